package amqp

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// everyType holds one field of each type, nested values, duplicate keys and
// an empty key, in an order no map would keep.
var everyType = Table{
	{"z-bool", true},
	{"int8", int8(-5)},
	{"uint8", uint8(250)},
	{"int16", int16(-300)},
	{"uint16", uint16(65000)},
	{"int32", int32(-70000)},
	{"uint32", uint32(4_000_000_000)},
	{"int64", int64(-1 << 40)},
	{"float32", float32(1.5)},
	{"float64", -2.25},
	{"decimal", Decimal{Scale: 2, Value: -12345}},
	{"longstr", "héllo"},
	{"binary", []byte{0, 1, 0xff}},
	{"array", []any{int32(1), "two", []any{nil, false}, Table{{"k", "v"}}, []byte{}}},
	{"timestamp", Timestamp(1_700_000_000)},
	{"table", Table{{"inner", Table{{"deep", int64(7)}}}, {"empty", Table(nil)}}},
	{"void", nil},
	{"dup", "first"},
	{"dup", "second"},
	{"", "empty key"},
	{"a-bool", false},
}

func TestTableRoundTrip(t *testing.T) {
	enc, err := AppendTable([]byte("prefix"), everyType)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(enc, []byte("prefix")) {
		t.Fatal("AppendTable did not append to dst")
	}
	enc = enc[len("prefix"):]
	got, n, err := DecodeTable(append(enc, "trailing"...))
	if err != nil {
		t.Fatal(err)
	}
	if n != len(enc) {
		t.Fatalf("consumed %d bytes, want %d", n, len(enc))
	}
	if !reflect.DeepEqual(got, everyType) {
		t.Fatalf("round trip mismatch:\n got %#v\nwant %#v", got, everyType)
	}
	again, err := AppendTable(nil, got)
	if err != nil || !bytes.Equal(again, enc) {
		t.Fatalf("re-encoding differs (err %v)", err)
	}
}

func TestTableRandomRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 2000; i++ {
		tab := randTable(r, 4)
		enc, err := AppendTable(nil, tab)
		if err != nil {
			t.Fatal(err)
		}
		got, n, err := DecodeTable(enc)
		if err != nil {
			t.Fatalf("decode %x: %v", enc, err)
		}
		if n != len(enc) {
			t.Fatalf("consumed %d of %d", n, len(enc))
		}
		// Compare encodings rather than values: NaN payloads survive bit for
		// bit but are never DeepEqual.
		again, _ := AppendTable(nil, got)
		if !bytes.Equal(again, enc) {
			t.Fatalf("round trip of %#v changed bytes", tab)
		}
	}
}

// TestTableWireFormat pins every type letter and layout to hand-written bytes,
// which a round trip alone cannot catch (a wrong letter decodes back fine).
func TestTableWireFormat(t *testing.T) {
	cases := []struct {
		v    any
		want []byte
	}{
		{true, []byte{'t', 1}},
		{false, []byte{'t', 0}},
		{int8(-2), []byte{'b', 0xfe}},
		{uint8(200), []byte{'B', 200}},
		{int16(-2), []byte{'s', 0xff, 0xfe}},
		{uint16(0x1234), []byte{'u', 0x12, 0x34}},
		{int32(-2), []byte{'I', 0xff, 0xff, 0xff, 0xfe}},
		{uint32(0x01020304), []byte{'i', 1, 2, 3, 4}},
		{int64(-2), []byte{'l', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe}},
		{int(258), []byte{'l', 0, 0, 0, 0, 0, 0, 1, 2}},
		{float32(1), []byte{'f', 0x3f, 0x80, 0, 0}},
		{float64(1), []byte{'d', 0x3f, 0xf0, 0, 0, 0, 0, 0, 0}},
		{Decimal{Scale: 3, Value: 258}, []byte{'D', 3, 0, 0, 1, 2}},
		{"ab", []byte{'S', 0, 0, 0, 2, 'a', 'b'}},
		{[]byte{9}, []byte{'x', 0, 0, 0, 1, 9}},
		{Timestamp(258), []byte{'T', 0, 0, 0, 0, 0, 0, 1, 2}},
		{nil, []byte{'V'}},
		{[]any{uint8(1), nil}, []byte{'A', 0, 0, 0, 3, 'B', 1, 'V'}},
		{[]any(nil), []byte{'A', 0, 0, 0, 0}},
		{Table{{"k", nil}}, []byte{'F', 0, 0, 0, 3, 1, 'k', 'V'}},
		{Table(nil), []byte{'F', 0, 0, 0, 0}},
	}
	for _, c := range cases {
		enc, err := AppendTable(nil, Table{{"k", c.v}})
		if err != nil {
			t.Fatalf("%T %v: %v", c.v, c.v, err)
		}
		want := binary.BigEndian.AppendUint32(nil, uint32(2+len(c.want)))
		want = append(want, 1, 'k')
		want = append(want, c.want...)
		if !bytes.Equal(enc, want) {
			t.Errorf("%T %v encodes as %x, want %x", c.v, c.v, enc, want)
		}
	}
}

func TestTableDecodeLenientBool(t *testing.T) {
	// RabbitMQ reads any nonzero bool octet as true; so do we.
	tab, err := DecodeTableBody([]byte{1, 'k', 't', 7})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := tab.Get("k"); v != true {
		t.Fatalf("bool octet 7 decoded as %v", v)
	}
}

func TestTableNaNBitExact(t *testing.T) {
	raw := []byte{0, 0, 0, 16,
		1, 'f', 'f', 0x7f, 0xa0, 0x00, 0x01, // signalling NaN with payload
		1, 'd', 'd', 0xff, 0xf8, 0, 0, 0, 0, 0, 0}
	raw[3] = byte(len(raw) - 4)
	tab, _, err := DecodeTable(raw)
	if err != nil {
		t.Fatal(err)
	}
	enc, err := AppendTable(nil, tab)
	if err != nil || !bytes.Equal(enc, raw) {
		t.Fatalf("NaN round trip: %x, want %x (err %v)", enc, raw, err)
	}
}

func TestTableDecodeErrors(t *testing.T) {
	valid, err := AppendTable(nil, everyType)
	if err != nil {
		t.Fatal(err)
	}
	// Every truncation of the length or fields is an error, never a panic.
	for i := 0; i < len(valid); i++ {
		if _, _, err := DecodeTable(valid[:i]); err == nil {
			t.Fatalf("truncation to %d of %d bytes decoded", i, len(valid))
		} else {
			wantError(t, err, FrameError)
		}
	}
	body := func(b ...byte) []byte { return b }
	cases := map[string][]byte{
		"unknown type letter":      body(1, 'k', 'Z'),
		"0-9-1 spec short U":       body(1, 'k', 'U', 0, 1),
		"missing type letter":      body(1, 'k'),
		"key past end":             body(5, 'k'),
		"short int16":              body(1, 'k', 's', 0),
		"longstr past end":         body(1, 'k', 'S', 0, 0, 0, 9, 'a'),
		"longstr huge length":      body(1, 'k', 'S', 0xff, 0xff, 0xff, 0xff),
		"byte array past end":      body(1, 'k', 'x', 0, 0, 0, 2, 1),
		"nested table past end":    body(1, 'k', 'F', 0, 0, 0, 4, 1, 'a'),
		"nested table bad field":   body(1, 'k', 'F', 0, 0, 0, 3, 1, 'a', '?'),
		"array element truncated":  body(1, 'k', 'A', 0, 0, 0, 2, 'I', 0),
		"array unknown letter":     body(1, 'k', 'A', 0, 0, 0, 1, 'Q'),
		"decimal truncated":        body(1, 'k', 'D', 1, 0, 0),
		"array length past table":  body(1, 'k', 'A', 0, 0, 0, 1),
		"trailing junk in a table": body(1, 'k', 'V', 3),
	}
	for name, b := range cases {
		if _, err := DecodeTableBody(b); err == nil {
			t.Errorf("%s: decoded", name)
		} else {
			e := wantError(t, err, FrameError)
			if !strings.HasPrefix(e.Text, "FRAME_ERROR - malformed field table: ") {
				t.Errorf("%s: text %q", name, e.Text)
			}
		}
		framed := binary.BigEndian.AppendUint32(nil, uint32(len(b)))
		if _, _, err := DecodeTable(append(framed, b...)); err == nil {
			t.Errorf("%s: decoded with length prefix", name)
		}
	}
	if _, _, err := DecodeTable([]byte{0, 0, 0, 5, 0}); err == nil {
		t.Error("table length past the end decoded")
	}
}

func TestTableErrorNamesThePath(t *testing.T) {
	_, err := DecodeTableBody([]byte{1, 'a', 'F', 0, 0, 0, 5, 1, 'b', 'A', 0, 0, 0, 1, 'Q'}[:15])
	if err == nil {
		t.Fatal("decoded")
	}
	if want := `field "a": field "b": `; !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not contain %q", err, want)
	}
}

func TestTableNoAliasing(t *testing.T) {
	enc, err := AppendTable(nil, everyType)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := DecodeTable(enc)
	if err != nil {
		t.Fatal(err)
	}
	for i := range enc {
		enc[i] = 0xA5
	}
	if !reflect.DeepEqual(got, everyType) {
		t.Fatal("decoded table changed when its input buffer was overwritten")
	}
}

// nestedArrays returns a table body holding arrays nested depth deep,
// built directly (5 bytes per level) rather than by encoding.
func nestedArrays(depth int) []byte {
	b := []byte{1, 'k'}
	for i := 0; i < depth; i++ {
		b = append(b, 'A')
		b = binary.BigEndian.AppendUint32(b, uint32(5*(depth-1-i)))
	}
	return b
}

func TestTableNestingLimit(t *testing.T) {
	tab, err := DecodeTableBody(nestedArrays(maxNesting))
	if err != nil {
		t.Fatalf("%d levels: %v", maxNesting, err)
	}
	if _, err := AppendTableBody(nil, tab); err != nil {
		t.Fatalf("re-encode %d levels: %v", maxNesting, err)
	}
	_, err = DecodeTableBody(nestedArrays(maxNesting + 1))
	e := wantError(t, err, FrameError)
	if len(e.Text) > 500 {
		t.Fatalf("error text is %d bytes long; deep paths should be elided", len(e.Text))
	}
	// A frame of a few MiB nests far deeper; it must fail fast, not exhaust
	// the stack.
	_, err = DecodeTableBody(nestedArrays(1 << 20))
	wantError(t, err, FrameError)

	cyclic := make([]any, 1)
	cyclic[0] = cyclic
	_, err = AppendTable(nil, Table{{"loop", cyclic}})
	wantError(t, err, InternalError)
}

func TestAppendTableErrors(t *testing.T) {
	dst := []byte("keep")
	cases := map[string]Table{
		"long key":         {{strings.Repeat("k", 256), int32(1)}},
		"uint64":           {{"k", uint64(1)}},
		"map":              {{"k", map[string]any{}}},
		"nested bad value": {{"k", []any{Table{{"x", struct{}{}}}}}},
	}
	for name, tab := range cases {
		out, err := AppendTable(dst, tab)
		wantError(t, err, InternalError)
		if !bytes.Equal(out, []byte("keep")) {
			t.Errorf("%s: dst changed to %q on error", name, out)
		}
		if _, err := AppendTableBody(nil, tab); err == nil {
			t.Errorf("%s: AppendTableBody accepted it", name)
		}
	}
	if _, err := AppendTable(nil, Table{{strings.Repeat("k", 255), nil}}); err != nil {
		t.Errorf("255-byte key rejected: %v", err)
	}
}

func TestTableBodyAMQPLAIN(t *testing.T) {
	// The AMQPLAIN response is a table without its length prefix.
	raw := []byte("\x05LOGINS\x00\x00\x00\x05guest\x08PASSWORDS\x00\x00\x00\x06secret")
	tab, err := DecodeTableBody(raw)
	if err != nil {
		t.Fatal(err)
	}
	want := Table{{"LOGIN", "guest"}, {"PASSWORD", "secret"}}
	if !reflect.DeepEqual(tab, want) {
		t.Fatalf("got %#v", tab)
	}
	enc, err := AppendTableBody(nil, tab)
	if err != nil || !bytes.Equal(enc, raw) {
		t.Fatalf("re-encoded %q (err %v)", enc, err)
	}
}

func TestTableGetWithWithout(t *testing.T) {
	orig := Table{{"a", int32(1)}, {"b", "x"}, {"a", int32(2)}}
	if v, ok := orig.Get("a"); !ok || v != int32(1) {
		t.Fatalf("Get(a) = %v, %v; want the first", v, ok)
	}
	if _, ok := orig.Get("missing"); ok {
		t.Fatal("Get(missing) found something")
	}
	if v, ok := (Table{{"v", nil}}).Get("v"); !ok || v != nil {
		t.Fatal("Get of a void field must report it present")
	}

	w := orig.With("a", "new")
	if want := (Table{{"a", "new"}, {"b", "x"}, {"a", int32(2)}}); !reflect.DeepEqual(w, want) {
		t.Fatalf("With replaced wrongly: %#v", w)
	}
	w2 := orig.With("c", true)
	if want := (Table{{"a", int32(1)}, {"b", "x"}, {"a", int32(2)}, {"c", true}}); !reflect.DeepEqual(w2, want) {
		t.Fatalf("With appended wrongly: %#v", w2)
	}
	wo := orig.Without("a", "zzz")
	if want := (Table{{"b", "x"}}); !reflect.DeepEqual(wo, want) {
		t.Fatalf("Without: %#v", wo)
	}
	if want := (Table{{"a", int32(1)}, {"b", "x"}, {"a", int32(2)}}); !reflect.DeepEqual(orig, want) {
		t.Fatalf("With/Without modified the receiver: %#v", orig)
	}
	// The copies must not share a backing array with the receiver.
	full := make(Table, 1, 8)
	full[0] = Field{"x", nil}
	a, b := full.With("p", 1), full.With("q", 2)
	if a[1].Key != "p" || b[1].Key != "q" {
		t.Fatal("With results share storage")
	}
	if got := Table(nil).With("k", 1); len(got) != 1 {
		t.Fatalf("With on nil: %#v", got)
	}
}

func TestTypeName(t *testing.T) {
	cases := map[string]any{
		"bool": true, "byte": int8(1), "unsignedbyte": uint8(1), "short": int16(1),
		"unsignedshort": uint16(1), "signedint": int32(1), "unsignedint": uint32(1),
		"float": float32(1), "double": 1.0, "decimal": Decimal{}, "longstr": "s",
		"binary": []byte{}, "array": []any{}, "timestamp": Timestamp(0), "table": Table{}, "void": nil,
	}
	for want, v := range cases {
		if got := TypeName(v); got != want {
			t.Errorf("TypeName(%T) = %q, want %q", v, got, want)
		}
	}
	if TypeName(int64(1)) != "long" || TypeName(1) != "long" {
		t.Error("int64 and int should be long")
	}
	if TypeName(uint64(1)) != "" {
		t.Error("unsupported types should have no name")
	}
	// Every decoded value has a name.
	got, err := DecodeTableBody(mustBody(t, everyType))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range got {
		if TypeName(f.Value) == "" {
			t.Errorf("decoded %T has no TypeName", f.Value)
		}
	}
}

func mustBody(t *testing.T, tab Table) []byte {
	t.Helper()
	b, err := AppendTableBody(nil, tab)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestFloatSpecials(t *testing.T) {
	tab := Table{{"inf", math.Inf(-1)}, {"negzero", math.Copysign(0, -1)}, {"f32inf", float32(math.Inf(1))}}
	enc, _ := AppendTable(nil, tab)
	got, _, err := DecodeTable(enc)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := got.Get("negzero"); !math.Signbit(v.(float64)) {
		t.Error("-0 lost its sign")
	}
}
