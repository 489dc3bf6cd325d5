package wal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// TestCrashKeepsConfirmedRecords crashes a log (CrashClone: only synced data
// survives, plus a random part of the unsynced data) while appenders run,
// and checks that every record confirmed before the crash survives, that
// what survives is a gapless prefix of what was appended, and that the log
// appends afterwards.
func TestCrashKeepsConfirmedRecords(t *testing.T) {
	for _, unsynced := range []int{0, 50, 100} {
		for seed := range 4 {
			t.Run(fmt.Sprintf("unsynced=%d%%/seed=%d", unsynced, seed), func(t *testing.T) {
				crashWhileAppending(t, unsynced, uint64(seed), false)
			})
		}
	}
}

// crashWhileAppending appends from several goroutines, takes a crash
// clone of the filesystem once enough records were confirmed, and checks
// the log reopened from it: the records replayed are a gapless run with
// the contents appended, every confirmed one is among them, and appends
// continue after them. With recycle, a checkpointer removes files 100
// records below the highest confirmed one as confirmations come (so files
// are reused, spare.go), the crash comes once three were, and confirmed
// records below the last removal's LSN may be gone.
func crashWhileAppending(t *testing.T, unsyncedPercent int, seed uint64, recycle bool) {
	fs := vfs.NewCrashableMem()
	opts, crashAfter := Options{SegmentSize: 8192}, 400
	if recycle {
		opts, crashAfter = Options{SegmentSize: 4096}, 1500
	}
	w := mustOpen(t, fs, opts)

	var (
		mu       sync.Mutex
		appended = map[LSN][]byte{}
		acked    = map[LSN]bool{}
		maxAcked LSN
		crashing bool
		cut      LSN        // the highest LSN a RemoveBefore was called with
		removing sync.Mutex // held by the checkpointer around each RemoveBefore
		enough   = make(chan struct{})
		progress = make(chan struct{}, 1)
		stop     = make(chan struct{})
		wg       sync.WaitGroup
	)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				rec := fmt.Appendf(nil, "g%d-%d-%s", g, i, bytes.Repeat([]byte{'x'}, (i*31+g*7)%200))
				lsn := w.Append(rec, Durable, func(lsn LSN, err error) {
					if err != nil {
						t.Errorf("LSN %d: %v", lsn, err)
						return
					}
					mu.Lock()
					acked[lsn] = true
					maxAcked = max(maxAcked, lsn)
					if len(acked) >= crashAfter && (!recycle || w.recycled.Load() >= 3) && !crashing {
						crashing = true
						close(enough)
					}
					mu.Unlock()
					select {
					case progress <- struct{}{}:
					default:
					}
				})
				mu.Lock()
				appended[lsn] = rec
				mu.Unlock()
			}
		}()
	}
	if recycle {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-progress:
				}
				removing.Lock()
				mu.Lock()
				c := max(cut, maxAcked-min(maxAcked, 100))
				cut = c
				mu.Unlock()
				err := w.RemoveBefore(c)
				removing.Unlock()
				if err != nil {
					t.Errorf("RemoveBefore(%d): %v", c, err)
					return
				}
			}
		}()
	}

	<-enough
	removing.Lock() // no removal between reading cut and the crash
	mu.Lock()
	confirmed := make([]LSN, 0, len(acked))
	for lsn := range acked {
		confirmed = append(confirmed, lsn)
	}
	cutAtCrash := cut
	mu.Unlock()
	// Every completion counted above ran after its fsync returned, so the
	// clone, taken now, holds those records.
	crashed := fs.CrashClone(vfs.CrashCloneCfg{
		UnsyncedDataPercent: unsyncedPercent,
		RNG:                 rand.New(rand.NewPCG(seed, 1)),
	})
	removing.Unlock()
	close(stop)
	wg.Wait()
	mustClose(t, w)

	w = mustOpen(t, crashed, opts)
	defer mustClose(t, w)
	files := walFiles(t, crashed)
	first, _ := parseFileName(crashed.PathBase(files[0]))
	if first > max(cutAtCrash, 1) {
		// RemoveBefore(cut) removes only files wholly below cut.
		t.Fatalf("the first file on disk starts at LSN %d, above the last removal's %d", first, cutAtCrash)
	}
	got := replayAll(t, w, first)
	survived := map[LSN]bool{}
	for i, r := range got {
		if r.lsn != first+LSN(i) {
			t.Fatalf("replayed LSN %d at position %d from %d: not a gapless run", r.lsn, i, first)
		}
		if !bytes.Equal(r.rec, appended[r.lsn]) {
			t.Fatalf("LSN %d replayed as %q, appended as %q", r.lsn, r.rec, appended[r.lsn])
		}
		survived[r.lsn] = true
	}
	for _, lsn := range confirmed {
		if lsn >= cutAtCrash && !survived[lsn] {
			t.Fatalf("confirmed LSN %d lost in the crash (%d records survived from %d)", lsn, len(got), first)
		}
	}
	last := first + LSN(len(got)) - 1
	if lsn := appendWait(t, w, Durable, []byte("after"))[0]; lsn != last+1 {
		t.Fatalf("Append after the crash got LSN %d, want %d", lsn, last+1)
	}
}

// TestCrashBetweenWriteAndFsync crashes while the writer waits in an fsync:
// the group it wrote is on disk but not synced, was not confirmed, and is
// gone after the crash; what was confirmed before stays.
func TestCrashBetweenWriteAndFsync(t *testing.T) {
	mem := vfs.NewCrashableMem()
	g := newGateFS(mem)
	w := mustOpen(t, g, Options{})
	appendWait(t, w, Durable, payload(1), payload(2))

	g.block.Store(true)
	confirmed := make(chan error, 2)
	w.Append(payload(3), Durable, func(_ LSN, err error) { confirmed <- err })
	w.Append(payload(4), Durable, func(_ LSN, err error) { confirmed <- err })
	<-g.entered // written, fsync not yet done
	select {
	case err := <-confirmed:
		t.Fatalf("a record was confirmed (%v) before its fsync", err)
	default:
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	g.block.Store(false)
	close(g.release)
	for range 2 {
		if err := <-confirmed; err != nil {
			t.Fatal(err)
		}
	}
	mustClose(t, w)

	w = mustOpen(t, crashed, Options{})
	defer mustClose(t, w)
	checkSeq(t, replayAll(t, w, 1), 1, 2)
	if lsn := appendWait(t, w, Durable, payload(3))[0]; lsn != 3 {
		t.Fatalf("LSN after the crash = %d, want 3", lsn)
	}
}

// TestFailedFsyncIsSticky fails an fsync: the records it covered, every
// record pending and every later one complete with the error, nothing is
// reported durable that is not, and fsync is never tried again.
func TestFailedFsyncIsSticky(t *testing.T) {
	mem := vfs.NewCrashableMem()
	g := newGateFS(mem)
	w := mustOpen(t, g, Options{})
	appendWait(t, w, Durable, payload(1))

	// Hold the writer in the fsync of LSN 2 so LSN 3 and 4 are pending when
	// it fails.
	g.block.Store(true)
	results := make(chan error, 3)
	for i := 2; i <= 4; i++ {
		w.Append(payload(i), Durable, func(_ LSN, err error) { results <- err })
		if i == 2 {
			<-g.entered
		}
	}
	g.failing.Store(true)
	g.block.Store(false)
	close(g.release)
	for i := 2; i <= 4; i++ {
		if err := <-results; !errors.Is(err, errorfs.ErrInjected) {
			t.Fatalf("LSN %d completed with %v, want the injected fsync error", i, err)
		}
	}
	if err := w.Err(); !errors.Is(err, errorfs.ErrInjected) {
		t.Fatalf("Err() = %v, want the fsync error", err)
	}
	syncsAfterFailure := g.syncs.Load()

	g.failing.Store(false) // a retry would now succeed; there must be none
	late := make(chan error, 1)
	w.Append(payload(5), Durable, func(_ LSN, err error) { late <- err })
	if err := <-late; !errors.Is(err, errorfs.ErrInjected) {
		t.Fatalf("Append after the failure completed with %v, want the sticky error", err)
	}
	w.Append(payload(6), Volatile, nil) // no done: must not hang anything
	if err := w.Sync(); !errors.Is(err, errorfs.ErrInjected) {
		t.Fatalf("Sync after the failure = %v", err)
	}
	if err := w.Reserve(context.Background(), 1); !errors.Is(err, errorfs.ErrInjected) {
		t.Fatalf("Reserve after the failure = %v", err)
	}
	if err := w.RemoveBefore(1); !errors.Is(err, errorfs.ErrInjected) {
		t.Fatalf("RemoveBefore after the failure = %v", err)
	}
	if err := w.Close(); !errors.Is(err, errorfs.ErrInjected) {
		t.Fatalf("Close after the failure = %v", err)
	}
	if n := g.syncs.Load(); n != syncsAfterFailure {
		t.Fatalf("%d fsyncs after the failed one: fsync was retried", n-syncsAfterFailure)
	}

	w = mustOpen(t, mem.CrashClone(vfs.CrashCloneCfg{}), Options{})
	defer mustClose(t, w)
	checkSeq(t, replayAll(t, w, 1), 1, 1)
}

// TestFailedWriteIsSticky fails a write under each policy.
func TestFailedWriteIsSticky(t *testing.T) {
	for _, policy := range []SyncPolicy{SyncFsync, SyncInterval, SyncNone} {
		t.Run(policy.String(), func(t *testing.T) {
			g := newGateFS(vfs.NewMem())
			w := mustOpen(t, g, Options{Sync: policy})
			appendWait(t, w, Durable, payload(1))
			g.failW.Store(true)
			results := make(chan error, 2)
			w.Append(payload(2), Durable, func(_ LSN, err error) { results <- err })
			w.Append(payload(3), Volatile, func(_ LSN, err error) { results <- err })
			for range 2 {
				if err := <-results; !errors.Is(err, errorfs.ErrInjected) {
					t.Fatalf("completed with %v, want the write error", err)
				}
			}
			if err := w.Close(); !errors.Is(err, errorfs.ErrInjected) {
				t.Fatalf("Close = %v, want the write error", err)
			}
		})
	}
}

// TestFailedSyncUnderSyncNone: a policy that confirms on write still fails
// Sync, and everything after it, when the fsync fails.
func TestFailedSyncUnderSyncNone(t *testing.T) {
	g := newGateFS(vfs.NewMem())
	w := mustOpen(t, g, Options{Sync: SyncNone})
	appendWait(t, w, Durable, payload(1)) // written: done
	g.failing.Store(true)
	if err := w.Sync(); !errors.Is(err, errorfs.ErrInjected) {
		t.Fatalf("Sync = %v, want the fsync error", err)
	}
	res := make(chan error, 1)
	w.Append(payload(2), Durable, func(_ LSN, err error) { res <- err })
	if err := <-res; !errors.Is(err, errorfs.ErrInjected) {
		t.Fatalf("Append after a failed Sync completed with %v", err)
	}
	if err := w.Close(); !errors.Is(err, errorfs.ErrInjected) {
		t.Fatalf("Close = %v", err)
	}
}
