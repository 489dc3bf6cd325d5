package auth

import "testing"

// ".*" is matched without a regexp, for its kind only; "" matches nothing.
func TestPermissionPatternsPerKind(t *testing.T) {
	p, err := NewPermission(".*", "^u-", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		k    Access
		name string
		want bool
	}{
		{Configure, "anything", true},
		{Configure, "", true},
		{Write, "u-x", true},
		{Write, "x-u-", false},
		{Read, "u-x", false},
		{Read, "", false},
	} {
		if got := p.Allows(c.k, c.name); got != c.want {
			t.Errorf("%s %q: allowed %v, want %v", c.k, c.name, got, c.want)
		}
	}
}
