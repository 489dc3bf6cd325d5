package diskstore

import (
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/brokerd/brokerd/store"
)

// An entry's origin (the broker's record of where a dead-lettered copy
// came from) survives every way back from disk: WAL replay after a crash,
// the index after a checkpoint, and each read (ScanQueue, ReadEntries,
// ReadRefs); an update of the entry keeps it. Entries without one (every
// entry before origins existed) come back without one, and their WAL
// records are still written as version 1.
func TestOriginSurvivesReplayAndCheckpoint(t *testing.T) {
	fs := vfs.NewCrashableMem()
	opts := quiet()
	opts.FS = fs
	s := openDir(t, "data", opts)
	origin := &store.Origin{Queue: "orders", Reason: "rejected", At: 1767225600123}
	m := bodyMsg(s, 1)
	h := &store.Header{Exchange: "dlx", RoutingKeys: []string{"dlq"}, Props: []byte{0x20, 0x00}}
	b := store.Batch{Messages: []*store.Message{m}, Puts: []store.Entry{
		{Ref: store.Ref{Queue: 3, Seq: 1}, Msg: m},
		{Ref: store.Ref{Queue: 3, Seq: 2}, Msg: m, Header: h, Origin: origin},
	}}
	if rec := encodeRecord(nil, &store.Batch{Puts: b.Puts[:1]}, nil); rec[0] != recordVersion {
		t.Fatalf("a record without origins is version %d, want %d", rec[0], recordVersion)
	}
	mustApply(t, s, &b)
	check := func(s *Store, when string) {
		t.Helper()
		var scanned []*store.Origin
		if err := s.ScanQueue(3, 0, func(e *store.Entry) bool { scanned = append(scanned, e.Origin); return true }); err != nil {
			t.Fatal(err)
		}
		metas, err := s.ReadEntries(3, 0, 0, 10, nil)
		if err != nil {
			t.Fatal(err)
		}
		refs, err := s.ReadRefs([]store.Ref{{Queue: 3, Seq: 2}, {Queue: 3, Seq: 1}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(scanned) != 2 || len(metas) != 2 || len(refs) != 2 {
			t.Fatalf("%s: %d scanned, %d read, %d by ref, want 2 each", when, len(scanned), len(metas), len(refs))
		}
		for _, got := range []struct {
			what        string
			none, other *store.Origin
		}{{"ScanQueue", scanned[0], scanned[1]}, {"ReadEntries", metas[0].Origin, metas[1].Origin}, {"ReadRefs", refs[1].Origin, refs[0].Origin}} {
			if got.none != nil || got.other == nil || *got.other != *origin {
				t.Fatalf("%s: %s gave origins %v and %v, want none and %+v", when, got.what, got.none, got.other, *origin)
			}
		}
	}
	check(s, "in the overlay")
	mustApply(t, s, &store.Batch{Updates: []store.Update{{Ref: store.Ref{Queue: 3, Seq: 2}, DeliveryCount: 2}}})
	crash := fs.CrashClone(vfs.CrashCloneCfg{}) // the batches are in the WAL only
	s.Close()

	opts.FS = crash
	s = openDir(t, "data", opts)
	check(s, "replayed from the WAL")
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	check(s, "after a checkpoint")
	mustApply(t, s, &store.Batch{Updates: []store.Update{{Ref: store.Ref{Queue: 3, Seq: 2}, DeliveryCount: 3}}})
	if err := s.Checkpoint(); err != nil { // the update rewrites the index value
		t.Fatal(err)
	}
	s.Close()
	s = openDir(t, "data", opts)
	defer s.Close()
	check(s, "from the index after a restart")
}
