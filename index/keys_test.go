package index

import (
	"bytes"
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

var edgeU64 = []uint64{0, 1, 2, 255, 256, 1<<32 - 1, 1 << 32, math.MaxInt64, math.MaxInt64 + 1,
	math.MaxUint64 - 1, math.MaxUint64}

var edgeI64 = []int64{math.MinInt64, math.MinInt64 + 1, -1 << 32, -2, -1, 0, 1, 2,
	1767225600000, math.MaxInt64 - 1, math.MaxInt64}

var edgePrio = []uint8{0, 1, 9, 10, 254, 255}

func inBounds(k, lower, upper []byte) bool {
	return bytes.Compare(k, lower) >= 0 && bytes.Compare(k, upper) < 0
}

// otherKindKeys are keys of every kind, for checking that a kind's bounds
// exclude the others.
func otherKindKeys() [][]byte {
	var ks [][]byte
	for _, x := range []uint64{0, math.MaxUint64} {
		ks = append(ks,
			EntryKey(nil, x, uint8(x), x),
			ExpiryKey(nil, int64(x), x, uint8(x), x),
			ExpiryKey(nil, math.MaxInt64, x, uint8(x), x),
			ExpiryKey(nil, math.MinInt64, x, uint8(x), x),
			MsgKey(nil, x),
			QueueStateKey(nil, x),
			SegmentKey(nil, uint32(x)),
			MetaKey(nil, bytes.Repeat([]byte{byte(x)}, 20)),
		)
	}
	return append(ks, MetaKey(nil, nil), StateKey())
}

func TestEntryKeyRoundTrip(t *testing.T) {
	for _, q := range edgeU64 {
		for _, p := range edgePrio {
			for _, s := range edgeU64 {
				k := EntryKey([]byte("junk"), q, p, s)[4:]
				if len(k) != EntryKeyLen {
					t.Fatalf("EntryKey(%d, %d, %d) has %d bytes, want %d", q, p, s, len(k), EntryKeyLen)
				}
				gq, gp, gs, err := DecodeEntryKey(k)
				if err != nil || gq != q || gp != p || gs != s {
					t.Fatalf("DecodeEntryKey(EntryKey(%d, %d, %d)) = %d, %d, %d, %v", q, p, s, gq, gp, gs, err)
				}
			}
		}
	}
}

func TestExpiryKeyRoundTrip(t *testing.T) {
	for _, d := range edgeI64 {
		for _, q := range edgeU64 {
			for _, p := range edgePrio {
				for _, s := range []uint64{0, 7, math.MaxUint64} {
					k := ExpiryKey(nil, d, q, p, s)
					if len(k) != ExpiryKeyLen {
						t.Fatalf("ExpiryKey has %d bytes, want %d", len(k), ExpiryKeyLen)
					}
					gd, gq, gp, gs, err := DecodeExpiryKey(k)
					if err != nil || gd != d || gq != q || gp != p || gs != s {
						t.Fatalf("DecodeExpiryKey(ExpiryKey(%d, %d, %d, %d)) = %d, %d, %d, %d, %v",
							d, q, p, s, gd, gq, gp, gs, err)
					}
				}
			}
		}
	}
}

func TestSmallKeysRoundTrip(t *testing.T) {
	for _, x := range edgeU64 {
		if got, err := DecodeMsgKey(MsgKey(nil, x)); err != nil || got != x {
			t.Errorf("DecodeMsgKey(MsgKey(%d)) = %d, %v", x, got, err)
		}
		if got, err := DecodeQueueStateKey(QueueStateKey(nil, x)); err != nil || got != x {
			t.Errorf("DecodeQueueStateKey(QueueStateKey(%d)) = %d, %v", x, got, err)
		}
		s := uint32(x)
		if got, err := DecodeSegmentKey(SegmentKey(nil, s)); err != nil || got != s {
			t.Errorf("DecodeSegmentKey(SegmentKey(%d)) = %d, %v", s, got, err)
		}
	}
	if k := StateKey(); !bytes.Equal(k, []byte{prefixState}) {
		t.Errorf("StateKey() = %x", k)
	}
	StateKey()[0] = 0xee // callers own the result
	if StateKey()[0] != prefixState {
		t.Error("StateKey returns a shared slice")
	}
}

func TestMetaKeyRoundTrip(t *testing.T) {
	for _, name := range metaNames {
		k := MetaKey(nil, []byte(name))
		got, err := DecodeMetaKey(k)
		if err != nil || string(got) != name {
			t.Errorf("DecodeMetaKey(MetaKey(%q)) = %q, %v", name, got, err)
		}
	}
}

func TestDecodeKeyErrors(t *testing.T) {
	entry := EntryKey(nil, 1, 2, 3)
	expiry := ExpiryKey(nil, 1, 2, 3, 4)
	cases := []struct {
		name   string
		k      []byte
		decode func([]byte) error
	}{
		{"entry empty", nil, decEntry},
		{"entry short", entry[:EntryKeyLen-1], decEntry},
		{"entry long", append(bytes.Clone(entry), 0), decEntry},
		{"entry is expiry", expiry[:EntryKeyLen], decEntry},
		{"expiry empty", []byte{}, decExpiry},
		{"expiry short", expiry[:ExpiryKeyLen-1], decExpiry},
		{"expiry is entry", append(bytes.Clone(entry), make([]byte, 8)...), decExpiry},
		{"msg short", MsgKey(nil, 1)[:8], decMsg},
		{"msg is queue state", QueueStateKey(nil, 1), decMsg},
		{"queue state is msg", MsgKey(nil, 1), decQueueState},
		{"segment long", append(SegmentKey(nil, 1), 0), decSegment},
		{"segment is state", StateKey(), decSegment},
		{"meta empty", nil, decMeta},
		{"meta is state", StateKey(), decMeta},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { mustCorrupt(t, c.decode(c.k), c.k) })
	}
}

func decEntry(k []byte) error      { _, _, _, err := DecodeEntryKey(k); return err }
func decExpiry(k []byte) error     { _, _, _, _, err := DecodeExpiryKey(k); return err }
func decMsg(k []byte) error        { _, err := DecodeMsgKey(k); return err }
func decQueueState(k []byte) error { _, err := DecodeQueueStateKey(k); return err }
func decSegment(k []byte) error    { _, err := DecodeSegmentKey(k); return err }
func decMeta(k []byte) error       { _, err := DecodeMetaKey(k); return err }

type entryTuple struct {
	d    int64 // expiry keys only
	q    uint64
	prio uint8
	seq  uint64
}

func cmpTuple(a, b entryTuple) int {
	return cmp.Or(cmp.Compare(a.d, b.d), cmp.Compare(a.q, b.q), cmp.Compare(a.prio, b.prio), cmp.Compare(a.seq, b.seq))
}

// randTuples mixes edge values (negative deadlines, seqs around the
// uint64 wrap, neighbouring queues) with random ones.
func randTuples(r *rand.Rand, n int) []entryTuple {
	u64 := func() uint64 {
		switch r.IntN(4) {
		case 0:
			return edgeU64[r.IntN(len(edgeU64))]
		case 1:
			return math.MaxUint64 - r.Uint64N(4) // near the wrap
		case 2:
			return r.Uint64N(4)
		}
		return r.Uint64()
	}
	ts := make([]entryTuple, n)
	for i := range ts {
		ts[i] = entryTuple{
			d:    int64(u64()),
			q:    u64(),
			prio: edgePrio[r.IntN(len(edgePrio))],
			seq:  u64(),
		}
	}
	return ts
}

func TestEntryKeyOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	ts := randTuples(r, 5000)
	type pair struct {
		t entryTuple
		k []byte
	}
	ps := make([]pair, len(ts))
	for i, tu := range ts {
		tu.d = 0
		ps[i] = pair{tu, EntryKey(nil, tu.q, tu.prio, tu.seq)}
	}
	byKey := slices.Clone(ps)
	slices.SortStableFunc(byKey, func(a, b pair) int { return bytes.Compare(a.k, b.k) })
	byTuple := slices.Clone(ps)
	slices.SortStableFunc(byTuple, func(a, b pair) int { return cmpTuple(a.t, b.t) })
	for i := range byKey {
		if cmpTuple(byKey[i].t, byTuple[i].t) != 0 {
			t.Fatalf("position %d: byte order gives %+v, numeric order %+v", i, byKey[i].t, byTuple[i].t)
		}
	}
}

func TestExpiryKeyOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	ts := randTuples(r, 5000)
	for _, d := range edgeI64 {
		ts = append(ts, entryTuple{d: d, q: 1, prio: 0, seq: 1})
	}
	keys := make([][]byte, len(ts))
	for i, tu := range ts {
		keys[i] = ExpiryKey(nil, tu.d, tu.q, tu.prio, tu.seq)
	}
	slices.SortFunc(keys, bytes.Compare)
	slices.SortFunc(ts, cmpTuple)
	for i, k := range keys {
		d, q, p, s, err := DecodeExpiryKey(k)
		if err != nil {
			t.Fatal(err)
		}
		if got := (entryTuple{d, q, p, s}); got != ts[i] {
			t.Fatalf("position %d: byte order gives %+v, numeric order %+v", i, got, ts[i])
		}
	}
}

func TestSeqOrderAcrossWrap(t *testing.T) {
	// Seq order is numeric: a seq that wrapped past MaxUint64 to 0 sorts
	// first. The queue must not wrap; this pins down what happens if it did.
	seqs := []uint64{math.MaxUint64, 0, math.MaxUint64 - 1, 1, 1 << 63, 1<<63 - 1}
	keys := make([][]byte, len(seqs))
	for i, s := range seqs {
		keys[i] = EntryKey(nil, 4, 1, s)
	}
	slices.SortFunc(keys, bytes.Compare)
	slices.Sort(seqs)
	for i, k := range keys {
		if _, _, s, _ := DecodeEntryKey(k); s != seqs[i] {
			t.Fatalf("position %d: seq %d, want %d", i, s, seqs[i])
		}
	}
}

func TestQueueBounds(t *testing.T) {
	for _, q := range edgeU64 {
		lo, hi := QueueBounds(q)
		for _, p := range edgePrio {
			for _, s := range edgeU64 {
				if k := EntryKey(nil, q, p, s); !inBounds(k, lo, hi) {
					t.Fatalf("QueueBounds(%d) = [%x, %x) misses %x", q, lo, hi, k)
				}
				for _, nq := range []uint64{q - 1, q + 1} { // wraps at the edges: still another queue
					if k := EntryKey(nil, nq, p, s); inBounds(k, lo, hi) {
						t.Fatalf("QueueBounds(%d) = [%x, %x) holds queue %d's key %x", q, lo, hi, nq, k)
					}
				}
			}
		}
		for _, k := range otherKindKeys() {
			if k[0] != prefixEntry && inBounds(k, lo, hi) {
				t.Fatalf("QueueBounds(%d) holds %x", q, k)
			}
		}
	}
}

func TestLevelBounds(t *testing.T) {
	for _, q := range []uint64{0, 5, math.MaxUint64} {
		for _, p := range edgePrio {
			for _, from := range edgeU64 {
				lo, hi := LevelBounds(q, p, from)
				for _, s := range edgeU64 {
					k := EntryKey(nil, q, p, s)
					if got, want := inBounds(k, lo, hi), s >= from; got != want {
						t.Fatalf("LevelBounds(%d, %d, %d): seq %d in bounds = %v, want %v", q, p, from, s, got, want)
					}
					for _, np := range []uint8{p - 1, p + 1} {
						if inBounds(EntryKey(nil, q, np, s), lo, hi) {
							t.Fatalf("LevelBounds(%d, %d, %d) holds prio %d seq %d", q, p, from, np, s)
						}
					}
					for _, nq := range []uint64{q - 1, q + 1} {
						if inBounds(EntryKey(nil, nq, p, s), lo, hi) {
							t.Fatalf("LevelBounds(%d, %d, %d) holds queue %d seq %d", q, p, from, nq, s)
						}
					}
				}
				for _, k := range otherKindKeys() {
					if k[0] != prefixEntry && inBounds(k, lo, hi) {
						t.Fatalf("LevelBounds(%d, %d, %d) holds %x", q, p, from, k)
					}
				}
			}
		}
	}
}

func TestExpiryBounds(t *testing.T) {
	for _, from := range edgeI64 {
		for _, until := range edgeI64 {
			lo, hi := ExpiryBounds(from, until)
			if from > until && bytes.Compare(lo, hi) < 0 {
				t.Fatalf("ExpiryBounds(%d, %d) = [%x, %x), want empty", from, until, lo, hi)
			}
			for _, d := range edgeI64 {
				for _, q := range []uint64{0, math.MaxUint64} {
					for _, p := range []uint8{0, 255} {
						for _, s := range []uint64{0, math.MaxUint64} {
							k := ExpiryKey(nil, d, q, p, s)
							if got, want := inBounds(k, lo, hi), from <= d && d <= until; got != want {
								t.Fatalf("ExpiryBounds(%d, %d): deadline %d (q %d prio %d seq %d) in = %v, want %v",
									from, until, d, q, p, s, got, want)
							}
						}
					}
				}
			}
			for _, k := range otherKindKeys() {
				if k[0] != prefixExpiry && inBounds(k, lo, hi) {
					t.Fatalf("ExpiryBounds(%d, %d) holds %x", from, until, k)
				}
			}
		}
	}
}

var metaNames = []string{
	"", "\x00", "\x00\x00", "a", "a\x00", "a\x00b", "a\x01", "ab", "a\xff", "a\xff\xff", "b",
	"\xc3\x28", "\xc3", "\xed\xa0\x80", "é", "vhost/%2f/queue/q1", "\xfe", "\xfe\xff",
	"\xff", "\xff\x00", "\xff\xfe", "\xff\xff", "\xff\xff\x00", "\xff\xff\xff", "\xff\xff\xff\xff",
}

func TestMetaKeyOrder(t *testing.T) {
	names := slices.Clone(metaNames)
	keys := make([][]byte, len(names))
	for i, n := range names {
		keys[i] = MetaKey(nil, []byte(n))
	}
	slices.SortFunc(keys, bytes.Compare)
	slices.Sort(names) // Go compares strings bytewise, and a prefix first
	for i, k := range keys {
		if got, _ := DecodeMetaKey(k); string(got) != names[i] {
			t.Fatalf("position %d: %q, want %q", i, got, names[i])
		}
	}
}

func TestMetaPrefixBounds(t *testing.T) {
	for _, prefix := range []string{"", "a", "\xff\xff", "\xff", "a\x00", "a\xff", "\x00", "\xc3", "vhost/"} {
		lo, hi := MetaPrefixBounds([]byte(prefix))
		for _, n := range metaNames {
			k := MetaKey(nil, []byte(n))
			if got, want := inBounds(k, lo, hi), len(n) >= len(prefix) && n[:len(prefix)] == prefix; got != want {
				t.Errorf("MetaPrefixBounds(%q) = [%x, %x): %q in = %v, want %v", prefix, lo, hi, n, got, want)
			}
		}
		for _, k := range otherKindKeys() {
			if got, want := inBounds(k, lo, hi), k[0] == prefixMeta && bytes.HasPrefix(k[1:], []byte(prefix)); got != want {
				t.Errorf("MetaPrefixBounds(%q): %x in = %v, want %v", prefix, k, got, want)
			}
		}
	}
	if lo, hi := MetaPrefixBounds([]byte("\xff\xff")); !bytes.Equal(hi, []byte{prefixMeta + 1}) || !bytes.Equal(lo, []byte{prefixMeta, 0xff, 0xff}) {
		t.Errorf("MetaPrefixBounds(ff ff) = [%x, %x)", lo, hi)
	}
}

func TestFixedBounds(t *testing.T) {
	for _, c := range []struct {
		name   string
		bounds func() ([]byte, []byte)
		prefix byte
	}{
		{"queue state", QueueStateBounds, prefixQueueState},
		{"segment", SegmentBounds, prefixSegment},
	} {
		lo, hi := c.bounds()
		for _, k := range otherKindKeys() {
			if got, want := inBounds(k, lo, hi), k[0] == c.prefix; got != want {
				t.Errorf("%s bounds: %x in = %v, want %v", c.name, k, got, want)
			}
		}
	}
}

func TestBoundsDoNotAlias(t *testing.T) {
	key := []byte("a\xff")
	lo, hi := MetaPrefixBounds(key)
	key[0] = 'z'
	lo[1] = 'y'
	if lo2, hi2 := MetaPrefixBounds([]byte("a\xff")); !bytes.Equal(hi, hi2) || bytes.Equal(lo, lo2) {
		t.Errorf("bounds alias their input or each other")
	}
}

func TestKeyAppendNoAlloc(t *testing.T) {
	buf := make([]byte, 0, ExpiryKeyLen)
	allocs := testing.AllocsPerRun(100, func() {
		buf = EntryKey(buf[:0], 1, 2, 3)
		buf = ExpiryKey(buf[:0], -1, 1, 2, 3)
		buf = MsgKey(buf[:0], 9)
		if _, _, _, err := DecodeEntryKey(EntryKey(buf[:0], 1, 2, 3)); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("key encode/decode with capacity: %v allocs, want 0", allocs)
	}
}
