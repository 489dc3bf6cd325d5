package segment

import (
	"fmt"
	"sync"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
)

// Codec is the compression of a block's payload. It is written in every
// block header, so a store reads blocks of any codec whatever its Options
// say; Options.Codec only chooses how new blocks are written.
type Codec uint8

// on-disk format; never renumber
const (
	// CodecDefault is not written to disk: in Options it selects the
	// package's measured default (see the package doc), DefaultCodec.
	CodecDefault Codec = 0
	// CodecNone stores the payload as is. Blocks that another codec would
	// shrink by less than an eighth are written with it too.
	CodecNone Codec = 1
	// CodecS2 is the S2 block format (github.com/klauspost/compress/s2), a
	// Snappy extension whose decoder also reads Snappy blocks.
	CodecS2 Codec = 2
	// CodecZstd is one Zstandard frame (RFC 8878) without a content
	// checksum: the block CRC covers the stored bytes.
	CodecZstd Codec = 3
)

// DefaultCodec is the codec new blocks get when Options.Codec is
// CodecDefault. The package doc gives the measurements behind it.
const DefaultCodec = CodecS2

// zstdLevel is the encoder level of CodecZstd blocks; the package doc says
// why it is not the library default.
const zstdLevel = zstd.SpeedFastest

func (c Codec) valid() bool { return c >= CodecNone && c <= CodecZstd }

func (c Codec) String() string {
	switch c {
	case CodecDefault:
		return "default"
	case CodecNone:
		return "none"
	case CodecS2:
		return "s2"
	case CodecZstd:
		return "zstd"
	}
	return fmt.Sprintf("codec(%d)", uint8(c))
}

// zstdWindow is the window of CodecZstd frames. The decoder refuses larger
// ones: a frame that claims a big window makes the decoder allocate it, and
// the block CRC is no defence against a bug or a crafted file.
const zstdWindow = 8 << 20

// The zstd coders are shared: EncodeAll and DecodeAll are safe for
// concurrent use, and neither starts goroutines when used only that way.
var (
	zstdEncoder = sync.OnceValue(func() *zstd.Encoder {
		e, err := zstd.NewWriter(nil,
			zstd.WithEncoderLevel(zstdLevel),
			zstd.WithEncoderConcurrency(1),
			zstd.WithEncoderCRC(false),
			zstd.WithWindowSize(zstdWindow),
			zstd.WithLowerEncoderMem(true))
		if err != nil {
			panic(fmt.Sprintf("segment: zstd encoder: %v", err))
		}
		return e
	})
	zstdDecoder = sync.OnceValue(func() *zstd.Decoder {
		d, err := zstd.NewReader(nil,
			zstd.WithDecoderConcurrency(0),
			zstd.WithDecoderMaxMemory(maxBlockLen),
			zstd.WithDecoderMaxWindow(zstdWindow),
			zstd.WithDecodeAllCapLimit(true))
		if err != nil {
			panic(fmt.Sprintf("segment: zstd decoder: %v", err))
		}
		return d
	})
)

// compress appends src compressed with c (CodecS2 or CodecZstd) to dst.
func compress(dst []byte, c Codec, src []byte) []byte {
	switch c {
	case CodecS2:
		n := s2.MaxEncodedLen(len(src))
		dst = growLen(dst, n)
		out := s2.Encode(dst[len(dst)-n:], src)
		return dst[:len(dst)-n+len(out)]
	case CodecZstd:
		return zstdEncoder().EncodeAll(src, dst)
	}
	panic(fmt.Sprintf("segment: compress with %s", c))
}

// decompress decodes src, which must decode to exactly rawLen bytes, into
// scratch if it has the capacity, else into a new slice of that length.
func decompress(scratch []byte, c Codec, src []byte, rawLen int) ([]byte, error) {
	if cap(scratch) < rawLen {
		scratch = make([]byte, 0, rawLen)
	}
	switch c {
	case CodecS2:
		n, err := s2.DecodedLen(src)
		if err != nil {
			return nil, fmt.Errorf("%w: s2: %w", errBadPayload, err)
		}
		if n != rawLen {
			return nil, fmt.Errorf("%w: s2 payload holds %d bytes, header says %d", errBadPayload, n, rawLen)
		}
		out, err := s2.Decode(scratch[:rawLen], src)
		if err != nil {
			return nil, fmt.Errorf("%w: s2: %w", errBadPayload, err)
		}
		return out, nil
	case CodecZstd:
		// The cap limit stops a lying frame at rawLen bytes.
		out, err := zstdDecoder().DecodeAll(src, scratch[:0:rawLen])
		if err != nil {
			return nil, fmt.Errorf("%w: zstd: %w", errBadPayload, err)
		}
		if len(out) != rawLen {
			return nil, fmt.Errorf("%w: zstd payload holds %d bytes, header says %d", errBadPayload, len(out), rawLen)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: %d", errBadCodec, c)
}

// growLen extends b by n bytes, reallocating when its capacity is short.
func growLen(b []byte, n int) []byte {
	if cap(b)-len(b) < n {
		nb := make([]byte, len(b), 2*cap(b)+n)
		copy(nb, b)
		b = nb
	}
	return b[:len(b)+n]
}
