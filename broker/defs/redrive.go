package defs

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/brokerd/brokerd/store"
)

// RedriveTask is a redrive task's record: its spec, state and counters.
// It is rewritten by every move, so it holds counters only: the failures
// are their own records (RedriveFailure), from which recovery rebuilds
// the list and the counts by reason. The value is JSON after the version
// byte.
type RedriveTask struct {
	ID          string  `json:"-"` // the key's
	VHost       string  `json:"vhost"`
	Queue       string  `json:"queue"`
	User        string  `json:"user"`
	Max         int     `json:"max,omitempty"`
	ToExchange  bool    `json:"to_exchange,omitempty"`
	Exchange    string  `json:"exchange,omitempty"`
	RoutingKey  string  `json:"routing_key,omitempty"`
	Reason      string  `json:"reason,omitempty"`
	SourceQueue string  `json:"source_queue,omitempty"`
	MinAgeMS    int64   `json:"min_age_ms,omitempty"`
	Rate        float64 `json:"rate,omitempty"`
	State       string  `json:"state"`
	Moved       int64   `json:"moved"`
	Failed      int64   `json:"failed"`
	Remaining   int64   `json:"remaining"`
	UpTo        uint64  `json:"upto_seq"`
	QueueID     uint64  `json:"queue_id"`
	Error       string  `json:"error,omitempty"`
	Created     int64   `json:"created_ms"`
	Ended       int64   `json:"ended_ms,omitempty"`
}

// EncodeRedriveTask returns the record of d. A task's strings come from
// JSON or AMQP short strings; encoding/json writes invalid UTF-8 as
// U+FFFD.
func EncodeRedriveTask(d RedriveTask) store.MetaOp {
	v, err := json.Marshal(d)
	if err != nil { // strings, numbers and booleans only (a finite Rate)
		panic(fmt.Sprintf("encode redrive task %q: %v", d.ID, err))
	}
	return store.MetaOp{Key: Key(PrefixRedriveTask, d.ID), Value: append([]byte{Version}, v...)}
}

// DecodeRedriveTask decodes a record EncodeRedriveTask wrote.
func DecodeRedriveTask(key string, v []byte) (RedriveTask, error) {
	p, err := Parts(key, PrefixRedriveTask, 1)
	if err != nil {
		return RedriveTask{}, err
	}
	if len(v) == 0 || v[0] != Version {
		return RedriveTask{}, fmt.Errorf("redrive task %q: %w: version", p[0], ErrCorrupt)
	}
	var d RedriveTask
	if err := json.Unmarshal(v[1:], &d); err != nil {
		return RedriveTask{}, fmt.Errorf("redrive task %q: %w: %w", p[0], ErrCorrupt, err)
	}
	d.ID = p[0]
	return d, nil
}

// RedriveFailure is one message a redrive task's target refused: its seq
// in the task's source queue and why. The value is the reason's bytes
// (with no version byte: the layout predates this package).
type RedriveFailure struct {
	Task   string
	Seq    uint64
	Reason string
}

// RedriveFailureKey is the key of task's failure at seq; its failures'
// keys sort by seq under Key(PrefixRedriveFailure, task).
func RedriveFailureKey(task string, seq uint64) string {
	return Key(PrefixRedriveFailure, task, fmt.Sprintf("%016x", seq))
}

// EncodeRedriveFailure returns the record of d.
func EncodeRedriveFailure(d RedriveFailure) store.MetaOp {
	return store.MetaOp{Key: RedriveFailureKey(d.Task, d.Seq), Value: []byte(d.Reason)}
}

// DecodeRedriveFailure decodes a record EncodeRedriveFailure wrote.
func DecodeRedriveFailure(key string, v []byte) (RedriveFailure, error) {
	p, err := Parts(key, PrefixRedriveFailure, 2)
	if err != nil {
		return RedriveFailure{}, err
	}
	seq, err := strconv.ParseUint(p[1], 16, 64)
	if err != nil || fmt.Sprintf("%016x", seq) != p[1] { // only the key RedriveFailureKey writes
		return RedriveFailure{}, fmt.Errorf("redrive failure %q: %w: seq %q", key, ErrCorrupt, p[1])
	}
	return RedriveFailure{Task: p[0], Seq: seq, Reason: string(v)}, nil
}
