package topology

import (
	"testing"

	"github.com/brokerd/brokerd/amqp"
)

func TestTopicMatch(t *testing.T) {
	for _, c := range []struct {
		pattern, key string
		want         bool
	}{
		{"a.b", "a.b", true},
		{"a.b", "a.c", false},
		{"a.b", "a.b.c", false},
		{"a.b", "a", false},
		{"a.B", "a.b", false},

		{"*", "a", true},
		{"*", "a.b", false},
		{"*", "", false}, // the empty key has no words
		{"a.*", "a.b", true},
		{"a.*", "a", false},
		{"a.*", "a.b.c", false},
		{"a.*", "a.", true}, // "a." is "a" and an empty word
		{"*.*", "a.b", true},
		{"*.b.*", "a.b.c", true},
		{"*.b.*", "a.x.c", false},

		{"#", "", true},
		{"#", "a", true},
		{"#", "a.b.c", true},
		{"#", ".", true},
		{"a.#", "a", true}, // '#' matches zero words
		{"a.#", "a.b", true},
		{"a.#", "a.b.c", true},
		{"a.#", "b.a", false},
		{"a.#", "", false},
		{"#.a", "a", true},
		{"#.a", "x.y.a", true},
		{"#.a", "a.x", false},
		{"a.#.b", "a.b", true},
		{"a.#.b", "a.x.b", true},
		{"a.#.b", "a.x.y.b", true},
		{"a.#.b", "a.x.y", false},
		{"a.#.b", "a.b.x", false},
		{"a.#.b", "a..b", true},
		{"a.#.b.#", "a.b", true},
		{"#.#", "", true},
		{"#.#", "a.b", true},
		{"#.#.c", "c", true},
		{"#.*", "", false},
		{"#.*", "a", true},
		{"*.#", "a.b.c", true},
		{"*.#", "", false},
		{"#.b.#", "a.b.c", true},
		{"#.b.#", "b", true},
		{"#.b.#", "a.c", false},

		// Empty words are words.
		{"a..b", "a..b", true},
		{"a.*.b", "a..b", true},
		{"a.*.b", "a.b", false},
		{"*", ".", false}, // "." is two empty words
		{"*.*", ".", true},
		{"", "", true},
		{"", "a", false},
		{"a", "", false},
		{"a.", "a.", true},
		{"a.", "a", false},

		// Only whole words are wildcards.
		{"a*", "ab", false},
		{"a*", "a*", true},
		{"a#", "a", false},
		{"a.b#", "a.b", false},
	} {
		if got := topicMatch(c.pattern, c.key); got != c.want {
			t.Errorf("topicMatch(%q, %q) = %v, want %v", c.pattern, c.key, got, c.want)
		}
	}
}

func TestHeadersMatch(t *testing.T) {
	tbl := func(kv ...any) amqp.Table {
		var t amqp.Table
		for i := 0; i < len(kv); i += 2 {
			t = append(t, amqp.Field{Key: kv[i].(string), Value: kv[i+1]})
		}
		return t
	}
	for _, c := range []struct {
		name          string
		bind, headers amqp.Table
		want          bool
	}{
		{"all: every key equal", tbl("x-match", "all", "a", "1", "b", int32(2)), tbl("b", int64(2), "a", "1", "c", "extra"), true},
		{"all: one differs", tbl("x-match", "all", "a", "1", "b", int32(2)), tbl("a", "1", "b", int32(3)), false},
		{"all: one missing", tbl("x-match", "all", "a", "1", "b", int32(2)), tbl("a", "1"), false},
		{"all is the default", tbl("a", "1", "b", "2"), tbl("a", "1"), false},
		{"default matches", tbl("a", "1"), tbl("a", "1"), true},
		{"all: no keys matches anything", tbl("x-match", "all"), nil, true},
		{"no args at all", nil, tbl("a", "1"), true},
		{"any: one equal", tbl("x-match", "any", "a", "1", "b", "2"), tbl("b", "2"), true},
		{"any: none equal", tbl("x-match", "any", "a", "1", "b", "2"), tbl("a", "2", "c", "1"), false},
		{"any: no keys matches nothing", tbl("x-match", "any"), tbl("a", "1"), false},
		{"any: no headers", tbl("x-match", "any", "a", "1"), nil, false},

		{"all ignores x- binding keys", tbl("x-match", "all", "x-a", "1", "b", "2"), tbl("b", "2"), true},
		{"any ignores x- binding keys", tbl("x-match", "any", "x-a", "1"), tbl("x-a", "1"), false},
		{"all-with-x considers x- keys", tbl("x-match", "all-with-x", "x-a", "1", "b", "2"), tbl("b", "2"), false},
		{"all-with-x all present", tbl("x-match", "all-with-x", "x-a", "1", "b", "2"), tbl("b", "2", "x-a", "1"), true},
		{"any-with-x on an x- key", tbl("x-match", "any-with-x", "x-a", "1", "b", "2"), tbl("x-a", "1"), true},
		{"any-with-x none", tbl("x-match", "any-with-x", "x-a", "1"), tbl("x-a", "2"), false},
		{"x-match itself never compared", tbl("x-match", "all-with-x"), tbl("x-match", "any"), true},

		{"void matches presence", tbl("a", nil), tbl("a", "anything"), true},
		{"void matches a void header", tbl("a", nil), tbl("a", nil), true},
		{"void needs the key", tbl("a", nil), tbl("b", "1"), false},
		{"void in any", tbl("x-match", "any", "a", nil, "b", "1"), tbl("a", int32(0)), true},
		{"value does not match void header", tbl("a", "1"), tbl("a", nil), false},

		{"int32 binding, int64 header", tbl("n", int32(5)), tbl("n", int64(5)), true},
		{"uint8 binding, int16 header", tbl("n", uint8(5)), tbl("n", int16(5)), true},
		{"int vs different int", tbl("n", int32(5)), tbl("n", int64(6)), false},
		{"int vs string", tbl("n", int32(5)), tbl("n", "5"), false},
		{"string vs binary", tbl("s", "raw"), tbl("s", []byte("raw")), true},
		{"bool", tbl("f", true), tbl("f", true), true},
		{"bool differs", tbl("f", true), tbl("f", false), false},
		{"case matters", tbl("s", "a"), tbl("s", "A"), false},
		{"keys are case-sensitive", tbl("s", "a"), tbl("S", "a"), false},
	} {
		if got := headersMatch(c.bind, c.headers); got != c.want {
			t.Errorf("%s: headersMatch(%v, %v) = %v, want %v", c.name, c.bind, c.headers, got, c.want)
		}
	}
}

func TestValuesEqual(t *testing.T) {
	tb := amqp.Table{{Key: "k", Value: int32(1)}, {Key: "s", Value: "v"}}
	for _, c := range []struct {
		name string
		a, b any
		want bool
	}{
		{"int8/int64", int8(-3), int64(-3), true},
		{"uint32/int64", uint32(4000000000), int64(4000000000), true},
		{"int/int32", 7, int32(7), true},
		{"uint16/uint8", uint16(255), uint8(255), true},
		{"int differs", int64(1), int64(2), false},
		{"negative vs unsigned", int8(-1), uint8(255), false},
		{"int vs float", int32(1), 1.0, false},
		{"float32/float64", float32(1.5), 1.5, true},
		{"float differs", 1.5, 2.5, false},
		{"float vs int", 1.0, int64(1), false},
		{"strings", "a", "a", true},
		{"strings differ", "a", "b", false},
		{"string/binary", "ab", []byte("ab"), true},
		{"binary/string", []byte("ab"), "ab", true},
		{"binary/binary", []byte{0, 1}, []byte{0, 1}, true},
		{"binary differs", []byte{0, 1}, []byte{0, 2}, false},
		{"string vs bool", "true", true, false},
		{"bools", false, false, true},
		{"decimal", amqp.Decimal{Scale: 2, Value: 5}, amqp.Decimal{Scale: 2, Value: 5}, true},
		{"decimal scale", amqp.Decimal{Scale: 1, Value: 5}, amqp.Decimal{Scale: 2, Value: 5}, false},
		{"timestamp", amqp.Timestamp(10), amqp.Timestamp(10), true},
		{"timestamp vs int", amqp.Timestamp(10), int64(10), false},
		{"void", nil, nil, true},
		{"void vs value", nil, "", false},
		{"value vs void", "", nil, false},
		{"arrays", []any{int32(1), "x"}, []any{int64(1), []byte("x")}, true},
		{"arrays differ in length", []any{int32(1)}, []any{int32(1), int32(2)}, false},
		{"arrays differ", []any{int32(1)}, []any{int32(2)}, false},
		{"array vs table", []any{}, amqp.Table{}, false},
		{"tables", tb, amqp.Table{{Key: "k", Value: int64(1)}, {Key: "s", Value: "v"}}, true},
		{"tables differ", tb, amqp.Table{{Key: "k", Value: int32(1)}, {Key: "s", Value: "w"}}, false},
		{"tables differ in keys", tb, amqp.Table{{Key: "k", Value: int32(1)}, {Key: "t", Value: "v"}}, false},
		{"nested", []any{tb}, []any{amqp.Table{{Key: "k", Value: uint8(1)}, {Key: "s", Value: []byte("v")}}}, true},
	} {
		if got := amqp.ValuesEqual(c.a, c.b); got != c.want {
			t.Errorf("%s: amqp.ValuesEqual(%#v, %#v) = %v, want %v", c.name, c.a, c.b, got, c.want)
		}
	}
}
