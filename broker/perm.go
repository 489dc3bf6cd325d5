package broker

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"net"
	"regexp"

	"github.com/brokerd/brokerd/amqp"
)

// User is an account. Passwords are kept only as RabbitMQ-compatible
// salted SHA-256 hashes (rabbit_password_hashing_sha256): base64 of a
// 4-byte salt followed by sha256(salt ++ password).
type User struct {
	Name         string
	PasswordHash string
	Tags         []string
	// LoopbackOnly users may connect only from a loopback address (the
	// default for guest, as in RabbitMQ).
	LoopbackOnly bool
	// Permissions by vhost.
	Permissions map[string]*Permission
}

// Permission holds the configure/write/read patterns of a user in a vhost.
// Patterns are unanchored regular expressions, as in RabbitMQ; "" matches
// nothing.
type Permission struct {
	Configure, Write, Read string
	configure, write, read *regexp.Regexp
	// any is set per kind whose pattern is ".*" (RabbitMQ's default, and
	// guest's): it matches every name, so no regexp runs per publish.
	any [3]bool
}

// NewPermission compiles the three patterns.
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
			return nil, fmt.Errorf("compile permission pattern %q: %w", x.src, err)
		}
	}
	return p, nil
}

type permKind int

const (
	permConfigure permKind = iota
	permWrite
	permRead
)

func (k permKind) String() string {
	return [...]string{"configure", "write", "read"}[k]
}

func (p *Permission) allows(k permKind, name string) bool {
	if p.any[k] {
		return true
	}
	re := [...]*regexp.Regexp{p.configure, p.write, p.read}[k]
	return re != nil && re.MatchString(name)
}

// HashPassword returns a RabbitMQ-compatible SHA-256 password hash.
func HashPassword(password string) string {
	var salt [4]byte
	if _, err := rand.Read(salt[:]); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	return hashWithSalt(salt[:], password)
}

func hashWithSalt(salt []byte, password string) string {
	h := sha256.Sum256(append(append([]byte(nil), salt...), password...))
	return base64.StdEncoding.EncodeToString(append(append([]byte(nil), salt...), h[:]...))
}

// CheckPassword reports whether password matches the stored hash.
func (u *User) CheckPassword(password string) bool {
	raw, err := base64.StdEncoding.DecodeString(u.PasswordHash)
	if err != nil || len(raw) != 4+sha256.Size {
		return false
	}
	want := hashWithSalt(raw[:4], password)
	return subtle.ConstantTimeCompare([]byte(want), []byte(u.PasswordHash)) == 1
}

func isLoopback(addr net.Addr) bool {
	switch a := addr.(type) {
	case *net.TCPAddr:
		return a.IP.IsLoopback()
	case *net.UnixAddr:
		return true
	}
	return false
}

// SetPermissions gives user the configure, write and read patterns in
// vhost, replacing those it had there. Connections opened afterwards use
// them; open connections keep the permissions they were opened with.
func (b *Broker) SetPermissions(user, vhost, configure, write, read string) error {
	p, err := NewPermission(configure, write, read)
	if err != nil {
		return fmt.Errorf("set permissions of user '%s' in vhost '%s': %w", user, vhost, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	u := b.users[user]
	switch {
	case u == nil:
		return fmt.Errorf("set permissions: no user '%s'", user)
	case b.vhosts[vhost] == nil:
		return fmt.Errorf("set permissions: no vhost '%s'", vhost)
	}
	u.Permissions[vhost] = p
	return nil
}

// checkPerm enforces the user's permission on a resource of the
// connection's vhost. The default exchange is named amq.default in
// permission patterns and errors, as in RabbitMQ.
func (c *conn) checkPerm(k permKind, kind, name string) *amqp.Error {
	if kind == "exchange" && name == "" {
		name = "amq.default"
	}
	if c.perm != nil && c.perm.allows(k, name) {
		return nil
	}
	return amqp.Errorf(amqp.AccessRefused, "%s access to %s '%s' in vhost '%s' refused for user '%s'",
		k, kind, name, c.vhost.Name, c.user.Name)
}

// checkDLXPerms: declaring a queue with x-dead-letter-exchange also needs
// read on the queue and write on the DLX (B63). A DLX set by policy is not
// checked.
func (c *conn) checkDLXPerms(queue string, args amqp.Table) *amqp.Error {
	v, ok := args.Get("x-dead-letter-exchange")
	if !ok {
		return nil
	}
	dlx, _ := v.(string)
	if err := c.checkPerm(permRead, "queue", queue); err != nil {
		return err
	}
	return c.checkPerm(permWrite, "exchange", dlx)
}
