package auth_test

import (
	"errors"
	"testing"

	"github.com/brokerd/brokerd/broker/auth"
	"github.com/brokerd/brokerd/broker/base"
)

// ".*" is matched without a regexp, for its kind only; "" matches nothing.
func TestPermissionPatternsPerKind(t *testing.T) {
	p, err := auth.NewPermission(".*", "^u-", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		k    auth.Access
		name string
		want bool
	}{
		{auth.Configure, "anything", true},
		{auth.Configure, "", true},
		{auth.Write, "u-x", true},
		{auth.Write, "x-u-", false},
		{auth.Read, "u-x", false},
		{auth.Read, "", false},
	} {
		if got := p.Allows(c.k, c.name); got != c.want {
			t.Errorf("%s %q: allowed %v, want %v", c.k, c.name, got, c.want)
		}
	}
}

// Patterns are unanchored regular expressions, one per kind of access;
// "" matches nothing, ".*" everything (without a regexp).
func TestPermissionPatterns(t *testing.T) {
	for _, tc := range []struct {
		configure, write, read string
		k                      auth.Access
		name                   string
		want                   bool
	}{
		{".*", "", "", auth.Configure, "", true},
		{".*", "", "", auth.Write, "x", false},
		{"", "", "", auth.Read, "", false},
		{"^amq\\.", "", "", auth.Configure, "amq.topic", true},
		{"^amq\\.", "", "", auth.Configure, "x.amq.topic", false},
		{"", "orders", "", auth.Write, "my-orders-dlq", true}, // unanchored
		{"", "^orders$", "", auth.Write, "orders", true},
		{"", "^orders$", "", auth.Write, "orders2", false},
		{"", "", "^(a|b)$", auth.Read, "b", true},
		{"", "", "^(a|b)$", auth.Read, "c", false},
		{"", "^amq\\.default$", "", auth.Write, "amq.default", true},
		{"^$", "", "", auth.Configure, "", true},
		{"^$", "", "", auth.Configure, "x", false},
		{".*x", "", "", auth.Configure, "abx", true}, // not the ".*" shortcut
		{".*x", "", "", auth.Configure, "ab", false},
		{".*", ".*", ".*", auth.Read, "anything at all", true},
	} {
		p, err := auth.NewPermission(tc.configure, tc.write, tc.read)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Allows(tc.k, tc.name); got != tc.want {
			t.Errorf("%q/%q/%q: %s %q allowed %v, want %v", tc.configure, tc.write, tc.read, tc.k, tc.name, got, tc.want)
		}
		if p.Configure != tc.configure || p.Write != tc.write || p.Read != tc.read {
			t.Errorf("sources %q/%q/%q, want %q/%q/%q", p.Configure, p.Write, p.Read, tc.configure, tc.write, tc.read)
		}
	}
}

// A pattern that does not compile is an *base.InvalidError, with
// RabbitMQ's invalid_regexp and Go's reason.
func TestPermissionInvalid(t *testing.T) {
	for _, tc := range []struct {
		configure, write, read string
		err                    string
	}{
		{"(", ".*", ".*", "invalid_regexp: \"(\": missing closing ): `(`"},
		{".*", "[a", ".*", "invalid_regexp: \"[a\": missing closing ]: `[a`"},
		{".*", ".*", "a**", "invalid_regexp: \"a**\": invalid nested repetition operator: `**`"},
	} {
		_, err := auth.NewPermission(tc.configure, tc.write, tc.read)
		var ie *base.InvalidError
		if !errors.As(err, &ie) || ie.Msg != tc.err {
			t.Errorf("%q/%q/%q: error %v, want *base.InvalidError %q", tc.configure, tc.write, tc.read, err, tc.err)
		}
	}
}

func TestAccessString(t *testing.T) {
	for k, want := range map[auth.Access]string{auth.Configure: "configure", auth.Write: "write", auth.Read: "read"} {
		if k.String() != want {
			t.Errorf("%d: %q, want %q", int(k), k.String(), want)
		}
	}
}
