package topology

import (
	"strings"

	"github.com/brokerd/brokerd/amqp"
)

// topicMatch reports whether a topic binding pattern matches a routing key.
// Words are separated by '.'; '*' matches exactly one word and '#' zero or
// more words (RabbitMQ's rules, including empty words: "a..b" has three).
func topicMatch(pattern, key string) bool {
	return topicWords(splitWords(pattern), splitWords(key))
}

// splitWords splits a key into words. The empty key has no words, not one
// empty word (rabbit_db_topic_exchange:split_topic_key_binary), so "*" does
// not match it.
func splitWords(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ".")
}

func topicWords(p, k []string) bool {
	for len(p) > 0 {
		switch p[0] {
		case "#":
			// Collapse runs of '#': they match the same as one.
			for len(p) > 1 && p[1] == "#" {
				p = p[1:]
			}
			if len(p) == 1 {
				return true
			}
			for i := 0; i <= len(k); i++ {
				if topicWords(p[1:], k[i:]) {
					return true
				}
			}
			return false
		case "*":
			if len(k) == 0 {
				return false
			}
		default:
			if len(k) == 0 || k[0] != p[0] {
				return false
			}
		}
		p, k = p[1:], k[1:]
	}
	return len(k) == 0
}

// headersMatch implements the headers exchange: the binding's x-match
// argument selects all (default) or any, and whether x- prefixed keys take
// part (all-with-x, any-with-x). A binding argument of type void matches a
// header with that key whatever its value; otherwise values must be equal
// (integers compare by value across widths, as RabbitMQ compares Erlang
// terms).
func headersMatch(bindArgs, headers amqp.Table) bool {
	mode := "all"
	if v, ok := bindArgs.Get("x-match"); ok {
		if s, ok := v.(string); ok {
			mode = s
		}
	}
	any := mode == "any" || mode == "any-with-x"
	withX := strings.HasSuffix(mode, "-with-x")
	considered := 0
	for _, f := range bindArgs {
		if f.Key == "x-match" || (!withX && strings.HasPrefix(f.Key, "x-")) {
			continue
		}
		considered++
		hv, present := headers.Get(f.Key)
		ok := present && (f.Value == nil || amqp.ValuesEqual(f.Value, hv))
		if any && ok {
			return true
		}
		if !any && !ok {
			return false
		}
	}
	// any: nothing matched; all: nothing failed.
	return !any
}
