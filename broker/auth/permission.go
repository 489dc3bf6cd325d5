package auth

import (
	"regexp"
	"strings"
)

// Permission holds the configure/write/read patterns of a user in a vhost.
// Patterns are unanchored regular expressions, as in RabbitMQ; "" matches
// nothing. Never changed once made (a change installs a new one), so it
// may be read from any goroutine without a lock.
type Permission struct {
	// Configure, Write and Read are the patterns' sources.
	Configure, Write, Read string
	configure, write, read *regexp.Regexp
	// any is set per kind whose pattern is ".*" (RabbitMQ's default, and
	// guest's): it matches every name, so no regexp runs per publish.
	any [3]bool
}

// NewPermission compiles the three patterns; a bad one is a
// *base.InvalidError.
func NewPermission(configure, write, read string) (*Permission, error) {
	p := &Permission{Configure: configure, Write: write, Read: read}
	var err error
	for i, x := range []struct {
		src string
		dst **regexp.Regexp
	}{{configure, &p.configure}, {write, &p.write}, {read, &p.read}} {
		if x.src == "" {
			continue
		}
		p.any[i] = x.src == ".*"
		if *x.dst, err = regexp.Compile(x.src); err != nil {
			return nil, invalidf("invalid_regexp: %q: %s", x.src, strings.TrimPrefix(err.Error(), "error parsing regexp: "))
		}
	}
	return p, nil
}

// Access is a kind of access a permission grants: Configure, Write or
// Read.
type Access int

// The kinds of access, as RabbitMQ names them.
const (
	Configure Access = iota
	Write
	Read
)

func (k Access) String() string {
	return [...]string{"configure", "write", "read"}[k]
}

// Allows reports whether p grants access k to the resource name (a queue
// or exchange name; the default exchange is "amq.default"). A ".*" pattern
// allows without running its regexp.
func (p *Permission) Allows(k Access, name string) bool {
	if p.any[k] {
		return true
	}
	re := [...]*regexp.Regexp{p.configure, p.write, p.read}[k]
	return re != nil && re.MatchString(name)
}

// PermissionInfo is a user's permissions in a vhost: the sources of the
// configure, write and read patterns.
type PermissionInfo struct {
	User, VHost, Configure, Write, Read string
}
