package defs

import (
	"encoding/binary"
	"fmt"

	"github.com/brokerd/brokerd/amqp"
)

// Version is the first byte of every value; on-disk format, never
// renumber. The broker's redrive task records start with it too.
const Version byte = 1

// maxTags bounds the string count a decoder accepts, so a corrupt count
// cannot make it allocate without limit.
const maxTags = 1 << 12

// maxMarks bounds the delivered marks a queue record may hold (one per
// priority level).
const maxMarks = 256

// EncodeArgs returns an argument table's AMQP encoding, as records and
// binding keys hold it. It panics if t does not encode: tables come from
// the wire or from the broker's own code, and both do.
func EncodeArgs(t amqp.Table) []byte {
	b, err := amqp.AppendTable(nil, t)
	if err != nil {
		panic(fmt.Sprintf("encode argument table: %v", err))
	}
	return b
}

// DecodeArgs decodes what EncodeArgs returns (bytes after the table are
// ignored); empty b is a nil table. Its error is amqp's, not wrapped: the
// record decoders wrap it in ErrCorrupt.
func DecodeArgs(b []byte) (amqp.Table, error) {
	if len(b) == 0 {
		return nil, nil
	}
	t, _, err := amqp.DecodeTable(b)
	return t, err
}

func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

func appendStrings(dst []byte, ss []string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(ss)))
	for _, s := range ss {
		dst = appendBytes(dst, []byte(s))
	}
	return dst
}

// recReader decodes one value; the first error sticks.
type recReader struct {
	b   []byte
	err error
}

func newRecReader(b []byte) *recReader {
	r := &recReader{b: b}
	switch {
	case len(b) == 0:
		r.err = fmt.Errorf("%w: empty value", ErrCorrupt)
	case b[0] != Version:
		r.err = fmt.Errorf("%w: unknown version %d", ErrCorrupt, b[0])
	default:
		r.b = b[1:]
	}
	return r
}

func (r *recReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = fmt.Errorf("%w: bad varint", ErrCorrupt)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *recReader) byte() byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) == 0 {
		r.err = fmt.Errorf("%w: value too short", ErrCorrupt)
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

// bytes returns the next length-prefixed bytes; they alias the value.
func (r *recReader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.err = fmt.Errorf("%w: length %d beyond the value's end", ErrCorrupt, n)
		return nil
	}
	b := r.b[:n:n]
	r.b = r.b[n:]
	return b
}

// rest returns what follows the version byte (the policy's JSON).
func (r *recReader) rest() []byte {
	if r.err != nil {
		return nil
	}
	b := r.b
	r.b = nil
	return b
}

func (r *recReader) strings() []string {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > maxTags || n > uint64(len(r.b)) { // each takes at least a byte
		r.err = fmt.Errorf("%w: %d strings", ErrCorrupt, n)
		return nil
	}
	var out []string
	for range n {
		out = append(out, string(r.bytes()))
	}
	return out
}

// marks reads the delivered marks appendMarks wrote, if the value has
// more bytes (none: nil).
func (r *recReader) marks() []uint64 {
	if r.err != nil || len(r.b) == 0 {
		return nil
	}
	n := r.uvarint()
	if n > maxMarks {
		r.err = fmt.Errorf("%w: %d delivered marks", ErrCorrupt, n)
		return nil
	}
	var marks []uint64
	for range n {
		marks = append(marks, r.uvarint())
	}
	return marks
}
