package wal

import (
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// zeroRecordHeader ends the records of a recycled file.
var zeroRecordHeader [recordHeaderSize]byte

// maxSpareBuf is the largest group buffer the writer keeps for reuse; one
// huge record should not pin its buffer for the life of the log.
const maxSpareBuf = 32 << 20

// active is the file being written.
type active struct {
	f          vfs.File // nil once closed
	path       string
	first      LSN
	off        int64 // where the next record goes
	cap        int64 // records must end at or before cap
	dirty      bool  // written since its last fsync
	dirtySince time.Time
	// recycled: the file holds an earlier life's records past off (see
	// spare.go), so each write is followed by a zero record header.
	recycled bool
}

// writer is the state of the writer goroutine; nothing else touches it.
type writer struct {
	w          *WAL
	act        active // act.f is nil between a finished file and the next
	spare      *group // swapped with WAL.pend at each commit
	timer      *time.Timer
	timerArmed bool
	// The group being committed is written up to record done, byte
	// doneOff of its buffer: a write that could not start a new file is
	// retried from there.
	done    int
	doneOff int
}

// startError is a failure to start the next file (create, open, write
// its header, preallocate, sync the directory): nothing of the group was
// written past the files already finished, so it is retried rather than
// made sticky.
type startError struct{ err error }

func (e *startError) Error() string { return e.err.Error() }
func (e *startError) Unwrap() error { return e.err }

func (wr *writer) init(w *WAL) {
	wr.w = w
	wr.spare = new(group)
	if w.opts.Sync == SyncInterval {
		wr.timer = time.NewTimer(time.Hour)
		wr.timer.Stop()
	}
}

// run is the writer goroutine: it takes the pending group whenever there is
// one, commits it, and exits after the group it took once Close began.
func (w *WAL) run() {
	defer close(w.stopped)
	wr := &w.wr
	var tick <-chan time.Time
	if wr.timer != nil {
		tick = wr.timer.C
	}
	for {
		w.mu.Lock()
		for w.pend.empty() && !w.closing {
			w.mu.Unlock()
			select {
			case <-w.kick:
			case <-tick:
				wr.timerArmed = false
				wr.intervalSync()
			}
			w.mu.Lock()
		}
		g := w.pend
		w.pend, wr.spare = wr.spare, nil
		closing := w.closing
		w.mu.Unlock()

		wr.commit(g)
		if w.opts.AfterGroup != nil {
			w.opts.AfterGroup()
		}
		g.reset()
		if cap(g.buf) > maxSpareBuf {
			g.buf = nil
		}
		wr.spare = g
		if closing {
			w.closeErr = wr.shutdown()
			return
		}
	}
}

// commit writes g, syncs per the policy and completes it.
func (wr *writer) commit(g *group) {
	w := wr.w
	err := w.Err()
	written := 0 // records of g written and fsync'd although the commit failed
	if err == nil {
		err = wr.writeRetrying(g)
		if err != nil {
			w.fail(err)
		}
		if _, ok := err.(*startError); ok {
			// Given up at Close: the records before the stall are in
			// files finished, so fsync'd, before it.
			written = wr.done
		}
	}
	w.mu.Lock()
	w.pendBytes -= int64(len(g.buf))
	w.signalSpaceLocked()
	w.mu.Unlock()
	if err != nil {
		for _, r := range g.recs[:written] {
			complete(r, nil)
		}
		wr.finish(g, written, err)
		return
	}
	w.records.Add(uint64(len(g.recs)))
	if len(g.recs) > 0 {
		w.groupSize.Observe(float64(len(g.recs)))
	}

	if w.opts.Sync == SyncFsync {
		// Volatile records ahead of the first Durable one need no fsync.
		k := 0
		for k < len(g.recs) && g.recs[k].class == Volatile {
			complete(g.recs[k], nil)
			k++
		}
		if k < len(g.recs) || len(g.syncs) > 0 {
			if err := wr.sync(); err != nil {
				w.fail(err)
				wr.finish(g, k, err)
				return
			}
		}
		wr.finish(g, k, nil)
		return
	}

	for _, r := range g.recs {
		complete(r, nil) // written is done under SyncInterval and SyncNone
	}
	if len(g.syncs) > 0 {
		err := wr.sync()
		if err != nil {
			w.fail(err)
		}
		for _, ch := range g.syncs {
			ch <- err
		}
	}
	if w.opts.Sync == SyncInterval {
		wr.scheduleSync()
	}
}

// finish completes g's records from index from on, and its Sync calls, with
// err.
func (wr *writer) finish(g *group, from int, err error) {
	for _, r := range g.recs[from:] {
		complete(r, err)
	}
	for _, ch := range g.syncs {
		ch <- err
	}
}

func complete(r pendingRec, err error) {
	if r.done != nil {
		r.done(r.lsn, err)
	}
}

// writeRetrying writes g, retrying while the next file cannot be started
// (out of descriptors or space): a backoff that doubles from stallMin to
// stallMax, with the stall reported (Options.OnStall) while it lasts.
// Close ends the retries: the group's records not yet written then fail
// with the *startError.
func (wr *writer) writeRetrying(g *group) error {
	w := wr.w
	wr.done, wr.doneOff = 0, 0
	var backoff time.Duration
	for {
		err := wr.write(g)
		var se *startError
		if !errors.As(err, &se) {
			if backoff > 0 {
				w.setStall(nil)
			}
			return err
		}
		if backoff == 0 {
			w.setStall(se.err)
		}
		backoff = min(max(2*backoff, stallMin), stallMax)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-w.closingCh:
			t.Stop()
			w.setStall(nil)
			return se
		}
	}
}

// Bounds of the backoff between attempts to start a new file.
const (
	stallMin = 10 * time.Millisecond
	stallMax = time.Second
)

// write writes g's records from wr.done on, as one write per file they go
// to: where the next record does not fit, the file is finished and the
// next one started.
func (wr *writer) write(g *group) error {
	a := &wr.act
	for wr.done < len(g.recs) {
		r := g.recs[wr.done]
		if a.f == nil {
			if err := wr.start(r.lsn, max(wr.w.opts.SegmentSize, fileHeaderSize+int64(r.size))); err != nil {
				return &startError{err}
			}
		}
		if a.off+int64(r.size) > a.cap {
			if a.off > fileHeaderSize {
				if err := wr.finishFile(); err != nil {
					return err
				}
				continue
			}
			// A record larger than a file, in a file without records:
			// it grows instead.
			need := fileHeaderSize + int64(r.size)
			if err := preallocate(a.f, need); err != nil {
				return &startError{fmt.Errorf("preallocate %s: %w", a.path, err)}
			}
			a.cap = need
		}
		n, j := 0, wr.done
		for j < len(g.recs) && a.off+int64(n+g.recs[j].size) <= a.cap {
			n += g.recs[j].size
			j++
		}
		if err := wr.writeAt(g.buf[wr.doneOff : wr.doneOff+n]); err != nil {
			return err
		}
		wr.w.noteWritten(g.recs[wr.done:j], a.off-int64(n))
		wr.done, wr.doneOff = j, wr.doneOff+n
	}
	return nil
}

func (wr *writer) writeAt(b []byte) error {
	a := &wr.act
	if _, err := a.f.WriteAt(b, a.off); err != nil {
		return fmt.Errorf("write %s: %w", a.path, err)
	}
	a.off += int64(len(b))
	if a.recycled {
		if _, err := a.f.WriteAt(zeroRecordHeader[:], a.off); err != nil {
			return fmt.Errorf("write %s: %w", a.path, err)
		}
	}
	if !a.dirty {
		a.dirty, a.dirtySince = true, time.Now()
	}
	wr.w.activeOff.Store(a.off)
	return nil
}

// finishFile fsyncs and closes the file being written: no record goes to it
// any more. A failed fsync is sticky; a failed close after it is not (the
// data is on disk), it is logged.
func (wr *writer) finishFile() error {
	a := &wr.act
	if err := wr.sync(); err != nil {
		return err
	}
	if err := a.f.Close(); err != nil {
		wr.w.log.Warn("wal: close a finished log file", "file", a.path, "err", err)
	}
	a.f = nil
	return nil
}

// start starts the file whose first record is first, from the spare if
// there is one and capacity is the usual size, else created. On failure
// nothing changes but what is left of a file created for it (removed).
func (wr *writer) start(first LSN, capacity int64) error {
	w, a := wr.w, &wr.act
	var f vfs.File
	var path string
	var err error
	recycled := false
	if capacity == w.opts.SegmentSize && w.takeSpare() {
		if f, path, err = w.useSpare(first); err != nil {
			w.log.Warn("wal: could not reuse a finished log file; creating a new one", "err", err)
		}
		recycled = f != nil
		if recycled {
			w.recycled.Add(1)
		}
	}
	if f == nil {
		if f, path, err = w.createFile(first, capacity); err != nil {
			return err
		}
	}
	w.filesMu.Lock()
	w.files[len(w.files)-1].size = a.off
	w.files = append(w.files, fileMeta{first: first, path: path, index: newIndex(capacity)})
	wr.act = active{f: f, path: path, first: first, off: fileHeaderSize, cap: capacity, recycled: recycled}
	w.activeOff.Store(fileHeaderSize)
	w.filesMu.Unlock()
	return nil
}

// sync fsyncs the file being written if it has unsynced data.
func (wr *writer) sync() error {
	a := &wr.act
	if !a.dirty {
		return nil
	}
	if err := wr.w.syncFile(a.f); err != nil {
		return fmt.Errorf("sync %s: %w", a.path, err)
	}
	a.dirty = false
	return nil
}

// scheduleSync keeps SyncInterval's promise while the writer is busy (it
// syncs if data has waited an interval) and while it is idle (the timer).
func (wr *writer) scheduleSync() {
	a := &wr.act
	if !a.dirty {
		return
	}
	waited := time.Since(a.dirtySince)
	if waited >= wr.w.opts.SyncInterval {
		wr.intervalSync()
		return
	}
	if !wr.timerArmed {
		wr.timer.Reset(wr.w.opts.SyncInterval - waited)
		wr.timerArmed = true
	}
}

func (wr *writer) intervalSync() {
	if wr.w.Err() != nil {
		return
	}
	if err := wr.sync(); err != nil {
		wr.w.fail(err)
	}
}

// shutdown fsyncs what the last groups wrote, whatever the policy, and
// closes the file. It returns the sticky error, if any.
func (wr *writer) shutdown() error {
	w := wr.w
	if wr.timer != nil {
		wr.timer.Stop()
	}
	err := w.Err()
	if err == nil {
		if err = wr.sync(); err != nil {
			w.fail(err)
		}
	}
	if f := wr.act.f; f != nil {
		wr.act.f = nil
		if cerr := f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close %s: %w", wr.act.path, cerr)
		}
	}
	return err
}
