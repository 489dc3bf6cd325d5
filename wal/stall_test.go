package wal

import (
	"errors"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// startFailFS fails what starting a new log file does — creating it, or
// reusing the spare — with err while on.
type startFailFS struct {
	*errorfs.FS
	on  atomic.Bool
	err error
}

func newStartFailFS(inner vfs.FS, err error) *startFailFS {
	f := &startFailFS{err: err}
	f.FS = errorfs.Wrap(inner, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if !f.on.Load() {
			return nil
		}
		switch op.Kind {
		case errorfs.OpCreate, errorfs.OpOpen, errorfs.OpOpenDir, errorfs.OpFilePreallocate, errorfs.OpRename:
			return &os.PathError{Op: "inject", Path: op.Path, Err: f.err}
		}
		return nil
	}))
	return f
}

// Out of descriptors or disk space when a file is full, the writer cannot
// start the next one. That loses nothing: the records wait, the WAL does
// not fail, the stall is reported, and once a file can be started again
// the records are written and completed in order; a restart replays all
// of them. (It used to make the WAL, and so the store, fail for good.)
func TestStallWhileStartingAFile(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENOSPC} {
		t.Run(errno.Error(), func(t *testing.T) {
			mem := vfs.NewMem()
			fs := newStartFailFS(mem, errno)
			stalls := make(chan error, 4)
			w := mustOpen(t, fs, Options{SegmentSize: 4 << 10, OnStall: func(err error) { stalls <- err }})
			appendSeq(t, w, 1, 10)

			fs.on.Store(true)
			// Enough records to fill the file several times over.
			done := make(chan error, 100)
			for i := 11; i <= 110; i++ {
				w.Append(payload(i), Durable, func(_ LSN, err error) { done <- err })
			}
			select {
			case err := <-stalls:
				if !errors.Is(err, errno) {
					t.Fatalf("stall reported %v, want %v", err, errno)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("no stall reported")
			}
			if err := w.Stalled(); !errors.Is(err, errno) {
				t.Fatalf("Stalled() = %v, want %v", err, errno)
			}
			if err := w.Err(); err != nil {
				t.Fatalf("the WAL failed: %v", err)
			}
			fs.on.Store(false)
			for range 100 {
				if err := <-done; err != nil {
					t.Fatalf("record completed with %v", err)
				}
			}
			if err := <-stalls; err != nil {
				t.Fatalf("stall end reported %v, want nil", err)
			}
			if err := w.Stalled(); err != nil {
				t.Fatalf("Stalled() = %v after the stall ended", err)
			}
			appendSeq(t, w, 111, 120)
			mustClose(t, w)

			w = mustOpen(t, mem, Options{SegmentSize: 4 << 10})
			defer mustClose(t, w)
			checkSeq(t, replayAll(t, w, 1), 1, 120)
		})
	}
}

// Close while the writer is stalled gives up: the waiting records fail
// (they were never written, so never confirmed), Close returns, and the
// records completed before are all there at the next Open.
func TestCloseWhileStalled(t *testing.T) {
	mem := vfs.NewMem()
	fs := newStartFailFS(mem, syscall.EMFILE)
	stalls := make(chan error, 4)
	w := mustOpen(t, fs, Options{SegmentSize: 4 << 10, OnStall: func(err error) { stalls <- err }})
	appendSeq(t, w, 1, 10)
	fs.on.Store(true)
	done := make(chan error, 100)
	for i := 11; i <= 110; i++ {
		w.Append(payload(i), Durable, func(_ LSN, err error) { done <- err })
	}
	if err := <-stalls; err == nil {
		t.Fatal("no stall")
	}
	if err := w.Close(); !errors.Is(err, syscall.EMFILE) {
		t.Fatalf("Close = %v, want the stall's error", err)
	}
	ok, failed := 0, 0
	for range 100 {
		if err := <-done; err == nil {
			ok++
		} else {
			failed++
		}
	}
	if failed == 0 {
		t.Fatal("every record completed although the writer was stalled")
	}
	fs.on.Store(false)
	w = mustOpen(t, mem, Options{SegmentSize: 4 << 10})
	defer mustClose(t, w)
	checkSeq(t, replayAll(t, w, 1), 1, 10+ok)
}

// Reserve does not hold appenders while the writer is stalled: it lets go
// of those waiting when the stall begins, since the caller's alarm (raised
// by OnStall) holds them back instead, where a client can see it.
func TestReserveLetsGoWhenStalled(t *testing.T) {
	fs := newStartFailFS(vfs.NewMem(), syscall.ENOSPC)
	stalls := make(chan error, 4)
	w := mustOpen(t, fs, Options{SegmentSize: 4 << 10, MaxPending: 2 << 10, OnStall: func(err error) { stalls <- err }})
	fs.on.Store(true)
	for i := 1; i <= 100; i++ {
		w.Append(payload(i), Durable, nil)
	}
	res := waitReserve(w, 1<<10)
	if err := <-stalls; err == nil {
		t.Fatal("no stall")
	}
	if err := <-res; err != nil {
		t.Fatalf("Reserve = %v, want nil once stalled", err)
	}
	fs.on.Store(false)
	if err := <-stalls; err != nil {
		t.Fatalf("stall end %v", err)
	}
	mustClose(t, w)
}
