package config

import (
	"testing"

	"github.com/BurntSushi/toml"
)

func TestLineIndex(t *testing.T) {
	src := `# comment [not.a.table]
top = 1
[amqp]   # trailing comment
listen = "a # not a comment [x]"
heartbeat = """
multi
line = "x"
[fake]
"""
frame_max = 4096
'quoted.key' = 1
"esc\"aped" = 2
dotted.inner.key = 3

[amqp.tls]
cert_file = '''
x'''
key_file = "k"

[[users]]
name = "a"
tags = [
  "administrator", # comment, with ] bracket
  "monitoring",
]
[[users]]
name = "b"
password = """ends with quotes"""""
inline = { x = 1, y = { z = "}" },
  w = 2 }
[[users]]

arr = [{ name = "p" }, { name = "q",
  extra = 1 }]
when = 1979-05-27 07:32:00Z
[users.sub]
k = 1
`
	// The scanner relies on its input being valid TOML.
	var m map[string]any
	if _, err := toml.Decode(src, &m); err != nil {
		t.Fatalf("test input is not valid TOML: %v", err)
	}
	want := map[string]int{
		"top":                   2,
		"amqp":                  3,
		"amqp.listen":           4,
		"amqp.heartbeat":        5,
		"amqp.frame_max":        10,
		"amqp.quoted.key":       11,
		`amqp.esc"aped`:         12,
		"amqp.dotted":           13,
		"amqp.dotted.inner.key": 13,
		"amqp.tls":              15,
		"amqp.tls.cert_file":    16,
		"amqp.tls.key_file":     18,
		"users":                 20,
		"users[0]":              20,
		"users[0].name":         21,
		"users[0].tags":         22,
		"users[0].tags[0]":      23,
		"users[0].tags[1]":      24,
		"users[1]":              26,
		"users[1].name":         27,
		"users[1].password":     28,
		"users[1].inline.x":     29,
		"users[1].inline.y.z":   29,
		"users[1].inline.w":     30,
		"users[2]":              31,
		"users[2].arr[0].name":  33,
		"users[2].arr[1].name":  33,
		"users[2].arr[1].extra": 34,
		"users[2].when":         35,
		"users[2].sub":          36,
		"users[2].sub.k":        37,
	}
	got := lineIndex(src)
	for k, line := range want {
		if got[k] != line {
			t.Errorf("line of %q = %d; want %d", k, got[k], line)
		}
	}
	for _, k := range []string{"fake", "amqp.fake", "not", "line", "amqp.line"} {
		if l, ok := got[k]; ok {
			t.Errorf("found key %q at line %d inside a string or comment", k, l)
		}
	}
}

// Invalid input must not hang the scanner.
func TestLineIndexTerminates(t *testing.T) {
	for _, src := range []string{"[", "[[", "a = [", "a = {", `a = "`, `a = """`, "= = =", "]]]", "a.=", "\ufeff[x]\ny=1", "{}", "a = [}"} {
		lineIndex(src)
	}
}
