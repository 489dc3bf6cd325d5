package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// The ledger is the producers' record, kept in the -state file between
// the commands: fill writes the "fill" streams, each produce run the
// "live" ones (a later run continues the numbering of an earlier one:
// that is how the producers move from RabbitMQ to brokerd), and check
// reads what every stream had confirmed.
//
// A stream is one producer's messages to one queue, numbered from 0.
// Every number below Next was published at most once; those in Confirmed
// were confirmed by the broker they were published to and must arrive.
// The others (nacked, or in flight when a connection failed) may or may
// not arrive; the checker counts those that do.

// ledger is the -state file's content.
type ledger struct {
	Queues  []string  `json:"queues"`
	Size    int       `json:"size"`
	Streams []*stream `json:"streams"`
}

// stream is one producer's record for one queue.
type stream struct {
	Producer    string  `json:"producer"`
	Queue       int     `json:"queue"`
	Next        uint64  `json:"next"`
	Confirmed   ranges  `json:"confirmed"`
	Nacked      uint64  `json:"nacked"`
	Unconfirmed uint64  `json:"unconfirmed"` // in flight when a connection failed or the run stopped
	Runs        []runAt `json:"runs"`
}

// runAt is one run of a stream: the numbers it used and where it published them.
type runAt struct {
	Via        string    `json:"via"`
	From       uint64    `json:"from"`
	To         uint64    `json:"to"` // exclusive
	Start      time.Time `json:"start"`
	End        time.Time `json:"end"`
	Reconnects int       `json:"reconnects"`
}

// ranges is a sorted set of disjoint half-open intervals [lo, hi).
type ranges [][2]uint64

// add inserts seq; seqs come mostly in order, so it extends the last
// interval in the common case.
func (rs *ranges) add(seq uint64) {
	r := *rs
	if n := len(r); n > 0 && r[n-1][1] == seq {
		r[n-1][1]++
		return
	}
	if n := len(r); n == 0 || r[n-1][1] < seq {
		*rs = append(r, [2]uint64{seq, seq + 1})
		return
	}
	// Out of order (rare: confirms come in order). r[i] is the first
	// interval ending at or after seq; one exists (the last one does).
	i := sort.Search(len(r), func(i int) bool { return r[i][1] >= seq })
	switch {
	case r[i][1] == seq: // right after r[i]: extend it, and join r[i+1] if it now touches
		r[i][1]++
		if i+1 < len(r) && r[i+1][0] == r[i][1] {
			r[i][1] = r[i+1][1]
			r = append(r[:i+1], r[i+2:]...)
		}
	case r[i][0] <= seq: // already in
	case r[i][0] == seq+1: // right before r[i] (r[i-1] ends before seq)
		r[i][0]--
	default:
		r = append(r, [2]uint64{})
		copy(r[i+1:], r[i:])
		r[i] = [2]uint64{seq, seq + 1}
	}
	*rs = r
}

// count is the number of seqs in the set.
func (rs ranges) count() uint64 {
	var n uint64
	for _, r := range rs {
		n += r[1] - r[0]
	}
	return n
}

// has reports whether seq is in the set.
func (rs ranges) has(seq uint64) bool {
	i := sort.Search(len(rs), func(i int) bool { return rs[i][1] > seq })
	return i < len(rs) && rs[i][0] <= seq
}

// stream returns the stream of producer p to queue q, adding it.
func (l *ledger) stream(p, q int) *stream {
	for _, s := range l.Streams {
		if s.Producer == producerNames[p] && s.Queue == q {
			return s
		}
	}
	s := &stream{Producer: producerNames[p], Queue: q}
	l.Streams = append(l.Streams, s)
	return s
}

// readLedger reads the state file; a missing file is an empty ledger.
func readLedger(path string) (*ledger, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &ledger{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read state: %w", err)
	}
	var l ledger
	if err := json.Unmarshal(b, &l); err != nil {
		return nil, fmt.Errorf("read state %s: %w", path, err)
	}
	return &l, nil
}

// write replaces the state file (write a temporary file, then rename, so
// a run stopped mid-write leaves the previous state).
func (l *ledger) write(path string) error {
	b, err := json.MarshalIndent(l, "", " ")
	if err != nil {
		return fmt.Errorf("encode state: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".state-*")
	if err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	if _, err = tmp.Write(b); err == nil {
		err = tmp.Close()
	} else {
		tmp.Close()
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write state: %w", err)
	}
	return nil
}

// checkQueues makes sure the ledger is about these queues (setting them on
// an empty ledger).
func (l *ledger) checkQueues(queues []string, size int) error {
	if len(l.Queues) == 0 {
		l.Queues, l.Size = queues, size
		return nil
	}
	if fmt.Sprint(l.Queues) != fmt.Sprint(queues) {
		return fmt.Errorf("the state file is about queues %v, not %v (remove it for a new run)", l.Queues, queues)
	}
	return nil
}
