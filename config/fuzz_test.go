package config

import (
	"os"
	"testing"

	"github.com/BurntSushi/toml"
)

// FuzzParse checks that no input makes Load's parsing, line indexing or
// validation panic or hang, that whatever it accepts validates, and that the
// line index finds every key BurntSushi/toml decodes.
func FuzzParse(f *testing.F) {
	example, err := os.ReadFile("brokerd.example.toml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(example))
	f.Add("[[users]]\nname = \"a\"\npassword = \"\"\"p\"\"\"\"\"\n[users.x]\ny = { z = [1, { w = '''}'''}] }\n")
	f.Add("a.b.\"c.d\" = 1\n[amqp]\ntls = { listen = \"\" }\n")
	f.Add("s = \"\"\"a\\\n  b\"\"\"\nt = 1979-05-27 07:32:00Z\n[[x.y]]\n[[x.y]]\nz = [[1], [2, [3]]]\n")
	f.Fuzz(func(t *testing.T, text string) {
		lines := lineIndex(text)
		var raw map[string]any
		if _, err := toml.Decode(text, &raw); err == nil {
			checkIndexed(t, "", raw, lines)
		}
		c, err := parse("fuzz.toml", text)
		if err == nil {
			if err := c.Validate(); err != nil {
				t.Fatalf("parse accepted a config that does not validate: %v", err)
			}
		}
	})
}

// checkIndexed fails t if some key path in the decoded value x has no line.
func checkIndexed(t *testing.T, path string, x any, lines map[string]int) {
	t.Helper()
	if path != "" && lines[path] == 0 {
		t.Fatalf("no line for %q; index: %v", path, lines)
	}
	switch x := x.(type) {
	case map[string]any:
		for k, v := range x {
			checkIndexed(t, joinKey(path, k), v, lines)
		}
	case []map[string]any:
		for i, v := range x {
			checkIndexed(t, indexKey(path, i), v, lines)
		}
	case []any:
		for i, v := range x {
			checkIndexed(t, indexKey(path, i), v, lines)
		}
	}
}
