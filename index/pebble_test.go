package index

import (
	"bytes"
	"log"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestOptions(t *testing.T) {
	fs := vfs.NewMem()
	o := Options(fs, 32<<20)
	if o.FS != fs || o.CacheSize != 32<<20 || o.Cache != nil || o.MemTableSize != 16<<20 ||
		o.FormatMajorVersion != FormatMajorVersion || o.Comparer != pebble.DefaultComparer || o.DisableWAL {
		t.Fatalf("Options = %+v", o)
	}
	for i, l := range o.Levels {
		if l.FilterPolicy != bloom.FilterPolicy(10) {
			t.Errorf("level %d filter policy %v, want bloom(10)", i, l.FilterPolicy)
		}
	}
	if o := Options(fs, 0); o.CacheSize != 0 {
		t.Errorf("Options(fs, 0).CacheSize = %d, want 0 (Pebble's default)", o.CacheSize)
	}
	if a, b := Options(fs, 1), Options(fs, 1); a == b {
		t.Error("Options returns a shared *Options")
	}
}

// scan returns the keys in [lo, hi).
func scan(t *testing.T, r pebble.Reader, lo, hi []byte) [][]byte {
	t.Helper()
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		t.Fatal(err)
	}
	var ks [][]byte
	for it.First(); it.Valid(); it.Next() {
		ks = append(ks, bytes.Clone(it.Key()))
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return ks
}

func TestPebble(t *testing.T) {
	fs := vfs.NewMem()
	db, err := Open("idx", fs, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	b := db.NewBatch()
	put := func(k, v []byte) {
		if err := b.Set(k, v, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Queues 9, 10, 11 and the last queue id, each with levels 0, 5, 255
	// and seqs including the extremes; written in scrambled order.
	queues := []uint64{11, 9, math.MaxUint64, 10}
	prios := []uint8{255, 0, 5}
	seqs := []uint64{math.MaxUint64, 7, 0, 3, 1 << 40}
	for _, q := range queues {
		for _, p := range prios {
			for _, s := range seqs {
				v := EntryValue{Msg: q ^ s, Size: uint32(p), Deadline: int64(s%5) - 2}
				put(EntryKey(nil, q, p, s), AppendEntryValue(nil, &v))
				if v.Deadline != 0 {
					put(ExpiryKey(nil, v.Deadline, q, p, s), nil)
				}
			}
		}
		put(QueueStateKey(nil, q), AppendQueueState(nil, &QueueState{LastSeq: q}))
	}
	for _, n := range metaNames {
		put(MetaKey(nil, []byte(n)), []byte(n))
	}
	for _, id := range []uint64{3, 1, 2} {
		put(MsgKey(nil, id), AppendMsgValue(nil, &MsgValue{Refs: 1, Size: uint32(id), Loc: []byte{byte(id)}}))
	}
	for _, s := range []uint32{2, 0, math.MaxUint32} {
		put(SegmentKey(nil, s), AppendSegmentState(nil, &SegmentState{LiveBytes: int64(s)}))
	}
	put(StateKey(), AppendStoreState(nil, &StoreState{CheckpointLSN: 99, NextMsgID: 4}))
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(); err != nil { // read from an sstable too, through the bloom filter
		t.Fatal(err)
	}

	// A queue's entries, in (prio, seq) order, and nothing else.
	lo, hi := QueueBounds(10)
	ks := scan(t, db, lo, hi)
	if len(ks) != len(prios)*len(seqs) {
		t.Fatalf("QueueBounds(10): %d keys, want %d", len(ks), len(prios)*len(seqs))
	}
	var last entryTuple
	for i, k := range ks {
		q, p, s, err := DecodeEntryKey(k)
		if err != nil {
			t.Fatal(err)
		}
		cur := entryTuple{q: q, prio: p, seq: s}
		if q != 10 || (i > 0 && cmpTuple(last, cur) >= 0) {
			t.Fatalf("QueueBounds(10) key %d: %+v after %+v", i, cur, last)
		}
		last = cur
	}
	lo, hi = QueueBounds(math.MaxUint64)
	if n := len(scan(t, db, lo, hi)); n != len(prios)*len(seqs) {
		t.Fatalf("QueueBounds(max): %d keys", n)
	}

	// One level from a seq.
	lo, hi = LevelBounds(10, 5, 3)
	var got []uint64
	for _, k := range scan(t, db, lo, hi) {
		_, _, s, _ := DecodeEntryKey(k)
		got = append(got, s)
	}
	if want := []uint64{3, 7, 1 << 40, math.MaxUint64}; !slices.Equal(got, want) {
		t.Fatalf("LevelBounds(10, 5, 3) seqs %v, want %v", got, want)
	}

	// Expiries in a closed interval, in deadline order; negative first.
	lo, hi = ExpiryBounds(-2, -1)
	ks = scan(t, db, lo, hi)
	prev := int64(math.MinInt64)
	for _, k := range ks {
		d, _, _, _, err := DecodeExpiryKey(k)
		if err != nil || d < prev || d < -2 || d > -1 {
			t.Fatalf("ExpiryBounds(-2, -1): deadline %d after %d, %v", d, prev, err)
		}
		prev = d
	}
	if len(ks) == 0 || prev != -1 {
		t.Fatalf("ExpiryBounds(-2, -1): %d keys, last deadline %d", len(ks), prev)
	}
	lo, hi = ExpiryBounds(5, 4)
	if ks := scan(t, db, lo, hi); len(ks) != 0 {
		t.Fatalf("empty ExpiryBounds: %d keys", len(ks))
	}

	// Definitions by prefix, raw bytes.
	for prefix, want := range map[string]int{"": len(metaNames), "a": 7, "\xff\xff": 4, "a\x00": 2} {
		lo, hi = MetaPrefixBounds([]byte(prefix))
		ks := scan(t, db, lo, hi)
		if len(ks) != want {
			t.Errorf("MetaPrefixBounds(%q): %d keys, want %d", prefix, len(ks), want)
		}
		for _, k := range ks {
			name, err := DecodeMetaKey(k)
			if err != nil || !bytes.HasPrefix(name, []byte(prefix)) {
				t.Errorf("MetaPrefixBounds(%q) gave %q, %v", prefix, name, err)
			}
		}
	}
	lo, hi = QueueStateBounds()
	if n := len(scan(t, db, lo, hi)); n != len(queues) {
		t.Errorf("QueueStateBounds: %d keys, want %d", n, len(queues))
	}
	lo, hi = SegmentBounds()
	if n := len(scan(t, db, lo, hi)); n != 3 {
		t.Errorf("SegmentBounds: %d keys, want 3", n)
	}

	// Deleting a queue leaves its neighbours whole.
	lo, hi = QueueBounds(10)
	if err := db.DeleteRange(lo, hi, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if n := len(scan(t, db, lo, hi)); n != 0 {
		t.Fatalf("after DeleteRange: %d keys of queue 10", n)
	}
	for _, q := range []uint64{9, 11} {
		lo, hi := QueueBounds(q)
		if n := len(scan(t, db, lo, hi)); n != len(prios)*len(seqs) {
			t.Fatalf("after deleting queue 10: queue %d has %d keys", q, n)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// Reopen: what was committed is there and decodes.
	db, err = Open("idx", fs, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	get := func(k []byte) []byte {
		v, closer, err := db.Get(k)
		if err != nil {
			t.Fatalf("get %x: %v", k, err)
		}
		defer closer.Close()
		return bytes.Clone(v)
	}
	var st StoreState
	if err := DecodeStoreState(get(StateKey()), &st); err != nil || st != (StoreState{CheckpointLSN: 99, NextMsgID: 4}) {
		t.Fatalf("store state %+v, %v", st, err)
	}
	var ev EntryValue
	if err := DecodeEntryValue(get(EntryKey(nil, 11, 255, 7)), &ev); err != nil || ev.Msg != 11^7 || ev.Size != 255 {
		t.Fatalf("entry (11, 255, 7) = %+v, %v", ev, err)
	}
	var mv MsgValue
	if err := DecodeMsgValue(get(MsgKey(nil, 2)), &mv); err != nil || mv.Size != 2 {
		t.Fatalf("message 2 = %+v, %v", mv, err)
	}
	if _, _, err := db.Get(EntryKey(nil, 10, 0, 0)); err != pebble.ErrNotFound {
		t.Fatalf("deleted entry: %v", err)
	}
}

func TestQuietLogger(t *testing.T) {
	var buf bytes.Buffer
	defer log.SetOutput(log.Writer())
	log.SetOutput(&buf)
	l := quietLogger{}
	l.Infof("flushed %d", 1)
	if buf.Len() != 0 {
		t.Errorf("Infof logged %q", buf.String())
	}
	l.Errorf("background error: %s", "disk full")
	if !strings.Contains(buf.String(), "pebble: background error: disk full") {
		t.Errorf("Errorf logged %q", buf.String())
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(buf.String(), "pebble: fatal: corrupt") {
			t.Errorf("Fatalf: recovered %v, logged %q", r, buf.String())
		}
	}()
	l.Fatalf("corrupt %s", "sstable")
	t.Error("Fatalf returned")
}
