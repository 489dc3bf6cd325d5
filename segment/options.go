package segment

import (
	"fmt"
	"log/slog"
	"math"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Defaults of Options.
const (
	DefaultTargetSize = 64 << 20
	DefaultBlockSize  = 64 << 10
	// DefaultMaxOpenFiles is Options.MaxOpenFiles' default.
	DefaultMaxOpenFiles = 256
	DefaultCacheBytes   = 32 << 20

	// maxBlockSize bounds Options.BlockSize: the cut threshold, not the
	// largest block (a large blob gets a block of its own).
	maxBlockSize = 64 << 20
	// minTargetSize lets tests roll files every few blocks.
	minTargetSize = fileHeaderSize + blockHeaderSize
)

// Options configure a Store. The zero value is valid: every zero field
// takes its default.
type Options struct {
	// FS is the filesystem; vfs.Default if nil.
	FS vfs.FS
	// TargetSize is the file size past which a Writer rolls to a new
	// segment: a file ends with the first block that reaches it. Default
	// 64 MiB; at most 4 GiB - 1, since Loc.Block is 32 bits.
	TargetSize int64
	// BlockSize is how many uncompressed bytes (blobs plus their 4-byte
	// table entries) a block collects before it is cut. Default 64 KiB. A
	// blob larger than that is a block of its own; blobs never span blocks.
	BlockSize int
	// CacheBytes is the block cache budget in decompressed bytes, LRU.
	// 0 means DefaultCacheBytes, a negative value no cache.
	CacheBytes int64
	// MaxOpenFiles bounds the read handles kept open (one per segment
	// read recently): past it, the least recently used idle one is closed
	// before another is opened. Handles in use are never closed, so it
	// is exceeded only while more segments than that are being read at
	// once. Default DefaultMaxOpenFiles.
	MaxOpenFiles int
	// Codec compresses new blocks; CodecDefault means DefaultCodec.
	Codec Codec
	// Logger gets what Open found (torn tails); discarded if nil.
	Logger *slog.Logger
}

// withDefaults returns o with defaults filled in, or why it is invalid.
func (o Options) withDefaults() (Options, error) {
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.TargetSize == 0 {
		o.TargetSize = DefaultTargetSize
	}
	if o.TargetSize < minTargetSize || o.TargetSize > math.MaxUint32 {
		return o, fmt.Errorf("segment: target size %d outside [%d, %d]", o.TargetSize, minTargetSize, int64(math.MaxUint32))
	}
	if o.BlockSize == 0 {
		o.BlockSize = DefaultBlockSize
	}
	if o.BlockSize < 1 || o.BlockSize > maxBlockSize {
		return o, fmt.Errorf("segment: block size %d outside [1, %d]", o.BlockSize, maxBlockSize)
	}
	if o.CacheBytes == 0 {
		o.CacheBytes = DefaultCacheBytes
	}
	if o.MaxOpenFiles <= 0 {
		o.MaxOpenFiles = DefaultMaxOpenFiles
	}
	if o.Codec == CodecDefault {
		o.Codec = DefaultCodec
	}
	if !o.Codec.valid() {
		return o, fmt.Errorf("segment: unknown codec %d", o.Codec)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}
