package index

import (
	"bytes"
	"errors"
	"math"
	"testing"
)

// mustCorrupt fails t unless err is a *DecodeError matching ErrCorrupt
// whose offset lies within the input.
func mustCorrupt(t testing.TB, err error, input []byte) {
	t.Helper()
	if err == nil {
		t.Fatalf("decode %x: no error", input)
	}
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("decode %x: error %q does not match ErrCorrupt", input, err)
	}
	var de *DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("decode %x: error %q is not a *DecodeError", input, err)
	}
	if de.Offset < 0 || de.Offset > len(input) {
		t.Fatalf("decode %x: error offset %d outside the %d-byte input", input, de.Offset, len(input))
	}
}

func headerEqual(a, b *Header) bool {
	if a == nil || b == nil {
		return a == b
	}
	if !bytes.Equal(a.Exchange, b.Exchange) || !bytes.Equal(a.Props, b.Props) ||
		len(a.RoutingKeys) != len(b.RoutingKeys) {
		return false
	}
	for i := range a.RoutingKeys {
		if !bytes.Equal(a.RoutingKeys[i], b.RoutingKeys[i]) {
			return false
		}
	}
	return true
}

// entryValueEqual compares as the encoding does: nil and empty byte slices
// are equal, a nil and a non-nil Header are not.
func entryValueEqual(a, b *EntryValue) bool {
	return a.Msg == b.Msg && a.Size == b.Size && a.Deadline == b.Deadline &&
		a.DeliveryCount == b.DeliveryCount && a.AcquiredCount == b.AcquiredCount && a.ReadyAt == b.ReadyAt &&
		bytes.Equal(a.DeadLetter, b.DeadLetter) &&
		a.DeadAt == b.DeadAt && headerEqual(a.Header, b.Header) && originEqual(a.Origin, b.Origin)
}

func originEqual(a, b *Origin) bool {
	if a == nil || b == nil {
		return a == b
	}
	return bytes.Equal(a.Queue, b.Queue) && bytes.Equal(a.Reason, b.Reason) && a.At == b.At
}

// sampleEntryValues are the entry values the seed corpora and round-trip
// tests start from: the shapes the store writes, and the extremes.
func sampleEntryValues() []EntryValue {
	return []EntryValue{
		{},
		{Msg: 1, Size: 5},
		{Msg: 1 << 40, Size: 4096, Deadline: 1767225600000},
		{Msg: 77, Size: 12, DeliveryCount: 3},
		{Msg: 78, Size: 0, Deadline: -1},
		{
			Msg: 99, Size: 1 << 20, Deadline: 1767225600123, DeliveryCount: 1,
			DeadLetter: []byte("rejected"), DeadAt: 1767225600999,
			Header: &Header{
				Exchange:    []byte("dlx"),
				RoutingKeys: [][]byte{[]byte("dead"), []byte("a\x00b"), []byte("\xff\xfe")},
				Props:       []byte{0x80, 0x00, 0x0a, 't', 'e', 'x', 't', '/', 'p', 'l', 'a', 'i', 'n'},
			},
		},
		{Msg: 5, Size: 1, Header: &Header{}},
		{Msg: 6, Size: 2, Header: &Header{RoutingKeys: [][]byte{nil, []byte("x")}}},
		{Msg: 7, DeadLetter: []byte("maxlen")},
		{Msg: 8, DeadAt: -5},
		{
			Msg: math.MaxUint64, Size: math.MaxUint32, Deadline: math.MinInt64,
			DeliveryCount: math.MaxUint32, DeadLetter: []byte("expired"), DeadAt: math.MaxInt64,
		},
		// Version 2: dead-lettered copies with the broker's record.
		{
			Msg: 100, Size: 7,
			Header: &Header{Exchange: []byte("dlx"), RoutingKeys: [][]byte{[]byte("dlq")}, Props: []byte{0x20, 0x00}},
			Origin: &Origin{Queue: []byte("orders"), Reason: []byte("rejected"), At: 1767225600999},
		},
		{Msg: 101, Origin: &Origin{Queue: []byte("q")}},
		{Msg: 102, Deadline: 5, DeliveryCount: 2, Origin: &Origin{Queue: []byte("\xff\x00"), Reason: []byte("maxlen"), At: -1}},
		// Version 3: entries of a queue with delayed retry that came back.
		{Msg: 200, Size: 1500, DeliveryCount: 1, AcquiredCount: 2, ReadyAt: 1767225600000},
		{Msg: 201, ReadyAt: -1},
		{Msg: 202, Size: 3, AcquiredCount: 1},
		{
			Msg: 203, Size: 9, Deadline: 1767225699999, DeliveryCount: 20, AcquiredCount: 31, ReadyAt: 1767225601500,
			Header: &Header{Exchange: []byte("dlx"), RoutingKeys: [][]byte{[]byte("dlq")}},
			Origin: &Origin{Queue: []byte("orders"), Reason: []byte("delivery_limit"), At: 1767225600999},
		},
		{Msg: math.MaxUint64, AcquiredCount: math.MaxUint32, ReadyAt: math.MinInt64},
		{Msg: 204, DeadLetter: []byte("rejected"), DeadAt: 9, ReadyAt: math.MaxInt64},
	}
}

func sampleMsgValues() []MsgValue {
	return []MsgValue{
		{},
		{Refs: 1, Size: 5, Loc: []byte{0, 0, 0, 3, 0x10, 0x20}},
		{Refs: 3, Size: 1 << 20, Loc: []byte("\x00\xff\x00")},
		{Refs: math.MaxUint32, Size: math.MaxUint32, Loc: bytes.Repeat([]byte{0xab}, 300)},
	}
}
