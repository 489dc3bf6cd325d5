package segment

import (
	"cmp"
	"container/list"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/brokerd/brokerd/internal/fsutil"
)

// Store is a directory of segment files. Read, ReadMany, Scan, List,
// CacheStats, Remove and Close are safe for concurrent use, also with the
// one Writer.
type Store struct {
	dir   string
	fs    vfs.FS
	opts  Options
	log   *slog.Logger
	cache *blockCache // nil when Options.CacheBytes < 0

	mu     sync.Mutex
	closed atomic.Bool // set under mu; read without it on the cache-hit path
	segs   map[ID]*segFile
	nextID ID
	writer *Writer // the active writer, or nil
	// idle holds the segFiles whose read handle is open and unused,
	// least recently used first; open counts every read handle open.
	// Past Options.MaxOpenFiles, acquire closes idle handles.
	idle list.List
	open int
}

// segFile is one segment file. Its fields other than size are guarded by
// Store.mu.
type segFile struct {
	id   ID
	path string
	size atomic.Int64 // bytes on disk: grows while a Writer writes it
	// valid is the length of the intact prefix as Open found it: all of a
	// file but the last, which it checked block by block; -1 for a file
	// written since Open. Informational: reads go up to size and rely on
	// the block CRCs, so intact blocks after damage stay readable.
	valid int64

	busy    bool          // a Writer is writing it, or wrote it and has not finished
	refs    int           // readers using f
	removed bool          // Remove or Close took it away; close f at refs 0
	f       vfs.File      // read handle, opened on first use
	idle    *list.Element // in Store.idle while f is open and refs is 0
}

// SegInfo describes one segment file.
type SegInfo struct {
	ID   ID
	Size int64 // bytes on disk
	// Valid is the length of the file's intact prefix as far as Open
	// checked it. Open checks the last file block by block (a crash can
	// tear it), so for that file Valid may be below Size; for the others,
	// and for files written since Open, it is Size.
	Valid int64
}

// Open opens the segment directory dir, creating it if missing. It checks
// every file name (a name that is not a segment file fails with
// ErrForeignFile) and every file header (magic, version, segment ID; a bad
// one is a *CorruptError), and reads the last file through to find its
// intact length: a crash while a Writer wrote it can tear its tail, which is
// logged and reported in SegInfo.Valid, never repaired: new blocks always
// go to new files, and an unfinished file is the caller's to remove.
func Open(dir string, opts Options) (*Store, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Store{
		dir:  dir,
		fs:   opts.FS,
		opts: opts,
		log:  opts.Logger,
		segs: make(map[ID]*segFile),
	}
	if opts.CacheBytes > 0 {
		s.cache = newBlockCache(opts.CacheBytes)
	}
	if err := s.mkdir(); err != nil {
		return nil, err
	}
	names, err := s.fs.List(dir)
	if err != nil {
		return nil, fmt.Errorf("list segment directory %s: %w", dir, err)
	}
	var ids []ID
	for _, name := range names {
		id, ok := parseFileName(name)
		if !ok {
			return nil, fmt.Errorf("%w: %s", ErrForeignFile, s.fs.PathJoin(dir, name))
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for i, id := range ids {
		sf, err := s.openFile(id, i == len(ids)-1)
		if err != nil {
			return nil, err
		}
		s.segs[id] = sf
	}
	s.nextID = 1
	if len(ids) > 0 {
		last := ids[len(ids)-1]
		if last == ^ID(0) {
			return nil, fmt.Errorf("segment: segment IDs exhausted (%d on disk)", last)
		}
		s.nextID = last + 1
	}
	return s, nil
}

// mkdir creates the directory when it is missing, durably.
func (s *Store) mkdir() error {
	if _, err := s.fs.Stat(s.dir); err == nil {
		return nil
	}
	if err := s.fs.MkdirAll(s.dir, 0o755); err != nil {
		return fmt.Errorf("create segment directory %s: %w", s.dir, err)
	}
	if err := fsutil.SyncDir(s.fs, s.fs.PathDir(s.dir)); err != nil {
		return fmt.Errorf("create segment directory %s: %w", s.dir, err)
	}
	return nil
}

// openFile checks the file of segment id: its header, and for the last
// file its blocks, to find the intact prefix.
func (s *Store) openFile(id ID, last bool) (*segFile, error) {
	path := s.fs.PathJoin(s.dir, fileName(id))
	f, err := s.fs.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open segment %d: %w", id, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat segment %d: %w", id, err)
	}
	sf := &segFile{id: id, path: path}
	size := st.Size()
	sf.size.Store(size)
	sf.valid = size

	var hdr [fileHeaderSize]byte
	n, err := f.ReadAt(hdr[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read segment %d header: %w", id, err)
	}
	if last && (n < fileHeaderSize || hdr == [fileHeaderSize]byte{}) {
		// Created, and the directory synced, but the header never
		// reached the disk: a crash right after the file was started.
		sf.valid = 0
		s.log.Warn("segment: last segment file has no header: torn by a crash before its writer finished",
			"file", path, "size", size)
		return sf, nil
	}
	if off, reason := checkFileHeader(hdr[:n], id); reason != "" {
		if n == fileHeaderSize && binary.LittleEndian.Uint32(hdr[12:16]) == crc32.Checksum(hdr[:12], crcTable) {
			// As written: a newer format, or a file renamed. Not ours
			// to read.
			return nil, &CorruptError{File: path, Offset: off, Reason: reason}
		}
		// Damage: the header holds nothing a read needs (blocks carry
		// their own lengths and CRCs), so the blocks stay readable and
		// only damaged ones are lost.
		s.log.Error("segment: damaged file header; its blocks are read on their own checksums",
			"file", path, "offset", off, "reason", reason)
	}
	if !last {
		return sf, nil
	}
	r := newBlockReader(f, path, fileHeaderSize, size)
	for {
		_, _, err := r.next(true)
		if err == io.EOF {
			return sf, nil
		}
		if err != nil {
			var ce *CorruptError
			if !errors.As(err, &ce) {
				return nil, fmt.Errorf("read segment %d: %w", id, err)
			}
			sf.valid = ce.Offset
			s.log.Warn("segment: last segment file has a torn tail: a crash before its writer finished, or damage",
				"file", path, "valid", sf.valid, "size", size, "dropped", size-sf.valid, "reason", ce.Reason)
			return sf, nil
		}
	}
}

// List returns every segment file, sorted by ID, including those the
// current Writer is writing.
func (s *Store) List() []SegInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]SegInfo, 0, len(s.segs))
	for _, sf := range s.segs {
		size := sf.size.Load()
		valid := sf.valid
		if valid < 0 {
			valid = size
		}
		out = append(out, SegInfo{ID: sf.id, Size: size, Valid: valid})
	}
	slices.SortFunc(out, func(a, b SegInfo) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// CacheStats returns the block cache's counters (zero without a cache).
func (s *Store) CacheStats() CacheStats {
	if s.cache == nil {
		return CacheStats{}
	}
	return s.cache.stats()
}

// Remove deletes segment id's file, drops its cached blocks and syncs the
// directory. It fails with ErrBusy while a Writer has the segment (until
// that Writer's Finish or Abort) and with ErrNotFound for an unknown ID.
// Reads already under way finish; later ones get ErrNotFound.
func (s *Store) Remove(id ID) error {
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		return ErrClosed
	}
	sf := s.segs[id]
	switch {
	case sf == nil:
		s.mu.Unlock()
		return fmt.Errorf("remove segment %d: %w", id, ErrNotFound)
	case sf.busy:
		s.mu.Unlock()
		return fmt.Errorf("remove segment %d: %w", id, ErrBusy)
	}
	delete(s.segs, id)
	sf.removed = true
	var closeErr error
	if sf.refs == 0 && sf.f != nil {
		closeErr = s.closeHandleLocked(sf)
	}
	s.mu.Unlock()
	if s.cache != nil {
		s.cache.drop(id)
	}
	if err := s.fs.Remove(sf.path); err != nil {
		// Still on disk: keep it known, so that List shows it and a
		// retry can remove it.
		s.mu.Lock()
		if !s.closed.Load() {
			sf.removed = false
			s.segs[id] = sf
		}
		s.mu.Unlock()
		return fmt.Errorf("remove segment %d: %w", id, err)
	}
	if err := fsutil.SyncDir(s.fs, s.dir); err != nil {
		return fmt.Errorf("remove segment %d: %w", id, err)
	}
	if closeErr != nil {
		return fmt.Errorf("remove segment %d: close: %w", id, closeErr)
	}
	return nil
}

// Close closes the store and its files. An active Writer is aborted: its
// later calls return ErrClosed. Reads under way finish. Close is
// idempotent; later calls return nil.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		return nil
	}
	s.closed.Store(true)
	w := s.writer
	var errs []error
	for _, sf := range s.segs {
		sf.removed = true
		if sf.refs == 0 && sf.f != nil {
			errs = append(errs, s.closeHandleLocked(sf))
		}
	}
	s.mu.Unlock()
	if w != nil {
		w.abort(ErrClosed)
	}
	return errors.Join(errs...)
}

// acquire returns segment id's file with a read handle open, for reading.
// The caller must release it.
func (s *Store) acquire(id ID) (*segFile, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return nil, ErrClosed
	}
	sf := s.segs[id]
	if sf == nil {
		return nil, fmt.Errorf("segment %d: %w", id, ErrNotFound)
	}
	if sf.busy {
		return nil, fmt.Errorf("segment %d: %w", id, ErrBusy)
	}
	if sf.f == nil {
		// Make room first: the descriptors are the process's, shared
		// with the index and the clients' sockets (Options.MaxOpenFiles).
		for s.open >= s.opts.MaxOpenFiles && s.idle.Len() > 0 {
			s.closeHandleLocked(s.idle.Front().Value.(*segFile))
		}
		f, err := s.fs.Open(sf.path)
		if err != nil {
			return nil, fmt.Errorf("open segment %d: %w", id, err)
		}
		sf.f = f
		s.open++
	}
	if sf.idle != nil {
		s.idle.Remove(sf.idle)
		sf.idle = nil
	}
	sf.refs++
	return sf, nil
}

// release ends a use of sf begun by acquire, closing its handle if it was
// removed meanwhile; otherwise the handle stays open for the next read,
// idle.
func (s *Store) release(sf *segFile) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sf.refs--
	switch {
	case sf.refs > 0 || sf.f == nil:
	case sf.removed:
		s.closeHandleLocked(sf)
	default:
		sf.idle = s.idle.PushBack(sf)
	}
}

// closeHandleLocked closes sf's read handle, which no reader uses.
func (s *Store) closeHandleLocked(sf *segFile) error {
	if sf.idle != nil {
		s.idle.Remove(sf.idle)
		sf.idle = nil
	}
	err := sf.f.Close()
	sf.f = nil
	s.open--
	return err
}
