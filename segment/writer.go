package segment

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/brokerd/brokerd/internal/fsutil"
)

// Writer appends blobs to new segment files. A store has at most one
// Writer at a time (the checkpoint's or a compaction's): NewWriter returns
// ErrWriterActive until the current one is finished or aborted.
//
// A Writer is used by one goroutine; only Store.Close may run concurrently
// with it (and aborts it). Write errors are sticky: after the first, Add
// and Finish return it.
type Writer struct {
	s         *Store
	codec     Codec
	blockSize int
	target    int64

	mu   sync.Mutex
	err  error // sticky failure, or ErrClosed
	done bool  // finished or aborted

	f    vfs.File // the file being written; nil between files
	sf   *segFile
	off  int64    // file offset of the open block: bytes written to f
	raw  []byte   // blob data of the open block, then its table when cut
	ends []uint32 // end offset of each blob in raw
	buf  []byte   // encoded block
	segs []ID     // segments this writer created
}

// NewWriter starts a Writer. Its first Add creates a new segment file (with
// an ID above every existing one); a Writer never appends to a file that
// exists.
func (s *Store) NewWriter() (*Writer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return nil, ErrClosed
	}
	if s.writer != nil {
		return nil, ErrWriterActive
	}
	w := &Writer{
		s:         s,
		codec:     s.opts.Codec,
		blockSize: s.opts.BlockSize,
		target:    s.opts.TargetSize,
	}
	s.writer = w
	return w, nil
}

// Add appends blob and returns where it will be. It only buffers, except
// that cutting a full block writes it (and rolling past TargetSize fsyncs
// and closes the file), so the Loc is known at once: blocks are written
// back to back. The Loc is readable only after Finish returned nil. blob is
// copied; the caller may reuse it.
//
// A blob above MaxBlobSize gets ErrBlobTooLarge, which does not end the
// Writer. Any other error is sticky.
func (w *Writer) Add(blob []byte) (Loc, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.usableLocked(); err != nil {
		return Loc{}, err
	}
	if len(blob) > MaxBlobSize {
		return Loc{}, fmt.Errorf("%w: %d bytes, limit %d", ErrBlobTooLarge, len(blob), MaxBlobSize)
	}
	if len(w.ends) > 0 && w.pending()+len(blob)+blobEndSize > w.blockSize {
		if err := w.cutLocked(); err != nil {
			return Loc{}, err
		}
	}
	if w.f == nil {
		if err := w.startFileLocked(); err != nil {
			return Loc{}, err
		}
	}
	loc := Loc{Seg: w.sf.id, Block: uint32(w.off), Off: uint32(len(w.raw)), Len: uint32(len(blob))}
	w.raw = append(w.raw, blob...)
	w.ends = append(w.ends, uint32(len(w.raw)))
	if w.pending() >= w.blockSize {
		if err := w.cutLocked(); err != nil {
			return Loc{}, err
		}
	}
	return loc, nil
}

// Finish writes the open block and fsyncs the file being written (files
// rolled earlier were fsynced when they were closed) and the directory.
// It always ends the Writer: on error the files stay on disk, unsynced, for
// the caller to remove. Locs that Add returned are readable once Finish has
// returned nil.
func (w *Writer) Finish() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.usableLocked(); err != nil {
		if !w.done {
			w.endLocked()
		}
		return err
	}
	if len(w.ends) > 0 {
		if err := w.cutLocked(); err != nil {
			w.endLocked()
			return err
		}
	}
	if w.f != nil {
		if err := w.closeFileLocked(); err != nil {
			w.endLocked()
			return err
		}
	}
	if len(w.segs) > 0 {
		if err := fsutil.SyncDir(w.s.fs, w.s.dir); err != nil {
			w.err = fmt.Errorf("finish segments %v: %w", w.segs, err)
			w.endLocked()
			return w.err
		}
	}
	w.endLocked()
	return nil
}

// Abort ends the Writer without syncing. The files it wrote stay on disk,
// listed, for the caller to remove. Abort after Finish or Abort does
// nothing.
func (w *Writer) Abort() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.endLocked()
	}
}

// Segments returns the segments this Writer wrote to, in order.
func (w *Writer) Segments() []ID {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.segs)
}

// abort ends the Writer with err as its sticky error (Store.Close).
func (w *Writer) abort(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return
	}
	if w.err == nil {
		w.err = err
	}
	w.endLocked()
}

func (w *Writer) usableLocked() error {
	if w.err != nil {
		return w.err
	}
	if w.done {
		return ErrWriterDone
	}
	return nil
}

// pending is the raw length the open block would have if cut now.
func (w *Writer) pending() int { return len(w.raw) + len(w.ends)*blobEndSize }

// fail records err as the sticky error and returns it.
func (w *Writer) fail(err error) error {
	w.err = err
	return err
}

// startFileLocked creates the next segment file and writes its header.
func (w *Writer) startFileLocked() error {
	s := w.s
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		return w.fail(ErrClosed)
	}
	id := s.nextID
	if id == 0 {
		s.mu.Unlock()
		return w.fail(fmt.Errorf("segment: segment IDs exhausted"))
	}
	s.nextID++
	sf := &segFile{id: id, path: s.fs.PathJoin(s.dir, fileName(id)), valid: -1, busy: true}
	s.segs[id] = sf
	s.mu.Unlock()

	f, err := s.fs.Create(sf.path, vfs.WriteCategoryUnspecified)
	if err != nil {
		s.mu.Lock()
		delete(s.segs, id)
		s.mu.Unlock()
		return w.fail(fmt.Errorf("create segment %d: %w", id, err))
	}
	w.segs = append(w.segs, id)
	w.f, w.sf = f, sf
	w.buf = appendFileHeader(w.buf[:0], id)
	if _, err := f.Write(w.buf); err != nil {
		return w.fail(fmt.Errorf("write segment %d header: %w", id, err))
	}
	w.off = fileHeaderSize
	sf.size.Store(w.off)
	return nil
}

// cutLocked writes the open block, and rolls to a new file when this one
// has reached the target size.
func (w *Writer) cutLocked() error {
	for _, e := range w.ends {
		w.raw = binary.LittleEndian.AppendUint32(w.raw, e)
	}
	w.buf = encodeBlock(w.buf[:0], w.codec, w.raw, len(w.ends))
	if _, err := w.f.Write(w.buf); err != nil {
		return w.fail(fmt.Errorf("write segment %d at %d: %w", w.sf.id, w.off, err))
	}
	w.off += int64(len(w.buf))
	w.sf.size.Store(w.off)
	w.ends = w.ends[:0]
	w.raw = w.raw[:0]
	// Do not keep a huge blob's memory for the rest of the writer's life.
	if cap(w.raw) > 4*w.blockSize+maxPooled {
		w.raw, w.buf = nil, nil
	}
	if w.off >= w.target {
		return w.closeFileLocked()
	}
	return nil
}

// closeFileLocked fsyncs and closes the file being written. A file is
// synced before its successor is created, so after a crash only the last
// file can be torn.
func (w *Writer) closeFileLocked() error {
	f := w.f
	w.f = nil
	if err := f.Sync(); err != nil {
		f.Close()
		return w.fail(fmt.Errorf("sync segment %d: %w", w.sf.id, err))
	}
	if err := f.Close(); err != nil {
		return w.fail(fmt.Errorf("close segment %d: %w", w.sf.id, err))
	}
	return nil
}

// endLocked closes what is open and gives the segments back to the store:
// readable, removable, and no longer the writer's.
func (w *Writer) endLocked() {
	w.done = true
	if w.f != nil {
		w.f.Close()
		w.f = nil
	}
	w.raw, w.ends, w.buf = nil, nil, nil
	s := w.s
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range w.segs {
		if sf := s.segs[id]; sf != nil {
			sf.busy = false
		}
	}
	if s.writer == w {
		s.writer = nil
	}
}
