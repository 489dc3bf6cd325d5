package wal

import (
	"errors"
	"fmt"
	"io"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// readChunk is how much a segmentReader reads at a time; a larger record is
// read whole.
const readChunk = 1 << 20

// errNoHeader means a file is shorter than a header or its header is all
// zeros: it was created but its header never reached the disk.
var errNoHeader = errors.New("file header missing")

// segmentReader reads the records of one file in order and checks each:
// its header, CRC and LSN (one after the previous record's). Not safe for
// concurrent use.
type segmentReader struct {
	f      vfs.File
	path   string
	size   int64
	off    int64 // offset of the next record; after io.EOF, the clean end
	expect LSN   // LSN the next record must carry
	ended  bool
	// stale: the clean end is followed by an earlier life's bytes (a
	// recycled file, spare.go), not by zeros.
	stale bool

	// holes are damaged spans known to hold only covered records
	// (Options.Covered), in file order: reading steps over each.
	holes []hole

	buf    []byte // file bytes [bufOff, bufOff+len(buf))
	bufOff int64
}

// hole is damage Open stepped over because every record it held is
// covered: a reader at off goes on at end, where the record with LSN next
// starts.
type hole struct {
	off, end int64
	next     LSN
}

// openSegment opens the file at path, whose name says its first LSN is
// first, and checks its header. It returns errNoHeader for a file whose
// header was never written and a *CorruptError for a bad one.
func openSegment(fs vfs.FS, path string, first LSN) (*segmentReader, error) {
	f, err := fs.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	r := &segmentReader{f: f, path: path, size: st.Size()}
	hdr, err := r.load(0, fileHeaderSize)
	if err != nil {
		f.Close()
		return nil, err
	}
	if len(hdr) < fileHeaderSize || allZero(hdr) {
		f.Close()
		return nil, errNoHeader
	}
	got, reason := decodeFileHeader(hdr)
	if reason == "" && got != first {
		reason = fmt.Sprintf("file header says first LSN %d, file name says %d", got, first)
	}
	if reason != "" {
		f.Close()
		return nil, &CorruptError{File: path, Offset: 0, Reason: reason}
	}
	r.off, r.expect = fileHeaderSize, first
	return r, nil
}

// openRecords opens the file at path for its records only, as if its
// header named first: a file whose header is damaged.
func openRecords(fs vfs.FS, path string, first LSN) (*segmentReader, error) {
	f, err := fs.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	return &segmentReader{f: f, path: path, size: st.Size(), off: fileHeaderSize, expect: first}, nil
}

func (r *segmentReader) close() error { return r.f.Close() }

// next returns the next record, skip records included. payload is valid
// until the next call. At the clean end of the file it returns io.EOF;
// damage is a *CorruptError at the offset of the first record not
// accepted, and the reader stays there (jump moves it on).
func (r *segmentReader) next() (recordHeader, []byte, error) {
	if len(r.holes) > 0 && r.off == r.holes[0].off {
		r.jump(r.holes[0].end, r.holes[0].next)
		r.holes = r.holes[1:]
	}
	if r.ended || r.off >= r.size {
		r.ended = true
		return recordHeader{}, nil, io.EOF
	}
	b, err := r.load(r.off, recordHeaderSize)
	if err != nil {
		return recordHeader{}, nil, err
	}
	h, err := decodeRecordHeader(b)
	if errors.Is(err, errZeroHeader) {
		return recordHeader{}, nil, r.cleanEnd()
	}
	if err != nil {
		return h, nil, r.corrupt(err.Error())
	}
	if left := r.size - r.off - recordHeaderSize; int64(h.length) > left {
		return h, nil, r.corrupt(fmt.Sprintf("%s %d: only %d bytes left in the file", errBadLength, h.length, max(left, 0)))
	}
	b, err = r.load(r.off, encodedSize(int(h.length)))
	if err != nil {
		return h, nil, err
	}
	h, payload, n, err := decodeRecord(b)
	if err != nil {
		return h, nil, r.corrupt(err.Error())
	}
	if h.lsn != r.expect {
		return h, nil, r.corrupt(fmt.Sprintf("record LSN %d, expected %d", h.lsn, r.expect))
	}
	next, err := recordNext(h, payload)
	if err != nil {
		return h, nil, r.corrupt(err.Error())
	}
	r.off += int64(n)
	r.expect = next
	return h, payload, nil
}

// jump moves the reader past damage: it goes on at off, where the record
// with LSN expect starts.
func (r *segmentReader) jump(off int64, expect LSN) {
	r.off, r.expect, r.ended = off, expect, false
}

// cleanEnd checks what follows a zero record header. Zeros, or bytes in
// which no record of this file's life appears (a recycled file's earlier
// records, spare.go), make it the clean end. A record from the expected LSN
// on is damage: a zeroed sector at a record boundary would otherwise end
// the file early and silently.
func (r *segmentReader) cleanEnd() error {
	for p := r.off; p < r.size; {
		b, err := r.load(p, readChunk)
		if err != nil {
			return err
		}
		for _, c := range b {
			if c != 0 {
				return r.staleEnd()
			}
		}
		p += int64(len(b))
	}
	r.ended = true
	return io.EOF
}

// staleEnd is cleanEnd once it met a non-zero byte.
func (r *segmentReader) staleEnd() error {
	rest, err := readFrom(r.f, r.path, r.off)
	if err != nil {
		return err
	}
	if ir := findIntactRecords(rest, r.expect); ir.count > 0 {
		return r.corrupt(fmt.Sprintf("zero record header followed by %d records from LSN %d", ir.count, ir.first))
	}
	r.ended, r.stale = true, true
	return io.EOF
}

func (r *segmentReader) corrupt(reason string) error {
	return &CorruptError{File: r.path, Offset: r.off, Reason: reason}
}

// load returns the file's bytes [off, off+n), fewer at the end of the file.
// The result is valid until the next call.
func (r *segmentReader) load(off int64, n int) ([]byte, error) {
	want := min(int64(n), r.size-off)
	if want <= 0 {
		return nil, nil
	}
	if off >= r.bufOff && off+want <= r.bufOff+int64(len(r.buf)) {
		s := off - r.bufOff
		return r.buf[s : s+want], nil
	}
	readLen := max(want, min(readChunk, r.size-off))
	if int64(cap(r.buf)) < readLen {
		r.buf = make([]byte, readLen)
	}
	r.buf = r.buf[:readLen]
	got, err := r.f.ReadAt(r.buf, off)
	if int64(got) < readLen {
		r.buf = r.buf[:0]
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("read %s at offset %d: %w", r.path, off, err)
	}
	r.bufOff = off
	return r.buf[:want], nil
}
