package amqp

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Table is an AMQP field table. It is a slice, not a map, so that a decoded
// table re-encodes to the same bytes: wire order and duplicate keys are kept.
// Lookups are linear, which is faster than a map for the handful of fields
// real tables have.
type Table []Field

// Field is one key and value of a Table. Value holds one of the Go types
// listed in the package documentation.
type Field struct {
	Key   string
	Value any
}

// Decimal is the 'D' field type: Value / 10^Scale.
type Decimal struct {
	Scale uint8
	Value int32
}

// Timestamp is the 'T' field type: seconds since the Unix epoch, as on the
// wire. It is a distinct type so that it encodes as 'T' rather than as 'l'.
type Timestamp uint64

// maxNesting bounds how deep tables and arrays may nest, in decoding and in
// encoding. The wire format costs only 5 bytes per level, so without a bound a
// frame of a few MiB could nest a million deep and exhaust the goroutine
// stack — here or in any code that later walks the table. No real client
// comes close; the bound is encoding/json's.
const maxNesting = 10000

// Get returns the value of the first field with key, as RabbitMQ's lookups do.
func (t Table) Get(key string) (any, bool) {
	for i := range t {
		if t[i].Key == key {
			return t[i].Value, true
		}
	}
	return nil, false
}

// With returns a copy of t with key set to v: the first field with key is
// replaced in place, or a field is appended if there is none. Later
// duplicates are kept. The copy is shallow: nested tables and arrays are
// shared with t.
func (t Table) With(key string, v any) Table {
	out := make(Table, len(t), len(t)+1)
	copy(out, t)
	for i := range out {
		if out[i].Key == key {
			out[i].Value = v
			return out
		}
	}
	return append(out, Field{Key: key, Value: v})
}

// Without returns a copy of t without any field whose key is one of keys.
// The copy is shallow, as for With.
func (t Table) Without(keys ...string) Table {
	out := make(Table, 0, len(t))
next:
	for _, f := range t {
		for _, k := range keys {
			if f.Key == k {
				continue next
			}
		}
		out = append(out, f)
	}
	return out
}

// TypeName returns RabbitMQ's name for the field type v encodes as, for error
// texts such as "{unacceptable_type,longstr}": "longstr", "signedint",
// "long", "short", "byte", "unsignedbyte", "unsignedshort", "unsignedint",
// "float", "double", "decimal", "timestamp", "table", "array", "void",
// "binary" or "bool". It returns "" for a value AppendTable rejects.
func TypeName(v any) string {
	switch v.(type) {
	case bool:
		return "bool"
	case int8:
		return "byte"
	case uint8:
		return "unsignedbyte"
	case int16:
		return "short"
	case uint16:
		return "unsignedshort"
	case int32:
		return "signedint"
	case uint32:
		return "unsignedint"
	case int64, int:
		return "long"
	case float32:
		return "float"
	case float64:
		return "double"
	case Decimal:
		return "decimal"
	case string:
		return "longstr"
	case []byte:
		return "binary"
	case []any:
		return "array"
	case Timestamp:
		return "timestamp"
	case Table:
		return "table"
	case nil:
		return "void"
	}
	return ""
}

// DecodeTable decodes a field table that starts at b[0] with its 4-byte
// length, and returns it with the number of bytes consumed. Decoding is
// strict: every length must fit, every type letter must be known, and the
// fields must fill the table's length exactly. Errors are *Error with Code
// FrameError. The result does not alias b.
func DecodeTable(b []byte) (Table, int, error) {
	if len(b) < 4 {
		return nil, 0, Errorf(FrameError, "malformed field table: length needs 4 bytes, %d left", len(b))
	}
	n := binary.BigEndian.Uint32(b)
	if uint64(n) > uint64(len(b)-4) {
		return nil, 0, Errorf(FrameError, "malformed field table: length %d exceeds the %d bytes left", n, len(b)-4)
	}
	t, err := decodeFields(b[4:4+int(n)], 0)
	if err != nil {
		return nil, 0, Errorf(FrameError, "malformed field table: %s", err.Error())
	}
	return t, 4 + int(n), nil
}

// DecodeTableBody decodes all of b as the fields of a table without the
// length prefix, the form the AMQPLAIN SASL response takes. Errors and
// ownership are as for DecodeTable.
func DecodeTableBody(b []byte) (Table, error) {
	t, err := decodeFields(b, 0)
	if err != nil {
		return nil, Errorf(FrameError, "malformed field table: %s", err.Error())
	}
	return t, nil
}

// AppendTable appends t with its 4-byte length prefix to dst. It fails, with
// an *Error of Code InternalError and dst unchanged, if a key is over 255
// bytes, a value has a Go type with no AMQP field type, or values nest more
// than 10000 deep (which also catches an array that contains itself).
func AppendTable(dst []byte, t Table) ([]byte, error) {
	start := len(dst)
	dst, err := appendTable(dst, t, 0)
	if err != nil {
		return dst[:start], Errorf(InternalError, "cannot encode field table: %s", err.Error())
	}
	return dst, nil
}

// AppendTableBody appends the fields of t without a length prefix. Errors are
// as for AppendTable.
func AppendTableBody(dst []byte, t Table) ([]byte, error) {
	start := len(dst)
	dst, err := appendFields(dst, t, 0)
	if err != nil {
		return dst[:start], Errorf(InternalError, "cannot encode field table: %s", err.Error())
	}
	return dst, nil
}

// decodeFields decodes b, which holds exactly the fields of one table.
// Errors are plain details; exported callers wrap them in *Error.
func decodeFields(b []byte, depth int) (Table, error) {
	if depth > maxNesting {
		return nil, fmt.Errorf("tables and arrays nest deeper than %d levels", maxNesting)
	}
	var t Table
	for len(b) > 0 {
		klen := int(b[0])
		if 1+klen > len(b) {
			return nil, fmt.Errorf("key of %d bytes, %d left", klen, len(b)-1)
		}
		key := string(b[1 : 1+klen])
		b = b[1+klen:]
		v, n, err := decodeValue(b, depth)
		if err != nil {
			return nil, within(err, fmt.Sprintf("field %q", key))
		}
		b = b[n:]
		t = append(t, Field{Key: key, Value: v})
	}
	return t, nil
}

func decodeArray(b []byte, depth int) ([]any, error) {
	if depth > maxNesting {
		return nil, fmt.Errorf("tables and arrays nest deeper than %d levels", maxNesting)
	}
	var a []any
	for len(b) > 0 {
		v, n, err := decodeValue(b, depth)
		if err != nil {
			return nil, within(err, fmt.Sprintf("array element %d", len(a)))
		}
		b = b[n:]
		a = append(a, v)
	}
	return a, nil
}

// sized returns the n-byte value that follows a 4-byte length at b[1:].
func sized(b []byte, what string) ([]byte, error) {
	if len(b) < 5 {
		return nil, fmt.Errorf("%s length needs 4 bytes, %d left", what, len(b)-1)
	}
	n := binary.BigEndian.Uint32(b[1:])
	if uint64(n) > uint64(len(b)-5) {
		return nil, fmt.Errorf("%s of %d bytes, %d left", what, n, len(b)-5)
	}
	return b[5 : 5+int(n)], nil
}

// fixedSize is the value size of each fixed-width type letter.
var fixedSize = [256]uint8{
	't': 1, 'b': 1, 'B': 1, 's': 2, 'u': 2, 'I': 4, 'i': 4, 'f': 4,
	'l': 8, 'd': 8, 'T': 8, 'D': 5,
}

// decodeValue decodes one type letter and value from the front of b and
// returns it with the number of bytes used.
func decodeValue(b []byte, depth int) (any, int, error) {
	if len(b) == 0 {
		return nil, 0, fmt.Errorf("type letter missing")
	}
	typ := b[0]
	if size := int(fixedSize[typ]); size > 0 {
		if len(b)-1 < size {
			return nil, 0, fmt.Errorf("type '%c' needs %d bytes, %d left", typ, size, len(b)-1)
		}
		p := b[1 : 1+size]
		var v any
		switch typ {
		case 't':
			v = p[0] != 0
		case 'b':
			v = int8(p[0])
		case 'B':
			v = p[0]
		case 's':
			v = int16(binary.BigEndian.Uint16(p))
		case 'u':
			v = binary.BigEndian.Uint16(p)
		case 'I':
			v = int32(binary.BigEndian.Uint32(p))
		case 'i':
			v = binary.BigEndian.Uint32(p)
		case 'f':
			v = math.Float32frombits(binary.BigEndian.Uint32(p))
		case 'l':
			v = int64(binary.BigEndian.Uint64(p))
		case 'd':
			v = math.Float64frombits(binary.BigEndian.Uint64(p))
		case 'T':
			v = Timestamp(binary.BigEndian.Uint64(p))
		case 'D':
			v = Decimal{Scale: p[0], Value: int32(binary.BigEndian.Uint32(p[1:]))}
		}
		return v, 1 + size, nil
	}
	switch typ {
	case 'V':
		return nil, 1, nil
	case 'S':
		p, err := sized(b, "longstr")
		if err != nil {
			return nil, 0, err
		}
		return string(p), 5 + len(p), nil
	case 'x':
		p, err := sized(b, "byte array")
		if err != nil {
			return nil, 0, err
		}
		return append([]byte{}, p...), 5 + len(p), nil
	case 'A':
		p, err := sized(b, "array")
		if err != nil {
			return nil, 0, err
		}
		a, err := decodeArray(p, depth+1)
		if err != nil {
			return nil, 0, err
		}
		return a, 5 + len(p), nil
	case 'F':
		p, err := sized(b, "table")
		if err != nil {
			return nil, 0, err
		}
		t, err := decodeFields(p, depth+1)
		if err != nil {
			return nil, 0, err
		}
		return t, 5 + len(p), nil
	}
	return nil, 0, fmt.Errorf("unknown field type %q", rune(typ))
}

func appendTable(dst []byte, t Table, depth int) ([]byte, error) {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst, err := appendFields(dst, t, depth)
	if err != nil {
		return dst, err
	}
	return patchLength(dst, start, "table")
}

func appendFields(dst []byte, t Table, depth int) ([]byte, error) {
	if depth > maxNesting {
		return dst, fmt.Errorf("tables and arrays nest deeper than %d levels", maxNesting)
	}
	for _, f := range t {
		if len(f.Key) > 255 {
			return dst, fmt.Errorf("key %.32q is %d bytes, over the 255 a shortstr holds", f.Key, len(f.Key))
		}
		dst = append(dst, byte(len(f.Key)))
		dst = append(dst, f.Key...)
		var err error
		if dst, err = appendValue(dst, f.Value, depth); err != nil {
			return dst, within(err, fmt.Sprintf("field %q", f.Key))
		}
	}
	return dst, nil
}

// patchLength writes the length of what follows the 4 bytes at dst[start:].
func patchLength(dst []byte, start int, what string) ([]byte, error) {
	n := len(dst) - start - 4
	if uint64(n) > math.MaxUint32 {
		return dst, fmt.Errorf("%s of %d bytes is over the 4 GiB limit", what, n)
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(n))
	return dst, nil
}

func appendValue(dst []byte, v any, depth int) ([]byte, error) {
	be := binary.BigEndian
	switch v := v.(type) {
	case bool:
		b := byte(0)
		if v {
			b = 1
		}
		return append(dst, 't', b), nil
	case int8:
		return append(dst, 'b', byte(v)), nil
	case uint8:
		return append(dst, 'B', v), nil
	case int16:
		return be.AppendUint16(append(dst, 's'), uint16(v)), nil
	case uint16:
		return be.AppendUint16(append(dst, 'u'), v), nil
	case int32:
		return be.AppendUint32(append(dst, 'I'), uint32(v)), nil
	case uint32:
		return be.AppendUint32(append(dst, 'i'), v), nil
	case int64:
		return be.AppendUint64(append(dst, 'l'), uint64(v)), nil
	case int:
		return be.AppendUint64(append(dst, 'l'), uint64(v)), nil
	case float32:
		return be.AppendUint32(append(dst, 'f'), math.Float32bits(v)), nil
	case float64:
		return be.AppendUint64(append(dst, 'd'), math.Float64bits(v)), nil
	case Decimal:
		return be.AppendUint32(append(dst, 'D', v.Scale), uint32(v.Value)), nil
	case Timestamp:
		return be.AppendUint64(append(dst, 'T'), uint64(v)), nil
	case nil:
		return append(dst, 'V'), nil
	case string:
		if uint64(len(v)) > math.MaxUint32 {
			return dst, fmt.Errorf("longstr of %d bytes is over the 4 GiB limit", len(v))
		}
		dst = be.AppendUint32(append(dst, 'S'), uint32(len(v)))
		return append(dst, v...), nil
	case []byte:
		if uint64(len(v)) > math.MaxUint32 {
			return dst, fmt.Errorf("byte array of %d bytes is over the 4 GiB limit", len(v))
		}
		dst = be.AppendUint32(append(dst, 'x'), uint32(len(v)))
		return append(dst, v...), nil
	case Table:
		return appendTable(append(dst, 'F'), v, depth+1)
	case []any:
		if depth+1 > maxNesting {
			return dst, fmt.Errorf("tables and arrays nest deeper than %d levels", maxNesting)
		}
		dst = append(dst, 'A')
		start := len(dst)
		dst = append(dst, 0, 0, 0, 0)
		for i, e := range v {
			var err error
			if dst, err = appendValue(dst, e, depth+1); err != nil {
				return dst, within(err, fmt.Sprintf("array element %d", i))
			}
		}
		return patchLength(dst, start, "array")
	}
	return dst, fmt.Errorf("unsupported value type %T", v)
}

// pathError is a table coding error with the path to the failing value.
// Nested calls add to path as they unwind, innermost first, instead of each
// wrapping the message: at maxNesting levels, rewrapping would copy the
// growing text ten thousand times.
type pathError struct {
	path []string // innermost first
	err  error
}

func within(err error, seg string) error {
	pe, ok := err.(*pathError)
	if !ok {
		pe = &pathError{err: err}
	}
	pe.path = append(pe.path, seg)
	return pe
}

// Error shows the outermost segments of a deep path; the rest only repeat.
func (e *pathError) Error() string {
	const show = 8
	var b []byte
	for i := len(e.path) - 1; i >= 0 && len(e.path)-1-i < show; i-- {
		b = append(b, e.path[i]...)
		b = append(b, ": "...)
	}
	if len(e.path) > show {
		b = fmt.Appendf(b, "(%d levels more): ", len(e.path)-show)
	}
	return string(append(b, e.err.Error()...))
}

func (e *pathError) Unwrap() error { return e.err }

// AsInt returns the value of any AMQP integer type.
func AsInt(v any) (int64, bool) {
	switch n := v.(type) {
	case int8:
		return int64(n), true
	case uint8:
		return int64(n), true
	case int16:
		return int64(n), true
	case uint16:
		return int64(n), true
	case int32:
		return int64(n), true
	case uint32:
		return int64(n), true
	case int64:
		return n, true
	case int:
		return int64(n), true
	}
	return 0, false
}

// AsFloat returns the value of either AMQP floating-point type.
func AsFloat(v any) (float64, bool) {
	switch n := v.(type) {
	case float32:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}

// ValuesEqual compares two field values the way RabbitMQ's headers exchange
// does: numbers by value (integers of any width are equal when their values
// are), strings and binaries by content, tables and arrays element-wise.
func ValuesEqual(a, b any) bool {
	if ai, ok := AsInt(a); ok {
		bi, ok := AsInt(b)
		return ok && ai == bi
	}
	if af, ok := AsFloat(a); ok {
		bf, ok := AsFloat(b)
		return ok && af == bf
	}
	switch av := a.(type) {
	case string:
		switch bv := b.(type) {
		case string:
			return av == bv
		case []byte:
			return av == string(bv)
		}
		return false
	case []byte:
		switch bv := b.(type) {
		case string:
			return string(av) == bv
		case []byte:
			return string(av) == string(bv)
		}
		return false
	case bool:
		bv, ok := b.(bool)
		return ok && av == bv
	case Decimal:
		bv, ok := b.(Decimal)
		return ok && av == bv
	case Timestamp:
		bv, ok := b.(Timestamp)
		return ok && av == bv
	case nil:
		return b == nil
	case []any:
		bv, ok := b.([]any)
		if !ok || len(av) != len(bv) {
			return false
		}
		for i := range av {
			if !ValuesEqual(av[i], bv[i]) {
				return false
			}
		}
		return true
	case Table:
		bv, ok := b.(Table)
		if !ok || len(av) != len(bv) {
			return false
		}
		for i := range av {
			if av[i].Key != bv[i].Key || !ValuesEqual(av[i].Value, bv[i].Value) {
				return false
			}
		}
		return true
	}
	return false
}
