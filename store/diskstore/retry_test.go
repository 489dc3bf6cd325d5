package diskstore

import (
	"fmt"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/brokerd/brokerd/store"
)

// retryRead reads q's entries every way the store reads them (ScanQueue,
// ReadEntries, ReadRefs), fails t unless they agree, and returns them as
// "seq:dc/ac@readyAt".
func retryRead(t *testing.T, s *Store, q store.QueueID, when string) []string {
	t.Helper()
	var scanned, windowed, byRef []string
	var refs []store.Ref
	err := s.ScanQueue(q, 0, func(e *store.Entry) bool {
		scanned = append(scanned, fmt.Sprintf("%d:%d/%d@%d", e.Seq, e.DeliveryCount, e.AcquiredCount, e.ReadyAt))
		refs = append(refs, e.Ref)
		return true
	})
	if err != nil {
		t.Fatalf("%s: %v", when, err)
	}
	ms, err := s.ReadEntries(q, 0, 0, 100, nil)
	if err != nil {
		t.Fatalf("%s: %v", when, err)
	}
	for _, m := range ms {
		windowed = append(windowed, fmt.Sprintf("%d:%d/%d@%d", m.Seq, m.DeliveryCount, m.AcquiredCount, m.ReadyAt))
	}
	if ms, err = s.ReadRefs(refs, nil); err != nil {
		t.Fatalf("%s: %v", when, err)
	}
	for _, m := range ms {
		byRef = append(byRef, fmt.Sprintf("%d:%d/%d@%d", m.Seq, m.DeliveryCount, m.AcquiredCount, m.ReadyAt))
	}
	if !slices.Equal(windowed, scanned) || !slices.Equal(byRef, scanned) {
		t.Fatalf("%s: ScanQueue %q, ReadEntries %q, ReadRefs %q disagree", when, scanned, windowed, byRef)
	}
	return scanned
}

func expectRetry(t *testing.T, s *Store, q store.QueueID, when string, want ...string) {
	t.Helper()
	if got := retryRead(t, s, q, when); !slices.Equal(got, want) {
		t.Fatalf("%s: entries %q, want %q", when, got, want)
	}
}

// An entry's ready-at time and acquired count survive every way back from
// disk: WAL replay after a crash (version-4 records), the index after a
// checkpoint (version-3 values), an update applied over the index and over
// a checkpoint's frozen overlay, a checkpoint of such updates, and a
// restart; an update that leaves them zero makes them zero.
func TestRetryFieldsSurviveReplayAndCheckpoint(t *testing.T) {
	fs := vfs.NewCrashableMem()
	opts := quiet()
	opts.FS = fs
	opts.CheckpointBytes = 1 << 40 // checkpoints only when the test says
	s := openDir(t, "data", opts)
	const q = store.QueueID(5)
	ref := func(seq uint64) store.Ref { return store.Ref{Queue: q, Seq: seq} }
	m := bodyMsg(s, 10)
	mustApply(t, s, &store.Batch{Messages: []*store.Message{m}, Puts: []store.Entry{
		{Ref: ref(1), Msg: m, DeliveryCount: 1, AcquiredCount: 2, ReadyAt: 1767225601000},
		{Ref: ref(2), Msg: m},
		{Ref: ref(3), Msg: m, AcquiredCount: 1},
	}})
	mustApply(t, s, &store.Batch{Updates: []store.Update{{Ref: ref(2), AcquiredCount: 1, ReadyAt: 1767225600500}}})
	want := []string{"1:1/2@1767225601000", "2:0/1@1767225600500", "3:0/1@0"}
	expectRetry(t, s, q, "in the overlay", want...)

	crash := fs.CrashClone(vfs.CrashCloneCfg{}) // the batches are in the WAL only
	s.Close()
	opts.FS = crash
	s = openDir(t, "data", opts)
	expectRetry(t, s, q, "replayed from the WAL", want...)

	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	expectRetry(t, s, q, "after a checkpoint", want...)

	// Updates of entries the index holds, read through the overlay, and
	// a put; then updates of both kinds applied while a checkpoint holds
	// the first overlay frozen.
	mustApply(t, s, &store.Batch{Messages: []*store.Message{m}, Puts: []store.Entry{{Ref: ref(4), Msg: m, ReadyAt: 7}},
		Updates: []store.Update{
			{Ref: ref(1), DeliveryCount: 2, AcquiredCount: 3, ReadyAt: 1767225603000},
			{Ref: ref(3), DeliveryCount: 5}, // the acquired count goes back to 0
		}})
	want = []string{"1:2/3@1767225603000", "2:0/1@1767225600500", "3:5/0@0", "4:0/0@7"}
	expectRetry(t, s, q, "updated over the index", want...)
	frozen, resume := make(chan struct{}), make(chan struct{})
	s.cpMu.Lock()
	s.cp.afterFreeze = func() { close(frozen); <-resume }
	s.cpMu.Unlock()
	cp := make(chan error, 1)
	go func() { cp <- s.Checkpoint() }()
	<-frozen
	expectRetry(t, s, q, "with the overlay frozen", want...)
	mustApply(t, s, &store.Batch{Updates: []store.Update{
		{Ref: ref(1), DeliveryCount: 2, AcquiredCount: 4},
		{Ref: ref(4), AcquiredCount: 1, ReadyAt: 8},
	}})
	want[0], want[3] = "1:2/4@0", "4:0/1@8"
	expectRetry(t, s, q, "updated over a frozen overlay", want...)
	close(resume)
	if err := <-cp; err != nil {
		t.Fatal(err)
	}
	s.cpMu.Lock()
	s.cp.afterFreeze = nil
	s.cpMu.Unlock()
	expectRetry(t, s, q, "after the checkpoint of the updates", want...)
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s = openDir(t, "data", opts)
	defer s.Close()
	expectRetry(t, s, q, "from the index after a restart", want...)
}

// In replicated mode the fields travel in the group's entries: a
// follower's ApplyEntry and a leader's replay of its log after a restart
// give them back, and its checkpoint writes them into the index.
func TestReplicatedRetryFields(t *testing.T) {
	const q = store.QueueID(9)
	leader := openDir(t, t.TempDir(), replicatedOpts(&memRetain{}))
	defer leader.Close()
	b := putBatch(leader, q, 1, "a")
	b.Puts[0].AcquiredCount, b.Puts[0].ReadyAt = 2, 1767225601000
	leader.Apply(b, nil)
	leader.Apply(&store.Batch{Updates: []store.Update{{Ref: store.Ref{Queue: q, Seq: 1}, DeliveryCount: 1, AcquiredCount: 3, ReadyAt: 1767225602000}}}, nil)
	ps := leader.TakeProposals(nil)
	if len(ps) != 1 {
		t.Fatalf("%d proposals, want 1", len(ps))
	}

	dir := t.TempDir()
	log := &memRetain{}
	f := openDir(t, dir, replicatedOpts(log))
	if _, _, err := f.AppendReplica([]LogEntry{{Group: 3, Term: 1, Index: 1, Data: ps[0].Data()}}, &HardState{Group: 3, Term: 1, Commit: 1}); err != nil {
		t.Fatal(err)
	}
	if err := f.SyncReplica(); err != nil {
		t.Fatal(err)
	}
	if err := f.ApplyEntry(1, 1, ps[0].Data()); err != nil {
		t.Fatal(err)
	}
	expectRetry(t, f, q, "a follower's applied entry", "1:1/3@1767225602000")
	if err := f.Abandon(); err != nil { // nothing checkpointed: the log has it
		t.Fatal(err)
	}

	log = &memRetain{}
	f = openDir(t, dir, replicatedOpts(log))
	e, ok := log.entries[1]
	if !ok {
		t.Fatalf("the replay gave the log %v", log.entries)
	}
	if err := f.ApplyEntry(1, 1, e.Data); err != nil {
		t.Fatal(err)
	}
	expectRetry(t, f, q, "the entry replayed from the log", "1:1/3@1767225602000")
	if err := f.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	f = openDir(t, dir, replicatedOpts(&memRetain{}))
	defer f.Close()
	expectRetry(t, f, q, "from the follower's index", "1:1/3@1767225602000")
}
