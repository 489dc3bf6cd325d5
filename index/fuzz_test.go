package index

import (
	"bytes"
	"math"
	"testing"
)

// The fuzz targets check, for every decoder: no panic; decode(encode(x)) ==
// x and byte order == tuple order for generated inputs; and for arbitrary
// bytes either an error matching ErrCorrupt or a value that re-encodes to
// exactly those bytes (every encoding here is canonical). Seeds are real
// encodings and damaged copies of them.

// addDamaged adds raw and some damaged variants of it through add.
func addDamaged(raw []byte, add func([]byte)) {
	add(raw)
	if len(raw) > 0 {
		add(raw[:len(raw)-1])
		add(raw[1:])
		flipped := bytes.Clone(raw)
		flipped[len(flipped)/2] ^= 0x80
		add(flipped)
	}
	add(append(bytes.Clone(raw), 0))
}

func FuzzEntryKey(f *testing.F) {
	seeds := []entryTuple{{q: 0, prio: 0, seq: 0}, {q: 10, prio: 5, seq: 7},
		{q: math.MaxUint64, prio: 255, seq: math.MaxUint64}, {q: 1, prio: 0, seq: math.MaxUint64 - 1}}
	for i, s := range seeds {
		o := seeds[(i+1)%len(seeds)]
		addDamaged(EntryKey(nil, s.q, s.prio, s.seq), func(raw []byte) {
			f.Add(s.q, s.prio, s.seq, o.q, o.prio, o.seq, raw)
		})
	}
	f.Add(uint64(1), uint8(0), uint64(0), uint64(0), uint8(255), uint64(math.MaxUint64), MsgKey(nil, 3))
	f.Fuzz(func(t *testing.T, q uint64, prio uint8, seq uint64, q2 uint64, prio2 uint8, seq2 uint64, raw []byte) {
		k := EntryKey(nil, q, prio, seq)
		gq, gp, gs, err := DecodeEntryKey(k)
		if err != nil || gq != q || gp != prio || gs != seq {
			t.Fatalf("DecodeEntryKey(EntryKey(%d, %d, %d)) = %d, %d, %d, %v", q, prio, seq, gq, gp, gs, err)
		}
		k2 := EntryKey(nil, q2, prio2, seq2)
		a, b := entryTuple{q: q, prio: prio, seq: seq}, entryTuple{q: q2, prio: prio2, seq: seq2}
		if got, want := bytes.Compare(k, k2), cmpTuple(a, b); got != want {
			t.Fatalf("compare keys of %+v and %+v = %d, tuples %d", a, b, got, want)
		}
		lo, hi := QueueBounds(q)
		if !inBounds(k, lo, hi) || inBounds(k2, lo, hi) != (q2 == q) {
			t.Fatalf("QueueBounds(%d) wrong for %+v / %+v", q, a, b)
		}
		lo, hi = LevelBounds(q, prio, seq2)
		if inBounds(k, lo, hi) != (seq >= seq2) || inBounds(k2, lo, hi) != (q2 == q && prio2 == prio) {
			t.Fatalf("LevelBounds(%d, %d, %d) wrong for %+v / %+v", q, prio, seq2, a, b)
		}

		rq, rp, rs, err := DecodeEntryKey(raw)
		if err != nil {
			mustCorrupt(t, err, raw)
			return
		}
		if again := EntryKey(nil, rq, rp, rs); !bytes.Equal(again, raw) {
			t.Fatalf("DecodeEntryKey(%x) re-encodes as %x", raw, again)
		}
	})
}

func FuzzExpiryKey(f *testing.F) {
	seeds := []entryTuple{{d: 0, q: 0}, {d: -1, q: 10, prio: 5, seq: 7},
		{d: math.MinInt64, q: math.MaxUint64, prio: 255, seq: math.MaxUint64},
		{d: math.MaxInt64, q: 1, seq: 1}, {d: 1767225600000, q: 3, prio: 1, seq: 9}}
	for i, s := range seeds {
		o := seeds[(i+1)%len(seeds)]
		addDamaged(ExpiryKey(nil, s.d, s.q, s.prio, s.seq), func(raw []byte) {
			f.Add(s.d, s.q, s.prio, s.seq, o.d, o.q, o.prio, o.seq, raw)
		})
	}
	f.Fuzz(func(t *testing.T, d int64, q uint64, prio uint8, seq uint64, d2 int64, q2 uint64, prio2 uint8, seq2 uint64, raw []byte) {
		k := ExpiryKey(nil, d, q, prio, seq)
		gd, gq, gp, gs, err := DecodeExpiryKey(k)
		if err != nil || gd != d || gq != q || gp != prio || gs != seq {
			t.Fatalf("DecodeExpiryKey(ExpiryKey(%d, %d, %d, %d)) = %d, %d, %d, %d, %v", d, q, prio, seq, gd, gq, gp, gs, err)
		}
		k2 := ExpiryKey(nil, d2, q2, prio2, seq2)
		a, b := entryTuple{d, q, prio, seq}, entryTuple{d2, q2, prio2, seq2}
		if got, want := bytes.Compare(k, k2), cmpTuple(a, b); got != want {
			t.Fatalf("compare keys of %+v and %+v = %d, tuples %d", a, b, got, want)
		}
		lo, hi := ExpiryBounds(min(d, d2), max(d, d2))
		if !inBounds(k, lo, hi) || !inBounds(k2, lo, hi) {
			t.Fatalf("ExpiryBounds(%d, %d) misses an end", min(d, d2), max(d, d2))
		}
		lo, hi = ExpiryBounds(d2, d2)
		if inBounds(k, lo, hi) != (d == d2) {
			t.Fatalf("ExpiryBounds(%d, %d) wrong for deadline %d", d2, d2, d)
		}

		rd, rq, rp, rs, err := DecodeExpiryKey(raw)
		if err != nil {
			mustCorrupt(t, err, raw)
			return
		}
		if again := ExpiryKey(nil, rd, rq, rp, rs); !bytes.Equal(again, raw) {
			t.Fatalf("DecodeExpiryKey(%x) re-encodes as %x", raw, again)
		}
	})
}

// splitKeys derives routing keys from one fuzzed byte string: pieces
// separated by 0xfe (so keys may hold NUL and invalid UTF-8).
func splitKeys(p []byte) [][]byte {
	if len(p) == 0 {
		return nil
	}
	return bytes.Split(p, []byte{0xfe})
}

func FuzzEntryValue(f *testing.F) {
	for _, v := range sampleEntryValues() {
		var rks []byte
		var exch, props []byte
		if v.Header != nil {
			rks = bytes.Join(v.Header.RoutingKeys, []byte{0xfe})
			exch, props = v.Header.Exchange, v.Header.Props
		}
		var oq, or []byte
		var oat int64
		if o := v.Origin; o != nil {
			oq, or, oat = o.Queue, o.Reason, o.At
		}
		addDamaged(AppendEntryValue(nil, &v), func(raw []byte) {
			f.Add(raw, v.Msg, v.Size, v.Deadline, v.DeliveryCount, v.DeadLetter, v.DeadAt,
				v.Header != nil, exch, rks, props, oq, or, oat, v.ReadyAt, v.AcquiredCount)
		})
	}
	f.Fuzz(func(t *testing.T, raw []byte, msg uint64, size uint32, deadline int64, dc uint32,
		reason []byte, deadAt int64, hasHeader bool, exch, rks, props []byte,
		originQueue, originReason []byte, originAt int64, readyAt int64, acquired uint32) {
		v := EntryValue{Msg: msg, Size: size, Deadline: deadline, DeliveryCount: dc,
			DeadLetter: reason, DeadAt: deadAt, ReadyAt: readyAt, AcquiredCount: acquired}
		if hasHeader {
			v.Header = &Header{Exchange: exch, RoutingKeys: splitKeys(rks), Props: props}
		}
		if len(originQueue) > 0 { // an origin always names its queue
			v.Origin = &Origin{Queue: originQueue, Reason: originReason, At: originAt}
		}
		b := AppendEntryValue(nil, &v)
		var got EntryValue
		if err := DecodeEntryValue(b, &got); err != nil {
			t.Fatalf("decode(encode(%+v)): %v", v, err)
		}
		if !entryValueEqual(&got, &v) {
			t.Fatalf("decode(encode(%+v)) = %+v", v, got)
		}

		if err := DecodeEntryValue(raw, &got); err != nil {
			mustCorrupt(t, err, raw)
			return
		}
		if again := AppendEntryValue(nil, &got); !bytes.Equal(again, raw) {
			t.Fatalf("DecodeEntryValue(%x) = %+v, re-encodes as %x", raw, got, again)
		}
	})
}

func FuzzMsgValue(f *testing.F) {
	for _, v := range sampleMsgValues() {
		addDamaged(AppendMsgValue(nil, &v), func(raw []byte) { f.Add(raw, v.Refs, v.Size, v.Loc) })
	}
	f.Fuzz(func(t *testing.T, raw []byte, refs, size uint32, loc []byte) {
		v := MsgValue{Refs: refs, Size: size, Loc: loc}
		var got MsgValue
		if err := DecodeMsgValue(AppendMsgValue(nil, &v), &got); err != nil ||
			got.Refs != refs || got.Size != size || !bytes.Equal(got.Loc, loc) {
			t.Fatalf("decode(encode(%+v)) = %+v, %v", v, got, err)
		}
		if err := DecodeMsgValue(raw, &got); err != nil {
			mustCorrupt(t, err, raw)
			return
		}
		if again := AppendMsgValue(nil, &got); !bytes.Equal(again, raw) {
			t.Fatalf("DecodeMsgValue(%x) = %+v, re-encodes as %x", raw, got, again)
		}
	})
}

func FuzzMetaKey(f *testing.F) {
	for i, n := range metaNames {
		o := metaNames[(i+3)%len(metaNames)]
		p := metaNames[(i+7)%len(metaNames)]
		f.Add([]byte(n), []byte(o), []byte(p), MetaKey(nil, []byte(n)))
	}
	f.Add([]byte("a"), []byte("a\x00"), []byte("\xff\xff"), StateKey())
	f.Fuzz(func(t *testing.T, name, name2, prefix, raw []byte) {
		k := MetaKey(nil, name)
		if got, err := DecodeMetaKey(k); err != nil || !bytes.Equal(got, name) {
			t.Fatalf("DecodeMetaKey(MetaKey(%q)) = %q, %v", name, got, err)
		}
		k2 := MetaKey(nil, name2)
		if got, want := bytes.Compare(k, k2), bytes.Compare(name, name2); got != want {
			t.Fatalf("compare meta keys %q, %q = %d, names %d", name, name2, got, want)
		}
		lo, hi := MetaPrefixBounds(prefix)
		for _, n := range [][]byte{name, name2, prefix} {
			if got, want := inBounds(MetaKey(nil, n), lo, hi), bytes.HasPrefix(n, prefix); got != want {
				t.Fatalf("MetaPrefixBounds(%q): %q in = %v, want %v", prefix, n, got, want)
			}
		}
		if inBounds(QueueStateKey(nil, 0), lo, hi) || inBounds(StateKey(), lo, hi) {
			t.Fatalf("MetaPrefixBounds(%q) holds another kind's key", prefix)
		}

		got, err := DecodeMetaKey(raw)
		if err != nil {
			mustCorrupt(t, err, raw)
			return
		}
		if again := MetaKey(nil, got); !bytes.Equal(again, raw) {
			t.Fatalf("DecodeMetaKey(%x) re-encodes as %x", raw, again)
		}
	})
}

// FuzzSmallKeys covers the message, queue state and segment key decoders.
func FuzzSmallKeys(f *testing.F) {
	for _, x := range []uint64{0, 1, 1 << 33, math.MaxUint64} {
		for _, k := range [][]byte{MsgKey(nil, x), QueueStateKey(nil, x), SegmentKey(nil, uint32(x)), StateKey()} {
			addDamaged(k, func(raw []byte) { f.Add(raw, x) })
		}
	}
	f.Fuzz(func(t *testing.T, raw []byte, x uint64) {
		if got, err := DecodeMsgKey(MsgKey(nil, x)); err != nil || got != x {
			t.Fatalf("msg key %d: %d, %v", x, got, err)
		}
		if got, err := DecodeQueueStateKey(QueueStateKey(nil, x)); err != nil || got != x {
			t.Fatalf("queue state key %d: %d, %v", x, got, err)
		}
		if got, err := DecodeSegmentKey(SegmentKey(nil, uint32(x))); err != nil || got != uint32(x) {
			t.Fatalf("segment key %d: %d, %v", uint32(x), got, err)
		}
		check := func(err error, again []byte) {
			if err != nil {
				mustCorrupt(t, err, raw)
			} else if !bytes.Equal(again, raw) {
				t.Fatalf("decoding %x re-encodes as %x", raw, again)
			}
		}
		id, err := DecodeMsgKey(raw)
		check(err, MsgKey(nil, id))
		q, err := DecodeQueueStateKey(raw)
		check(err, QueueStateKey(nil, q))
		s, err := DecodeSegmentKey(raw)
		check(err, SegmentKey(nil, s))
	})
}

// fuzzLevels derives a valid level list from fuzz inputs: up to 8 levels,
// ascending priorities, counts > 0.
func fuzzLevels(a, b, c int64) []LevelState {
	var ls []LevelState
	prio := int(uint8(a))
	for i := range int(uint64(c) % 9) {
		if prio > 255 {
			break
		}
		ls = append(ls, LevelState{Prio: uint8(prio), Count: uint64(b)>>(i*7) | 1, Bytes: uint64(a) >> (i * 5)})
		prio += 1 + int(uint8(b>>(i*8))%32)
	}
	return ls
}

// FuzzStateValues covers the queue, segment and store state decoders.
func FuzzStateValues(f *testing.F) {
	for _, x := range edgeI64 {
		u := uint64(x)
		for _, b := range [][]byte{
			AppendQueueState(nil, &QueueState{LastSeq: u}),
			AppendQueueState(nil, &QueueState{LastSeq: u, Levels: fuzzLevels(x, -x, x/7)}),
			{formatQueueStateV1, byte(u & 0x7f)}, // an older build's value
			AppendSegmentState(nil, &SegmentState{x, -x, x / 7}),
			AppendStoreState(nil, &StoreState{CheckpointLSN: u, NextMsgID: ^u}),
			AppendStoreState(nil, &StoreState{CheckpointLSN: u, NextMsgID: ^u, Position: u | 1}),
			AppendGroupState(nil, &GroupState{Applied: u, AppliedTerm: u / 3, Compacted: u / 2, ConfState: []byte{byte(u)}}),
		} {
			addDamaged(b, func(raw []byte) { f.Add(raw, x, -x, x/7) })
		}
	}
	f.Fuzz(func(t *testing.T, raw []byte, a, b, c int64) {
		qs := QueueState{LastSeq: uint64(a), Levels: fuzzLevels(a, b, c)}
		ss := SegmentState{a, b, c}
		st := StoreState{CheckpointLSN: uint64(a), NextMsgID: uint64(b), Position: uint64(c)}
		var gq QueueState
		var gs SegmentState
		var gt StoreState
		if err := DecodeQueueState(AppendQueueState(nil, &qs), &gq); err != nil || !queueStateEqual(&gq, &qs) {
			t.Fatalf("queue state %+v: %+v, %v", qs, gq, err)
		}
		if err := DecodeSegmentState(AppendSegmentState(nil, &ss), &gs); err != nil || gs != ss {
			t.Fatalf("segment state %+v: %+v, %v", ss, gs, err)
		}
		if err := DecodeStoreState(AppendStoreState(nil, &st), &gt); err != nil || gt != st {
			t.Fatalf("store state %+v: %+v, %v", st, gt, err)
		}
		check := func(err error, again func() []byte) {
			if err != nil {
				mustCorrupt(t, err, raw)
			} else if a := again(); !bytes.Equal(a, raw) {
				t.Fatalf("decoding %x re-encodes as %x", raw, a)
			}
		}
		if len(raw) > 0 && raw[0] == formatQueueStateV1 {
			// An old version decodes to a value the newest version
			// encodes; that encoding decodes to the same value.
			if err := DecodeQueueState(raw, &gq); err != nil {
				mustCorrupt(t, err, raw)
			} else if gq.Levels != nil {
				t.Fatalf("v1 queue state %x decoded with levels %+v", raw, gq.Levels)
			} else {
				var g2 QueueState
				if err := DecodeQueueState(AppendQueueState(nil, &gq), &g2); err != nil || !queueStateEqual(&g2, &gq) {
					t.Fatalf("v1 queue state %x: %+v re-encoded decodes as %+v, %v", raw, gq, g2, err)
				}
			}
		} else {
			check(DecodeQueueState(raw, &gq), func() []byte { return AppendQueueState(nil, &gq) })
		}
		check(DecodeSegmentState(raw, &gs), func() []byte { return AppendSegmentState(nil, &gs) })
		check(DecodeStoreState(raw, &gt), func() []byte { return AppendStoreState(nil, &gt) })
		var gg GroupState
		check(DecodeGroupState(raw, &gg), func() []byte { return AppendGroupState(nil, &gg) })
	})
}
