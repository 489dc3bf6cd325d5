package diskstore

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/brokerd/brokerd/store"
	"github.com/brokerd/brokerd/store/storetest"
)

func segmentBytes(s *Store) (n int64, files int) {
	for _, si := range s.segs.List() {
		n += si.Size
		files++
	}
	return n, files
}

// TestDiskFollowsLiveData: segment files hold live messages only. Acking
// most of a checkpointed backlog makes compaction rewrite the survivors
// and remove the old files; acking the rest removes every segment.
func TestDiskFollowsLiveData(t *testing.T) {
	opts := quiet()
	opts.FS = vfs.NewMem()
	opts.CheckpointBytes = 1 << 40 // checkpoints only when the test says
	s := openDir(t, "data", opts)
	defer s.Close()
	const n = 2000
	const size = 4096
	rng := rand.New(rand.NewPCG(1, 2))
	var refs []store.Ref
	for i := uint64(1); i <= n; i++ {
		body := make([]byte, size)
		for j := range body {
			body[j] = byte(rng.Uint32()) // incompressible: sizes stay visible
		}
		m := &store.Message{ID: s.AllocMsgID(), Body: body, Persistent: true}
		r := store.Ref{Queue: 1, Seq: i}
		refs = append(refs, r)
		storetest.Apply(t, s, &store.Batch{Messages: []*store.Message{m}, Puts: []store.Entry{{Ref: r, Msg: m}}})
	}
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	full, _ := segmentBytes(s)
	if full < n*1024 {
		t.Fatalf("segments hold %d bytes after checkpointing %d messages", full, n)
	}
	// Ack 90 %: every message but each tenth.
	var dels []store.Ref
	for i, r := range refs {
		if i%10 != 0 {
			dels = append(dels, r)
		}
	}
	storetest.Apply(t, s, &store.Batch{Deletes: dels})
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if err := s.Compact(); err != nil {
		t.Fatal(err)
	}
	after, _ := segmentBytes(s)
	if after > full/5 {
		t.Fatalf("segments hold %d bytes after acking 90%% of %d (compaction did not reclaim)", after, full)
	}
	got := 0
	if err := s.ScanQueue(1, 0, func(e *store.Entry) bool {
		if e.Seq%10 != 1 || len(e.Msg.Body) != size {
			t.Fatalf("after compaction: seq %d with %d-byte body", e.Seq, len(e.Msg.Body))
		}
		got++
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if got != n/10 {
		t.Fatalf("after compaction %d entries, want %d", got, n/10)
	}
	// Ack the rest: no segment is left.
	var rest []store.Ref
	for i, r := range refs {
		if i%10 == 0 {
			rest = append(rest, r)
		}
	}
	storetest.Apply(t, s, &store.Batch{Deletes: rest})
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if left, files := segmentBytes(s); files != 0 {
		t.Fatalf("%d segment files (%d bytes) left with no live message", files, left)
	}
}

// TestReserveWaitsForCheckpoints: while a checkpoint is stuck and the
// active overlay is past twice CheckpointBytes, Reserve does not return
// (an already-ended context gets its error back instead of room); once the
// checkpoint finishes it does.
func TestReserveWaitsForCheckpoints(t *testing.T) {
	opts := quiet()
	opts.FS = vfs.NewMem()
	opts.CheckpointBytes = 64 << 10
	s := openDir(t, "data", opts)
	defer s.Close()
	frozen, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	s.cpMu.Lock()
	s.cp.afterFreeze = func() { once.Do(func() { close(frozen); <-resume }) }
	s.cpMu.Unlock()
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	body := make([]byte, 1024)
	seq := uint64(0)
	put := func() {
		seq++
		m := &store.Message{ID: s.AllocMsgID(), Body: body, Persistent: true}
		storetest.Apply(t, s, &store.Batch{Messages: []*store.Message{m}, Puts: []store.Entry{{Ref: store.Ref{Queue: 1, Seq: seq}, Msg: m}}})
	}
	// Fill past CheckpointBytes: the checkpointer freezes and gets stuck.
	for range 80 {
		put()
	}
	<-frozen
	if err := s.Reserve(ended, 1024); err != nil {
		t.Fatalf("Reserve with room: %v", err)
	}
	for range 200 { // past twice CheckpointBytes in the new active overlay
		put()
	}
	if err := s.Reserve(ended, 1024); !errors.Is(err, context.Canceled) {
		t.Fatalf("Reserve past the bound with a stuck checkpoint = %v, want it to wait (context.Canceled)", err)
	}
	got := make(chan error, 1)
	go func() { got <- s.Reserve(context.Background(), 1024) }()
	close(resume) // the stuck checkpoint ends; the next one takes the overlay
	if err := <-got; err != nil {
		t.Fatalf("Reserve after the checkpoints: %v", err)
	}
}

// TestStaleWakeStartsNoCheckpoint: the Applies that find the active
// overlay full before the checkpoint freezes it each wake the
// checkpointer; once that checkpoint took the overlay, a wake left over
// must not checkpoint the next, barely started one (each full checkpoint
// was followed by a small one, at the same fixed cost).
func TestStaleWakeStartsNoCheckpoint(t *testing.T) {
	opts := quiet()
	opts.FS = vfs.NewMem()
	opts.CheckpointBytes = 64 << 10
	opts.CheckpointInterval = time.Hour
	s := openDir(t, "data", opts)
	defer s.Close()
	frozen := make(chan struct{}, 8)
	committed, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	s.cpMu.Lock()
	s.cp.afterFreeze = func() { frozen <- struct{}{} }
	s.cp.afterCommit = func() { once.Do(func() { close(committed); <-resume }) }
	s.cpMu.Unlock()
	stale := make(chan struct{}, 8)
	s.mu.Lock()
	s.staleWake = func() { stale <- struct{}{} }
	s.mu.Unlock()
	body := make([]byte, 1024)
	seq := uint64(0)
	put := func() {
		seq++
		m := &store.Message{ID: s.AllocMsgID(), Body: body, Persistent: true}
		storetest.Apply(t, s, &store.Batch{Messages: []*store.Message{m}, Puts: []store.Entry{{Ref: store.Ref{Queue: 1, Seq: seq}, Msg: m}}})
	}
	for range 80 { // past CheckpointBytes: a checkpoint starts
		put()
	}
	<-frozen
	<-committed
	s.wake() // as an Apply that found the overlay full before the freeze
	for range 5 {
		put() // the next overlay, far from full
	}
	close(resume)
	select {
	case <-stale:
	case <-frozen:
		t.Fatal("a stale wake checkpointed an overlay of 5 KiB (CheckpointBytes 64 KiB)")
	}
}
