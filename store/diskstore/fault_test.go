package diskstore

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/brokerd/brokerd/store"
)

// faultFS injects err into the operations match selects while it is on.
type faultFS struct {
	*errorfs.FS
	on    atomic.Bool
	hit   chan struct{} // a value per injected error, while there is room
	match func(errorfs.Op) bool
	err   error
}

func newFaultFS(base vfs.FS, err error, match func(errorfs.Op) bool) *faultFS {
	f := &faultFS{match: match, err: err, hit: make(chan struct{}, 64)}
	f.FS = errorfs.Wrap(base, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if f.on.Load() && f.match(op) {
			select {
			case f.hit <- struct{}{}:
			default:
			}
			return &os.PathError{Op: fmt.Sprint("op ", int(op.Kind)), Path: op.Path, Err: f.err}
		}
		return nil
	}))
	return f
}

// waitHits waits until n errors were injected since the last call.
func (f *faultFS) waitHits(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-f.hit:
		case <-time.After(20 * time.Second):
			t.Fatal("the fault was not hit")
		}
	}
}

// alarmLog records OnAlarm calls for a test to wait on.
type alarmLog chan string

func (a alarmLog) record(resource string, raised bool) {
	a <- fmt.Sprintf("%s=%v", resource, raised)
}

func (a alarmLog) expect(t *testing.T, want string) {
	t.Helper()
	select {
	case got := <-a:
		if got != want {
			t.Fatalf("alarm %q, want %q", got, want)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("no alarm %q", want)
	}
}

// kind matches the operations of one kind on files whose path contains
// part.
func kind(k errorfs.OpKind, part string) func(errorfs.Op) bool {
	return func(op errorfs.Op) bool { return op.Kind == k && strings.Contains(op.Path, part) }
}

// A checkpoint that fails — out of descriptors, out of space, a failed
// segment fsync — at any of the store's write sites before its index
// batch commits is abandoned and retried: the store does not fail, keeps
// taking changes, raises the checkpoint alarm while it retries and clears
// it once a retry succeeds; no segment file of a failed attempt is left
// behind, and everything applied (before, during and after the failures)
// is there after a restart.
func TestCheckpointRetriedAfterFault(t *testing.T) {
	cases := []struct {
		name  string
		err   error
		match func(errorfs.Op) bool
	}{
		{"segment create EMFILE", syscall.EMFILE, kind(errorfs.OpCreate, "segments")},
		{"segment write ENOSPC", syscall.ENOSPC, kind(errorfs.OpFileWrite, "segments")},
		{"segment fsync EIO", syscall.EIO, kind(errorfs.OpFileSync, "segments")},
		{"segment directory open EMFILE", syscall.EMFILE, kind(errorfs.OpOpenDir, "segments")},
		{"index table read EIO", syscall.EIO, kind(errorfs.OpFileReadAt, ".sst")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ffs := newFaultFS(vfs.NewMem(), tc.err, tc.match)
			alarms := make(alarmLog, 16)
			opts := quiet()
			opts.FS = ffs
			opts.OnAlarm = alarms.record
			opts.CheckpointBytes = 1 // every Apply wakes the checkpointer
			s := openDir(t, "data", opts)

			const q = store.QueueID(7)
			seq := uint64(0)
			// publish puts n messages in one batch.
			publish := func(n int) {
				t.Helper()
				var b store.Batch
				for range n {
					seq++
					m := &store.Message{ID: s.AllocMsgID(), Persistent: true, Body: []byte(fmt.Sprintf("body %d", seq))}
					b.Messages = append(b.Messages, m)
					b.Puts = append(b.Puts, store.Entry{Ref: store.Ref{Queue: q, Seq: seq}, Msg: m})
				}
				applyWait(t, s, &b)
			}
			publish(5000) // an index table of many blocks, not all of them read at open
			// The index's tables exist and are closed, for the case that
			// opens one; its acks make the checkpoint read them.
			if err := s.Checkpoint(); err != nil {
				t.Fatal(err)
			}
			if err := s.db.Flush(); err != nil {
				t.Fatal(err)
			}
			s.Close()
			s = openDir(t, "data", opts)
			ffs.on.Store(true)
			for i := uint64(1); i <= 10; i++ {
				applyWait(t, s, &store.Batch{Deletes: []store.Ref{{Queue: q, Seq: i * 400}}})
			}
			publish(50)
			// The background checkpoint fails, raises the alarm and
			// retries; the store keeps taking changes meanwhile.
			alarms.expect(t, "checkpoint=true")
			if err := s.Err(); err != nil {
				t.Fatalf("store failed: %v", err)
			}
			publish(50)
			ffs.waitHits(t, 3)
			ffs.on.Store(false)
			alarms.expect(t, "checkpoint=false")
			if got := s.Stats().CheckpointFailures; got < 1 {
				t.Errorf("CheckpointFailures = %d, want at least 1", got)
			}

			// No segment file of a failed attempt is left behind.
			for _, si := range s.segs.List() {
				if s.cp.segs[si.ID] == nil {
					t.Errorf("segment %d on disk, not in the index", si.ID)
				}
			}
			publish(10)
			s.Close()
			s = openDir(t, "data", opts)
			defer s.Close()
			var got []string
			if err := s.ScanQueue(q, 0, func(e *store.Entry) bool {
				got = append(got, fmt.Sprintf("%d", e.Seq))
				return true
			}); err != nil {
				t.Fatal(err)
			}
			if want := int(seq) - 10; len(got) != want || got[399] != "401" {
				t.Fatalf("after restart %d entries, want %d, 400 deleted", len(got), want)
			}
		})
	}
}

// Err returns the store's sticky error, for tests.
func (s *Store) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func applyWait(t *testing.T, s *Store, b *store.Batch) {
	t.Helper()
	done := make(chan error, 1)
	s.Apply(b, func(err error) { done <- err })
	if err := <-done; err != nil {
		t.Fatalf("apply: %v", err)
	}
}

// When the WAL cannot start its next file (no descriptor, no space), its
// records wait and the "wal" alarm is raised; it clears, and every record
// completes, once a file can be started. Close during such a stall does
// not wait for the disk: it returns, and every batch confirmed before is
// there at the next Open.
func TestWALStall(t *testing.T) {
	for _, closeStalled := range []bool{false, true} {
		t.Run(fmt.Sprintf("close=%v", closeStalled), func(t *testing.T) {
			mem := vfs.NewMem()
			ffs := newFaultFS(mem, syscall.EMFILE, func(op errorfs.Op) bool {
				return op.Kind == errorfs.OpCreate && strings.Contains(op.Path, "wal/")
			})
			alarms := make(alarmLog, 16)
			opts := quiet()
			opts.FS = ffs
			opts.OnAlarm = alarms.record
			opts.WALSegmentSize = 16 << 10
			s := openDir(t, "data", opts)
			const q = store.QueueID(3)
			ffs.on.Store(true)
			done := make(chan error, 200)
			for i := uint64(1); i <= 200; i++ {
				m := &store.Message{ID: s.AllocMsgID(), Persistent: true, Body: make([]byte, 500)}
				s.Apply(&store.Batch{Messages: []*store.Message{m}, Puts: []store.Entry{{Ref: store.Ref{Queue: q, Seq: i}, Msg: m}}},
					func(err error) { done <- err })
			}
			alarms.expect(t, "wal=true")
			confirmed := 0
			if closeStalled {
				if err := s.Close(); err == nil {
					t.Fatal("Close reported no error with records it could not write")
				}
				for range 200 {
					if <-done == nil {
						confirmed++
					}
				}
				if confirmed == 200 {
					t.Fatal("every batch confirmed although the WAL was stalled")
				}
			} else {
				ffs.on.Store(false)
				alarms.expect(t, "wal=false")
				for range 200 {
					if err := <-done; err != nil {
						t.Fatalf("batch failed: %v", err)
					}
				}
				confirmed = 200
				s.Close()
			}
			ffs.on.Store(false)
			s = openDir(t, "data", quietOn(mem))
			defer s.Close()
			n := 0
			if err := s.ScanQueue(q, 0, func(*store.Entry) bool { n++; return true }); err != nil {
				t.Fatal(err)
			}
			if n < confirmed {
				t.Fatalf("%d entries after restart, %d were confirmed", n, confirmed)
			}
		})
	}
}

func quietOn(fs vfs.FS) Options {
	o := quiet()
	o.FS = fs
	return o
}

// With fewer descriptors free than a checkpoint may need, none is started
// (Pebble would panic if it could not create its log file): the attempt
// fails with EMFILE, the alarm is raised, and the checkpoint runs once
// descriptors are free again.
func TestCheckpointWaitsForDescriptors(t *testing.T) {
	var free atomic.Int64
	free.Store(5)
	alarms := make(alarmLog, 16)
	opts := quiet()
	opts.FS = vfs.NewMem()
	opts.OnAlarm = alarms.record
	opts.CheckpointBytes = 1
	opts.FreeDescriptors = func() (int, error) { return int(free.Load()), nil }
	s := openDir(t, "data", opts)
	defer s.Close()
	m := &store.Message{ID: s.AllocMsgID(), Persistent: true, Body: []byte("x")}
	applyWait(t, s, &store.Batch{Messages: []*store.Message{m}, Puts: []store.Entry{{Ref: store.Ref{Queue: 1, Seq: 1}, Msg: m}}})
	if err := s.Checkpoint(); !errors.Is(err, syscall.EMFILE) {
		t.Fatalf("Checkpoint with 5 descriptors free = %v, want EMFILE", err)
	}
	alarms.expect(t, "checkpoint=true")
	if n := len(s.segs.List()); n != 0 {
		t.Fatalf("%d segment files written while out of descriptors", n)
	}
	free.Store(1000)
	alarms.expect(t, "checkpoint=false")
	if n := len(s.segs.List()); n != 1 {
		t.Fatalf("%d segment files after the checkpoint, want 1", n)
	}
}

// With less free space than an index batch needs, a checkpoint does not
// commit it (Pebble would stop the process on a failed log write): the
// attempt fails with ENOSPC, leaves no segment file behind, raises the
// alarm, and the checkpoint runs once there is room; nothing is lost.
func TestCheckpointWaitsForIndexRoom(t *testing.T) {
	mem := vfs.NewMem()
	mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 1 << 20, TotalBytes: 1 << 30})
	alarms := make(alarmLog, 16)
	opts := quietOn(mem)
	opts.OnAlarm = alarms.record
	opts.CheckpointBytes = 1
	s := openDir(t, "data", opts)
	m := &store.Message{ID: s.AllocMsgID(), Persistent: true, Body: []byte("x")}
	applyWait(t, s, &store.Batch{Messages: []*store.Message{m}, Puts: []store.Entry{{Ref: store.Ref{Queue: 1, Seq: 1}, Msg: m}}})
	if err := s.Checkpoint(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Checkpoint with 1 MiB free = %v, want ENOSPC", err)
	}
	alarms.expect(t, "checkpoint=true")
	if err := s.Err(); err != nil {
		t.Fatalf("store failed: %v", err)
	}
	if n := len(s.segs.List()); n != 0 {
		t.Fatalf("%d segment files left by the failed checkpoint", n)
	}
	mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 1 << 30, TotalBytes: 1 << 30})
	alarms.expect(t, "checkpoint=false")
	s.Close()
	s = openDir(t, "data", opts)
	defer s.Close()
	n := 0
	if err := s.ScanQueue(1, 0, func(*store.Entry) bool { n++; return true }); err != nil || n != 1 {
		t.Fatalf("after restart: %d entries, %v", n, err)
	}
}

// The store raises the disk alarm when the free space, less what it is
// about to write (the checkpoint of what its overlays hold, the index's
// headroom, the next WAL file when there is no spare to reuse), falls
// below the limit — before the space is gone — starts a checkpoint at
// once, and clears the alarm when there is room again.
func TestDiskAlarmCountsWhatTheStoreWillWrite(t *testing.T) {
	mem := vfs.NewMem()
	const mib = 1 << 20
	mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 1 << 30, TotalBytes: 2 << 30})
	alarms := make(alarmLog, 16)
	opts := quietOn(mem)
	opts.OnAlarm = alarms.record
	opts.DiskFreeLimit = 50 * mib
	opts.CheckpointInterval = time.Hour
	s := openDir(t, "data", opts)
	defer s.Close()
	var b store.Batch
	for i := uint64(1); i <= 100; i++ {
		m := &store.Message{ID: s.AllocMsgID(), Persistent: true, Body: make([]byte, 10<<10)}
		b.Messages = append(b.Messages, m)
		b.Puts = append(b.Puts, store.Entry{Ref: store.Ref{Queue: 1, Seq: i}, Msg: m})
	}
	applyWait(t, s, &b)
	need := s.diskNeed()
	// 100 × 10 KiB held, 32 MiB for the index, 64 MiB for a new WAL file.
	if need < 97*mib || need > 98*mib {
		t.Fatalf("diskNeed = %d MiB, want about 97", need/mib)
	}
	// Above the limit, but not by what the store is about to write.
	mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 50*mib + need - 1, TotalBytes: 2 << 30})
	s.SetDiskFreeLimit(50 * mib)
	alarms.expect(t, "disk=true")
	// The checkpoint it started moved the overlay out.
	s.mu.Lock()
	for s.frozen != nil || !s.active.empty() {
		s.mu.Unlock()
		<-s.cpDoneCh()
		s.mu.Lock()
	}
	s.mu.Unlock()
	mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 1 << 30, TotalBytes: 2 << 30})
	s.SetDiskFreeLimit(50 * mib)
	alarms.expect(t, "disk=false")
	// 0 turns the watch off.
	mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 1, TotalBytes: 2 << 30})
	s.SetDiskFreeLimit(0)
	select {
	case a := <-alarms:
		t.Fatalf("alarm %s with the watch off", a)
	case <-time.After(100 * time.Millisecond): // nothing may happen
	}
}

// cpDoneCh returns the channel closed when the current checkpoint ends.
func (s *Store) cpDoneCh() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cpDone
}
