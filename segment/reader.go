package segment

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// errNoBlob is the reason of a *CorruptError for a Loc whose block is
// intact but holds no blob at that offset with that length: the index and
// the file disagree.
var errNoBlob = errors.New("no such blob in block")

// Read returns the blob at loc appended to dst. The block is read,
// CRC-checked and decompressed once and then served from the block cache
// (without a cache, every call reads it). Damage to the block, or a loc the
// block does not hold, is a *CorruptError naming the file and the block's
// offset. Safe for concurrent use, also with a Writer; loc must come from a
// Writer whose Finish returned nil (or from Scan).
func (s *Store) Read(loc Loc, dst []byte) ([]byte, error) {
	if s.closed.Load() {
		return dst, ErrClosed
	}
	if s.cache != nil {
		blk, err := s.cachedBlock(loc.Seg, loc.Block)
		if err != nil {
			return dst, err
		}
		b, err := s.blob(blk, loc)
		if err != nil {
			return dst, err
		}
		return append(dst, b...), nil
	}
	sc := getScratch()
	defer putScratch(sc)
	blk, err := s.uncachedBlock(loc.Seg, loc.Block, sc)
	if err != nil {
		return dst, err
	}
	b, err := s.blob(blk, loc)
	if err != nil {
		return dst, err
	}
	return append(dst, b...), nil
}

// ReadMany reads the blobs at locs, visiting each block once: it calls fn
// with the index into locs and the blob, in (Seg, Block, Off) order, not in
// the order of locs. The blob is valid only during fn. The first error,
// from a read or from fn, stops it and is returned.
func (s *Store) ReadMany(locs []Loc, fn func(i int, blob []byte) error) error {
	return s.ReadManyDamaged(locs, fn, nil)
}

// ReadManyDamaged is ReadMany that goes on past damage: for each loc whose
// block fails its checks, or which its block does not hold, it calls
// damaged (when not nil) with the loc's index and the *CorruptError, in
// place of fn, and reads on; damage never stops it. Other errors (I/O,
// ErrClosed, ErrNotFound, an error from fn or damaged) stop it and are
// returned. With a nil damaged it is ReadMany.
func (s *Store) ReadManyDamaged(locs []Loc, fn func(i int, blob []byte) error, damaged func(i int, ce *CorruptError) error) error {
	if s.closed.Load() {
		return ErrClosed
	}
	order := make([]int, len(locs))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		la, lb := &locs[a], &locs[b]
		return cmp.Or(cmp.Compare(la.Seg, lb.Seg), cmp.Compare(la.Block, lb.Block), cmp.Compare(la.Off, lb.Off))
	})
	var sc *scratch
	if s.cache == nil {
		sc = getScratch()
		defer putScratch(sc)
	}
	// bad reports damage at loc i to damaged, or stops with it.
	bad := func(i int, err error) error {
		var ce *CorruptError
		if damaged == nil || !errors.As(err, &ce) {
			return err
		}
		return damaged(i, ce)
	}
	for i := 0; i < len(order); {
		first := locs[order[i]]
		var blk block
		var err error
		if s.cache != nil {
			blk, err = s.cachedBlock(first.Seg, first.Block)
		} else {
			blk, err = s.uncachedBlock(first.Seg, first.Block, sc)
		}
		for ; i < len(order); i++ {
			loc := locs[order[i]]
			if loc.Seg != first.Seg || loc.Block != first.Block {
				break
			}
			if err != nil {
				if err := bad(order[i], err); err != nil {
					return err
				}
				continue
			}
			b, berr := s.blob(blk, loc)
			if berr != nil {
				if err := bad(order[i], berr); err != nil {
					return err
				}
				continue
			}
			if err := fn(order[i], b); err != nil {
				return err
			}
		}
	}
	return nil
}

// Scan calls fn for every blob of segment id in file order, with the Loc
// that Add returned for it. It reads the file sequentially and bypasses the
// block cache (compaction reads each block once). The blob is valid only
// during fn. Damage stops Scan with a *CorruptError; an error from fn stops
// it and is returned as is.
func (s *Store) Scan(id ID, fn func(loc Loc, blob []byte) error) error {
	sf, err := s.acquire(id)
	if err != nil {
		return err
	}
	defer s.release(sf)
	if size := sf.size.Load(); size < fileHeaderSize {
		return corrupt(sf.path, fileHeaderSize, fmt.Errorf("%w: the file is %d bytes, shorter than its header", errShortBlock, size))
	}
	r := newBlockReader(sf.f, sf.path, fileHeaderSize, sf.size.Load())
	for {
		off, blk, err := r.next(false)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		for i := range blk.n {
			start, end := blk.start(i), blk.end(i)
			loc := Loc{Seg: id, Block: uint32(off), Off: start, Len: end - start}
			if err := fn(loc, blk.raw[start:end]); err != nil {
				return err
			}
		}
	}
}

// blob returns loc's bytes in blk, its block.
func (s *Store) blob(blk block, loc Loc) ([]byte, error) {
	b, ok := blk.blob(loc.Off, loc.Len)
	if !ok {
		path := s.fs.PathJoin(s.dir, fileName(loc.Seg))
		return nil, corrupt(path, int64(loc.Block), fmt.Errorf("%w: offset %d length %d (block has %d blobs in %d bytes)",
			errNoBlob, loc.Off, loc.Len, blk.n, blk.dataLen()))
	}
	return b, nil
}

// cachedBlock returns the block at off of segment id through the cache.
// The block is the cache's: it is never modified, and stays valid after
// eviction.
func (s *Store) cachedBlock(id ID, off uint32) (block, error) {
	return s.cache.get(blockKey{id, off}, func() (block, error) {
		sf, err := s.acquire(id)
		if err != nil {
			return block{}, err
		}
		defer s.release(sf)
		sc := getScratch()
		defer putScratch(sc)
		// Decompress into memory of the block's own (nil scratch); a
		// stored-raw payload aliases the pooled read buffer and is copied.
		blk, h, err := readBlock(sf, off, &sc.rbuf, nil)
		if err == nil && h.codec == CodecNone {
			blk.raw = slices.Clone(blk.raw)
		}
		return blk, err
	})
}

// uncachedBlock reads the block at off of segment id into sc; the block
// is valid until sc is used again.
func (s *Store) uncachedBlock(id ID, off uint32, sc *scratch) (block, error) {
	sf, err := s.acquire(id)
	if err != nil {
		return block{}, err
	}
	defer s.release(sf)
	blk, h, err := readBlock(sf, off, &sc.rbuf, sc.raw)
	if err == nil && h.codec != CodecNone {
		sc.raw = blk.raw[:0]
	}
	return blk, err
}

// readBlock reads, checks and decodes the block at off of sf. The bytes on
// disk go to *rbuf (grown as needed); the payload is decompressed into raw
// when it has the capacity, else into a new slice of its own. A stored-raw
// payload (h.codec CodecNone) aliases *rbuf.
func readBlock(sf *segFile, off uint32, rbuf *[]byte, raw []byte) (block, blockHeader, error) {
	size := sf.size.Load()
	at := int64(off)
	if at < fileHeaderSize || at+blockHeaderSize > size {
		return block{}, blockHeader{}, corrupt(sf.path, at, fmt.Errorf("%w: no block header at offset %d of a %d-byte file", errShortBlock, at, size))
	}
	buf := growLen((*rbuf)[:0], blockHeaderSize)
	*rbuf = buf
	if _, err := sf.f.ReadAt(buf, at); err != nil {
		return block{}, blockHeader{}, readError(sf, at, err)
	}
	h, err := parseBlockHeader(buf)
	if err != nil {
		return block{}, h, corrupt(sf.path, at, err)
	}
	if at+h.size() > size {
		return block{}, h, corrupt(sf.path, at, fmt.Errorf("%w: %d-byte block runs past the end of a %d-byte file (the file was cut short, or the length is bad)", errShortBlock, h.size(), size))
	}
	buf = growLen(buf, int(h.stored))
	*rbuf = buf
	if _, err := sf.f.ReadAt(buf[blockHeaderSize:], at+blockHeaderSize); err != nil {
		return block{}, h, readError(sf, at, err)
	}
	blk, h, err := decodeBlock(buf, raw, maxBlockLen)
	if err != nil {
		return block{}, h, corrupt(sf.path, at, err)
	}
	return blk, h, nil
}

// readError wraps an error reading the block at off: a short read means
// the file is shorter than it was, which is damage.
func readError(sf *segFile, off int64, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return corrupt(sf.path, off, fmt.Errorf("%w: file ends inside the block", errShortBlock))
	}
	return fmt.Errorf("read segment %d at %d: %w", sf.id, off, err)
}

// scratch holds the buffers of one block read: rbuf for the bytes on disk,
// raw for the decompressed payload.
type scratch struct {
	rbuf []byte
	raw  []byte
}

// maxPooled bounds the buffers kept for reuse, so one huge blob does not
// pin its block's memory.
const maxPooled = 1 << 20

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

func getScratch() *scratch { return scratchPool.Get().(*scratch) }

func putScratch(sc *scratch) {
	if cap(sc.rbuf) > maxPooled {
		sc.rbuf = nil
	}
	if cap(sc.raw) > maxPooled {
		sc.raw = nil
	}
	scratchPool.Put(sc)
}

// blockReader reads a file's blocks in order through a window of
// readAhead bytes, so scanning a file takes few large reads.
type blockReader struct {
	f         vfs.File
	path      string
	off, end  int64  // next block; end of the file
	win       []byte // file bytes from winOff
	winOff    int64
	raw       []byte // decompression scratch
	readAhead int
}

func newBlockReader(f vfs.File, path string, off, end int64) *blockReader {
	return &blockReader{f: f, path: path, off: off, end: end, readAhead: 1 << 20}
}

// next returns the next block and its offset, or io.EOF after the last
// one. With checkOnly the block's CRC and header are checked but the
// payload is not decompressed (the block returned is empty). The block is
// valid until the next call.
func (r *blockReader) next(checkOnly bool) (int64, block, error) {
	off := r.off
	if off >= r.end {
		return off, block{}, io.EOF
	}
	if r.end-off < blockHeaderSize {
		return off, block{}, corrupt(r.path, off, fmt.Errorf("%w: %d bytes after the last block, want a %d-byte header", errShortBlock, r.end-off, blockHeaderSize))
	}
	hb, err := r.window(off, blockHeaderSize)
	if err != nil {
		return off, block{}, err
	}
	h, err := parseBlockHeader(hb)
	if err != nil {
		return off, block{}, corrupt(r.path, off, err)
	}
	if off+h.size() > r.end {
		return off, block{}, corrupt(r.path, off, fmt.Errorf("%w: %d-byte block runs past the end of a %d-byte file (the file was cut short, or the length is bad)", errShortBlock, h.size(), r.end))
	}
	b, err := r.window(off, int(h.size()))
	if err != nil {
		return off, block{}, err
	}
	var blk block
	if checkOnly {
		_, err = checkBlock(b)
	} else {
		blk, _, err = decodeBlock(b, r.raw, maxBlockLen)
		if err == nil && h.codec != CodecNone {
			r.raw = blk.raw[:0]
		}
	}
	if err != nil {
		return off, block{}, corrupt(r.path, off, err)
	}
	r.off = off + h.size()
	return off, blk, nil
}

// window returns the n file bytes at off, reading them (and up to
// readAhead more) if the window does not hold them.
func (r *blockReader) window(off int64, n int) ([]byte, error) {
	if off >= r.winOff && off+int64(n) <= r.winOff+int64(len(r.win)) {
		return r.win[off-r.winOff : off-r.winOff+int64(n)], nil
	}
	want := int64(max(n, r.readAhead))
	want = min(want, r.end-off)
	if int64(cap(r.win)) < want {
		r.win = make([]byte, want)
	}
	r.win = r.win[:want]
	r.winOff = off
	if _, err := r.f.ReadAt(r.win, off); err != nil {
		r.win = r.win[:0]
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, corrupt(r.path, off, fmt.Errorf("%w: file ends inside the block", errShortBlock))
		}
		return nil, fmt.Errorf("read %s at %d: %w", r.path, off, err)
	}
	return r.win[:n], nil
}
