package config

import (
	"strconv"
	"strings"
)

// BurntSushi/toml keeps key positions private and, for arrays of tables,
// keeps one position per key name rather than per element. So Load scans the
// (already parsed, hence valid) file once more with the small scanner below,
// which knows just enough TOML to map each key path to the line defining it:
// table headers, [[arrays]] (counting elements), dotted and quoted keys,
// inline tables and arrays (which may span lines), and the four string forms
// (whose contents may hold anything, including newlines, '#', '=' and '[').
//
// Paths are dotted; array elements are indexed: "amqp.tls.cert_file",
// "users[1].password", "auth.loopback_users[0]". A table's path maps to its
// header line.

// lineIndex returns the 1-based line of every key path defined in src.
// src must be valid TOML; on anything else the result is incomplete but
// lineIndex still terminates.
func lineIndex(src string) map[string]int {
	sc := &scanner{
		s:     strings.TrimPrefix(src, "\ufeff"),
		line:  1,
		lines: make(map[string]int),
		aot:   make(map[string]int),
	}
	sc.document()
	return sc.lines
}

type scanner struct {
	s     string
	i     int
	line  int
	lines map[string]int
	aot   map[string]int // array-of-tables path → elements seen so far
}

func joinKey(prefix, k string) string {
	if prefix == "" {
		return k
	}
	return prefix + "." + k
}

func indexKey(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

func (sc *scanner) record(path string, line int) {
	if _, ok := sc.lines[path]; !ok {
		sc.lines[path] = line
	}
}

func (sc *scanner) peek() byte {
	if sc.i < len(sc.s) {
		return sc.s[sc.i]
	}
	return 0
}

func (sc *scanner) eof() bool { return sc.i >= len(sc.s) }

// advance moves past n bytes, counting newlines.
func (sc *scanner) advance(n int) {
	for ; n > 0 && sc.i < len(sc.s); n-- {
		if sc.s[sc.i] == '\n' {
			sc.line++
		}
		sc.i++
	}
}

// skipSpace skips blanks within a line.
func (sc *scanner) skipSpace() {
	for !sc.eof() {
		switch sc.peek() {
		case ' ', '\t', '\r':
			sc.i++
		default:
			return
		}
	}
}

// skipBlank skips blanks, comments and newlines.
func (sc *scanner) skipBlank() {
	for !sc.eof() {
		switch sc.peek() {
		case ' ', '\t', '\r', '\n':
			sc.advance(1)
		case '#':
			for !sc.eof() && sc.peek() != '\n' {
				sc.i++
			}
		default:
			return
		}
	}
}

func (sc *scanner) document() {
	table := ""
	for {
		sc.skipBlank()
		if sc.eof() {
			return
		}
		start, line := sc.i, sc.line
		if sc.peek() == '[' {
			array := strings.HasPrefix(sc.s[sc.i:], "[[")
			if array {
				sc.advance(2)
			} else {
				sc.advance(1)
			}
			table = sc.header(sc.key(), array, line)
			sc.skipSpace()
			for sc.peek() == ']' {
				sc.advance(1)
			}
		} else {
			path := table
			for _, seg := range sc.key() {
				path = joinKey(path, seg)
				sc.record(path, line)
			}
			sc.skipSpace()
			if sc.peek() == '=' {
				sc.advance(1)
				sc.skipSpace()
				sc.value(path)
			}
		}
		if sc.i == start { // not TOML; make progress regardless
			sc.advance(1)
		}
	}
}

// header resolves a table header to its path: a segment naming an array of
// tables refers to its last element, and a [[header]] appends an element.
func (sc *scanner) header(segs []string, array bool, line int) string {
	path := ""
	for j, seg := range segs {
		path = joinKey(path, seg)
		sc.record(path, line)
		n, isArray := sc.aot[path]
		if array && j == len(segs)-1 {
			sc.aot[path] = n + 1
			path = indexKey(path, n)
			sc.record(path, line)
		} else if isArray && n > 0 {
			path = indexKey(path, n-1)
		}
	}
	return path
}

// key reads a possibly dotted key and returns its segments.
func (sc *scanner) key() []string {
	var segs []string
	for {
		sc.skipSpace()
		switch sc.peek() {
		case '"':
			start := sc.i
			sc.basicString()
			raw := sc.s[start:sc.i]
			if u, err := strconv.Unquote(raw); err == nil {
				segs = append(segs, u)
			} else {
				segs = append(segs, strings.Trim(raw, `"`))
			}
		case '\'':
			start := sc.i
			sc.literalString()
			segs = append(segs, strings.Trim(sc.s[start:sc.i], "'"))
		default:
			start := sc.i
			for !sc.eof() && !strings.ContainsRune(" \t\r\n=.[]#\"'{},", rune(sc.peek())) {
				sc.i++
			}
			if sc.i == start {
				return segs
			}
			segs = append(segs, sc.s[start:sc.i])
		}
		sc.skipSpace()
		if sc.peek() != '.' {
			return segs
		}
		sc.advance(1)
	}
}

// value skips one value, recording the keys and elements inside inline
// tables and arrays under path.
func (sc *scanner) value(path string) {
	switch {
	case strings.HasPrefix(sc.s[sc.i:], `"""`):
		sc.multiline(`"""`, true)
	case strings.HasPrefix(sc.s[sc.i:], `'''`):
		sc.multiline(`'''`, false)
	case sc.peek() == '"':
		sc.basicString()
	case sc.peek() == '\'':
		sc.literalString()
	case sc.peek() == '[':
		sc.advance(1)
		for n := 0; ; {
			sc.skipBlank()
			switch sc.peek() {
			case 0:
				return
			case ']':
				sc.advance(1)
				return
			case ',':
				sc.advance(1)
				continue
			}
			start := sc.i
			elem := indexKey(path, n)
			sc.record(elem, sc.line)
			sc.value(elem)
			n++
			if sc.i == start {
				sc.advance(1)
			}
		}
	case sc.peek() == '{':
		sc.advance(1)
		for {
			sc.skipBlank()
			switch sc.peek() {
			case 0:
				return
			case '}':
				sc.advance(1)
				return
			case ',':
				sc.advance(1)
				continue
			}
			start, line := sc.i, sc.line
			p := path
			for _, seg := range sc.key() {
				p = joinKey(p, seg)
				sc.record(p, line)
			}
			sc.skipSpace()
			if sc.peek() == '=' {
				sc.advance(1)
				sc.skipSpace()
				sc.value(p)
			}
			if sc.i == start {
				sc.advance(1)
			}
		}
	default: // number, boolean, date-time: may contain spaces, never these
		for !sc.eof() && !strings.ContainsRune(",]}#\n", rune(sc.peek())) {
			sc.i++
		}
	}
}

// basicString skips a "..." string.
func (sc *scanner) basicString() {
	sc.advance(1)
	for !sc.eof() {
		switch sc.peek() {
		case '\\':
			sc.advance(2)
		case '"':
			sc.advance(1)
			return
		case '\n': // unterminated; stop at the line end
			return
		default:
			sc.i++
		}
	}
}

// literalString skips a '...' string.
func (sc *scanner) literalString() {
	sc.advance(1)
	for !sc.eof() {
		switch sc.peek() {
		case '\'':
			sc.advance(1)
			return
		case '\n':
			return
		default:
			sc.i++
		}
	}
}

// multiline skips a """...""" or ”'...”' string. Up to two quotes may
// directly precede the closing delimiter and belong to the content.
func (sc *scanner) multiline(delim string, escapes bool) {
	sc.advance(3)
	for !sc.eof() {
		if escapes && sc.peek() == '\\' {
			sc.advance(2)
			continue
		}
		if strings.HasPrefix(sc.s[sc.i:], delim) {
			sc.advance(3)
			for extra := 0; extra < 2 && sc.peek() == delim[0]; extra++ {
				sc.advance(1)
			}
			return
		}
		sc.advance(1)
	}
}
