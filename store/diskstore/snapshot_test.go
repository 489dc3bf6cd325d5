package diskstore

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/brokerd/brokerd/index"
	"github.com/brokerd/brokerd/store"
)

// leaderLog drives a replicated store as its group's leader would: each
// proposal taken becomes the next entry, appended and committed at once.
// It keeps every entry it made. Not safe for concurrent use.
type leaderLog struct {
	t     testing.TB
	s     *Store
	next  uint64
	term  uint64
	mu    sync.Mutex
	ents  map[uint64]LogEntry
	group uint64
}

func newLeaderLog(t testing.TB, s *Store, term uint64) *leaderLog {
	return &leaderLog{t: t, s: s, next: 1, term: term, ents: map[uint64]LogEntry{}, group: s.Group()}
}

// commit takes the store's proposals and commits each as an entry.
func (l *leaderLog) commit() {
	for _, p := range l.s.TakeProposals(nil) {
		e := LogEntry{Group: l.group, Term: l.term, Index: l.next, Data: slices.Clone(p.Data())}
		l.next++
		if _, _, err := l.s.AppendReplica([]LogEntry{e}, &HardState{Group: l.group, Term: l.term, Vote: 1, Commit: e.Index}); err != nil {
			l.t.Error(err)
			return
		}
		if err := l.s.SyncReplica(); err != nil {
			l.t.Error(err)
			return
		}
		l.mu.Lock()
		l.ents[e.Index] = e
		l.mu.Unlock()
		if err := l.s.Committed(e.Index, e.Term); err != nil {
			l.t.Error(err)
			return
		}
	}
}

func (l *leaderLog) entry(i uint64) LogEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ents[i]
}

// ingestState is what a follower gives IngestSnapshot for a snapshot at
// gs: the leader's entry at the applied index, its own term and vote.
func (l *leaderLog) ingestState(gs index.GroupState, term, vote uint64) IngestState {
	return IngestState{
		Log:       []LogEntry{l.entry(gs.Applied)},
		PrevTerm:  l.entry(gs.Applied - 1).Term,
		HardState: HardState{Group: l.group, Term: term, Vote: vote, Commit: gs.Applied},
	}
}

func replicatedOn(fs vfs.FS, log RetainLog) Options {
	o := replicatedOpts(log)
	o.FS = fs
	return o
}

// A snapshot, ingested by another member's store in place of its own,
// gives exactly what the source held at the snapshot's applied entry
// (batches committed after it are not there), the group's state at that
// entry with the log starting at the entry given, and the member's own
// term and vote in its hard state.
func TestSnapshotCreateIngestRoundTrip(t *testing.T) {
	base := t.TempDir()
	src := openDir(t, filepath.Join(base, "src"), replicatedOpts(&memRetain{}))
	defer src.Close()
	ll := newLeaderLog(t, src, 4)
	for i := range 20 {
		src.Apply(putBatch(src, 9, uint64(i+1), fmt.Sprintf("m%d", i+1)), nil)
		if i%3 == 0 {
			src.Apply(&store.Batch{Meta: []store.MetaOp{{Key: fmt.Sprintf("def/%d", i), Value: []byte("v")}}}, nil)
		}
		ll.commit()
		if i == 10 {
			if err := src.Checkpoint(); err != nil { // some of it in segments, some in the overlay
				t.Fatal(err)
			}
		}
	}
	src.SetConfState([]byte("membership"))
	want := bodies(t, src, 9)
	snap := filepath.Join(base, "snap")
	var under index.GroupState
	gs, err := src.CreateSnapshot(snap, func(gs index.GroupState) error { under = gs; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if gs.Applied != ll.next-1 || gs.AppliedTerm != 4 || string(gs.ConfState) != "membership" || under.Applied != gs.Applied {
		t.Fatalf("snapshot state %+v (under: %+v), want applied %d of term 4 with the membership", gs, under, ll.next-1)
	}
	// After the snapshot: not in it.
	src.Apply(putBatch(src, 9, 100, "late"), nil)
	ll.commit()

	// The member: a store of its own, behind, with a hard state.
	dst := filepath.Join(base, "dst")
	old := openDir(t, dst, replicatedOpts(&memRetain{}))
	old.Apply(putBatch(old, 9, 1, "stale"), nil)
	old.Apply(putBatch(old, 5, 1, "other queue"), nil)
	ol := newLeaderLog(t, old, 2)
	ol.commit()
	if err := old.Abandon(); err != nil {
		t.Fatal(err)
	}
	if err := IngestSnapshot(dst, snap, replicatedOpts(nil), ll.ingestState(gs, 3, 77)); err != nil {
		t.Fatal(err)
	}
	log := &memRetain{}
	s := openDir(t, dst, replicatedOpts(log))
	defer s.Close()
	if got := bodies(t, s, 9); !slices.Equal(got, want) {
		t.Fatalf("the ingested store holds %v, want %v", got, want)
	}
	if got := bodies(t, s, 5); len(got) != 0 {
		t.Fatalf("the member's own queue survived the ingest: %v", got)
	}
	defs := 0
	if err := s.ScanMeta("def/", func(string, []byte) bool { defs++; return true }); err != nil || defs != 7 {
		t.Fatalf("%d definitions (%v), want 7", defs, err)
	}
	got, err := s.GroupState()
	if err != nil || got.Applied != gs.Applied || got.AppliedTerm != 4 || got.Compacted != gs.Applied-1 || got.CompactedTerm != 4 || string(got.ConfState) != "membership" {
		t.Fatalf("the ingested group state %+v (%v), want applied %d, compacted to %d", got, err, gs.Applied, gs.Applied-1)
	}
	if log.hs != (HardState{Group: 3, Term: 3, Vote: 77, Commit: gs.Applied}) {
		t.Fatalf("hard state %+v: the term and vote must survive, commit the snapshot's", log.hs)
	}
	if len(log.entries) != 1 || log.entries[gs.Applied].Term != 4 || string(log.entries[gs.Applied].Data) != string(ll.entry(gs.Applied).Data) {
		t.Fatalf("the ingested log holds %v, want the entry at %d", log.entries, gs.Applied)
	}
	if id := s.AllocMsgID(); id>>idGroupShift != 3 {
		t.Fatalf("next id %#x", id)
	}
	// The member goes on from there: the next entry applies on top.
	src.Apply(putBatch(src, 9, 101, "next"), nil)
	ll.commit()
	if err := s.ApplyEntry(gs.Applied+1, 4, ll.entry(ll.next-1).Data); err != nil {
		t.Fatal(err)
	}
	if got := bodies(t, s, 9); !slices.Equal(got, append(slices.Clone(want), "next")) {
		t.Fatalf("after the next entry the store holds %v", got)
	}
	if _, err := src.CreateSnapshot(snap, nil); err == nil {
		t.Fatal("a snapshot made into a directory that exists")
	}
}

// hookFS calls before ahead of every change to the file system.
type hookFS struct {
	vfs.FS
	before func(op, name string)
}

func (h hookFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	h.before("create", name)
	return h.FS.Create(name, c)
}
func (h hookFS) Rename(a, b string) error { h.before("rename", a); return h.FS.Rename(a, b) }
func (h hookFS) Remove(name string) error { h.before("remove", name); return h.FS.Remove(name) }
func (h hookFS) RemoveAll(name string) error {
	h.before("removeall", name)
	return h.FS.RemoveAll(name)
}
func (h hookFS) Link(a, b string) error { h.before("link", b); return h.FS.Link(a, b) }
func (h hookFS) MkdirAll(n string, p os.FileMode) error {
	h.before("mkdir", n)
	return h.FS.MkdirAll(n, p)
}

// A crash at any point of an ingest leaves the member's old store or the
// new one, never a mix: a crash clone (synced data only, or with a share of
// what was not synced) is taken before every change the ingest makes to
// the file system, and each opens to exactly the old contents, group
// state and hard state, or exactly the new.
func TestSnapshotIngestCrash(t *testing.T) {
	mem := vfs.NewCrashableMem()
	src := openDir(t, "src", replicatedOn(mem, &memRetain{}))
	ll := newLeaderLog(t, src, 4)
	for i := range 30 {
		src.Apply(putBatch(src, 9, uint64(i+1), fmt.Sprintf("new%d", i+1)), nil)
		ll.commit()
		if i == 15 {
			if err := src.Checkpoint(); err != nil {
				t.Fatal(err)
			}
		}
	}
	gs, err := src.CreateSnapshot("snap", nil)
	if err != nil {
		t.Fatal(err)
	}
	wantNew := bodies(t, src, 9)
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}

	old := openDir(t, "dst", replicatedOn(mem, &memRetain{}))
	ol := newLeaderLog(t, old, 2)
	for i := range 5 {
		old.Apply(putBatch(old, 9, uint64(i+1), fmt.Sprintf("old%d", i+1)), nil)
		ol.commit()
	}
	if err := old.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	wantOld := bodies(t, old, 9)
	// Committed, not checkpointed: in the WAL only, as the group's log
	// (the group applies it again after a reopen, not the store).
	old.Apply(putBatch(old, 9, 6, "old6"), nil)
	ol.commit()
	if err := old.Abandon(); err != nil {
		t.Fatal(err)
	}

	rng := rand.New(rand.NewPCG(1, 2))
	type clone struct {
		at string
		fs vfs.FS
	}
	var clones []clone
	var mu sync.Mutex // Pebble removes obsolete files from a goroutine of its own
	hook := hookFS{FS: mem, before: func(op, name string) {
		at := op + " " + name
		mu.Lock()
		defer mu.Unlock()
		clones = append(clones, clone{at, mem.CrashClone(vfs.CrashCloneCfg{})})
		clones = append(clones, clone{at + " (some unsynced)", mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: rng})})
	}}
	opts := replicatedOn(hook, nil)
	if err := IngestSnapshot("dst", "snap", opts, ll.ingestState(gs, 9, 1)); err != nil {
		t.Fatal(err)
	}
	mu.Lock() // Pebble's cleaner is stopped by now; the lock says so to the race detector
	clones = append(clones, clone{"the end", mem.CrashClone(vfs.CrashCloneCfg{})})
	mu.Unlock()
	if len(clones) < 20 {
		t.Fatalf("only %d changes to the file system seen", len(clones))
	}
	var olds, news int
	for _, c := range clones {
		log := &memRetain{}
		s, err := Open("dst", replicatedOn(c.fs, log))
		if err != nil {
			t.Fatalf("crash before %s: open: %v", c.at, err)
		}
		got := bodies(t, s, 9)
		g, err := s.GroupState()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case slices.Equal(got, wantNew):
			news++
			if g.Applied != gs.Applied || log.hs.Term != 9 || log.hs.Commit != gs.Applied || len(log.entries) != 1 {
				t.Errorf("crash before %s: the new store with group state %+v, hard state %+v, %d entries", c.at, g, log.hs, len(log.entries))
			}
		case slices.Equal(got, wantOld):
			olds++
			if log.hs.Term != 2 || len(log.entries) == 0 {
				t.Errorf("crash before %s: the old store with hard state %+v, %d entries", c.at, log.hs, len(log.entries))
			}
		default:
			t.Errorf("crash before %s: the store holds %s: neither the old nor the new", c.at, strings.Join(got, ","))
		}
		s.Close()
	}
	if olds == 0 || news == 0 {
		t.Fatalf("%d crashes gave the old store and %d the new: want both", olds, news)
	}
	t.Logf("%d crash points: %d old, %d new", len(clones), olds, news)
}

// A snapshot taken while batches are applied and committed and checkpoints
// and compactions run holds exactly the state of its applied entry: every
// batch of the entries up to it and none after.
func TestSnapshotUnderLoad(t *testing.T) {
	base := t.TempDir()
	opts := replicatedOpts(&memRetain{})
	opts.CheckpointBytes = 16 << 10 // checkpoints all along
	src := openDir(t, filepath.Join(base, "src"), opts)
	defer src.Close()
	ll := newLeaderLog(t, src, 6)
	// ops[i] is what entry i did: +seq put, -seq delete.
	var mu sync.Mutex
	ops := map[uint64][]int64{}
	stop := make(chan struct{})
	done := make(chan struct{})
	progress := make(chan struct{}, 1) // every 200 entries
	go func() {
		defer close(done)
		for seq := uint64(1); ; seq++ {
			select {
			case <-stop:
				return
			default:
			}
			b := putBatch(src, 9, seq, fmt.Sprintf("%d %s", seq, strings.Repeat("x", 500)))
			op := []int64{int64(seq)}
			if seq%3 == 0 {
				b.Deletes = append(b.Deletes, store.Ref{Queue: 9, Seq: seq - 2})
				op = append(op, -int64(seq-2))
			}
			src.Apply(b, nil)
			mu.Lock()
			ops[ll.next] = op
			mu.Unlock()
			ll.commit()
			if seq%200 == 0 {
				select {
				case progress <- struct{}{}:
				default:
				}
			}
		}
	}()
	var snaps []index.GroupState
	for i := range 3 {
		<-progress
		gs, err := src.CreateSnapshot(filepath.Join(base, fmt.Sprint("snap", i)), nil)
		if err != nil {
			t.Fatal(err)
		}
		snaps = append(snaps, gs)
	}
	close(stop)
	<-done
	// Besides the snapshots' own, the background ran checkpoints while
	// they were made.
	if n := src.Stats().CheckpointDuration.Count; n < 3+3 {
		t.Fatalf("%d checkpoints under the load, want more than the snapshots' 3", n)
	}
	for i, gs := range snaps {
		live := map[int64]bool{}
		mu.Lock()
		for e := uint64(1); e <= gs.Applied; e++ {
			for _, op := range ops[e] {
				if op > 0 {
					live[op] = true
				} else {
					delete(live, -op)
				}
			}
		}
		mu.Unlock()
		dst := filepath.Join(base, fmt.Sprint("dst", i))
		if err := IngestSnapshot(dst, filepath.Join(base, fmt.Sprint("snap", i)), replicatedOpts(nil), ll.ingestState(gs, 6, 1)); err != nil {
			t.Fatal(err)
		}
		s := openDir(t, dst, replicatedOpts(&memRetain{}))
		got := bodies(t, s, 9)
		s.Close()
		var gotSeqs []int64
		for _, b := range got {
			var seq int64
			fmt.Sscan(b, &seq)
			gotSeqs = append(gotSeqs, seq)
			if !live[seq] {
				t.Errorf("snapshot %d at entry %d holds seq %d, not live there", i, gs.Applied, seq)
			}
		}
		if len(gotSeqs) != len(live) {
			t.Errorf("snapshot %d at entry %d holds %d entries, want %d", i, gs.Applied, len(gotSeqs), len(live))
		}
		t.Logf("snapshot %d: entry %d, %d live messages", i, gs.Applied, len(live))
	}
}
