package defs

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/store"
)

// equalValues reports whether two values of one record kind hold the same
// definition: argument tables compare by their AMQP encoding, policy
// definitions by their JSON, tags and hashes nil or empty alike, marks
// all zero or none alike (a record holds them so).
func equalValues(a, b any) bool {
	if reflect.TypeOf(a) != reflect.TypeOf(b) {
		return false
	}
	switch a := a.(type) {
	case VHost:
		b := b.(VHost)
		return a.Name == b.Name && a.Description == b.Description && a.DefaultQueueType == b.DefaultQueueType && slices.Equal(a.Tags, b.Tags)
	case User:
		b := b.(User)
		return a.Name == b.Name && a.Algorithm == b.Algorithm && bytes.Equal(a.Hash, b.Hash) && slices.Equal(a.Tags, b.Tags)
	case Perm:
		return a == b.(Perm)
	case Exchange:
		b := b.(Exchange)
		return a.VHost == b.VHost && a.Name == b.Name && a.Type == b.Type && a.AutoDelete == b.AutoDelete &&
			a.Internal == b.Internal && equalArgs(a.Args, b.Args)
	case Queue:
		b := b.(Queue)
		return a.VHost == b.VHost && a.Name == b.Name && a.ID == b.ID && a.AutoDelete == b.AutoDelete &&
			a.Backlog == b.Backlog && equalArgs(a.Args, b.Args) && slices.Equal(liveMarks(a.Marks), liveMarks(b.Marks))
	case QueueState:
		b := b.(QueueState)
		return a.ID == b.ID && a.Backlog == b.Backlog && slices.Equal(liveMarks(a.Marks), liveMarks(b.Marks))
	case Binding:
		b := b.(Binding)
		return a.VHost == b.VHost && a.Source == b.Source && a.Dest == b.Dest && a.ToExchange == b.ToExchange &&
			a.Key == b.Key && equalArgs(a.Args, b.Args)
	case Policy:
		b := b.(Policy)
		ja, erra := json.Marshal(a.Definition)
		jb, errb := json.Marshal(b.Definition)
		return a.Operator == b.Operator && a.VHost == b.VHost && a.Name == b.Name && a.Pattern == b.Pattern &&
			a.ApplyTo == b.ApplyTo && a.Priority == b.Priority && erra == nil && errb == nil && bytes.Equal(ja, jb)
	default:
		return reflect.DeepEqual(a, b)
	}
}

func equalArgs(a, b amqp.Table) bool { return bytes.Equal(EncodeArgs(a), EncodeArgs(b)) }

// liveMarks is marks as a record keeps them: none if all are zero.
func liveMarks(m []uint64) []uint64 {
	if slices.ContainsFunc(m, func(x uint64) bool { return x > 0 }) {
		return m
	}
	return nil
}

// shortKey cuts s to what a table key (an AMQP short string) holds.
func shortKey(s string) string { return s[:min(len(s), 255)] }

// fuzzArgs builds an argument table from fuzz input; n picks its shape.
func fuzzArgs(n int64, k, s string) amqp.Table {
	k = shortKey(k)
	switch n & 3 {
	case 0:
		return nil
	case 1:
		return amqp.Table{}
	case 2:
		return amqp.Table{{Key: k, Value: int32(n)}, {Key: "x-s", Value: s}}
	default:
		return amqp.Table{{Key: k, Value: n}, {Key: "t", Value: amqp.Table{{Key: shortKey(s), Value: true}}},
			{Key: "l", Value: []any{s, int8(3)}}}
	}
}

// encodeValue encodes a value of any record kind.
func encodeValue(v any) store.MetaOp {
	switch v := v.(type) {
	case VHost:
		return EncodeVHost(v)
	case User:
		return EncodeUser(v)
	case Perm:
		return EncodePerm(v)
	case Exchange:
		return EncodeExchange(v)
	case Queue:
		return EncodeQueue(v)
	case Binding:
		return EncodeBinding(v)
	case Policy:
		return EncodePolicy(v)
	case QueueState:
		return EncodeQueueState(v)
	case RedriveTask:
		return EncodeRedriveTask(v)
	case RedriveFailure:
		return EncodeRedriveFailure(v)
	case Parameter:
		return EncodeParameter(v)
	case GlobalParameter:
		return EncodeGlobalParameter(v)
	}
	panic(fmt.Sprintf("no record kind %T", v))
}

// decoders decode a record as each kind.
var decoders = []struct {
	kind   string
	decode func(key string, v []byte) (any, error)
}{
	{"vhost", func(k string, v []byte) (any, error) { return DecodeVHost(k, v) }},
	{"user", func(k string, v []byte) (any, error) { return DecodeUser(k, v) }},
	{"permission", func(k string, v []byte) (any, error) { return DecodePerm(k, v) }},
	{"exchange", func(k string, v []byte) (any, error) { return DecodeExchange(k, v) }},
	{"queue", func(k string, v []byte) (any, error) { return DecodeQueue(k, v) }},
	{"binding", func(k string, v []byte) (any, error) { return DecodeBinding(k, v) }},
	{"queue state", func(k string, v []byte) (any, error) { return DecodeQueueState(k, v) }},
	{"redrive task", func(k string, v []byte) (any, error) { return DecodeRedriveTask(k, v) }},
	{"redrive failure", func(k string, v []byte) (any, error) { return DecodeRedriveFailure(k, v) }},
	{"policy", func(k string, v []byte) (any, error) { return DecodePolicy(k, v) }},
	{"parameter", func(k string, v []byte) (any, error) { return DecodeParameter(k, v) }},
	{"global parameter", func(k string, v []byte) (any, error) { return DecodeGlobalParameter(k, v) }},
}

// decodeAs decodes op as the kind of value v.
func decodeAs(v any, op store.MetaOp) (any, error) {
	kind := map[string]string{"VHost": "vhost", "User": "user", "Perm": "permission", "Exchange": "exchange",
		"Queue": "queue", "Binding": "binding", "Policy": "policy",
		"QueueState": "queue state", "RedriveTask": "redrive task", "RedriveFailure": "redrive failure",
		"Parameter": "parameter", "GlobalParameter": "global parameter"}[reflect.TypeOf(v).Name()]
	for _, d := range decoders {
		if d.kind == kind {
			return d.decode(op.Key, op.Value)
		}
	}
	panic(fmt.Sprintf("no record kind %T", v))
}

// roundTrip checks that v's record decodes to v, and that the record of
// what it decodes to is the same bytes.
func roundTrip(t *testing.T, v any) {
	t.Helper()
	op := encodeValue(v)
	got, err := decodeAs(v, op)
	if err != nil {
		t.Fatalf("decode the record %q %x of %#v: %v", op.Key, op.Value, v, err)
	}
	if !equalValues(got, v) {
		t.Fatalf("record %q %x of %#v decodes to %#v", op.Key, op.Value, v, got)
	}
	if again := encodeValue(got); again.Key != op.Key || !bytes.Equal(again.Value, op.Value) {
		t.Fatalf("record of %#v is %q %x; decoded and encoded again, %q %x", v, op.Key, op.Value, again.Key, again.Value)
	}
}
