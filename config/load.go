package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// SyntaxError is returned by Load when the file is not valid TOML. Err is the
// toml.ParseError; its ErrorWithPosition and ErrorWithUsage give a longer,
// annotated explanation.
type SyntaxError struct {
	File string
	Err  toml.ParseError
}

// Error returns "file:line:col: message (last key "k")".
func (e *SyntaxError) Error() string {
	p := e.Err.Position
	msg := fmt.Sprintf("%s:%d:%d: %s", e.File, p.Line, p.Col, e.Err.Message)
	if e.Err.LastKey != "" {
		msg += fmt.Sprintf(" (last key %q)", e.Err.LastKey)
	}
	return msg
}

// Unwrap returns the toml.ParseError.
func (e *SyntaxError) Unwrap() error { return e.Err }

// Load reads the TOML file at path over Default and validates the result.
// Keys the file leaves out keep their defaults, except that a file giving
// users or vhosts replaces the default list entirely.
//
// The error is a *SyntaxError for invalid TOML, a *ValidationError listing
// every unknown key, wrongly typed value and invalid value with its line, or
// an error from reading the file.
func Load(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read config: %w", err)
	}
	return parse(path, string(data))
}

// parse is Load after reading: path only names the file in messages.
func parse(path, text string) (Config, error) {
	// Decoding into a map rather than into Config lets one pass report every
	// unknown key and every type mismatch, each at its own line; decoding into
	// the struct stops at the first mismatch and has no per-element lines.
	var raw map[string]any
	if _, err := toml.Decode(text, &raw); err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return Config{}, &SyntaxError{File: path, Err: pe}
		}
		return Config{}, fmt.Errorf("parse config %s: %w", path, err)
	}

	c := Default()
	c.src = &origin{file: path, lines: lineIndex(text)}
	d := decoder{src: c.src}
	d.table("", raw, reflect.ValueOf(&c).Elem())

	// A value that failed to decode left its field at the default, or at the
	// zero value inside a new array element; Validate's opinion of that
	// stand-in would only repeat the decode problem.
	probs := d.probs
	var ve *ValidationError
	if err := c.Validate(); errors.As(err, &ve) {
		for _, p := range ve.Problems {
			if !d.failed(p.Key) {
				probs = append(probs, p)
			}
		}
	} else if err != nil {
		return Config{}, err
	}
	if len(probs) > 0 {
		sortProblems(probs)
		return Config{}, &ValidationError{File: path, Problems: probs}
	}
	return c, nil
}

// decoder assigns a decoded TOML tree to a struct, by the fields' toml tags,
// collecting a Problem for each key it cannot place.
type decoder struct {
	src   *origin
	probs []Problem
}

// failed reports whether decoding key, or anything inside it, failed.
func (d *decoder) failed(key string) bool {
	for _, p := range d.probs {
		if p.Key == key || strings.HasPrefix(p.Key, key+".") || strings.HasPrefix(p.Key, key+"[") {
			return true
		}
	}
	return false
}

func (d *decoder) problem(key, format string, args ...any) {
	d.probs = append(d.probs, Problem{Key: key, Line: d.src.line(key), Msg: fmt.Sprintf(format, args...)})
}

var (
	durationType = reflect.TypeFor[Duration]()
	byteSizeType = reflect.TypeFor[ByteSize]()
)

// table assigns the keys of m to the fields of the struct v.
func (d *decoder) table(path string, m map[string]any, v reflect.Value) {
	t := v.Type()
	fields := make(map[string]int, t.NumField())
	var names []string
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("toml"), ","); name != "" && name != "-" {
			fields[name] = i
			names = append(names, name)
		}
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		key := joinKey(path, k)
		i, ok := fields[k]
		if !ok {
			if s := suggest(k, names); s != "" {
				d.problem(key, "unknown key (did you mean %q?)", s)
			} else {
				d.problem(key, "unknown key")
			}
			continue
		}
		d.value(key, m[k], v.Field(i))
	}
}

// value assigns x to v, which is a field of one of Config's types.
func (d *decoder) value(key string, x any, v reflect.Value) {
	switch v.Type() {
	case durationType:
		s, ok := x.(string)
		if !ok {
			d.problem(key, "must be a duration string such as \"60s\", got %s", tomlType(x))
			return
		}
		var dur Duration
		if err := dur.UnmarshalText([]byte(s)); err != nil {
			d.problem(key, "%s", err.Error())
			return
		}
		v.Set(reflect.ValueOf(dur))
		return
	case byteSizeType:
		switch x := x.(type) {
		case int64:
			if x < 0 {
				d.problem(key, "must not be negative, got %d", x)
				return
			}
			v.SetUint(uint64(x))
		case string:
			b, err := ParseByteSize(x)
			if err != nil {
				d.problem(key, "%s", err.Error())
				return
			}
			v.SetUint(uint64(b))
		default:
			d.problem(key, "must be a number of bytes or a string with a unit such as \"50MB\", got %s", tomlType(x))
		}
		return
	}

	switch v.Kind() {
	case reflect.String:
		s, ok := x.(string)
		if !ok {
			d.problem(key, "must be a string, got %s", tomlType(x))
			return
		}
		v.SetString(s)
	case reflect.Int:
		n, ok := x.(int64)
		if !ok {
			d.problem(key, "must be an integer, got %s", tomlType(x))
			return
		}
		if v.OverflowInt(n) {
			d.problem(key, "%d is out of range", n)
			return
		}
		v.SetInt(n)
	case reflect.Float64:
		switch x := x.(type) {
		case float64:
			v.SetFloat(x)
		case int64:
			v.SetFloat(float64(x))
		default:
			d.problem(key, "must be a number, got %s", tomlType(x))
		}
	case reflect.Bool:
		b, ok := x.(bool)
		if !ok {
			d.problem(key, "must be true or false, got %s", tomlType(x))
			return
		}
		v.SetBool(b)
	case reflect.Struct:
		m, ok := x.(map[string]any)
		if !ok {
			d.problem(key, "must be a table ([%s]), got %s", key, tomlType(x))
			return
		}
		d.table(key, m, v)
	case reflect.Slice:
		d.slice(key, x, v)
	default:
		panic(fmt.Sprintf("config: no decoder for field %s of type %s", key, v.Type()))
	}
}

// slice assigns an array to v, replacing what v held.
func (d *decoder) slice(key string, x any, v reflect.Value) {
	var elems []any
	switch x := x.(type) {
	case []any:
		elems = x
	case []map[string]any:
		for _, m := range x {
			elems = append(elems, m)
		}
	}
	tables := v.Type().Elem().Kind() == reflect.Struct
	if elems == nil && !isArray(x) {
		if tables {
			d.problem(key, "must be an array of tables ([[%s]]), got %s", key, tomlType(x))
		} else {
			d.problem(key, "must be an array, got %s", tomlType(x))
		}
		return
	}
	out := reflect.MakeSlice(v.Type(), len(elems), len(elems))
	for i, e := range elems {
		d.value(indexKey(key, i), e, out.Index(i))
	}
	v.Set(out)
}

func isArray(x any) bool {
	switch x.(type) {
	case []any, []map[string]any:
		return true
	}
	return false
}

// tomlType names the TOML type of a decoded value, for messages.
func tomlType(x any) string {
	switch x.(type) {
	case string:
		return "string"
	case int64:
		return "integer"
	case float64:
		return "float"
	case bool:
		return "boolean"
	case time.Time:
		return "date-time"
	case []any, []map[string]any:
		return "array"
	case map[string]any:
		return "table"
	}
	return fmt.Sprintf("%T", x)
}

// suggest returns the name in names closest to k if it is a likely typo.
func suggest(k string, names []string) string {
	best, bestDist := "", 3
	for _, n := range names {
		if dist := editDistance(strings.ToLower(k), n); dist < bestDist && 2*dist <= len(n) {
			best, bestDist = n, dist
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// quoteList formats values for "want one of" messages.
func quoteList[T ~string](vs []T) string {
	q := make([]string, len(vs))
	for i, v := range vs {
		q[i] = strconv.Quote(string(v))
	}
	return strings.Join(q, ", ")
}
