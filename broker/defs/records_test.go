package defs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/store"
)

func TestRecordsRoundTrip(t *testing.T) {
	args := amqp.Table{{Key: "x-max-length", Value: int32(3)}, {Key: "x-dead-letter-exchange", Value: "dl\xff"}}
	for _, v := range []any{
		VHost{Name: "/"},
		VHost{Name: "d\x00", Description: "d\x00", DefaultQueueType: "quorum", Tags: []string{"a", "b\xff"}},
		VHost{Name: "t", Tags: []string{""}}, // a tag alone is metadata
		User{Name: "u", Algorithm: "rabbit_password_hashing_md5", Hash: []byte{1, 2, 3, 4, 0, 9}, Tags: []string{"management"}},
		User{Name: "", Algorithm: "rabbit_password_hashing_sha256"}, // no password, no tags
		Perm{VHost: "/", User: "u\x00", Configure: "^a$", Read: ".*"},
		Exchange{VHost: "/", Name: "x", Type: "headers", Internal: true, Args: args},
		Exchange{VHost: "", Name: "", Type: ""},
		Queue{VHost: "/", Name: "q\x00\xff", ID: 1 << 33, AutoDelete: true, Args: args},
		Queue{VHost: "/", Name: "m", ID: 1, Backlog: true, Marks: []uint64{0, 1<<64 - 1, 0}},
		Binding{VHost: "/", Source: "", Dest: "q", Key: "k"},
		Binding{VHost: "/", Source: "a", Dest: "b", ToExchange: true, Key: "", Args: args},
		Policy{VHost: "/", Name: "p", Pattern: "^q", ApplyTo: "queues", Priority: -4,
			Definition: map[string]any{"max-length": 10, "overflow": "reject-publish", "ha": []any{"a", 1.5}, "b": true}},
		Policy{Operator: true, VHost: "v", Name: "o", ApplyTo: "all"},
	} {
		roundTrip(t, v)
	}
	for _, id := range []uint64{0, 1, 300, 1<<64 - 1} {
		op := EncodeQueueIDMark(id)
		if got, err := DecodeQueueIDMark(op.Key, op.Value); err != nil || got != id {
			t.Fatalf("queue id mark %d: %d, %v", id, got, err)
		}
	}
	op := EncodeBootstrapMark()
	if err := DecodeBootstrapMark(op.Key, op.Value); err != nil {
		t.Fatalf("bootstrap mark: %v", err)
	}
}

// A vhost without metadata is written as before vhosts had any (the
// version alone), and such a record decodes to none.
func TestVHostWithoutMetadata(t *testing.T) {
	op := EncodeVHost(VHost{Name: "/", Tags: []string{}})
	if !bytes.Equal(op.Value, []byte{Version}) {
		t.Fatalf("empty vhost metadata encodes as %x", op.Value)
	}
	got, err := DecodeVHost(op.Key, op.Value)
	if err != nil || got.Description != "" || got.DefaultQueueType != "" || got.Tags != nil {
		t.Fatalf("vhost without metadata: %+v, %v", got, err)
	}
}

// Decoders refuse what they cannot read with an error wrapping
// ErrCorrupt, and accept trailing bytes after the fields they know.
func TestDecodeErrors(t *testing.T) {
	queue := EncodeQueue(Queue{VHost: "/", Name: "q", ID: 7, Marks: []uint64{1}})
	user := EncodeUser(User{Name: "u", Algorithm: "a", Hash: []byte{1}, Tags: []string{"t"}})
	perm := EncodePerm(Perm{VHost: "/", User: "u", Configure: "c", Write: "w", Read: "r"})
	vhost := EncodeVHost(VHost{Name: "v", Description: "d", Tags: []string{"t"}})
	exchange := EncodeExchange(Exchange{VHost: "/", Name: "x", Type: "direct"})
	binding := EncodeBinding(Binding{VHost: "/", Source: "s", Dest: "q", Key: "k"})
	policy := EncodePolicy(Policy{VHost: "/", Name: "p", Pattern: ".*"})
	with := func(op store.MetaOp, v []byte) store.MetaOp { return store.MetaOp{Key: op.Key, Value: v} }
	withKey := func(op store.MetaOp, k string) store.MetaOp { return store.MetaOp{Key: k, Value: op.Value} }
	cut := func(op store.MetaOp) store.MetaOp { return with(op, op.Value[:len(op.Value)-1]) }
	version := func(op store.MetaOp) store.MetaOp {
		v := bytes.Clone(op.Value)
		v[0] = Version + 1
		return with(op, v)
	}
	tooManyMarks := binary.AppendUvarint(bytes.Clone(EncodeQueue(Queue{VHost: "/", Name: "q", ID: 7}).Value), maxMarks+1)
	tooManyTags := append(binary.AppendUvarint([]byte{Version, 0, 0}, maxTags+1), make([]byte, maxTags+1)...)
	badArgs := append([]byte{Version, 1, 'd', 0}, appendBytes(nil, []byte{0, 0, 0, 9})...)

	for _, c := range []struct {
		name string
		kind string
		op   store.MetaOp
		want string // in the error; "" for no error
	}{
		{"queue", "queue", queue, ""},
		{"queue with trailing bytes", "queue", with(queue, append(bytes.Clone(queue.Value), 9, 9)), ""},
		{"queue truncated", "queue", cut(queue), "bad varint"},
		{"queue unknown version", "queue", version(queue), "unknown version 2"},
		{"queue empty value", "queue", with(queue, nil), "empty value"},
		{"queue id 0", "queue", EncodeQueue(Queue{VHost: "/", Name: "q"}), "queue id 0"},
		{"queue marks beyond a level each", "queue", with(queue, tooManyMarks), "257 delivered marks"},
		{"queue under an exchange's prefix", "queue", withKey(queue, ExchangeKey("/", "q")), "lacks prefix"},
		{"queue key with one part", "queue", withKey(queue, Key(PrefixQueue, "/")), "has 1 parts, want 2"},
		{"queue key with a bad escape", "queue", withKey(queue, PrefixQueue+"/\x00\x02"), "bad escape 0x00 0x02"},
		{"queue key ending in a part", "queue", withKey(queue, PrefixQueue+"/\x00\x01q"), "key ends inside a part"},
		{"user truncated", "user", cut(user), "beyond the value's end"},
		{"user too many tags", "user", withKey(with(user, tooManyTags), user.Key), "4097 strings"},
		{"permission truncated", "permission", cut(perm), "beyond the value's end"},
		{"vhost truncated", "vhost", cut(vhost), "beyond the value's end"},
		{"exchange bad arguments", "exchange", with(exchange, badArgs), "arguments"},
		{"exchange without flags", "exchange", with(exchange, exchange.Value[:8]), "value too short"},
		{"binding with a value", "binding", with(binding, []byte{Version, 1}), ""},
		{"binding unknown version", "binding", version(binding), "unknown version"},
		{"binding to a kind that is neither", "binding", withKey(binding, Key(PrefixBinding, "/", "s", "z", "d", "k", "")), `destination kind "z"`},
		{"binding bad arguments", "binding", withKey(binding, Key(PrefixBinding, "/", "s", "q", "d", "k", "\x00\x00\x00\x09")), "arguments"},
		{"policy", "policy", policy, ""},
		{"policy not JSON", "policy", with(policy, []byte{Version, '{'}), "policy document"},
		{"policy of a wrong type", "policy", with(policy, []byte(string(Version)+`{"priority":"high"}`)), "policy document"},
		{"policy under another prefix", "policy", withKey(policy, QueueKey("/", "p")), "lacks prefix"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var dec func(string, []byte) (any, error)
			for _, d := range decoders {
				if d.kind == c.kind {
					dec = d.decode
				}
			}
			_, err := dec(c.op.Key, c.op.Value)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("error %v", err)
			case c.want != "" && (!errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("error %v, want ErrCorrupt with %q", err, c.want)
			}
		})
	}
	if _, err := DecodeQueueIDMark(KeyQueueIDMark+"x", []byte{Version, 1}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("queue id mark under a longer key: %v", err)
	}
	if err := DecodeBootstrapMark(KeyBootstrapMark, []byte{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("empty bootstrap mark: %v", err)
	}
}

func TestVHostPrefixes(t *testing.T) {
	got := VHostPrefixes()
	got[0] = "changed" // a new slice each time
	for _, p := range VHostPrefixes() {
		if p == "changed" || p == PrefixVHost || p == PrefixUser || strings.HasPrefix(p, "n/") {
			t.Fatalf("vhost prefixes %q", VHostPrefixes())
		}
	}
	// Every kind whose first part is the vhost is one of them.
	want := map[string]bool{PrefixExchange: true, PrefixQueue: true, PrefixBinding: true, PrefixPolicy: true, PrefixOperatorPolicy: true, PrefixPerm: true, PrefixParameter: true,
		PrefixVHostLimits: true, PrefixTopicPerm: true}
	if len(VHostPrefixes()) != len(want) {
		t.Fatalf("vhost prefixes %q", VHostPrefixes())
	}
	for _, p := range VHostPrefixes() {
		if !want[p] {
			t.Fatalf("vhost prefixes %q", VHostPrefixes())
		}
	}
}

// A key holding a number decodes only as the encoder writes it (16
// lower-case hex digits): another spelling of the same number would decode
// to a value whose record has a different key (FuzzDecode found one).
func TestNumberKeysCanonical(t *testing.T) {
	for _, key := range []string{
		Key(PrefixQueueState, "00000000A0000000"), Key(PrefixQueueState, "a0000000"), Key(PrefixQueueState, "+0000000a0000000"),
	} {
		if _, err := DecodeQueueState(key, []byte{Version, 0}); !errors.Is(err, ErrCorrupt) {
			t.Errorf("queue state key %q: %v, want ErrCorrupt", key, err)
		}
	}
	for _, seq := range []string{"000000000000000A", "a", "+00000000000000a"} {
		key := Key(PrefixRedriveFailure, "task", seq)
		if _, err := DecodeRedriveFailure(key, []byte("why")); !errors.Is(err, ErrCorrupt) {
			t.Errorf("redrive failure key %q: %v, want ErrCorrupt", key, err)
		}
	}
}
