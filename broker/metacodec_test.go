package broker

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/brokerd/brokerd/amqp"
)

// compareParts orders tuples of names element by element, a proper prefix
// first.
func compareParts(a, b []string) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if c := strings.Compare(a[i], b[i]); c != 0 {
			return c
		}
	}
	return len(a) - len(b)
}

func sign(n int) int { return min(max(n, -1), 1) }

var keySeeds = [][2]string{
	{"", ""}, {"a", "a\x00"}, {"a\x00", "a\x01"}, {"a\x00\xff", "a\x00"}, {"q\xff", "q\uFFFD"},
	{"d\x00k", "d"}, {"\x00", "\x00\x00"}, {"/", "/\x00x"}, {"x\x01", "x"},
}

func FuzzMetaKey(f *testing.F) {
	for _, s := range keySeeds {
		f.Add(s[0], s[1], s[1], s[0])
	}
	f.Fuzz(func(t *testing.T, a1, a2, b1, b2 string) {
		a, b := []string{a1, a2}, []string{b1, b2}
		ka, kb := metaKey(metaBinding, a...), metaKey(metaBinding, b...)
		got, err := metaParts(ka, metaBinding, 2)
		if err != nil || !slices.Equal(got, a) {
			t.Fatalf("round trip of %q: %q, %v", a, got, err)
		}
		if (ka == kb) != slices.Equal(a, b) {
			t.Fatalf("keys of %q and %q: equal=%v", a, b, ka == kb)
		}
		if sign(strings.Compare(ka, kb)) != sign(compareParts(a, b)) {
			t.Fatalf("order of %q and %q not kept by keys %q and %q", a, b, ka, kb)
		}
		// A tuple's key never starts another tuple's of the same length
		// (so a prefix scan per vhost finds exactly that vhost).
		if ka != kb && strings.HasPrefix(kb, metaKey(metaBinding, a1)) != (a1 == b1) {
			t.Fatalf("vhost prefix of %q matches %q", a1, b)
		}
	})
}

// Decoders of definition records reject what they cannot read with an
// error wrapping errMetaCorrupt, and never panic.
func FuzzDecodeDefinitions(f *testing.F) {
	q := newQueue(nil, 7, "q", true, false, true, amqp.Table{{Key: "x-max-length", Value: int32(3)}})
	f.Add(encodeQueueDef(q))
	f.Add(encodeExchangeDef(newExchange("x", typeTopic, true, true, true, amqp.Table{{Key: "alternate-exchange", Value: "ae"}})))
	f.Add(encodePolicyDef(&Policy{Name: "p", Pattern: "^a", ApplyTo: "all", Definition: map[string]any{"max-length": 1}}))
	f.Add(encodeQueueIDMark(1 << 40))
	f.Add(encodeVHostDef(vhostDef{Description: "d", DefaultQueueType: "quorum", Tags: []string{"a", "b"}}))
	f.Add(encodeUserDef(userDef{Algorithm: HashSHA512, Hash: []byte{1, 2, 3, 4, 5}, Tags: []string{"administrator"}}))
	f.Add(encodePermDef(permDef{Configure: ".*", Write: "^a", Read: ""}))
	f.Add([]byte{metaVersion})
	f.Add([]byte{})
	f.Add([]byte(metaKey(metaBinding, "/", "amq.direct", "q", "d\x00", "k\xff", "")))
	f.Fuzz(func(t *testing.T, v []byte) {
		check := func(what string, err error) {
			if err != nil && !errors.Is(err, errMetaCorrupt) {
				t.Fatalf("%s: error %v does not wrap errMetaCorrupt", what, err)
			}
		}
		_, err := decodeQueueDef(v)
		check("queue", err)
		_, err = decodeExchangeDef(v)
		check("exchange", err)
		_, err = decodePolicyDef(v)
		check("policy", err)
		_, err = decodeQueueIDMark(v)
		check("queue id mark", err)
		_, err = decodeVHostDef(v)
		check("vhost", err)
		_, err = decodeUserDef(v)
		check("user", err)
		_, err = decodePermDef(v)
		check("permission", err)
		check("empty", checkEmptyDef(v))
		_, err = splitMetaKey(string(v))
		check("key", err)
	})
}

func TestDefinitionRecordsRoundTrip(t *testing.T) {
	args := amqp.Table{{Key: "x-max-length", Value: int32(3)}, {Key: "x-dead-letter-exchange", Value: "dl\xff"}}
	q := newQueue(nil, 1<<33, "q\x00\xff", true, false, true, args)
	qd, err := decodeQueueDef(encodeQueueDef(q))
	if err != nil || qd.ID != 1<<33 || !qd.AutoDelete || !bytes.Equal(encodeArgs(qd.Args), encodeArgs(args)) {
		t.Fatalf("queue: %+v, %v", qd, err)
	}
	x := newExchange("x", typeHeaders, true, false, true, args)
	xd, err := decodeExchangeDef(encodeExchangeDef(x))
	if err != nil || xd.Type != typeHeaders || xd.AutoDelete || !xd.Internal || !bytes.Equal(encodeArgs(xd.Args), encodeArgs(args)) {
		t.Fatalf("exchange: %+v, %v", xd, err)
	}
	p := &Policy{Name: "p", Pattern: "^q", ApplyTo: "queues", Priority: 4, Definition: map[string]any{"max-length": 10, "overflow": "reject-publish"}}
	pd, err := decodePolicyDef(encodePolicyDef(p))
	if err != nil || pd.Pattern != "^q" || pd.ApplyTo != "queues" || pd.Priority != 4 || len(pd.Definition) != 2 {
		t.Fatalf("policy: %+v, %v", pd, err)
	}
	if id, err := decodeQueueIDMark(encodeQueueIDMark(99)); err != nil || id != 99 {
		t.Fatalf("queue id mark: %d, %v", id, err)
	}
	// A version this broker does not know is refused, not misread.
	v := encodeQueueDef(q)
	v[0] = metaVersion + 1
	if _, err := decodeQueueDef(v); !errors.Is(err, errMetaCorrupt) {
		t.Fatalf("unknown version: %v", err)
	}
}

func TestAuthRecordsRoundTrip(t *testing.T) {
	vd := vhostDef{Description: "d\x00", DefaultQueueType: "quorum", Tags: []string{"a", "b\xff"}}
	if got, err := decodeVHostDef(encodeVHostDef(vd)); err != nil || got.Description != vd.Description || got.DefaultQueueType != vd.DefaultQueueType || !slices.Equal(got.Tags, vd.Tags) {
		t.Fatalf("vhost: %+v, %v", got, err)
	}
	// A vhost record of the layout before metadata (the version alone)
	// decodes to none, and no metadata is written that way.
	if got, err := decodeVHostDef([]byte{metaVersion}); err != nil || got.Description != "" || got.DefaultQueueType != "" || got.Tags != nil {
		t.Fatalf("vhost without metadata: %+v, %v", got, err)
	}
	if v := encodeVHostDef(vhostDef{}); !bytes.Equal(v, []byte{metaVersion}) {
		t.Fatalf("empty vhost metadata encodes as %x", v)
	}
	ud := userDef{Algorithm: HashMD5, Hash: []byte{1, 2, 3, 4, 0, 9}, Tags: []string{"management"}}
	if got, err := decodeUserDef(encodeUserDef(ud)); err != nil || got.Algorithm != ud.Algorithm || !bytes.Equal(got.Hash, ud.Hash) || !slices.Equal(got.Tags, ud.Tags) {
		t.Fatalf("user: %+v, %v", got, err)
	}
	if got, err := decodeUserDef(encodeUserDef(userDef{Algorithm: HashSHA256})); err != nil || len(got.Hash) != 0 || len(got.Tags) != 0 {
		t.Fatalf("user without password: %+v, %v", got, err)
	}
	if _, err := decodeUserDef(encodeUserDef(userDef{Algorithm: "rabbit_password_hashing_rot13"})); !errors.Is(err, errMetaCorrupt) {
		t.Fatalf("unknown algorithm: %v", err)
	}
	pd := permDef{Configure: "^a$", Write: "", Read: ".*"}
	if got, err := decodePermDef(encodePermDef(pd)); err != nil || got != pd {
		t.Fatalf("permission: %+v, %v", got, err)
	}
	// Truncated records are refused.
	for name, c := range map[string]struct {
		v      []byte
		decode func([]byte) error
	}{
		"user":       {encodeUserDef(ud), func(v []byte) error { _, err := decodeUserDef(v); return err }},
		"permission": {encodePermDef(pd), func(v []byte) error { _, err := decodePermDef(v); return err }},
		"vhost":      {encodeVHostDef(vd), func(v []byte) error { _, err := decodeVHostDef(v); return err }},
	} {
		if err := c.decode(c.v[:len(c.v)-1]); !errors.Is(err, errMetaCorrupt) {
			t.Errorf("truncated %s record: %v, want errMetaCorrupt", name, err)
		}
	}
}
