package defs

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
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

// Keys round-trip, keep the order of their tuples, and a tuple's key is a
// prefix of another's exactly when the tuple is; SplitKey takes only what
// Key writes.
func FuzzKey(f *testing.F) {
	for _, s := range keySeeds {
		f.Add(s[0], s[1], s[1], s[0], Key("", s[0], s[1]))
	}
	for _, g := range goldens() {
		f.Add("/", g.name, "", "x", g.key[2:])
	}
	f.Add("a", "b", "c", "d", "\x00")
	f.Add("a", "b", "c", "d", "x\x00\x02")
	f.Fuzz(func(t *testing.T, a1, a2, b1, b2, raw string) {
		a, b := []string{a1, a2}, []string{b1, b2}
		ka, kb := Key(PrefixBinding, a...), Key(PrefixBinding, b...)
		got, err := Parts(ka, PrefixBinding, 2)
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
		if ka != kb && strings.HasPrefix(kb, Key(PrefixBinding, a1)) != (a1 == b1) {
			t.Fatalf("vhost prefix of %q matches %q", a1, b)
		}
		// Arbitrary bytes split into parts that make exactly those bytes,
		// or are refused.
		parts, err := SplitKey(raw)
		switch {
		case err != nil && !errors.Is(err, ErrCorrupt):
			t.Fatalf("SplitKey(%q): error %v does not wrap ErrCorrupt", raw, err)
		case err == nil && Key("", parts...) != raw:
			t.Fatalf("SplitKey(%q) = %q, which makes %q", raw, parts, Key("", parts...))
		}
	})
}

// Every decoder, given any key and value, returns an error wrapping
// ErrCorrupt or a value; a value's record decodes to the same value and
// is a fixed point (encoding what it decodes to gives it again), under the
// same key for every kind but bindings (whose argument table may have had
// bytes after it). Decoders take trailing bytes and non-minimal varints
// (see the package doc), so the record need not be the input's bytes.
func FuzzDecode(f *testing.F) {
	for _, g := range goldens() {
		v, err := hex.DecodeString(g.value)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(g.key, v)
		f.Add(g.key, v[:len(v)/2])
		f.Add(g.key, append(bytes.Clone(v), 0x80, 0))
		f.Add(g.key+"\x00", v)
	}
	f.Add(PrefixQueue, []byte{})
	f.Add(QueueKey("/", "q"), []byte{Version, 0x81, 0x00, 0, 0})
	f.Fuzz(func(t *testing.T, key string, v []byte) {
		for _, d := range decoders {
			got, err := d.decode(key, v)
			if err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("%s: error %v does not wrap ErrCorrupt", d.kind, err)
				}
				continue
			}
			op := encodeValue(got)
			if d.kind != "binding" && op.Key != key {
				t.Fatalf("%s %q decodes to %#v, whose key is %q", d.kind, key, got, op.Key)
			}
			again, err := d.decode(op.Key, op.Value)
			if err != nil || !equalValues(again, got) {
				t.Fatalf("%s %q %x decodes to %#v, whose record %q %x decodes to %#v, %v", d.kind, key, v, got, op.Key, op.Value, again, err)
			}
			if op2 := encodeValue(again); op2.Key != op.Key || !bytes.Equal(op2.Value, op.Value) {
				t.Fatalf("%s: record %q %x, then %q %x", d.kind, op.Key, op.Value, op2.Key, op2.Value)
			}
		}
		if id, err := DecodeQueueIDMark(key, v); err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("queue id mark: error %v does not wrap ErrCorrupt", err)
			}
		} else if op := EncodeQueueIDMark(id); op.Key != key {
			t.Fatalf("queue id mark under %q", key)
		}
		if err := DecodeBootstrapMark(key, v); err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("bootstrap mark: error %v does not wrap ErrCorrupt", err)
		}
	})
}

func FuzzQueueRecord(f *testing.F) {
	f.Add("/", "q", uint64(7), uint8(0), int64(0), "", "", []byte(nil))
	f.Add("v\x00h", "q\x00\xff", uint64(1<<33), uint8(3), int64(3), "x-max-length", "s", []byte{5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add("", "", uint64(0), uint8(255), int64(-1), "k", "\x00", []byte{0xff})
	f.Fuzz(func(t *testing.T, vhost, name string, id uint64, flags uint8, n int64, k, s string, marks []byte) {
		d := Queue{VHost: vhost, Name: name, ID: id, AutoDelete: flags&1 != 0, Backlog: flags&2 != 0, Args: fuzzArgs(n, k, s)}
		d.Marks = fuzzMarks(marks)
		if id == 0 { // never given: ids start at 1
			op := EncodeQueue(d)
			if _, err := DecodeQueue(op.Key, op.Value); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("queue id 0 decodes: %v", err)
			}
			return
		}
		roundTrip(t, d)
	})
}

func FuzzQueueStateRecord(f *testing.F) {
	f.Add(uint64(7), false, []byte(nil))
	f.Add(uint64(1<<63), true, []byte{5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff})
	f.Fuzz(func(t *testing.T, id uint64, backlog bool, marks []byte) {
		d := QueueState{ID: id, Backlog: backlog}
		d.Marks = fuzzMarks(marks)
		if id == 0 { // never given: ids start at 1
			op := EncodeQueueState(d)
			if _, err := DecodeQueueState(op.Key, op.Value); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("queue state of id 0 decodes: %v", err)
			}
			return
		}
		roundTrip(t, d)
	})
}

func FuzzExchangeRecord(f *testing.F) {
	f.Add("/", "orders", "topic", uint8(3), int64(2), "alternate-exchange", "ae")
	f.Add("", "", "", uint8(0), int64(0), "", "")
	f.Fuzz(func(t *testing.T, vhost, name, typ string, flags uint8, n int64, k, s string) {
		roundTrip(t, Exchange{VHost: vhost, Name: name, Type: typ, AutoDelete: flags&1 != 0, Internal: flags&2 != 0, Args: fuzzArgs(n, k, s)})
	})
}

func FuzzBindingRecord(f *testing.F) {
	f.Add("/", "amq.direct", "q", false, "k\x00", int64(0), "", "")
	f.Add("/", "src", "dst", true, "#", int64(3), "x-match", "all")
	f.Fuzz(func(t *testing.T, vhost, source, dest string, toExchange bool, key string, n int64, k, s string) {
		roundTrip(t, Binding{VHost: vhost, Source: source, Dest: dest, ToExchange: toExchange, Key: key, Args: fuzzArgs(n, k, s)})
	})
}

// Policies come to the broker as JSON (the management API, definitions
// files), so their strings are UTF-8; encoding/json would write others'
// bytes as U+FFFD.
func FuzzPolicyRecord(f *testing.F) {
	f.Add(false, "/", "p", "^q", "queues", 4, "max-length", int64(10), "overflow", "reject-publish", 1.5, true)
	f.Add(true, "vh", "op", "", "all", 0, "", int64(-1), "k", "<&>\u2028", 1e21, false)
	f.Fuzz(func(t *testing.T, operator bool, vhost, name, pattern, applyTo string, priority int, k1 string, n int64, k2, s string, x float64, b bool) {
		if math.IsInf(x, 0) || math.IsNaN(x) {
			x = 0 // not JSON
		}
		u := func(s string) string { return strings.ToValidUTF8(s, "?") }
		d := Policy{Operator: operator, VHost: vhost, Name: name, Pattern: u(pattern), ApplyTo: u(applyTo), Priority: priority,
			Definition: map[string]any{u(k1): n, u(k2): u(s), "x": x, "b": b, "l": []any{u(s), n, b}}}
		if priority&1 != 0 {
			d.Definition = nil
		}
		roundTrip(t, d)
	})
}

func FuzzUserRecord(f *testing.F) {
	f.Add("guest", "rabbit_password_hashing_sha256", []byte{1, 2, 3, 4, 0xaa}, "administrator", "", uint8(1))
	f.Add("", "", []byte(nil), "", "", uint8(0))
	f.Fuzz(func(t *testing.T, name, alg string, hash []byte, t1, t2 string, ntags uint8) {
		roundTrip(t, User{Name: name, Algorithm: alg, Hash: hash, Tags: []string{t1, t2}[:ntags%3]})
	})
}

func FuzzPermRecord(f *testing.F) {
	f.Add("/", "guest", ".*", "^a", "")
	f.Fuzz(func(t *testing.T, vhost, user, configure, write, read string) {
		roundTrip(t, Perm{VHost: vhost, User: user, Configure: configure, Write: write, Read: read})
	})
}

func FuzzVHostRecord(f *testing.F) {
	f.Add("/", "", "", "", "", uint8(0))
	f.Add("prod", "Production", "quorum", "a", "b", uint8(2))
	f.Fuzz(func(t *testing.T, name, description, queueType, t1, t2 string, ntags uint8) {
		roundTrip(t, VHost{Name: name, Description: description, DefaultQueueType: queueType, Tags: []string{t1, t2}[:ntags%3]})
	})
}

// A redrive task's record is JSON: its strings are UTF-8 (encoding/json
// writes others' bytes as U+FFFD) and its rate finite.
func FuzzRedriveTaskRecord(f *testing.F) {
	f.Add("r1", "/", "dlq", "guest", 10, true, "x", "k", "expired", "src", int64(60000), 2.5, "running", int64(3), int64(1), int64(7), uint64(99), uint64(4), "", int64(1_700_000_000_000), int64(0))
	f.Add("", "", "", "", 0, false, "", "", "", "", int64(0), 0.0, "", int64(0), int64(0), int64(0), uint64(0), uint64(0), "e\u2028", int64(-1), int64(1))
	f.Fuzz(func(t *testing.T, id, vhost, queue, user string, max int, toX bool, x, key, reason, src string, minAge int64, rate float64,
		state string, moved, failed, remaining int64, upTo, qid uint64, errText string, created, ended int64) {
		if math.IsInf(rate, 0) || math.IsNaN(rate) {
			rate = 0 // not JSON
		}
		u := func(s string) string { return strings.ToValidUTF8(s, "?") }
		roundTrip(t, RedriveTask{ID: id, VHost: u(vhost), Queue: u(queue), User: u(user), Max: max, ToExchange: toX, Exchange: u(x),
			RoutingKey: u(key), Reason: u(reason), SourceQueue: u(src), MinAgeMS: minAge, Rate: rate, State: u(state),
			Moved: moved, Failed: failed, Remaining: remaining, UpTo: upTo, QueueID: qid, Error: u(errText), Created: created, Ended: ended})
	})
}

func FuzzRedriveFailureRecord(f *testing.F) {
	f.Add("r1", uint64(7), "no queue 'q'")
	f.Add("\x00", uint64(1<<63), "")
	f.Fuzz(func(t *testing.T, task string, seq uint64, reason string) {
		roundTrip(t, RedriveFailure{Task: task, Seq: seq, Reason: reason})
	})
}

// fuzzMarks turns fuzzed bytes into at most maxMarks marks: 8 bytes a
// mark, a shorter tail a byte each.
func fuzzMarks(b []byte) []uint64 {
	var marks []uint64
	for len(b) > 0 && len(marks) < maxMarks {
		var m uint64
		if len(b) >= 8 {
			m, b = binary.LittleEndian.Uint64(b), b[8:]
		} else {
			m, b = uint64(b[0]), b[1:]
		}
		marks = append(marks, m)
	}
	return marks
}

// Parameter values come to the broker as JSON; the record keeps them
// compacted.
func FuzzParameterRecord(f *testing.F) {
	f.Add("/", "shovel", "s", `{"src-queue":"a","dest-uri":["amqp://"]}`, false)
	f.Add("", "", "", `null`, true)
	f.Fuzz(func(t *testing.T, vhost, component, name, value string, global bool) {
		var c bytes.Buffer
		if json.Compact(&c, []byte(value)) != nil || !json.Valid(c.Bytes()) {
			return
		}
		if global {
			roundTrip(t, GlobalParameter{Name: name, Value: c.Bytes()})
			return
		}
		roundTrip(t, Parameter{VHost: vhost, Component: component, Name: name, Value: c.Bytes()})
	})
}
