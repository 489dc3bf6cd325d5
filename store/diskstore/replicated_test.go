package diskstore

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/brokerd/brokerd/store"
	"github.com/brokerd/brokerd/wal"
)

// memRetain is a RetainLog that keeps what a replay hands it and drops
// nothing.
type memRetain struct {
	mu      sync.Mutex
	entries map[uint64]LogEntry
	hs      HardState
}

func (l *memRetain) ReplayEntry(_ wal.LSN, e LogEntry) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.entries == nil {
		l.entries = map[uint64]LogEntry{}
	}
	for i := range l.entries {
		if i >= e.Index {
			delete(l.entries, i)
		}
	}
	l.entries[e.Index] = e
	return nil
}

func (l *memRetain) ReplayHardState(_ wal.LSN, hs HardState) error {
	l.mu.Lock()
	l.hs = hs
	l.mu.Unlock()
	return nil
}

func (l *memRetain) Retain(uint64, uint64) (uint64, uint64, wal.LSN) { return 0, 0, 1 }

func replicatedOpts(log RetainLog) Options {
	o := quiet()
	o.Replication = &Replication{Group: 3, Log: log}
	return o
}

// putBatch is a batch storing one new message in q at seq.
func putBatch(s *Store, q store.QueueID, seq uint64, body string) *store.Batch {
	m := &store.Message{ID: s.AllocMsgID(), Body: []byte(body), Persistent: true}
	return &store.Batch{Messages: []*store.Message{m}, Puts: []store.Entry{{Ref: store.Ref{Queue: q, Seq: seq}, Msg: m}}}
}

func bodies(t *testing.T, s *Store, q store.QueueID) []string {
	t.Helper()
	var ids []store.MsgID
	if err := s.ScanQueue(q, 0, func(e *store.Entry) bool { ids = append(ids, e.Msg.ID); return true }); err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(ids))
	if err := s.LoadMessages(ids, func(i int, m *store.Message) { out[i] = string(m.Body) }); err != nil {
		t.Fatal(err)
	}
	return out
}

// A replicated store's Apply changes what it reads at once but completes
// only when the entry holding the batch is committed; a checkpoint writes
// what is committed with the group's applied entry; what was never
// committed is gone after Abandon and Open, and the log's entries come back
// through the replay. Message ids carry the group.
func TestReplicatedApplyCommitsAndCheckpoints(t *testing.T) {
	dir := t.TempDir()
	log := &memRetain{}
	s := openDir(t, dir, replicatedOpts(log))
	if id := s.AllocMsgID(); id>>idGroupShift != 3 {
		t.Fatalf("message id %#x: the group is not in its high bits", id)
	}
	done := make(chan error, 2)
	s.Apply(putBatch(s, 9, 1, "a"), func(err error) { done <- err })
	s.Apply(putBatch(s, 9, 2, "b"), func(err error) { done <- err })
	if got := bodies(t, s, 9); strings.Join(got, ",") != "a,b" {
		t.Fatalf("the leader reads %v before the commit, want a,b", got)
	}
	ps := s.TakeProposals(nil)
	if len(ps) != 1 || ps[0].Batches() != 2 {
		t.Fatalf("%d proposals, want one of 2 batches", len(ps))
	}
	select {
	case err := <-done:
		t.Fatalf("a done ran before the commit: %v", err)
	default:
	}
	// The raft layer writes the entry to the WAL (as its log) and
	// reports the commit.
	if _, _, err := s.AppendReplica([]LogEntry{{Group: 3, Term: 2, Index: 7, Data: ps[0].Data()}}, &HardState{Group: 3, Term: 2, Commit: 7}); err != nil {
		t.Fatal(err)
	}
	if err := s.SyncReplica(); err != nil {
		t.Fatal(err)
	}
	if err := s.Committed(7, 2); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	// One more batch, never committed.
	s.Apply(putBatch(s, 9, 3, "c"), func(err error) { done <- err })
	s.TakeProposals(nil)
	if err := s.Abandon(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, store.ErrClosed) {
		t.Fatalf("the uncommitted batch's done: %v, want ErrClosed", err)
	}

	log2 := &memRetain{}
	s = openDir(t, dir, replicatedOpts(log2))
	defer s.Close()
	if got := bodies(t, s, 9); strings.Join(got, ",") != "a,b" {
		t.Fatalf("after a reopen the store holds %v, want the committed a,b", got)
	}
	gs, err := s.GroupState()
	if err != nil || gs.Applied != 7 || gs.AppliedTerm != 2 {
		t.Fatalf("group state %+v, %v; want applied 7 of term 2", gs, err)
	}
	if e, ok := log2.entries[7]; !ok || e.Term != 2 || log2.hs.Commit != 7 {
		t.Fatalf("the replay gave the log %v and hard state %+v", log2.entries, log2.hs)
	}
	if id := s.AllocMsgID(); id>>idGroupShift != 3 || id&(1<<idGroupShift-1) <= 2 {
		t.Fatalf("after a reopen the next id is %#x", id)
	}

	// A follower's path: a committed entry proposed elsewhere.
	leader := openDir(t, t.TempDir(), replicatedOpts(&memRetain{}))
	defer leader.Close()
	leader.Apply(putBatch(leader, 9, 10, "z"), nil)
	p := leader.TakeProposals(nil)[0]
	if err := s.ApplyEntry(8, 3, p.Data()); err != nil {
		t.Fatal(err)
	}
	if got := bodies(t, s, 9); strings.Join(got, ",") != "a,b,z" {
		t.Fatalf("after ApplyEntry the store holds %v", got)
	}
	if ix, term := s.Applied(); ix != 8 || term != 3 {
		t.Fatalf("applied %d of term %d, want 8 of 3", ix, term)
	}
	if err := s.ApplyEntry(9, 3, []byte{0xff}); err == nil {
		t.Fatal("a damaged entry applied")
	}
}

// A checkpoint never writes a batch whose entry is not committed: when the
// store is abandoned first, the index has nothing of it.
func TestReplicatedCheckpointWaitsForCommit(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, dir, replicatedOpts(&memRetain{}))
	s.Apply(putBatch(s, 4, 1, "x"), nil)
	s.TakeProposals(nil)
	cp := make(chan error, 1)
	frozen := make(chan struct{})
	s.cpMu.Lock()
	s.cp.afterFreeze = func() { close(frozen) }
	s.cpMu.Unlock()
	go func() { cp <- s.Checkpoint() }()
	<-frozen // the checkpoint has the batch and waits for its commit
	if err := s.Abandon(); err != nil {
		t.Fatal(err)
	}
	if err := <-cp; err != nil && !errors.Is(err, store.ErrClosed) {
		t.Fatal(err)
	}
	s = openDir(t, dir, replicatedOpts(&memRetain{}))
	defer s.Close()
	if got := bodies(t, s, 4); len(got) != 0 {
		t.Fatalf("an uncommitted batch reached the index: %v", got)
	}
}

// A single node's store is not opened as a cluster node's.
func TestReplicatedRefusesSingleNodeStore(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, dir, quiet())
	s.Apply(putBatch(s, 4, 1, "x"), nil)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, replicatedOpts(&memRetain{})); err == nil || !strings.Contains(err.Error(), "single node") {
		t.Fatalf("Open = %v, want a refusal naming a single node's store", err)
	}
}

// A follower's store checkpoints by itself once the entries it applies
// fill its overlay, as Apply makes a leader's do.
func TestReplicatedFollowerCheckpoints(t *testing.T) {
	o := replicatedOpts(&memRetain{})
	o.CheckpointBytes = 64 << 10
	leader := openDir(t, t.TempDir(), replicatedOpts(&memRetain{}))
	defer leader.Close()
	f := openDir(t, t.TempDir(), o)
	defer f.Close()
	body := strings.Repeat("x", 4096)
	for i := range 64 {
		leader.Apply(putBatch(leader, 9, uint64(i+1), body), nil)
		p := leader.TakeProposals(nil)[0]
		if err := f.ApplyEntry(uint64(i+1), 1, p.Data()); err != nil {
			t.Fatal(err)
		}
	}
	// 256 KiB applied, four times the bound: the checkpointer was woken
	// and writes the group's state. Waiting for it is waiting for an
	// event of the store's own loop.
	deadline := time.Now().Add(10 * time.Second) // the interval's checkpoint comes at 30 s
	for {
		gs, err := f.GroupState()
		if err != nil {
			t.Fatal(err)
		}
		if gs.Applied > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a follower's full overlay was never checkpointed")
		}
		time.Sleep(5 * time.Millisecond) // polls the index for the checkpoint's write
	}
}
