package segment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// on-disk format; never renumber
const (
	fileMagic      = "bdsg"
	formatVersion  = 1
	fileHeaderSize = 16 // magic 4, version 4, segment ID 4, CRC 4

	blockHeaderSize = 17 // CRC 4, stored length 4, raw length 4, blob count 4, codec 1
	blobEndSize     = 4  // one entry of a block's blob table: uint32 end offset

	// maxBlockLen bounds a block's stored and raw payload lengths. A reader
	// believes no length above it.
	maxBlockLen = 1 << 30
)

// MaxBlobSize is the largest blob Add accepts. Its block (blob plus table)
// stays below maxBlockLen.
const MaxBlobSize = maxBlockLen - 1<<20

// crcTable is the one CRC-32C (Castagnoli) table of the package.
var crcTable = crc32.MakeTable(crc32.Castagnoli)

// Why bytes are not a block. decodeBlock wraps one of these; readers turn
// them into a *CorruptError with the file and the block's offset.
var (
	errShortBlock  = errors.New("truncated block")
	errBadLength   = errors.New("bad block length")
	errBadCRC      = errors.New("bad block CRC")
	errBadCodec    = errors.New("bad block codec")
	errBadCount    = errors.New("bad block blob count")
	errBadPayload  = errors.New("undecodable block payload")
	errBadBlobList = errors.New("bad block blob table")
)

// blockErrors lists every error kind decodeBlock returns (fuzzing checks it).
var blockErrors = []error{errShortBlock, errBadLength, errBadCRC, errBadCodec, errBadCount, errBadPayload, errBadBlobList}

// appendFileHeader appends the header of segment id's file.
func appendFileHeader(dst []byte, id ID) []byte {
	var h [fileHeaderSize]byte
	copy(h[0:4], fileMagic)
	binary.LittleEndian.PutUint32(h[4:8], formatVersion)
	binary.LittleEndian.PutUint32(h[8:12], uint32(id))
	binary.LittleEndian.PutUint32(h[12:16], crc32.Checksum(h[:12], crcTable))
	return append(dst, h[:]...)
}

// checkFileHeader says why b is not the header of segment id's file, with
// the offset of the offending field, or returns "" if it is.
func checkFileHeader(b []byte, id ID) (off int64, reason string) {
	if len(b) < fileHeaderSize {
		return int64(len(b)), fmt.Sprintf("file header is %d bytes, want %d", len(b), fileHeaderSize)
	}
	if string(b[0:4]) != fileMagic {
		return 0, fmt.Sprintf("bad magic %x, want %x", b[0:4], fileMagic)
	}
	if v := binary.LittleEndian.Uint32(b[4:8]); v != formatVersion {
		return 4, fmt.Sprintf("unsupported format version %d (this build reads %d)", v, formatVersion)
	}
	if got, want := binary.LittleEndian.Uint32(b[12:16]), crc32.Checksum(b[:12], crcTable); got != want {
		return 12, fmt.Sprintf("bad file header CRC %08x, want %08x", got, want)
	}
	if got := ID(binary.LittleEndian.Uint32(b[8:12])); got != id {
		return 8, fmt.Sprintf("file header names segment %d, file name says %d", got, id)
	}
	return 0, ""
}

// blockHeader is a decoded block header.
type blockHeader struct {
	crc    uint32
	stored uint32 // payload length on disk
	raw    uint32 // payload length after decompression: blob data + table
	count  uint32 // blobs in the block, at least 1
	codec  Codec
}

// parseBlockHeader decodes the fixed header at the start of b and checks
// the lengths a reader needs before it trusts them to read the payload.
// The rest is checked after the CRC (decodeBlock), so that a flipped bit in
// the codec or count reads as a bad CRC, the likelier cause.
func parseBlockHeader(b []byte) (blockHeader, error) {
	if len(b) < blockHeaderSize {
		return blockHeader{}, fmt.Errorf("%w: %d header bytes, want %d", errShortBlock, len(b), blockHeaderSize)
	}
	h := blockHeader{
		crc:    binary.LittleEndian.Uint32(b[0:4]),
		stored: binary.LittleEndian.Uint32(b[4:8]),
		raw:    binary.LittleEndian.Uint32(b[8:12]),
		count:  binary.LittleEndian.Uint32(b[12:16]),
		codec:  Codec(b[16]),
	}
	if h.stored > maxBlockLen || h.raw > maxBlockLen {
		return h, fmt.Errorf("%w: stored %d, raw %d, limit %d", errBadLength, h.stored, h.raw, maxBlockLen)
	}
	return h, nil
}

// size is the block's length on disk.
func (h blockHeader) size() int64 { return blockHeaderSize + int64(h.stored) }

// block is a decoded block: blob data followed by the table of blob ends.
// It aliases the buffers it was decoded into.
type block struct {
	raw []byte // the uncompressed payload
	n   int    // blobs
}

// dataLen is the length of the blob data (the offset of the table).
func (b block) dataLen() int { return len(b.raw) - b.n*blobEndSize }

// end returns the offset after blob i.
func (b block) end(i int) uint32 {
	t := b.dataLen() + i*blobEndSize
	return binary.LittleEndian.Uint32(b.raw[t : t+blobEndSize])
}

// start returns the offset of blob i.
func (b block) start(i int) uint32 {
	if i == 0 {
		return 0
	}
	return b.end(i - 1)
}

// blob returns the bytes of the blob at off with length n, checking that a
// blob starts there and has that length: a Loc the block does not hold is
// reported, never answered with neighbouring bytes.
func (b block) blob(off, n uint32) ([]byte, bool) {
	dl := uint32(b.dataLen())
	if off > dl || n > dl-off {
		return nil, false
	}
	if n == 0 {
		return b.raw[off:off], true
	}
	// The first blob ending after off is the only one that can start there.
	lo, hi := 0, b.n
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if b.end(m) <= off {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == b.n || b.start(lo) != off || b.end(lo) != off+n {
		return nil, false
	}
	return b.raw[off : off+n], true
}

// checkTable verifies the blob table: ends never decrease and the last one
// is the end of the data.
func (b block) checkTable() error {
	dl := b.dataLen()
	prev := uint32(0)
	for i := range b.n {
		e := b.end(i)
		if e < prev || int64(e) > int64(dl) {
			return fmt.Errorf("%w: blob %d ends at %d after %d (data is %d bytes)", errBadBlobList, i, e, prev, dl)
		}
		prev = e
	}
	if int(prev) != dl {
		return fmt.Errorf("%w: blobs end at %d, data is %d bytes", errBadBlobList, prev, dl)
	}
	return nil
}

// encodeBlock appends the block holding raw (blob data followed by the
// table of n blob ends) compressed with codec, or stored raw when codec
// saves less than an eighth: such data is random or already compressed, and
// decompressing it on every cache miss would buy nothing.
func encodeBlock(dst []byte, codec Codec, raw []byte, n int) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, blockHeaderSize)...)
	used := codec
	if codec != CodecNone {
		dst = compress(dst, codec, raw)
		if stored := len(dst) - start - blockHeaderSize; stored >= len(raw)-len(raw)/8 {
			used = CodecNone
			dst = dst[:start+blockHeaderSize]
		}
	}
	if used == CodecNone {
		dst = append(dst, raw...)
	}
	h := dst[start:]
	binary.LittleEndian.PutUint32(h[4:8], uint32(len(h)-blockHeaderSize))
	binary.LittleEndian.PutUint32(h[8:12], uint32(len(raw)))
	binary.LittleEndian.PutUint32(h[12:16], uint32(n))
	h[16] = byte(used)
	binary.LittleEndian.PutUint32(h[0:4], crc32.Checksum(h[4:], crcTable))
	return dst
}

// decodeBlock decodes the block at the start of b, which must hold all of
// it. The payload is decompressed into scratch when it is large enough (a
// stored-raw payload aliases b instead). Blocks claiming a raw length above
// maxRaw are refused before anything is allocated.
func decodeBlock(b []byte, scratch []byte, maxRaw int) (block, blockHeader, error) {
	h, err := parseBlockHeader(b)
	if err != nil {
		return block{}, h, err
	}
	if int64(len(b)) < h.size() {
		return block{}, h, fmt.Errorf("%w: %d of %d bytes", errShortBlock, len(b), h.size())
	}
	b = b[:h.size()]
	if got := crc32.Checksum(b[4:], crcTable); got != h.crc {
		return block{}, h, fmt.Errorf("%w: %08x, want %08x", errBadCRC, got, h.crc)
	}
	if h.count == 0 || uint64(h.count)*blobEndSize > uint64(h.raw) {
		return block{}, h, fmt.Errorf("%w: %d blobs in %d bytes", errBadCount, h.count, h.raw)
	}
	if int64(h.raw) > int64(maxRaw) {
		return block{}, h, fmt.Errorf("%w: raw length %d above %d", errBadLength, h.raw, maxRaw)
	}
	payload := b[blockHeaderSize:]
	var raw []byte
	switch h.codec {
	case CodecNone:
		if h.stored != h.raw {
			return block{}, h, fmt.Errorf("%w: stored %d, raw %d, uncompressed", errBadLength, h.stored, h.raw)
		}
		raw = payload
	case CodecS2, CodecZstd:
		raw, err = decompress(scratch, h.codec, payload, int(h.raw))
		if err != nil {
			return block{}, h, err
		}
	default:
		return block{}, h, fmt.Errorf("%w: %d", errBadCodec, h.codec)
	}
	blk := block{raw: raw, n: int(h.count)}
	if err := blk.checkTable(); err != nil {
		return block{}, h, err
	}
	return blk, h, nil
}

// checkBlock verifies a whole block's lengths and CRC without decompressing
// it (Open uses it to find the intact prefix of the last file).
func checkBlock(b []byte) (blockHeader, error) {
	h, err := parseBlockHeader(b)
	if err != nil {
		return h, err
	}
	if int64(len(b)) < h.size() {
		return h, fmt.Errorf("%w: %d of %d bytes", errShortBlock, len(b), h.size())
	}
	if got := crc32.Checksum(b[4:h.size()], crcTable); got != h.crc {
		return h, fmt.Errorf("%w: %08x, want %08x", errBadCRC, got, h.crc)
	}
	if !h.codec.valid() {
		return h, fmt.Errorf("%w: %d", errBadCodec, h.codec)
	}
	if h.count == 0 || uint64(h.count)*blobEndSize > uint64(h.raw) {
		return h, fmt.Errorf("%w: %d blobs in %d bytes", errBadCount, h.count, h.raw)
	}
	return h, nil
}
