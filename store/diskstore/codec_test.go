package diskstore

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"testing"

	"github.com/brokerd/brokerd/store"
	"github.com/brokerd/brokerd/wal"
)

// codecBatch is a batch with every field the record encodes, the first
// message referred to by two puts, the second (stored before) by id only;
// with origin, a put has an origin (version 2), with retry, a put and the
// update have a ready-at time and an acquired count (version 4).
func codecBatch(origin, retry bool) (*store.Batch, []*store.Message) {
	fresh := &store.Message{ID: 41, Persistent: true, Body: []byte("body"),
		Header: store.Header{Exchange: "x", RoutingKeys: []string{"a", "b"}, Props: []byte{0x10, 0, 1}}}
	stored := &store.Message{ID: 7}
	b := &store.Batch{
		Messages: []*store.Message{fresh, stored},
		Puts: []store.Entry{
			{Ref: store.Ref{Queue: 3, Prio: 2, Seq: 9}, Msg: fresh, Deadline: 1767225600123, DeliveryCount: 2},
			{Ref: store.Ref{Queue: 4, Seq: 1}, Msg: fresh, DeadLetter: "rejected", DeadAt: -5,
				Header: &store.Header{Exchange: "dlx", RoutingKeys: []string{"dlq"}}},
			{Ref: store.Ref{Queue: store.VolatileQueue | 5, Seq: math.MaxUint64}, Msg: stored},
		},
		Updates:    []store.Update{{Ref: store.Ref{Queue: 3, Seq: 8}, DeliveryCount: 4, DeadLetter: "expired", DeadAt: 12}},
		Deletes:    []store.Ref{{Queue: 3, Prio: 1, Seq: 2}},
		DropQueues: []store.QueueID{11},
		Meta:       []store.MetaOp{{Key: "q/a", Value: []byte("def")}, {Key: "q/b"}, {Key: "e", Value: []byte{}}},
	}
	if origin {
		b.Puts[1].Origin = &store.Origin{Queue: "orders", Reason: "rejected", At: 1767225600000}
	}
	if retry {
		b.Puts[0].ReadyAt, b.Puts[0].AcquiredCount = 1767225601500, 3
		b.Puts[2].ReadyAt = -1
		b.Updates[0].ReadyAt, b.Updates[0].AcquiredCount = 1767225602000, math.MaxUint32
	}
	return b, []*store.Message{fresh} // stored is written by id only
}

// codecShapes are codecBatch's arguments and the record version each
// gives.
var codecShapes = []struct {
	origin, retry bool
	version       byte
}{
	{false, false, recordVersion},
	{true, false, recordVersionOrigin},
	{false, true, recordVersionRetry},
	{true, true, recordVersionRetry},
}

// sameRecord fails unless got, decoded from a record, is want's batch: it
// compares their encodings (with the bodies the record carried).
func sameRecord(t *testing.T, what string, got, want *store.Batch, msgs []*store.Message) {
	t.Helper()
	if g, w := encodeRecord(nil, got, got.Messages), encodeRecord(nil, want, msgs); !bytes.Equal(g, w) {
		t.Fatalf("%s: decoded batch re-encodes as\n%x\nwant\n%x", what, g, w)
	}
}

// Every kind decodes to what was encoded. Apply's records (version 1, 2
// with an origin, 4 with a retry's fields) decode as local batches,
// unchanged; a version-3 local or volatile record is the version byte and
// kind byte followed by exactly that record; entries and hard states have
// the layout codec.go gives (the golden bytes pin it: it is on-disk
// format).
func TestRecordKindsRoundTrip(t *testing.T) {
	for _, shape := range codecShapes {
		origin := shape.origin
		b, msgs := codecBatch(shape.origin, shape.retry)
		plain := encodeRecord(nil, b, msgs)
		if plain[0] != shape.version {
			t.Fatalf("origin %v retry %v: Apply's record is version %d, want %d", shape.origin, shape.retry, plain[0], shape.version)
		}
		r, err := decodeWALRecord(plain)
		if err != nil || r.kinded || r.kind != kindLocal || r.batch == nil {
			t.Fatalf("origin %v: version %d record decodes as kinded %v kind %d batch %v, err %v; want an unkinded local batch",
				origin, plain[0], r.kinded, r.kind, r.batch != nil, err)
		}
		sameRecord(t, "version 1/2/4", r.batch, b, msgs)
		if got := r.batch.Puts[1].Origin; origin != (got != nil) || origin && *got != *b.Puts[1].Origin {
			t.Fatalf("origin %v: decoded origin %v", origin, got)
		}
		for i := range b.Puts {
			if g, w := r.batch.Puts[i], b.Puts[i]; g.ReadyAt != w.ReadyAt || g.AcquiredCount != w.AcquiredCount {
				t.Fatalf("version %d: put %d decodes ready at %d, acquired %d; want %d, %d", plain[0], i, g.ReadyAt, g.AcquiredCount, w.ReadyAt, w.AcquiredCount)
			}
		}
		if g, w := r.batch.Updates[0], b.Updates[0]; g != w {
			t.Fatalf("version %d: update decodes as %+v, want %+v", plain[0], g, w)
		}
		if r.batch.Puts[2].Msg.Body != nil {
			t.Fatalf("a put of a message the record does not carry decodes with a body")
		}
		for _, kind := range []byte{kindLocal, kindVolatile} {
			rec := encodeBatchRecord(nil, kind, b, msgs)
			if want := append([]byte{recordVersionKind, kind}, plain...); !bytes.Equal(rec, want) {
				t.Fatalf("%s record is\n%x\nwant version 3, kind %d, then the version %d record\n%x", kindName(kind), rec, kind, plain[0], want)
			}
			r, err := decodeWALRecord(rec)
			if err != nil || !r.kinded || r.kind != kind || r.batch == nil {
				t.Fatalf("%s record decodes as kinded %v kind %d, err %v", kindName(kind), r.kinded, r.kind, err)
			}
			sameRecord(t, kindName(kind), r.batch, b, msgs)
		}
	}

	entries := []struct {
		e    LogEntry
		want []byte
	}{
		{LogEntry{Group: 1, Term: 2, Index: 300, Type: 0, Data: []byte("ab")}, []byte{3, 3, 1, 2, 0xac, 0x02, 0, 2, 'a', 'b'}},
		{LogEntry{Group: 0, Term: 1, Index: 1, Type: 1}, []byte{3, 3, 0, 1, 1, 1, 0}}, // empty data: a leader's first entry
		{LogEntry{Group: math.MaxUint64, Term: math.MaxUint64, Index: math.MaxUint64, Type: 2, Data: make([]byte, 200)}, nil},
	}
	for _, c := range entries {
		rec := encodeEntry(nil, &c.e)
		if c.want != nil && !bytes.Equal(rec, c.want) {
			t.Fatalf("entry %+v encodes as %x, want %x", c.e, rec, c.want)
		}
		r, err := decodeWALRecord(rec)
		if err != nil || r.kind != kindEntry || r.batch != nil {
			t.Fatalf("entry %+v decodes as kind %d, err %v", c.e, r.kind, err)
		}
		if got := r.entry; got.Group != c.e.Group || got.Term != c.e.Term || got.Index != c.e.Index || got.Type != c.e.Type ||
			!bytes.Equal(got.Data, c.e.Data) || got.Data == nil {
			t.Fatalf("entry %+v decodes as %+v", c.e, got)
		}
	}
	hardStates := []struct {
		hs   HardState
		want []byte
	}{
		{HardState{Group: 7, Term: 3, Vote: 2, Commit: 128}, []byte{3, 4, 7, 3, 2, 0x80, 0x01}},
		{HardState{Group: math.MaxUint64, Term: math.MaxUint64, Vote: math.MaxUint64, Commit: math.MaxUint64}, nil},
	}
	for _, c := range hardStates {
		rec := encodeHardState(nil, &c.hs)
		if c.want != nil && !bytes.Equal(rec, c.want) {
			t.Fatalf("hard state %+v encodes as %x, want %x", c.hs, rec, c.want)
		}
		r, err := decodeWALRecord(rec)
		if err != nil || r.kind != kindHardState || r.hardState != c.hs {
			t.Fatalf("hard state %+v decodes as kind %d %+v, err %v", c.hs, r.kind, r.hardState, err)
		}
	}
}

// Bad records are refused with an error wrapping errCorrupt, whatever is
// wrong with them: nothing of them is guessed.
func TestRecordKindsCorrupt(t *testing.T) {
	b, msgs := codecBatch(true, false)
	local := encodeBatchRecord(nil, kindLocal, b, msgs)
	b, msgs = codecBatch(true, true)
	retry := encodeRecord(nil, b, msgs)
	// An update whose acquired count (1<<32) does not fit its field:
	// version, no messages or puts, one update (ref 1/0/1, dc 0, no dead
	// letter, dead at 0, ready at 0, the count), no deletes, drops, meta.
	overflow := []byte{recordVersionRetry, 0, 0, 1, 1, 0, 1, 0, 0, 0, 0, 0x80, 0x80, 0x80, 0x80, 0x10, 0, 0, 0}
	if _, err := decodeWALRecord(append(overflow[:11:11], 1, 0, 0, 0)); err != nil {
		t.Fatalf("the overflow case's record with a count of 1 does not decode: %v", err)
	}
	entry := encodeEntry(nil, &LogEntry{Group: 1, Term: 2, Index: 3, Data: []byte("data")})
	hs := encodeHardState(nil, &HardState{Group: 1, Term: 2, Vote: 3, Commit: 4})
	cases := map[string][]byte{
		"empty":                       {},
		"unknown version":             {5, 0},
		"acquired count past 32 bits": overflow,
		"retry trailing bytes":        append(bytes.Clone(retry), 0),
		"version 3 without a kind":    {3},
		"kind 0":                      {3, 0},
		"unknown kind":                {3, 9, 0, 0, 0, 0},
		"local without a batch":       {3, kindLocal},
		"a kinded record in local":    append([]byte{3, kindLocal}, entry...),
		"a kinded record in volatile": append([]byte{3, kindVolatile}, hs...),
		"entry data past the end":     {3, kindEntry, 1, 2, 3, 0, 5, 'a'},
		"entry with trailing bytes":   append(bytes.Clone(entry), 0),
		"hard state trailing bytes":   append(bytes.Clone(hs), 0),
		"local trailing bytes":        append(bytes.Clone(local), 0),
		"varint overflow":             {3, kindHardState, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0, 0, 0},
	}
	// Every proper prefix of a good record is torn.
	for _, rec := range [][]byte{local, entry, hs} {
		for n := 1; n < len(rec); n++ {
			cases[fmt.Sprintf("%s record's first %d bytes", kindName(rec[1]), n)] = rec[:n]
		}
	}
	for n := 1; n < len(retry); n++ {
		cases[fmt.Sprintf("version 4 record's first %d bytes", n)] = retry[:n]
	}
	for name, rec := range cases {
		r, err := decodeWALRecord(rec)
		if !errors.Is(err, errCorrupt) {
			t.Errorf("%s (%x): decoded as kind %d, err %v; want an error wrapping errCorrupt", name, rec, r.kind, err)
		}
	}
}

// A version-3 record's kind must agree with its WAL record's class: a
// volatile batch in a Volatile record, the rest in Durable ones. A version
// 1 or 2 record takes its class from the WAL.
func TestRecordKindClass(t *testing.T) {
	b, msgs := codecBatch(false, false)
	recs := map[string][]byte{
		"v1":        encodeRecord(nil, b, msgs),
		"local":     encodeBatchRecord(nil, kindLocal, b, msgs),
		"volatile":  encodeBatchRecord(nil, kindVolatile, b, msgs),
		"entry":     encodeEntry(nil, &LogEntry{Group: 1}),
		"hardstate": encodeHardState(nil, &HardState{Group: 1}),
	}
	ok := map[string][]wal.Class{
		"v1":        {wal.Durable, wal.Volatile},
		"local":     {wal.Durable},
		"volatile":  {wal.Volatile},
		"entry":     {wal.Durable},
		"hardstate": {wal.Durable},
	}
	for name, rec := range recs {
		r, err := decodeWALRecord(rec)
		if err != nil {
			t.Fatal(err)
		}
		for _, class := range []wal.Class{wal.Durable, wal.Volatile} {
			err := r.checkClass(class)
			if want := slices.Contains(ok[name], class); want != (err == nil) || err != nil && !errors.Is(err, errCorrupt) {
				t.Errorf("%s record in a %s WAL record: %v, want accepted %v (refusals wrap errCorrupt)", name, class, err, want)
			}
		}
	}
}

// reencode is the canonical encoding of a decoded record.
func reencode(r *walRecord) []byte {
	switch {
	case r.batch != nil && !r.kinded:
		return encodeRecord(nil, r.batch, r.batch.Messages)
	case r.batch != nil:
		return encodeBatchRecord(nil, r.kind, r.batch, r.batch.Messages)
	case r.kind == kindEntry:
		return encodeEntry(nil, &r.entry)
	default:
		return encodeHardState(nil, &r.hardState)
	}
}

// FuzzWALRecord: any bytes either decode or fail with an error wrapping
// errCorrupt, never panic; what decodes encodes again (canonically: a
// non-minimal varint becomes minimal) to a record that decodes to the
// same thing and encodes to the same bytes.
func FuzzWALRecord(f *testing.F) {
	for _, shape := range codecShapes {
		b, msgs := codecBatch(shape.origin, shape.retry)
		f.Add(encodeRecord(nil, b, msgs))
		f.Add(encodeBatchRecord(nil, kindLocal, b, msgs))
		f.Add(encodeBatchRecord(nil, kindVolatile, b, msgs))
	}
	f.Add(encodeRecord(nil, &store.Batch{}, nil))
	f.Add(encodeEntry(nil, &LogEntry{Group: 1, Term: 2, Index: 3, Type: 1, Data: []byte("proposal")}))
	f.Add(encodeEntry(nil, &LogEntry{}))
	f.Add(encodeHardState(nil, &HardState{Group: 1, Term: 2, Vote: 3, Commit: 4}))
	f.Add([]byte{3, 9})
	f.Fuzz(func(t *testing.T, rec []byte) {
		r, err := decodeWALRecord(rec)
		if err != nil {
			if !errors.Is(err, errCorrupt) {
				t.Fatalf("error %v does not wrap errCorrupt", err)
			}
			return
		}
		enc := reencode(&r)
		r2, err := decodeWALRecord(enc)
		if err != nil {
			t.Fatalf("re-encoded record %x does not decode: %v", enc, err)
		}
		if r2.kinded != r.kinded || r2.kind != r.kind {
			t.Fatalf("re-encoded record is kinded %v kind %d, want %v %d", r2.kinded, r2.kind, r.kinded, r.kind)
		}
		if !reflect.DeepEqual(r2, r) {
			t.Fatalf("re-encoded record decodes as\n%+v\nwant\n%+v", r2, r)
		}
		if enc2 := reencode(&r2); !bytes.Equal(enc2, enc) {
			t.Fatalf("encoding is not stable:\n%x\n%x", enc, enc2)
		}
	})
}

// FuzzReplicaRecords: entries and hard states of any field values round
// trip exactly, and every proper prefix of their records is refused.
func FuzzReplicaRecords(f *testing.F) {
	f.Add(uint64(1), uint64(2), uint64(3), uint8(0), []byte("proposal"), uint64(4), uint64(5))
	f.Add(uint64(0), uint64(0), uint64(0), uint8(2), []byte{}, uint64(0), uint64(0))
	f.Add(uint64(math.MaxUint64), uint64(math.MaxUint64), uint64(1<<63), uint8(255), make([]byte, 300), uint64(math.MaxUint64), uint64(1<<7))
	f.Fuzz(func(t *testing.T, group, term, index uint64, typ uint8, data []byte, vote, commit uint64) {
		e := LogEntry{Group: group, Term: term, Index: index, Type: typ, Data: data}
		hs := HardState{Group: group, Term: term, Vote: vote, Commit: commit}
		for _, rec := range [][]byte{encodeEntry(nil, &e), encodeHardState(nil, &hs)} {
			r, err := decodeWALRecord(rec)
			if err != nil {
				t.Fatalf("%x: %v", rec, err)
			}
			switch r.kind {
			case kindEntry:
				got := r.entry
				if got.Group != e.Group || got.Term != e.Term || got.Index != e.Index || got.Type != e.Type || !bytes.Equal(got.Data, e.Data) || got.Data == nil {
					t.Fatalf("entry %+v decodes as %+v", e, got)
				}
				if len(data) > 0 && &got.Data[0] == &rec[len(rec)-len(data)] {
					t.Fatalf("decoded data aliases the record")
				}
			case kindHardState:
				if r.hardState != hs {
					t.Fatalf("hard state %+v decodes as %+v", hs, r.hardState)
				}
			default:
				t.Fatalf("%x decodes as kind %d", rec, r.kind)
			}
			for n := range len(rec) {
				if _, err := decodeWALRecord(rec[:n]); !errors.Is(err, errCorrupt) {
					t.Fatalf("prefix %x of %x: err %v, want errCorrupt", rec[:n], rec, err)
				}
			}
		}
	})
}

// goldenBatches are batches of the shapes Apply writes, without a retry's
// fields, and their records as the encoder wrote them before version 4
// existed (captured from it): they must stay byte for byte the same, and
// decode with ReadyAt and AcquiredCount 0.
func goldenBatches() []struct {
	name string
	b    store.Batch
	rec  []byte
} {
	m := &store.Message{ID: 300, Persistent: true, Body: []byte("hi"),
		Header: store.Header{Exchange: "x", RoutingKeys: []string{"k"}, Props: []byte{0x10, 0, 2}}}
	r := store.Ref{Queue: 7, Prio: 1, Seq: 200}
	return []struct {
		name string
		b    store.Batch
		rec  []byte
	}{
		{"publish", store.Batch{Messages: []*store.Message{m}, Puts: []store.Entry{{Ref: r, Msg: m, Deadline: 1767225600000}}},
			[]byte{0x1, 0x1, 0xac, 0x2, 0x1, 0x1, 0x78, 0x1, 0x1, 0x6b, 0x3, 0x10, 0x0, 0x2, 0x2, 0x68, 0x69, 0x1, 0x7, 0x1, 0xc8, 0x1, 0xac, 0x2,
				0x80, 0xa0, 0xd5, 0xed, 0xee, 0x66, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0}},
		{"requeue", store.Batch{Updates: []store.Update{{Ref: r, DeliveryCount: 3}}},
			[]byte{0x1, 0x0, 0x0, 0x1, 0x7, 0x1, 0xc8, 0x1, 0x3, 0x0, 0x0, 0x0, 0x0, 0x0}},
		{"dead-letter", store.Batch{Deletes: []store.Ref{r}, Puts: []store.Entry{{Ref: store.Ref{Queue: 8, Seq: 1}, Msg: &store.Message{ID: 300},
			DeadLetter: "rejected", DeadAt: 5, Header: &store.Header{Exchange: "dlx", RoutingKeys: []string{"dlq"}},
			Origin: &store.Origin{Queue: "q", Reason: "rejected", At: 5}}}},
			[]byte{0x2, 0x0, 0x1, 0x8, 0x0, 0x1, 0xac, 0x2, 0x0, 0x0, 0x8, 0x72, 0x65, 0x6a, 0x65, 0x63, 0x74, 0x65, 0x64, 0xa, 0x1, 0x3, 0x64,
				0x6c, 0x78, 0x1, 0x3, 0x64, 0x6c, 0x71, 0x0, 0x1, 0x1, 0x71, 0x8, 0x72, 0x65, 0x6a, 0x65, 0x63, 0x74, 0x65, 0x64, 0xa, 0x0, 0x1,
				0x7, 0x1, 0xc8, 0x1, 0x0, 0x0}},
	}
}

// A batch without a retry's fields is written exactly as before version 4
// existed (version 1, or 2 with an origin), and such records decode with
// the fields 0; a ready-at time or an acquired count on any put or update
// makes the record version 4, whose layout the golden bytes pin.
func TestRecordVersionRetry(t *testing.T) {
	for _, c := range goldenBatches() {
		if got := encodeRecord(nil, &c.b, c.b.Messages); !bytes.Equal(got, c.rec) {
			t.Fatalf("%s: record is\n%#v\nwant, as before version 4,\n%#v", c.name, got, c.rec)
		}
		r, err := decodeWALRecord(c.rec)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		for _, e := range r.batch.Puts {
			if e.ReadyAt != 0 || e.AcquiredCount != 0 {
				t.Fatalf("%s: a version %d put decodes with ready at %d, acquired %d", c.name, c.rec[0], e.ReadyAt, e.AcquiredCount)
			}
		}
		for _, u := range r.batch.Updates {
			if u.ReadyAt != 0 || u.AcquiredCount != 0 {
				t.Fatalf("%s: a version %d update decodes with ready at %d, acquired %d", c.name, c.rec[0], u.ReadyAt, u.AcquiredCount)
			}
		}
		sameRecord(t, c.name, r.batch, &c.b, c.b.Messages)
	}

	g := goldenBatches()
	pub, upd, dl := &g[0].b, &g[1].b, &g[2].b
	pub.Puts[0].AcquiredCount = 1
	upd.Updates[0].ReadyAt = -1
	dl.Puts[0].ReadyAt = 9
	for name, b := range map[string]*store.Batch{"a put's acquired count": pub, "an update's ready-at": upd, "a dead-lettered put's ready-at": dl} {
		if rec := encodeRecord(nil, b, b.Messages); rec[0] != recordVersionRetry {
			t.Fatalf("a batch with %s is written as version %d, want %d", name, rec[0], recordVersionRetry)
		}
	}
	upd.Updates[0].ReadyAt, upd.Updates[0].AcquiredCount = 1767225600000, 4
	want := []byte{recordVersionRetry, 0, 0, 1, 0x7, 0x1, 0xc8, 0x1, 3, 0, 0, 0x80, 0xa0, 0xd5, 0xed, 0xee, 0x66, 4, 0, 0, 0}
	if got := encodeRecord(nil, upd, nil); !bytes.Equal(got, want) {
		t.Fatalf("version 4 update record is\n%#v\nwant\n%#v", got, want)
	}
}
