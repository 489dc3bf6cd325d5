package amqp

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"
)

// allMethods returns a zero value of every method the spec defines, found by
// asking newMethod for every id pair, so the list cannot drift from the
// generated code.
func allMethods() []Method {
	var out []Method
	for c := 0; c < 256; c++ {
		for m := 0; m < 256; m++ {
			if mm := newMethod(uint16(c), uint16(m)); mm != nil {
				out = append(out, mm)
			}
		}
	}
	return out
}

// randString returns up to max random bytes, not necessarily UTF-8: AMQP
// strings are bytes.
func randString(r *rand.Rand, max int) string {
	b := make([]byte, r.IntN(max+1))
	for i := range b {
		b[i] = byte(r.UintN(256))
	}
	return string(b)
}

// randValue returns a random value of a random field type, nesting at most
// depth more levels.
func randValue(r *rand.Rand, depth int) any {
	n := 17
	if depth <= 0 {
		n = 15 // no arrays or tables
	}
	switch r.IntN(n) {
	case 0:
		return r.IntN(2) == 0
	case 1:
		return int8(r.Uint32())
	case 2:
		return uint8(r.Uint32())
	case 3:
		return int16(r.Uint32())
	case 4:
		return uint16(r.Uint32())
	case 5:
		return int32(r.Uint32())
	case 6:
		return r.Uint32()
	case 7:
		return int64(r.Uint64())
	case 8:
		return float32(r.NormFloat64())
	case 9:
		return r.NormFloat64()
	case 10:
		return Decimal{Scale: uint8(r.Uint32()), Value: int32(r.Uint32())}
	case 11:
		return randString(r, 40)
	case 12:
		return []byte(randString(r, 40))
	case 13:
		return Timestamp(r.Uint64())
	case 14:
		return nil
	case 15:
		a := make([]any, r.IntN(5))
		for i := range a {
			a[i] = randValue(r, depth-1)
		}
		if len(a) == 0 {
			return []any(nil) // what decoding an empty array gives
		}
		return a
	default:
		return randTable(r, depth-1)
	}
}

func randTable(r *rand.Rand, depth int) Table {
	var t Table
	for range r.IntN(6) {
		t = append(t, Field{Key: randString(r, 12), Value: randValue(r, depth)})
	}
	return t
}

// fillRandom sets every exported field of the struct m points to at random.
func fillRandom(r *rand.Rand, m any) {
	v := reflect.ValueOf(m).Elem()
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.Bool:
			f.SetBool(r.IntN(2) == 0)
		case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			f.SetUint(r.Uint64()) // SetUint truncates to the field's width
		case reflect.String:
			f.SetString(randString(r, 255))
		case reflect.Slice: // Table
			f.Set(reflect.ValueOf(randTable(r, 3)))
		default:
			panic("fillRandom: unexpected field kind " + f.Kind().String())
		}
	}
}

// wantError fails the test unless err is an *Error with code.
func wantError(t *testing.T, err error, code uint16) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an *amqp.Error", err, err)
	}
	if e.Code != code {
		t.Fatalf("error %v has code %d, want %d", err, e.Code, code)
	}
	return e
}

// tableHasBool reports whether a bool appears anywhere in t. Decoding maps
// every nonzero bool octet to true, so only tables without one are
// byte-for-byte reproducible from arbitrary input.
func tableHasBool(t Table) bool {
	for _, f := range t {
		if valueHasBool(f.Value) {
			return true
		}
	}
	return false
}

func valueHasBool(v any) bool {
	switch v := v.(type) {
	case bool:
		return true
	case Table:
		return tableHasBool(v)
	case []any:
		for _, e := range v {
			if valueHasBool(e) {
				return true
			}
		}
	}
	return false
}
