package segment

import (
	"encoding/binary"
	"fmt"
)

// Loc locates one blob. It is what the index stores, as AppendLoc encodes
// it. Locs are comparable: equal Locs name the same blob.
type Loc struct {
	Seg   ID
	Block uint32 // file offset of the block holding the blob
	Off   uint32 // offset of the blob inside the block's uncompressed payload
	Len   uint32 // blob length
}

// MaxLocSize is the longest encoding AppendLoc makes.
const MaxLocSize = 4 * binary.MaxVarintLen32

// AppendLoc appends the encoding of l to dst: Seg, Block, Off and Len as
// four unsigned LEB128 varints (encoding/binary.AppendUvarint), in that
// order, 4 to 20 bytes and typically 8 to 10. The encoding is canonical:
// DecodeLoc accepts no other bytes for l.
func AppendLoc(dst []byte, l Loc) []byte {
	dst = binary.AppendUvarint(dst, uint64(l.Seg))
	dst = binary.AppendUvarint(dst, uint64(l.Block))
	dst = binary.AppendUvarint(dst, uint64(l.Off))
	return binary.AppendUvarint(dst, uint64(l.Len))
}

// DecodeLoc decodes a Loc that AppendLoc encoded; b must hold exactly that
// encoding. Any other bytes give an error wrapping ErrBadLoc.
func DecodeLoc(b []byte) (Loc, error) {
	var v [4]uint32
	rest := b
	for i := range v {
		x, n := binary.Uvarint(rest)
		if n <= 0 {
			return Loc{}, fmt.Errorf("%w: field %d of %x is truncated or overflows", ErrBadLoc, i, b)
		}
		if x > 1<<32-1 {
			return Loc{}, fmt.Errorf("%w: field %d of %x is %d, above 32 bits", ErrBadLoc, i, b, x)
		}
		if n > 1 && rest[n-1] == 0 {
			return Loc{}, fmt.Errorf("%w: field %d of %x is not minimally encoded", ErrBadLoc, i, b)
		}
		v[i] = uint32(x)
		rest = rest[n:]
	}
	if len(rest) != 0 {
		return Loc{}, fmt.Errorf("%w: %d bytes after %x", ErrBadLoc, len(rest), b[:len(b)-len(rest)])
	}
	return Loc{Seg: ID(v[0]), Block: v[1], Off: v[2], Len: v[3]}, nil
}
