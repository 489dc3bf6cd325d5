package mgmt

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
)

// Request bodies take scalars in the forms RabbitMQ's management plugin
// takes them (rabbit_misc:parse_bool/1, parse_int/1), because its own
// clients send them so: rabbitmqadmin sends every declare option as a
// string ("durable": "true", "count": "1"). A value of the wrong form is
// refused with a 400 naming the field (fieldError).

// jsonBool is a boolean field: true, false, or the string "true" or
// "false" (parse_bool). null leaves it unset, as absence does.
type jsonBool bool

func (v *jsonBool) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case "true", `"true"`:
		*v = true
	case "false", `"false"`:
		*v = false
	case "null":
	default:
		return typeError(b, reflect.TypeFor[jsonBool]())
	}
	return nil
}

// jsonInt is an integer field: a JSON number (a fraction is truncated,
// as parse_int truncates a float) or a string of decimal digits
// ("count": "1").
type jsonInt int64

func (n *jsonInt) UnmarshalJSON(b []byte) error {
	if s, ok := strings.CutPrefix(string(b), `"`); ok {
		i, err := strconv.ParseInt(strings.TrimSuffix(s, `"`), 10, 64)
		if err != nil || !strings.HasSuffix(s, `"`) {
			return typeError(b, reflect.TypeFor[jsonInt]())
		}
		*n = jsonInt(i)
		return nil
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil || math.IsInf(f, 0) || math.Abs(f) >= 1<<63 {
		return typeError(b, reflect.TypeFor[jsonInt]())
	}
	*n = jsonInt(math.Trunc(f))
	return nil
}

// typeError is what a field's decoder returns for a value of the wrong
// form: encoding/json fills in the field's name (Field) on its way out,
// which it does for no other error a decoder returns.
func typeError(b []byte, t reflect.Type) error {
	return &json.UnmarshalTypeError{Value: string(bytes.TrimSpace(b)), Type: t}
}

// fieldError turns a decoding error into the 400 a client sees: the field
// (its path, for a nested one), the form expected and the value given.
// Anything else the decoder says means the body is not JSON: RabbitMQ's
// "not_json".
func fieldError(err error) error {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) || te.Field == "" {
		return badRequest("not_json")
	}
	got := te.Value // ours give the value, encoding/json's its JSON type
	if word, ok := jsonTypeWords[got]; ok {
		got = word
	}
	return badRequest("%s: expected %s, got %s", te.Field, describeType(te.Type), got)
}

var jsonTypeWords = map[string]string{"number": "a number", "string": "a string", "bool": "a boolean",
	"array": "a list", "object": "an object"}

// describeType says in words what a field of type t takes.
func describeType(t reflect.Type) string {
	switch t {
	case reflect.TypeFor[jsonBool]():
		return `a boolean (true, false, "true" or "false")`
	case reflect.TypeFor[jsonInt]():
		return "an integer (a number, or a string of digits)"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Pointer:
		return describeType(t.Elem())
	}
	return fmt.Sprintf("a %s", t)
}
