package wal

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/brokerd/brokerd/internal/histogram"
)

// WAL is an open log. Its methods are safe for concurrent use, except that
// Replay belongs to recovery, before the first Append.
type WAL struct {
	opts Options
	fs   vfs.FS
	dir  string
	log  *slog.Logger
	lock io.Closer

	// mu guards the pending group and the state appenders see.
	mu        sync.Mutex
	pend      *group // appended, not yet taken by the writer
	nextLSN   LSN
	pendBytes int64         // encoded bytes appended, not yet written
	spaceCh   chan struct{} // closed when pendBytes falls; nil when no Reserve waits
	appended  bool          // Append was called: Replay is over
	closing   bool
	err       error // sticky
	// down is set with err or closing, so that ReadAt, which does not
	// take mu unless it is set, sees them.
	down atomic.Bool

	lastLSN atomic.Uint64

	kick      chan struct{} // wakes the writer; capacity 1
	closingCh chan struct{} // closed when Close begins
	stopped   chan struct{} // closed when the writer has exited
	// stall is the error the writer retries (it cannot start a new file),
	// nil when it is not stalled.
	stall   atomic.Pointer[error]
	closeMu sync.Mutex
	closed  bool
	// closeErr is the writer's final error; written before stopped closes.
	closeErr error

	wr writer // owned by the writer goroutine

	filesMu  sync.Mutex
	files    []fileMeta // on disk, oldest first; the last is being written
	rd       readers    // ReadAt's floor, written LSN and open files; under filesMu
	removeMu sync.Mutex // serialises RemoveBefore

	spare spare // a finished file kept for the next rotation (spare.go)

	activeOff atomic.Int64 // bytes in the file being written
	syncs     atomic.Uint64
	syncNanos atomic.Uint64
	records   atomic.Uint64
	recycled  atomic.Uint64
	// syncLatency (seconds per fsync) and groupSize (records per group
	// commit) are observed on the writer goroutine, once per fsync and
	// once per group, never per record.
	syncLatency *histogram.Histogram
	groupSize   *histogram.Histogram
}

// group is the records one commit writes: their encodings back to back, the
// completions, and the Sync calls waiting for them.
type group struct {
	buf   []byte
	recs  []pendingRec
	syncs []chan error
}

type pendingRec struct {
	lsn   LSN
	size  int // bytes of buf; 0 for records appended after a failure
	class Class
	done  func(LSN, error)
}

func (g *group) empty() bool { return len(g.recs) == 0 && len(g.syncs) == 0 }

func (g *group) reset() {
	g.buf = g.buf[:0]
	clear(g.recs) // drop the completions' closures
	g.recs = g.recs[:0]
	clear(g.syncs)
	g.syncs = g.syncs[:0]
}

// Stats are counters of an open WAL.
type Stats struct {
	Files     int    // log files on disk
	Bytes     int64  // bytes of headers and records in them (not the preallocated rest)
	Syncs     uint64 // fsyncs of log files since Open
	SyncNanos uint64 // time spent in those fsyncs
	Records   uint64 // records written since Open
	Recycled  uint64 // files started from a finished file since Open (spare.go)
	// SyncLatency is the distribution of fsync durations in seconds.
	SyncLatency histogram.Snapshot
	// GroupSize is the distribution of records per group commit: one
	// write and, under SyncFsync, one fsync covering them all.
	GroupSize histogram.Snapshot
}

// Bucket bounds of Stats.SyncLatency (seconds) and Stats.GroupSize
// (records).
var (
	SyncLatencyBounds = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}
	GroupSizeBounds   = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096}
)

// Open opens the log in dir, creating dir if it is missing. It validates
// every file and repairs a torn tail of the last (see the package doc), then
// starts the writer. Call Replay next, then Append.
func Open(dir string, opts Options) (*WAL, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	fs := opts.FS
	if err := mkdirAllSynced(fs, dir); err != nil {
		return nil, err
	}
	lock, err := fs.Lock(fs.PathJoin(dir, lockName))
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	w := &WAL{
		opts:        opts,
		fs:          fs,
		dir:         dir,
		log:         opts.Logger,
		lock:        lock,
		pend:        new(group),
		kick:        make(chan struct{}, 1),
		closingCh:   make(chan struct{}),
		stopped:     make(chan struct{}),
		syncLatency: histogram.New(SyncLatencyBounds...),
		groupSize:   histogram.New(GroupSizeBounds...),
	}
	if err := w.recover(); err != nil {
		lock.Close()
		return nil, err
	}
	w.wr.init(w)
	w.findSpare()
	go w.run()
	return w, nil
}

// recover reads the directory and opens the file to append to.
func (w *WAL) recover() error {
	rec, err := recoverFiles(w.fs, w.dir, w.opts.Covered, w.log)
	if err != nil {
		return err
	}
	last := &rec.files[len(rec.files)-1]
	a := active{first: last.first, cap: w.opts.SegmentSize}
	if rec.create {
		a.f, a.path, err = w.createFile(last.first, w.opts.SegmentSize)
		a.off = fileHeaderSize
		last.index = newIndex(w.opts.SegmentSize)
	} else {
		a.path, a.off, a.recycled = last.path, rec.tailOff, rec.tailStale
		a.f, err = w.fs.OpenReadWrite(last.path, vfs.WriteCategoryUnspecified)
		if err != nil {
			err = fmt.Errorf("open %s: %w", last.path, err)
		}
	}
	if err != nil {
		return err
	}
	w.wr.act = a
	w.files = rec.files
	w.rd = readers{floor: rec.files[0].first, written: rec.next - 1}
	w.nextLSN = rec.next
	w.lastLSN.Store(uint64(rec.next - 1))
	w.activeOff.Store(a.off)
	w.log.Debug("wal: opened", "dir", w.dir, "files", len(rec.files), "last_lsn", uint64(rec.next-1))
	return nil
}

// Append queues rec (copied before Append returns) and returns its LSN. It
// never blocks on I/O or on backpressure: callers call Reserve first, outside
// their locks. LSNs follow the order of Append calls, and records are written
// in that order.
//
// done, if not nil, runs exactly once on the WAL's goroutine, in LSN order:
// with a nil error when the record is durable per the sync policy (Durable)
// or written (Volatile), or with the sticky error. done must not block and
// must not call Sync or Close.
//
// After Close, Append assigns no LSN: it returns 0 and runs done(0, ErrClosed)
// on a goroutine of its own, so a caller holding a lock done takes does not
// deadlock. Append panics if class is not Durable or Volatile or rec is longer
// than MaxRecordSize.
func (w *WAL) Append(rec []byte, class Class, done func(LSN, error)) LSN {
	if !class.valid() {
		panic(fmt.Sprintf("wal: Append with invalid class %d", uint8(class)))
	}
	if len(rec) > MaxRecordSize {
		panic(fmt.Sprintf("wal: Append of %d bytes, more than MaxRecordSize", len(rec)))
	}
	w.mu.Lock()
	if w.closing {
		w.mu.Unlock()
		if done != nil {
			go done(0, ErrClosed)
		}
		return 0
	}
	w.appended = true
	lsn := w.nextLSN
	w.nextLSN++
	w.lastLSN.Store(uint64(lsn))
	g := w.pend
	wake := g.empty()
	switch {
	case w.err == nil:
		g.buf = appendRecord(g.buf, lsn, class, rec)
		size := encodedSize(len(rec))
		g.recs = append(g.recs, pendingRec{lsn: lsn, size: size, class: class, done: done})
		w.pendBytes += int64(size)
	case done != nil:
		// Failed: nothing is written, but done still runs, in order.
		g.recs = append(g.recs, pendingRec{lsn: lsn, class: class, done: done})
	default:
		wake = false
	}
	w.mu.Unlock()
	if wake {
		w.wake()
	}
	return lsn
}

func (w *WAL) wake() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Reserve blocks until the bytes appended but not yet written plus n are at
// most Options.MaxPending, ctx is done, or the WAL has failed or is closed.
// It reserves nothing: concurrent callers may all pass and overshoot the
// limit by their records, which keeps Append free of blocking. n above
// MaxPending waits until nothing is pending. While the writer is stalled
// (Stalled) it does not wait: whoever OnStall told holds appenders back.
func (w *WAL) Reserve(ctx context.Context, n int) error {
	for {
		w.mu.Lock()
		if err := w.usableLocked(); err != nil {
			w.mu.Unlock()
			return err
		}
		if w.pendBytes == 0 || w.pendBytes+int64(n) <= w.opts.MaxPending || w.stall.Load() != nil {
			w.mu.Unlock()
			return nil
		}
		if w.spaceCh == nil {
			w.spaceCh = make(chan struct{})
		}
		ch := w.spaceCh
		w.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// signalSpaceLocked wakes every Reserve waiting.
func (w *WAL) signalSpaceLocked() {
	if w.spaceCh != nil {
		close(w.spaceCh)
		w.spaceCh = nil
	}
}

// Sync blocks until every record appended before the call is written and
// fsync'd, whatever the sync policy. Checkpoints call it.
func (w *WAL) Sync() error {
	ch := make(chan error, 1)
	w.mu.Lock()
	if err := w.usableLocked(); err != nil {
		w.mu.Unlock()
		return err
	}
	wake := w.pend.empty()
	w.pend.syncs = append(w.pend.syncs, ch)
	w.mu.Unlock()
	if wake {
		w.wake()
	}
	return <-ch
}

// usableLocked returns why the WAL takes no more work, or nil.
func (w *WAL) usableLocked() error {
	if w.closing {
		return ErrClosed
	}
	return w.err
}

// fail makes err the sticky error, unless there is one already.
func (w *WAL) fail(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
		w.down.Store(true)
		w.log.Error("wal: failed; no further records are written", "dir", w.dir, "err", err)
	}
	w.signalSpaceLocked()
	w.mu.Unlock()
}

// Stalled returns the error the writer is retrying while it cannot start
// a new file (out of descriptors or disk space), or nil. Records appended
// meanwhile wait; Reserve holds appenders back once MaxPending is queued.
func (w *WAL) Stalled() error {
	if p := w.stall.Load(); p != nil {
		return *p
	}
	return nil
}

// setStall records that the writer began (err) or ended (nil) retrying
// the start of a new file, and reports it. Writer goroutine only.
func (w *WAL) setStall(err error) {
	if err != nil {
		w.stall.Store(&err)
		w.log.Error("wal: cannot start a new log file; retrying (records wait, nothing is lost)", "dir", w.dir, "err", err)
	} else {
		w.stall.Store(nil)
		w.log.Info("wal: new log file started after failures", "dir", w.dir)
	}
	if w.opts.OnStall != nil {
		w.opts.OnStall(err)
	}
	if err != nil {
		// Reserve no longer waits: let go of those waiting.
		w.mu.Lock()
		w.signalSpaceLocked()
		w.mu.Unlock()
	}
}

// LastLSN returns the highest LSN assigned so far: by Append since Open, or
// found on disk by Open.
func (w *WAL) LastLSN() LSN { return LSN(w.lastLSN.Load()) }

// FirstLSN returns the first LSN of the oldest file still on disk: the
// lowest record Replay or ReadAt may find (it may have been removed by a
// repair, or not been written yet in a new log). Safe for concurrent use.
func (w *WAL) FirstLSN() LSN {
	w.filesMu.Lock()
	defer w.filesMu.Unlock()
	return w.files[0].first
}

// Err returns the sticky error, or nil.
func (w *WAL) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Stats returns the WAL's counters.
func (w *WAL) Stats() Stats {
	w.filesMu.Lock()
	s := Stats{Files: len(w.files)}
	for _, f := range w.files[:len(w.files)-1] {
		s.Bytes += f.size
	}
	s.Bytes += w.activeOff.Load() // under filesMu: rotate moves both together
	w.filesMu.Unlock()
	s.Syncs = w.syncs.Load()
	s.SyncNanos = w.syncNanos.Load()
	s.Records = w.records.Load()
	s.Recycled = w.recycled.Load()
	s.SyncLatency = w.syncLatency.Snapshot()
	s.GroupSize = w.groupSize.Snapshot()
	return s
}

// syncFile fsyncs f and counts it.
func (w *WAL) syncFile(f vfs.File) error {
	start := time.Now()
	err := f.SyncData()
	d := time.Since(start)
	w.syncNanos.Add(uint64(d))
	w.syncLatency.Observe(d.Seconds())
	w.syncs.Add(1)
	return err
}

// Close writes and fsyncs every pending record, completes every done, stops
// the writer and waits for it. It returns the sticky error if the WAL failed
// (now or before). Idempotent: later calls return the first call's result.
func (w *WAL) Close() error {
	w.closeMu.Lock()
	defer w.closeMu.Unlock()
	if w.closed {
		return w.closeErr
	}
	w.closed = true
	w.mu.Lock()
	w.closing = true
	w.down.Store(true)
	w.signalSpaceLocked()
	w.mu.Unlock()
	close(w.closingCh)
	w.wake()
	<-w.stopped
	w.closeReaders()
	if err := w.lock.Close(); err != nil && w.closeErr == nil {
		w.closeErr = fmt.Errorf("unlock %s: %w", w.dir, err)
	}
	return w.closeErr
}
