package broker

import "testing"

// ".*" is matched without a regexp, for its kind only; "" matches nothing.
func TestPermissionPatternsPerKind(t *testing.T) {
	p, err := newPermission(".*", "^u-", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		k    permKind
		name string
		want bool
	}{
		{permConfigure, "anything", true},
		{permConfigure, "", true},
		{permWrite, "u-x", true},
		{permWrite, "x-u-", false},
		{permRead, "u-x", false},
		{permRead, "", false},
	} {
		if got := p.allows(c.k, c.name); got != c.want {
			t.Errorf("%s %q: allowed %v, want %v", c.k, c.name, got, c.want)
		}
	}
}
