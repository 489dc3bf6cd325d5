package index

import (
	"bytes"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestEntryValueRoundTrip(t *testing.T) {
	for i, v := range sampleEntryValues() {
		b := AppendEntryValue([]byte("prefix"), &v)
		if string(b[:6]) != "prefix" {
			t.Fatalf("value %d: AppendEntryValue overwrote dst", i)
		}
		b = b[6:]
		got := EntryValue{Msg: 123, DeadLetter: []byte("stale"), Header: &Header{}} // overwritten
		if err := DecodeEntryValue(b, &got); err != nil {
			t.Fatalf("value %d %+v: %v", i, v, err)
		}
		if !entryValueEqual(&got, &v) {
			t.Fatalf("value %d: decode(encode(%+v)) = %+v", i, v, got)
		}
		if again := AppendEntryValue(nil, &got); !bytes.Equal(again, b) {
			t.Fatalf("value %d: re-encoding %x gives %x", i, b, again)
		}
	}
}

func TestEntryValueCompact(t *testing.T) {
	// The common entry: 2 header bytes and two short varints.
	b := AppendEntryValue(nil, &EntryValue{Msg: 100, Size: 100})
	if want := []byte{formatEntryV1, 0, 100, 100}; !bytes.Equal(b, want) {
		t.Errorf("plain entry = %x, want %x", b, want)
	}
}

// Only an entry with a ready-at time or an acquired count is written as
// version 3; of the others, only one with an origin as version 2, every
// other as version 1 (what builds before origins read). Values as older
// builds wrote them decode, with the fields they did not have zero.
func TestEntryValueVersions(t *testing.T) {
	for i, v := range sampleEntryValues() {
		b := AppendEntryValue(nil, &v)
		want := formatEntryV1
		switch {
		case v.ReadyAt != 0 || v.AcquiredCount != 0:
			want = formatEntryV3
		case v.Origin != nil:
			want = formatEntryV2
		}
		if b[0] != want {
			t.Errorf("value %d (origin %v, ready at %d, acquired %d): format %#x, want %#x",
				i, v.Origin != nil, v.ReadyAt, v.AcquiredCount, b[0], want)
		}
	}
	// An entry value written before origins existed: a dead-lettered
	// copy with its header, deadline and delivery count.
	old := []byte{0x11, entryHasDeadline | entryHasDeliveryCount | entryHasHeader, 42, 5, 20, 3,
		3, 'd', 'l', 'x', 1, 3, 'd', 'l', 'q', 2, 0x20, 0x00}
	var got EntryValue
	if err := DecodeEntryValue(old, &got); err != nil {
		t.Fatal(err)
	}
	want := EntryValue{Msg: 42, Size: 5, Deadline: 10, DeliveryCount: 3,
		Header: &Header{Exchange: []byte("dlx"), RoutingKeys: [][]byte{[]byte("dlq")}, Props: []byte{0x20, 0x00}}}
	if !entryValueEqual(&got, &want) || got.Origin != nil {
		t.Fatalf("version 1 value decoded as %+v, want %+v", got, want)
	}
	if again := AppendEntryValue(nil, &got); !bytes.Equal(again, old) {
		t.Fatalf("version 1 value re-encodes as %x, want %x", again, old)
	}

	// A version 2 value as builds before version 3 wrote it: a
	// dead-lettered copy with a deadline, a delivery count and its origin.
	old2 := []byte{0x12, entryHasDeadline | entryHasDeliveryCount | entryHasOrigin, 102, 0, 10, 2,
		1, 'q', 6, 'm', 'a', 'x', 'l', 'e', 'n', 1}
	if err := DecodeEntryValue(old2, &got); err != nil {
		t.Fatal(err)
	}
	want = EntryValue{Msg: 102, Deadline: 5, DeliveryCount: 2, Origin: &Origin{Queue: []byte("q"), Reason: []byte("maxlen"), At: -1}}
	if !entryValueEqual(&got, &want) {
		t.Fatalf("version 2 value decoded as %+v, want %+v", got, want)
	}
	if again := AppendEntryValue(nil, &got); !bytes.Equal(again, old2) {
		t.Fatalf("version 2 value re-encodes as %x, want %x", again, old2)
	}

	// Version 3 pinned: the retry fields follow the others, in flag order.
	v3 := EntryValue{Msg: 7, Size: 3, DeliveryCount: 2, AcquiredCount: 5, ReadyAt: 1767225600000}
	wantV3 := []byte{0x13, entryHasDeliveryCount | entryHasReadyAt | entryHasAcquiredCount, 7, 3, 2,
		0x80, 0xa0, 0xd5, 0xed, 0xee, 0x66, 5}
	if b := AppendEntryValue(nil, &v3); !bytes.Equal(b, wantV3) {
		t.Fatalf("version 3 value %+v encodes as %x, want %x", v3, b, wantV3)
	}
}

func TestDecodedSlicesAliasWithCappedCapacity(t *testing.T) {
	v := sampleEntryValues()[5]
	b := AppendEntryValue(nil, &v)
	var got EntryValue
	if err := DecodeEntryValue(b, &got); err != nil {
		t.Fatal(err)
	}
	orig := bytes.Clone(b)
	_ = append(got.DeadLetter, "XXXX"...)
	_ = append(got.Header.Exchange, "XXXX"...)
	_ = append(got.Header.RoutingKeys[0], "XXXX"...)
	if !bytes.Equal(b, orig) {
		t.Fatal("appending to a decoded slice overwrote the input")
	}
	b[bytes.Index(b, []byte("rejected"))] = 'R' // aliasing is documented
	if string(got.DeadLetter) != "Rejected" {
		t.Fatalf("DeadLetter = %q: does not alias the input as documented", got.DeadLetter)
	}
}

func TestMsgValueRoundTrip(t *testing.T) {
	for i, v := range sampleMsgValues() {
		b := AppendMsgValue(nil, &v)
		got := MsgValue{Loc: []byte("stale")}
		if err := DecodeMsgValue(b, &got); err != nil {
			t.Fatalf("value %d: %v", i, err)
		}
		if got.Refs != v.Refs || got.Size != v.Size || !bytes.Equal(got.Loc, v.Loc) {
			t.Fatalf("value %d: decode(encode(%+v)) = %+v", i, v, got)
		}
	}
}

func TestStateValuesRoundTrip(t *testing.T) {
	for _, x := range edgeU64 {
		for _, qs := range []QueueState{
			{LastSeq: x},
			{LastSeq: x, Levels: []LevelState{{Prio: 0, Count: 1, Bytes: 0}}},
			{LastSeq: x, Levels: []LevelState{{Prio: 0, Count: x | 1, Bytes: x}, {Prio: 9, Count: 3, Bytes: ^x}, {Prio: 255, Count: math.MaxUint64, Bytes: math.MaxUint64}}},
		} {
			gq := QueueState{Levels: []LevelState{{Prio: 7, Count: 7}}} // overwritten
			b := AppendQueueState(nil, &qs)
			if err := DecodeQueueState(b, &gq); err != nil || !queueStateEqual(&gq, &qs) {
				t.Errorf("queue state %+v: got %+v, %v", qs, gq, err)
			}
			if again := AppendQueueState(nil, &gq); !bytes.Equal(again, b) {
				t.Errorf("queue state %+v: re-encoding %x gives %x", qs, b, again)
			}
		}
		st := StoreState{CheckpointLSN: x, NextMsgID: ^x}
		var gs StoreState
		if err := DecodeStoreState(AppendStoreState(nil, &st), &gs); err != nil || gs != st {
			t.Errorf("store state %+v: got %+v, %v", st, gs, err)
		}
	}
	for _, x := range edgeI64 {
		ss := SegmentState{LiveBytes: x, LiveMsgs: -x, TotalBytes: x / 3}
		var gs SegmentState
		if err := DecodeSegmentState(AppendSegmentState(nil, &ss), &gs); err != nil || gs != ss {
			t.Errorf("segment state %+v: got %+v, %v", ss, gs, err)
		}
	}
}

// A version 1 queue state (last seq only, written by an older build) still
// decodes, with no levels; it is rewritten as version 2.
func TestQueueStateV1(t *testing.T) {
	v1 := []byte{formatQueueStateV1, 0xac, 0x02} // last seq 300
	gq := QueueState{Levels: []LevelState{{Prio: 1, Count: 1}}}
	if err := DecodeQueueState(v1, &gq); err != nil || gq.LastSeq != 300 || gq.Levels != nil {
		t.Fatalf("decode v1 %x = %+v, %v; want last seq 300, no levels", v1, gq, err)
	}
	if got, want := AppendQueueState(nil, &gq), []byte{formatQueueStateV2, 0xac, 0x02, 0}; !bytes.Equal(got, want) {
		t.Fatalf("re-encoding a v1 state = %x, want %x", got, want)
	}
	if err := decQueueStateValue(append(bytes.Clone(v1), 0)); err == nil {
		t.Fatal("a v1 state with a trailing byte decoded")
	}
	if QueueStateHasLevels(v1) || !QueueStateHasLevels(AppendQueueState(nil, &gq)) {
		t.Fatal("QueueStateHasLevels does not tell version 1 from version 2")
	}
}

func TestQueueStateCompact(t *testing.T) {
	b := AppendQueueState(nil, &QueueState{LastSeq: 5, Levels: []LevelState{{Prio: 0, Count: 2, Bytes: 100}, {Prio: 4, Count: 1, Bytes: 1}}})
	if want := []byte{formatQueueStateV2, 5, 2, 0, 2, 100, 4, 1, 1}; !bytes.Equal(b, want) {
		t.Errorf("queue state = %x, want %x", b, want)
	}
	for n := range len(b) {
		mustCorrupt(t, decQueueStateValue(b[:n]), b[:n])
	}
}

func TestDecodeValueErrors(t *testing.T) {
	full := AppendEntryValue(nil, &sampleEntryValues()[5])
	plain := AppendEntryValue(nil, &EntryValue{Msg: 300, Size: 1})
	msg := AppendMsgValue(nil, &sampleMsgValues()[1])
	cases := []struct {
		name    string
		b       []byte
		decode  func([]byte) error
		version bool   // also ErrUnknownVersion
		reason  string // substring of the error
	}{
		{"empty", nil, decEntryValue, false, "empty value"},
		{"future version", append([]byte{0x14}, plain[1:]...), decEntryValue, true, "format byte 0x14"},
		{"version 3 without retry fields", append([]byte{formatEntryV3}, plain[1:]...), decEntryValue, false, "version 3 without a ready-at time or an acquired count"},
		{"version 3 with only an origin", []byte{formatEntryV3, entryHasOrigin, 1, 1, 1, 'q', 0, 0}, decEntryValue, false, "version 3 without"},
		{"version 2 with a ready-at time", []byte{formatEntryV2, entryHasOrigin | entryHasReadyAt, 1, 1, 1, 'q', 0, 0, 2}, decEntryValue, false, "unknown flags 0x40"},
		{"version 1 with an acquired count", []byte{formatEntryV1, entryHasAcquiredCount, 1, 1, 1}, decEntryValue, false, "unknown flags 0x80"},
		{"flagged zero ready-at", []byte{formatEntryV3, entryHasReadyAt, 1, 1, 0}, decEntryValue, false, "ready-at time flagged but zero"},
		{"flagged zero acquired count", []byte{formatEntryV3, entryHasAcquiredCount, 1, 1, 0}, decEntryValue, false, "acquired count flagged but zero"},
		{"acquired count overflows uint32", []byte{formatEntryV3, entryHasAcquiredCount, 1, 1, 0x80, 0x80, 0x80, 0x80, 0x10}, decEntryValue, false, "acquired count 4294967296 overflows 32 bits"},
		{"truncated ready-at", []byte{formatEntryV3, entryHasReadyAt | entryHasAcquiredCount, 1, 1, 0x80}, decEntryValue, false, "truncated ready-at time"},
		{"version 2 without an origin", append([]byte{formatEntryV2}, plain[1:]...), decEntryValue, false, "version 2 without an origin"},
		{"version 1 with an origin", []byte{formatEntryV1, entryHasOrigin, 1, 1, 1, 'q', 0, 0}, decEntryValue, false, "unknown flags 0x20"},
		{"empty origin queue", []byte{formatEntryV2, entryHasOrigin, 1, 1, 0, 0, 0}, decEntryValue, false, "origin queue flagged but zero"},
		{"truncated origin", []byte{formatEntryV2, entryHasOrigin, 1, 1, 1, 'q', 0}, decEntryValue, false, "truncated origin time"},
		{"zero format byte", append([]byte{0x00}, plain[1:]...), decEntryValue, false, "format byte 0x00, want 0x11"},
		{"message value as entry", msg, decEntryValue, false, "format byte 0x21"},
		{"entry value as message", plain, decMsgValue, false, "format byte 0x11"},
		{"unknown flag", []byte{formatEntryV1, 0x40, 1, 1}, decEntryValue, false, "unknown flags 0x40"},
		{"unknown flag in version 2", []byte{formatEntryV2, entryHasOrigin | 0x40, 1, 1}, decEntryValue, false, "unknown flags 0x40"},
		{"truncated flags", []byte{formatEntryV1}, decEntryValue, false, "truncated flags"},
		{"truncated varint", plain[:3], decEntryValue, false, "truncated message id"},
		{"trailing byte", append(bytes.Clone(plain), 0), decEntryValue, false, "1 trailing bytes"},
		{"non-minimal varint", []byte{formatEntryV1, 0, 0x81, 0x00, 1}, decEntryValue, false, "not minimally encoded"},
		{"varint overflow", append([]byte{formatEntryV1, 0}, bytes.Repeat([]byte{0xff}, 10)...), decEntryValue, false, "overflows 64 bits"},
		{"size overflows uint32", []byte{formatEntryV1, 0, 1, 0x80, 0x80, 0x80, 0x80, 0x10}, decEntryValue, false, "size 4294967296 overflows 32 bits"},
		{"flagged zero deadline", []byte{formatEntryV1, entryHasDeadline, 1, 1, 0}, decEntryValue, false, "deadline flagged but zero"},
		{"flagged empty reason", []byte{formatEntryV1, entryHasDeadLetter, 1, 1, 0}, decEntryValue, false, "dead-letter reason flagged but zero"},
		{"reason longer than value", []byte{formatEntryV1, entryHasDeadLetter, 1, 1, 5, 'a'}, decEntryValue, false, "exceeds the 2 bytes left"},
		{"routing key count too large", []byte{formatEntryV1, entryHasHeader, 1, 1, 0, 0x80, 0x80, 0x80, 0x80, 0x01, 0}, decEntryValue, false, "routing key count"},
		{"truncated header", full[:len(full)-1], decEntryValue, false, "properties length"},
		{"msg truncated location", msg[:len(msg)-1], decMsgValue, false, "location length"},
		{"queue state trailing", append(AppendQueueState(nil, &QueueState{LastSeq: 5}), 0), decQueueStateValue, false, "trailing"},
		{"segment state truncated", AppendSegmentState(nil, &SegmentState{1, 2, 3})[:3], decSegmentState, false, "truncated total bytes"},
		{"store state trailing bytes", []byte{formatStoreStateV1, 0, 0, 0x80, 0x80, 0x80, 0x80, 0x10}, decStoreState, false, "trailing"},
		{"store state as queue state", AppendStoreState(nil, &StoreState{}), decQueueStateValue, false, "format byte 0x51, want 0x32"},
		{"queue state future version", []byte{0x33, 1, 0}, decQueueStateValue, true, "format byte 0x33"},
		{"queue state levels descend", []byte{formatQueueStateV2, 9, 2, 5, 1, 1, 4, 1, 1}, decQueueStateValue, false, "level priority 4 after 5"},
		{"queue state level repeated", []byte{formatQueueStateV2, 9, 2, 5, 1, 1, 5, 1, 1}, decQueueStateValue, false, "level priority 5 after 5"},
		{"queue state empty level", []byte{formatQueueStateV2, 9, 1, 5, 0, 0}, decQueueStateValue, false, "level 5 holds no entries"},
		{"queue state level count past input", []byte{formatQueueStateV2, 9, 3, 5, 1, 1}, decQueueStateValue, false, "level count 3 exceeds the 3 bytes left"},
		{"queue state over 256 levels", append([]byte{formatQueueStateV2, 9, 0x81, 0x02}, bytes.Repeat([]byte{1}, 257*3)...), decQueueStateValue, false, "level count 257 exceeds 256"},
		{"queue state truncated level", []byte{formatQueueStateV2, 9, 1, 5, 1}, decQueueStateValue, false, "level count 1 exceeds the 2 bytes left"},
		{"queue state level bytes truncated", []byte{formatQueueStateV2, 9, 1, 5, 1, 0x80}, decQueueStateValue, false, "truncated level bytes"},
		{"queue state level trailing", []byte{formatQueueStateV2, 9, 1, 5, 1, 1, 0}, decQueueStateValue, false, "trailing"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.decode(c.b)
			mustCorrupt(t, err, c.b)
			if got := errors.Is(err, ErrUnknownVersion); got != c.version {
				t.Errorf("errors.Is(%q, ErrUnknownVersion) = %v, want %v", err, got, c.version)
			}
			if !strings.Contains(err.Error(), c.reason) {
				t.Errorf("error %q does not say %q", err, c.reason)
			}
		})
	}
}

func TestDecodeErrorText(t *testing.T) {
	err := DecodeEntryValue([]byte{formatEntryV1, 0, 0x81}, new(EntryValue))
	const want = "decode entry value: index: corrupt encoding: truncated message id at offset 2"
	if err == nil || err.Error() != want {
		t.Errorf("error = %v, want %q", err, want)
	}
}

func TestEntryValueTruncatedEverywhere(t *testing.T) {
	// Every proper prefix of every sample fails with a typed error, never a
	// panic or a shorter value.
	for _, v := range sampleEntryValues() {
		b := AppendEntryValue(nil, &v)
		for n := range len(b) {
			mustCorrupt(t, decEntryValue(b[:n]), b[:n])
		}
	}
	for _, v := range sampleMsgValues() {
		b := AppendMsgValue(nil, &v)
		for n := range len(b) {
			mustCorrupt(t, decMsgValue(b[:n]), b[:n])
		}
	}
}

func TestValueAppendNoAlloc(t *testing.T) {
	samples := sampleEntryValues()
	buf := make([]byte, 0, 256)
	var v EntryValue
	allocs := testing.AllocsPerRun(100, func() {
		for i := range samples {
			buf = AppendEntryValue(buf[:0], &samples[i])
		}
		buf = AppendEntryValue(buf[:0], &EntryValue{Msg: 1, Size: 2, Deadline: 3})
		if err := DecodeEntryValue(buf, &v); err != nil {
			t.Fatal(err)
		}
		buf = AppendMsgValue(buf[:0], &MsgValue{Refs: 1, Size: 2, Loc: []byte{1, 2, 3}})
		var m MsgValue
		if err := DecodeMsgValue(buf, &m); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("value encode/decode with capacity: %v allocs, want 0", allocs)
	}
}

func TestUvarintEdges(t *testing.T) {
	for _, x := range []uint64{0, 127, 128, 16383, 16384, math.MaxUint32, math.MaxUint64} {
		var got QueueState
		b := AppendQueueState(nil, &QueueState{LastSeq: x})
		if err := DecodeQueueState(b, &got); err != nil || got.LastSeq != x {
			t.Errorf("uvarint %d (%x): got %d, %v", x, b, got.LastSeq, err)
		}
	}
	// 2^64 would need a 10th byte of 2.
	b := append([]byte{formatQueueStateV1}, bytes.Repeat([]byte{0x80}, 9)...)
	mustCorrupt(t, decQueueStateValue(append(b, 2)), append(b, 2))
	if err := decQueueStateValue(append(b, 1)); err != nil { // 2^63
		t.Errorf("2^63: %v", err)
	}
}

func decEntryValue(b []byte) error      { return DecodeEntryValue(b, new(EntryValue)) }
func decMsgValue(b []byte) error        { return DecodeMsgValue(b, new(MsgValue)) }
func decQueueStateValue(b []byte) error { return DecodeQueueState(b, new(QueueState)) }
func decSegmentState(b []byte) error    { return DecodeSegmentState(b, new(SegmentState)) }
func decStoreState(b []byte) error      { return DecodeStoreState(b, new(StoreState)) }

func queueStateEqual(a, b *QueueState) bool {
	return a.LastSeq == b.LastSeq && slices.Equal(a.Levels, b.Levels)
}

// A replicated store's state (version 2) and a group's state round-trip;
// a single node's store state stays version 1, byte for byte.
func TestStoreAndGroupStateRoundTrip(t *testing.T) {
	v1 := AppendStoreState(nil, &StoreState{CheckpointLSN: 7, NextMsgID: 9})
	if v1[0] != formatStoreStateV1 {
		t.Fatalf("single node state written as %#x", v1[0])
	}
	for _, want := range []StoreState{{CheckpointLSN: 7, NextMsgID: 9}, {CheckpointLSN: 7, NextMsgID: 1<<48 + 3, Position: 12}} {
		var got StoreState
		got.Position = 99
		if err := DecodeStoreState(AppendStoreState(nil, &want), &got); err != nil || got != want {
			t.Fatalf("%+v: got %+v, %v", want, got, err)
		}
	}
	gs := GroupState{Applied: 10, AppliedTerm: 2, Compacted: 8, CompactedTerm: 1, ConfState: []byte{1, 2, 3}}
	var got GroupState
	if err := DecodeGroupState(AppendGroupState(nil, &gs), &got); err != nil || got.Applied != 10 || got.AppliedTerm != 2 ||
		got.Compacted != 8 || got.CompactedTerm != 1 || string(got.ConfState) != "\x01\x02\x03" {
		t.Fatalf("got %+v, %v", got, err)
	}
	bad := gs
	bad.Compacted = 11
	if err := DecodeGroupState(AppendGroupState(nil, &bad), &got); err == nil {
		t.Fatal("a compaction above the applied index decoded")
	}
	if k, err := DecodeGroupStateKey(GroupStateKey(nil, 5)); err != nil || k != 5 {
		t.Fatalf("key %d, %v", k, err)
	}
}
