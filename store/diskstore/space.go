package diskstore

import (
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Disk space.
//
// The store writes in bursts that a once-a-second look at the free space
// misses: a WAL file is preallocated whole when it starts (64 MiB), and a
// checkpoint writes a segment and an index batch the size of what the
// overlays hold. A publisher at full speed took a volume from 336 MiB
// free to nothing between two samples, through the 50 MB limit, and the
// checkpoint then found no space.
//
// So the store watches its own filesystem (Options.DiskFreeLimit): the
// free space, sampled at least every second and after every few MiB the
// WAL takes, less what the store is about to write before it can give any
// back — the next WAL file, unless the spare is there to be reused, and
// the checkpoint of what the overlays hold, plus room for the index to
// flush and compact. When that falls below the limit, AlarmDisk is raised:
// publishers are held back while the space the store needs is still
// there, and while it is raised a checkpoint runs at every sample that
// finds changes waiting, since one gives space back (the WAL files it
// covered, the segments consumers' acks left dead). The alarm clears by
// itself once the same sum is above the limit again.
//
// The need is an estimate, generous where it is unsure; if it is wrong,
// what runs out is the store's own writes, which are retried (checkpoints,
// a WAL file's start) rather than failing the store.

// indexHeadroom is what the index may write besides a checkpoint's batch:
// its log file, a memtable flushed, a compaction's output.
const indexHeadroom = 32 << 20

// indexCommitSlack is the free space an index commit needs besides twice
// its batch (indexRoom): the index's log may start a file, and a flush
// that follows writes a manifest edit.
const indexCommitSlack = 4 << 20

// indexRoom returns an error matching syscall.ENOSPC when the filesystem
// has no room for an index batch of n bytes. The index (Pebble) treats a
// failed write of its log, or of its manifest, as fatal and stops the
// process; so a checkpoint does not commit into a disk filled to its last
// MiB from outside, it fails and is retried, as when its segment write
// meets ENOSPC. Between the look and the commit the space can still go;
// that window is what remains (doc.go). A filesystem that cannot say how
// much is free is not checked.
func (s *Store) indexRoom(n int) error {
	u, err := s.opts.FS.GetDiskUsage(s.dir)
	if err != nil {
		return nil
	}
	if need := 2*uint64(n) + indexCommitSlack; u.AvailBytes < need {
		return fmt.Errorf("index batch of %d bytes: %d bytes free, it needs %d: %w", n, u.AvailBytes, need, syscall.ENOSPC)
	}
	return nil
}

// spaceKickBytes is how much the WAL takes between samples beyond the
// once-a-second one.
const spaceKickBytes = 4 << 20

// AlarmDisk is the alarm raised while the free space, less what the store
// is about to write, is below Options.DiskFreeLimit.
const AlarmDisk = "disk"

// space is the disk watch's state.
type space struct {
	limit    atomic.Uint64 // Options.DiskFreeLimit, SetDiskFreeLimit
	appended atomic.Int64  // WAL bytes appended since the last sample
	kick     chan struct{}
	low      bool // the alarm is raised; the watch goroutine only
	stopped  chan struct{}
}

// SetDiskFreeLimit changes Options.DiskFreeLimit (0 turns the watch off,
// clearing the alarm) and has it checked at once. Safe for concurrent
// use.
func (s *Store) SetDiskFreeLimit(n uint64) {
	s.space.limit.Store(n)
	s.kickSpace()
}

// DiskFreeLimit returns the free space limit in force (SetDiskFreeLimit;
// 0: none). Safe for concurrent use.
func (s *Store) DiskFreeLimit() uint64 { return s.space.limit.Load() }

func (s *Store) kickSpace() {
	select {
	case s.space.kick <- struct{}{}:
	default:
	}
}

// spaceAppended counts n bytes appended to the WAL; every spaceKickBytes
// it has the free space sampled. Called by Apply, under s.mu.
func (s *Store) spaceAppended(n int) {
	if s.space.appended.Add(int64(n)) >= spaceKickBytes {
		s.space.appended.Store(0)
		s.kickSpace()
	}
}

// spaceLoop is the disk watch's goroutine.
func (s *Store) spaceLoop() {
	defer close(s.space.stopped)
	t := time.NewTicker(s.opts.DiskCheckInterval)
	defer t.Stop()
	var failed bool // the last sample failed (logged once)
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		case <-s.space.kick:
		}
		limit := s.space.limit.Load()
		if limit == 0 {
			s.setLow(false, 0, 0, 0)
			continue
		}
		u, err := s.opts.FS.GetDiskUsage(s.dir)
		if err != nil {
			if !failed && !errors.Is(err, vfs.ErrUnsupported) {
				s.log.Warn("cannot read free disk space; disk alarm not evaluated", "dir", s.dir, "err", err)
			}
			failed = true
			continue
		}
		failed = false
		s.space.appended.Store(0)
		need := s.diskNeed()
		s.setLow(u.AvailBytes < limit+need, u.AvailBytes, need, limit)
		if s.space.low && s.overlayHolds() {
			// What consumers acked meanwhile gives space back only
			// through a checkpoint: don't wait for the interval.
			s.forceCheckpoint()
		}
	}
}

// overlayHolds reports whether the active overlay holds anything.
func (s *Store) overlayHolds() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.active.empty()
}

// diskNeed is what the store is about to write before it can give space
// back: see the comment at the top of this file.
func (s *Store) diskNeed() uint64 {
	s.mu.Lock()
	held := s.active.bytes
	if s.frozen != nil {
		held += s.frozen.bytes
	}
	s.mu.Unlock()
	need := uint64(held) + indexHeadroom
	if !s.wal.SpareReady() {
		need += uint64(s.opts.WALSegmentSize)
	}
	return need
}

// setLow raises or clears the disk alarm. On raising it starts a
// checkpoint, which gives space back.
func (s *Store) setLow(low bool, free, need, limit uint64) {
	if s.space.low == low {
		return
	}
	s.space.low = low
	if low {
		s.log.Warn("disk space low: publishers are held back until the store has room for what it is about to write",
			"dir", s.dir, "free", free, "store_needs", need, "disk_free_limit", limit)
	} else {
		s.log.Info("disk space back above the limit", "dir", s.dir, "free", free, "store_needs", need, "disk_free_limit", limit)
	}
	s.alarm(AlarmDisk, low)
	s.diskLow.Store(low)
	if low {
		s.checkpointEnded() // let go of Reserve waiters: the alarm holds them now
	}
}
