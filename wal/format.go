package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// on-disk format; never renumber
const (
	fileMagic      = "bdwl"
	formatVersion  = 1
	fileHeaderSize = 20 // magic 4, version 4, first LSN 8, CRC 4

	recordHeaderSize = 17 // CRC 4, length 4, class 1, LSN 8

	// MaxRecordSize is the largest payload Append accepts and the largest
	// length a reader believes.
	MaxRecordSize = 1 << 30
)

// crcTable is the one CRC-32C (Castagnoli) table of the package.
var crcTable = crc32.MakeTable(crc32.Castagnoli)

// Why bytes are not a record. decodeRecord wraps one of these; readers turn
// them into a *CorruptError with the file and offset.
var (
	// errZeroHeader is a record header of all zeros: the clean end of a file.
	errZeroHeader = errors.New("zero record header")
	errShort      = errors.New("truncated record")
	errBadLength  = errors.New("bad record length")
	errBadClass   = errors.New("bad record class")
	errBadLSN     = errors.New("bad record LSN")
	errBadCRC     = errors.New("bad record CRC")
)

// appendFileHeader appends the header of a file whose first record is first.
func appendFileHeader(dst []byte, first LSN) []byte {
	var h [fileHeaderSize]byte
	copy(h[0:4], fileMagic)
	binary.LittleEndian.PutUint32(h[4:8], formatVersion)
	binary.LittleEndian.PutUint64(h[8:16], uint64(first))
	binary.LittleEndian.PutUint32(h[16:20], crc32.Checksum(h[:16], crcTable))
	return append(dst, h[:]...)
}

// decodeFileHeader returns the first LSN a file header names, or why b
// (at least fileHeaderSize bytes) is not a header.
func decodeFileHeader(b []byte) (LSN, string) {
	if len(b) < fileHeaderSize {
		return 0, fmt.Sprintf("file header is %d bytes, want %d", len(b), fileHeaderSize)
	}
	if string(b[0:4]) != fileMagic {
		return 0, fmt.Sprintf("bad magic %x, want %x", b[0:4], fileMagic)
	}
	if v := binary.LittleEndian.Uint32(b[4:8]); v != formatVersion {
		return 0, fmt.Sprintf("unsupported format version %d (this build reads %d)", v, formatVersion)
	}
	if got, want := binary.LittleEndian.Uint32(b[16:20]), crc32.Checksum(b[:16], crcTable); got != want {
		return 0, fmt.Sprintf("bad file header CRC %08x, want %08x", got, want)
	}
	first := LSN(binary.LittleEndian.Uint64(b[8:16]))
	if first == 0 {
		return 0, "file header names first LSN 0"
	}
	return first, ""
}

// recordHeader is a decoded record header.
type recordHeader struct {
	crc    uint32
	length uint32
	class  Class
	lsn    LSN
}

// encodedSize returns the bytes a record with a payload of n bytes takes.
func encodedSize(n int) int { return recordHeaderSize + n }

// appendRecord appends the encoding of one record to dst.
func appendRecord(dst []byte, lsn LSN, class Class, payload []byte) []byte {
	start := len(dst)
	n := encodedSize(len(payload))
	if cap(dst)-start < n {
		grown := make([]byte, start, max(2*cap(dst), start+n))
		copy(grown, dst)
		dst = grown
	}
	dst = dst[:start+n]
	r := dst[start:]
	binary.LittleEndian.PutUint32(r[4:8], uint32(len(payload)))
	r[8] = byte(class)
	binary.LittleEndian.PutUint64(r[9:17], uint64(lsn))
	copy(r[recordHeaderSize:], payload)
	binary.LittleEndian.PutUint32(r[0:4], crc32.Checksum(r[4:], crcTable))
	return dst
}

// decodeRecordHeader decodes the header at the start of b and checks what it
// can without the payload. It returns an error wrapping errZeroHeader for a
// header of zeros (or a short b of zeros), errShort for a short b, and
// errBadClass, errBadLSN or errBadLength for a header no writer produces.
func decodeRecordHeader(b []byte) (recordHeader, error) {
	if len(b) < recordHeaderSize {
		if allZero(b) {
			return recordHeader{}, errZeroHeader
		}
		return recordHeader{}, fmt.Errorf("%w: %d header bytes, want %d", errShort, len(b), recordHeaderSize)
	}
	h := recordHeader{
		crc:    binary.LittleEndian.Uint32(b[0:4]),
		length: binary.LittleEndian.Uint32(b[4:8]),
		class:  Class(b[8]),
		lsn:    LSN(binary.LittleEndian.Uint64(b[9:17])),
	}
	if h == (recordHeader{}) {
		return h, errZeroHeader
	}
	if !h.class.onDisk() {
		return h, fmt.Errorf("%w %d", errBadClass, uint8(h.class))
	}
	if h.lsn == 0 {
		return h, fmt.Errorf("%w 0", errBadLSN)
	}
	if h.length > MaxRecordSize {
		return h, fmt.Errorf("%w %d (max %d)", errBadLength, h.length, MaxRecordSize)
	}
	return h, nil
}

// decodeRecord decodes the record at the start of b. The payload aliases b.
// n is the record's encoded size. Errors wrap one of the err* sentinels of
// this file.
func decodeRecord(b []byte) (h recordHeader, payload []byte, n int, err error) {
	h, err = decodeRecordHeader(b)
	if err != nil {
		return h, nil, 0, err
	}
	n = encodedSize(int(h.length))
	if len(b) < n {
		return h, nil, 0, fmt.Errorf("%w: length %d, %d bytes present", errShort, h.length, len(b)-recordHeaderSize)
	}
	if got := crc32.Checksum(b[4:n], crcTable); got != h.crc {
		return h, nil, 0, fmt.Errorf("%w %08x, computed %08x", errBadCRC, h.crc, got)
	}
	return h, b[recordHeaderSize:n], n, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// skipNextSize is the payload of a skip record that names the LSN after
// it: a uint64. A skip record with a shorter payload stands for its own
// LSN only.
const skipNextSize = 8

// skipNext returns the LSN of the record that follows a skip record, or
// why the record is not a valid one.
func skipNext(h recordHeader, payload []byte) (LSN, error) {
	if len(payload) < skipNextSize {
		return h.lsn + 1, nil
	}
	next := LSN(binary.LittleEndian.Uint64(payload))
	if next < h.lsn {
		return 0, fmt.Errorf("%w: skip record %d names next LSN %d", errBadLSN, h.lsn, next)
	}
	return next, nil
}

// recordNext returns the LSN of the record after the one decoded.
func recordNext(h recordHeader, payload []byte) (LSN, error) {
	if h.class == classSkip {
		return skipNext(h, payload)
	}
	return h.lsn + 1, nil
}

// appendSkipRecord appends a skip record of exactly size bytes with LSN
// lsn, followed by the record with LSN next: it stands for the LSNs lsn …
// next-1 (none when next == lsn: padding). It reports false when size
// cannot hold such a record: below a record header, or below a header
// and skipNextSize unless next is lsn+1.
func appendSkipRecord(dst []byte, lsn, next LSN, size int) ([]byte, bool) {
	if size < recordHeaderSize || size-recordHeaderSize < skipNextSize && next != lsn+1 || next < lsn {
		return dst, false
	}
	payload := make([]byte, size-recordHeaderSize)
	if len(payload) >= skipNextSize {
		binary.LittleEndian.PutUint64(payload, uint64(next))
	}
	return appendRecord(dst, lsn, classSkip, payload), true
}
