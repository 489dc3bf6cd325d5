package wal

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"sort"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// readHandles is how many files ReadAt keeps open between reads. A reader
// by LSN (a Raft follower catching up) reads forward through one or two
// files; a file outside the handles costs an open and a close per read
// (BenchmarkReadAt/cold). At most readHandles descriptors stay open, plus
// one per ReadAt under way on a file not among them.
const readHandles = 4

// readWindow is the first read of a ReadAt: from an index entry, enough
// to hold the header of any record up to the next entry (indexStride), a
// skip record's next LSN, and a small record whole.
const readWindow = indexStride + 4<<10

// readBufs are readWindow-sized buffers for ReadAt's first read.
var readBufs = sync.Pool{New: func() any { b := make([]byte, readWindow); return &b }}

// readers is ReadAt's state. WAL.filesMu guards it.
type readers struct {
	// floor is the lowest LSN ReadAt reads. RemoveBefore raises it past a
	// file before it removes or recycles the file, so a read that began
	// before and ended after that finds floor above its LSN.
	floor LSN
	// written is the highest LSN whose write returned (or that Open found).
	written LSN
	cache   []*readHandle // the open files, most recently used first
	closed  bool          // Close began: no handle is cached any more
}

// readHandle is a file ReadAt reads, shared by the ReadAts reading it.
type readHandle struct {
	first LSN // the file's first LSN: which file it is
	f     vfs.File
	refs  int // ReadAts using f, plus one while it is cached; f is closed at 0
}

// ReadAt appends to dst the payload of the record with LSN lsn and returns
// it and the record's class (Durable or Volatile). On error it returns dst
// unchanged (bytes past its length may have been written).
//
// Every record whose write to its file returned can be read, before its
// fsync: ReadAt does not wait for durability, and a caller that must serve
// only durable records asks for those whose done reported so. Records Open
// found are readable as soon as Open returns. Errors:
//
//   - ErrRemoved (wrapped): lsn is below the first record still on disk;
//     RemoveBefore removed its file (also once RemoveBefore began removing
//     it, should the removal then fail).
//   - ErrNotWritten (wrapped): lsn has not been appended, or its write has
//     not returned yet.
//   - *CorruptError (wrapped): the record's bytes do not check out (CRC,
//     length, LSN, the LSN chain from the index entry to it), or it was
//     lost to damage Open stepped over (Options.Covered) or Repair dropped.
//     ReadAt never returns bytes other than those appended.
//   - The sticky error once the WAL has failed, ErrClosed once Close began.
//   - A read error of the file, wrapped.
//
// ReadAt is safe for concurrent use with every method of the WAL, Replay
// included. It locates the record with the file's index (index.go): one
// read of at most readWindow bytes from the nearest index entry at or
// below lsn, and a second for the rest of a larger payload.
func (w *WAL) ReadAt(lsn LSN, dst []byte) ([]byte, Class, error) {
	if w.down.Load() {
		w.mu.Lock()
		err := w.usableLocked()
		w.mu.Unlock()
		if err != nil {
			return dst, 0, err
		}
	}
	loc, err := w.locate(lsn)
	if err != nil {
		return dst, 0, err
	}
	out, class, err := loc.read(lsn, dst)
	// A removal that began while the file was read may have recycled it
	// under the read (a new life written over the old): whatever was read
	// does not count.
	if floor := w.releaseHandle(loc.h); lsn < floor {
		return dst, 0, removedError(lsn, floor)
	}
	if err != nil {
		return dst, 0, err
	}
	return out, class, nil
}

// recordLoc is where ReadAt looks for a record: from an index entry of a
// file, read through h, up to the file's end.
type recordLoc struct {
	h    *readHandle
	path string
	from indexEntry
	end  int64 // the offset after the file's last readable record
}

func removedError(lsn, floor LSN) error {
	return fmt.Errorf("read LSN %d: the oldest record on disk is %d: %w", lsn, floor, ErrRemoved)
}

// locate finds the file holding lsn and its index entry at or below lsn,
// and a handle on the file (referenced: releaseHandle gives it back).
func (w *WAL) locate(lsn LSN) (recordLoc, error) {
	w.filesMu.Lock()
	loc, first, err := w.locateLocked(lsn)
	if err != nil || loc.h != nil {
		w.filesMu.Unlock()
		return loc, err
	}
	w.filesMu.Unlock()

	// Opened outside the lock, which the writer takes after every write.
	// The name is the right file or none: a file's name is its first LSN,
	// never reused while the log is open.
	f, err := w.fs.Open(loc.path)
	w.filesMu.Lock()
	switch {
	case w.rd.closed:
		err = ErrClosed
	case lsn < w.rd.floor:
		err = removedError(lsn, w.rd.floor)
	case err != nil:
		err = fmt.Errorf("open %s: %w", loc.path, err)
	}
	if err != nil {
		w.filesMu.Unlock()
		if f != nil {
			f.Close()
		}
		return loc, err
	}
	var drop vfs.File
	loc.h, drop = w.cacheLocked(first, f)
	w.filesMu.Unlock()
	if drop != nil {
		closeRead(drop)
	}
	return loc, nil
}

// locateLocked is locate's look-up; loc.h is nil when the file is not
// open. It returns the file's first LSN.
func (w *WAL) locateLocked(lsn LSN) (recordLoc, LSN, error) {
	switch {
	case w.rd.closed:
		return recordLoc{}, 0, ErrClosed
	case lsn == 0:
		return recordLoc{}, 0, errors.New("wal: read LSN 0: no record has LSN 0")
	case lsn < w.rd.floor:
		return recordLoc{}, 0, removedError(lsn, w.rd.floor)
	case lsn > w.rd.written:
		return recordLoc{}, 0, fmt.Errorf("read LSN %d: records are written up to LSN %d: %w", lsn, w.rd.written, ErrNotWritten)
	}
	// files[i] holds LSNs [files[i].first, files[i+1].first); floor is
	// at least files[0].first.
	i := sort.Search(len(w.files), func(i int) bool { return w.files[i].first > lsn }) - 1
	fm := &w.files[i]
	j := sort.Search(len(fm.index), func(j int) bool { return fm.index[j].lsn > lsn }) - 1
	if j < 0 {
		// No intact record of the file's before it: the file starts
		// with damage Open stepped over.
		return recordLoc{}, 0, fmt.Errorf("read LSN %d: %w", lsn, &CorruptError{File: fm.path, Offset: fileHeaderSize,
			Reason: fmt.Sprintf("no intact record in the file up to LSN %d", lsn), FirstLSN: lsn, LastLSN: lsn})
	}
	loc := recordLoc{path: fm.path, from: fm.index[j], end: fm.size}
	for k, h := range w.rd.cache {
		if h.first == fm.first {
			h.refs++
			copy(w.rd.cache[1:k+1], w.rd.cache[:k])
			w.rd.cache[0] = h
			loc.h = h
			break
		}
	}
	return loc, fm.first, nil
}

// cacheLocked caches f, the file whose first LSN is first, and returns its
// handle, referenced. If another ReadAt cached the file meanwhile, it
// returns that one and f to close; else the least recently used handle,
// if one must go and no ReadAt uses it.
func (w *WAL) cacheLocked(first LSN, f vfs.File) (*readHandle, vfs.File) {
	for k, h := range w.rd.cache {
		if h.first == first {
			h.refs++
			copy(w.rd.cache[1:k+1], w.rd.cache[:k])
			w.rd.cache[0] = h
			return h, f
		}
	}
	h := &readHandle{first: first, f: f, refs: 2}
	w.rd.cache = slices.Insert(w.rd.cache, 0, h)
	if len(w.rd.cache) <= readHandles {
		return h, nil
	}
	last := len(w.rd.cache) - 1
	victim := w.rd.cache[last]
	w.rd.cache[last] = nil
	w.rd.cache = w.rd.cache[:last]
	return h, victim.unrefLocked()
}

// unrefLocked drops one reference to h and returns its file if that was
// the last, for the caller to close outside the lock.
func (h *readHandle) unrefLocked() vfs.File {
	h.refs--
	if h.refs == 0 {
		return h.f
	}
	return nil
}

// releaseHandle gives back the reference locate took and returns the read
// floor, which the read's LSN must still be at or above.
func (w *WAL) releaseHandle(h *readHandle) LSN {
	w.filesMu.Lock()
	f := h.unrefLocked()
	floor := w.rd.floor
	w.filesMu.Unlock()
	if f != nil {
		closeRead(f)
	}
	return floor
}

// uncacheLocked drops the cached handle of the file whose first LSN is
// first, if there is one, and returns its file if no ReadAt uses it.
func (w *WAL) uncacheLocked(first LSN) vfs.File {
	for k, h := range w.rd.cache {
		if h.first == first {
			w.rd.cache = slices.Delete(w.rd.cache, k, k+1)
			return h.unrefLocked()
		}
	}
	return nil
}

// closeReaders closes the cached handles (Close); a ReadAt under way
// closes its own when it ends.
func (w *WAL) closeReaders() {
	w.filesMu.Lock()
	w.rd.closed = true
	var drop []vfs.File
	for _, h := range w.rd.cache {
		if f := h.unrefLocked(); f != nil {
			drop = append(drop, f)
		}
	}
	w.rd.cache = nil
	w.filesMu.Unlock()
	for _, f := range drop {
		closeRead(f)
	}
}

// closeRead closes a file opened for reading. Its error says nothing about
// data (nothing was written through it), so it is dropped.
func closeRead(f vfs.File) { _ = f.Close() }

// read reads the record with LSN lsn from loc: one window from the index
// entry, whose record headers it walks (checking that their LSNs follow
// each other) to lsn's, then the rest of its payload, straight into dst.
// The record is returned only if its CRC checks out.
func (loc *recordLoc) read(lsn LSN, dst []byte) ([]byte, Class, error) {
	bp := readBufs.Get().(*[]byte)
	defer readBufs.Put(bp)
	buf := (*bp)[:min(int64(readWindow), loc.end-loc.from.off)]
	if err := loc.readFull(buf, loc.from.off); err != nil {
		return dst, 0, err
	}
	expect := loc.from.lsn
	for p := 0; ; {
		off := loc.from.off + int64(p)
		if off >= loc.end {
			return dst, 0, loc.lost(lsn, off, fmt.Sprintf("the file's records end at offset %d, before LSN %d", off, lsn))
		}
		if p+recordHeaderSize > len(buf) {
			// Records without an entry start within indexStride of
			// the one before them: lengths that lead further are
			// damaged, or the header is cut by the file's end.
			return dst, 0, loc.lost(lsn, off, fmt.Sprintf("no record header of LSN %d within %d bytes of the index entry of LSN %d", expect, p, loc.from.lsn))
		}
		h, err := decodeRecordHeader(buf[p:])
		if err != nil {
			return dst, 0, loc.lost(lsn, off, err.Error())
		}
		if h.lsn != expect {
			return dst, 0, loc.lost(lsn, off, fmt.Sprintf("record LSN %d, expected %d", h.lsn, expect))
		}
		size := int64(encodedSize(int(h.length)))
		if off+size > loc.end {
			return dst, 0, loc.lost(lsn, off, fmt.Sprintf("%s %d: the file's records end at offset %d", errBadLength, h.length, loc.end))
		}
		if h.class == classSkip {
			next := h.lsn + 1
			if h.length >= skipNextSize {
				if p+recordHeaderSize+skipNextSize > len(buf) {
					return dst, 0, loc.lost(lsn, off, "skip record cut by the read window")
				}
				next, err = skipNext(h, buf[p+recordHeaderSize:p+recordHeaderSize+skipNextSize])
				if err != nil {
					return dst, 0, loc.lost(lsn, off, err.Error())
				}
			}
			if lsn < next {
				return dst, 0, loc.lost(lsn, off, fmt.Sprintf("records %d to %d were dropped as damaged", h.lsn, next-1))
			}
			expect, p = next, p+int(size)
			continue
		}
		if h.lsn != lsn {
			expect, p = h.lsn+1, p+int(size)
			continue
		}
		return loc.payload(h, buf[p:], off, dst)
	}
}

// payload appends the payload of the record whose header h was read at
// off (have: the bytes read from there on) to dst, reading what the window
// left out, and checks the record's CRC.
func (loc *recordLoc) payload(h recordHeader, have []byte, off int64, dst []byte) ([]byte, Class, error) {
	start, n := len(dst), int(h.length)
	dst = slices.Grow(dst, n)[:start+n]
	got := copy(dst[start:], have[recordHeaderSize:])
	if got < n {
		if err := loc.readFull(dst[start+got:], off+int64(recordHeaderSize+got)); err != nil {
			return dst[:start], 0, err
		}
	}
	crc := crc32.Update(crc32.Checksum(have[4:recordHeaderSize], crcTable), crcTable, dst[start:])
	if crc != h.crc {
		return dst[:start], 0, loc.lost(h.lsn, off, fmt.Sprintf("%s %08x, computed %08x", errBadCRC, h.crc, crc))
	}
	return dst, h.class, nil
}

func (loc *recordLoc) readFull(b []byte, off int64) error {
	n, err := loc.h.f.ReadAt(b, off)
	if n < len(b) {
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("read %s at offset %d: %w", loc.path, off, err)
	}
	return nil
}

// lost is the damage that keeps ReadAt from the record with LSN lsn.
func (loc *recordLoc) lost(lsn LSN, off int64, reason string) error {
	return fmt.Errorf("read LSN %d: %w", lsn, &CorruptError{File: loc.path, Offset: off, Reason: reason, FirstLSN: lsn, LastLSN: lsn})
}
