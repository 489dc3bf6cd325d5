package amqp

import (
	"encoding/binary"
	"fmt"
	"unicode/utf8"
)

// Method is one AMQP method: the generated structs in spec_gen.go, always
// used as pointers (*BasicPublish). The set is closed: only this package's
// types implement it.
type Method interface {
	ClassID() uint16
	MethodID() uint16
	Name() string      // "basic.publish", "queue.declare-ok"
	HasContent() bool  // a content header and body frames follow the method
	Synchronous() bool // the peer answers with the matching -ok method
	// AppendArgs appends the encoded arguments (without the class and method
	// ids) to dst. It panics if a Table argument holds a value AppendTable
	// rejects, which only Go code that builds tables by hand can cause:
	// tables from DecodeTable always encode.
	AppendArgs(dst []byte) []byte
	decodeArgs(b []byte) error
}

// DecodeMethod decodes the payload of a method frame: class id, method id,
// arguments. Bytes after the arguments are ignored, as RabbitMQ does.
//
// An unknown method is an *Error with Code CommandInvalid; a payload too short
// for the arguments, or a malformed field table, is an *Error with Code
// FrameError. Both carry the class and method ids when they were read.
//
// The result does not alias payload, which the caller may reuse at once.
func DecodeMethod(payload []byte) (Method, error) {
	if len(payload) < 4 {
		return nil, Errorf(FrameError, "method frame payload of %d bytes is too short for class and method ids", len(payload))
	}
	classID := binary.BigEndian.Uint16(payload)
	methodID := binary.BigEndian.Uint16(payload[2:])
	m := newMethod(classID, methodID)
	if m == nil {
		e := Errorf(CommandInvalid, "unknown method class %d method %d", classID, methodID)
		e.ClassID, e.MethodID = classID, methodID
		return nil, e
	}
	if err := m.decodeArgs(payload[4:]); err != nil {
		e := Errorf(FrameError, "cannot decode %s: %s", m.Name(), err.Error())
		e.ClassID, e.MethodID = classID, methodID
		return nil, e
	}
	return m, nil
}

// AppendMethodFrame appends a complete method frame carrying m on channel to
// dst and returns the extended slice. See Method.AppendArgs for when it
// panics.
func AppendMethodFrame(dst []byte, channel uint16, m Method) []byte {
	start := len(dst)
	dst = append(dst, FrameMethod, byte(channel>>8), byte(channel), 0, 0, 0, 0)
	dst = binary.BigEndian.AppendUint16(dst, m.ClassID())
	dst = binary.BigEndian.AppendUint16(dst, m.MethodID())
	dst = m.AppendArgs(dst)
	binary.BigEndian.PutUint32(dst[start+3:], uint32(len(dst)-start-frameHeaderSize))
	return append(dst, FrameEnd)
}

// decoder reads AMQP primitives from the front of b. The first failure sticks
// in err and later reads return zero values, so generated code reads every
// field and checks once. field names the argument in the error text.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) take(n int, field, what string) ([]byte, bool) {
	if d.err != nil {
		return nil, false
	}
	if n > len(d.b) {
		d.err = fmt.Errorf("field %s: %s needs %d bytes, %d left", field, what, n, len(d.b))
		return nil, false
	}
	p := d.b[:n]
	d.b = d.b[n:]
	return p, true
}

func (d *decoder) octet(field string) uint8 {
	p, ok := d.take(1, field, "octet")
	if !ok {
		return 0
	}
	return p[0]
}

func (d *decoder) short(field string) uint16 {
	p, ok := d.take(2, field, "short")
	if !ok {
		return 0
	}
	return binary.BigEndian.Uint16(p)
}

func (d *decoder) long(field string) uint32 {
	p, ok := d.take(4, field, "long")
	if !ok {
		return 0
	}
	return binary.BigEndian.Uint32(p)
}

func (d *decoder) longlong(field string) uint64 {
	p, ok := d.take(8, field, "longlong")
	if !ok {
		return 0
	}
	return binary.BigEndian.Uint64(p)
}

func (d *decoder) shortstr(field string) string {
	n := d.octet(field)
	p, ok := d.take(int(n), field, "shortstr")
	if !ok {
		return ""
	}
	return string(p)
}

func (d *decoder) longstr(field string) string {
	n := d.long(field)
	if d.err == nil && uint64(n) > uint64(len(d.b)) {
		d.err = fmt.Errorf("field %s: longstr of %d bytes, %d left", field, n, len(d.b))
	}
	p, ok := d.take(int(n), field, "longstr")
	if !ok {
		return ""
	}
	return string(p)
}

func (d *decoder) table(field string) Table {
	n := d.long(field)
	if d.err == nil && uint64(n) > uint64(len(d.b)) {
		d.err = fmt.Errorf("field %s: table of %d bytes, %d left", field, n, len(d.b))
	}
	p, ok := d.take(int(n), field, "table")
	if !ok {
		return nil
	}
	t, err := decodeFields(p, 0)
	if err != nil {
		d.err = fmt.Errorf("field %s: %w", field, err)
		return nil
	}
	return t
}

// appendShortstr appends s as a shortstr. Over 255 bytes cannot be encoded,
// and reply texts that quote user input do get that long, so rather than
// emit a frame the peer must reject, s is cut to 255 bytes — at a rune
// boundary when s is UTF-8, so the text stays readable.
func appendShortstr(dst []byte, s string) []byte {
	if len(s) > 255 {
		s = truncateShortstr(s)
	}
	dst = append(dst, byte(len(s)))
	return append(dst, s...)
}

func truncateShortstr(s string) string {
	cut := 255
	if utf8.ValidString(s) {
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
	}
	return s[:cut]
}

func appendLongstr(dst []byte, s string) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(s)))
	return append(dst, s...)
}

// appendTableArg encodes a table argument of a method. AppendArgs has no error
// result, and the only failure is a Go value no AMQP type represents — a bug
// in the code that built the table — so it panics, naming the argument.
func appendTableArg(dst []byte, t Table, arg string) []byte {
	dst, err := AppendTable(dst, t)
	if err != nil {
		panic(fmt.Sprintf("amqp: encode %s: %s", arg, err.Error()))
	}
	return dst
}
