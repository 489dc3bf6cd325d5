package mgmt

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

// jsonValues is an upper bound on the values decoding a JSON text makes.
func FuzzJSONValues(f *testing.F) {
	for _, s := range []string{`[0,0,0]`, `{"a":{"b":[1,"x,y",{"c":null}]}}`, `"a\"b,[{"`, `[]`, `{}`, `[[[]],{}]`, `1`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		n := jsonValues(b)
		var v any
		if json.Unmarshal(b, &v) != nil {
			return
		}
		var count func(any) int
		count = func(v any) int {
			c := 1
			switch x := v.(type) {
			case []any:
				for _, e := range x {
					c += count(e)
				}
			case map[string]any:
				for _, e := range x {
					c += count(e)
				}
			}
			return c
		}
		if c := count(v); c > n {
			t.Fatalf("jsonValues(%q) = %d, under the %d values it decodes to", b, n, c)
		}
	})
}

// A definitions file of any bytes is read or refused with a 400, never a
// panic.
func FuzzDecodeImport(f *testing.F) {
	for _, s := range []string{
		`{"users":[{"name":"u","password_hash":"","tags":"administrator"}],"queues":[{"name":"q","arguments":{"x":[1,2]}}]}`,
		`{"rabbit_version":"3.10","topic_permissions":[{"a":[1,{"b":2}]}],"global_parameters":[],"x":{"y":[[]]}}`,
		`{"queues":null,"bindings":[{"source":"x","arguments":null}]}`, `[1,2`, `{"users":[1]}`, `{} {}`,
	} {
		f.Add([]byte(s))
	}
	s := &Server{opts: Options{FrameMax: 4096}}
	f.Fuzz(func(t *testing.T, b []byte) {
		_, err := s.decodeImport(bytes.NewReader(b), 1<<20)
		var he *httpError
		if err != nil && (!errors.As(err, &he) || he.status != 400) {
			t.Fatalf("decodeImport(%q): %v, want a 400", b, err)
		}
	})
}
