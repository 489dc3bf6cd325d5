package broker

import (
	"crypto/md5"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/defs"
	"github.com/brokerd/brokerd/internal/loginlimit"
)

// Password hashing algorithms, by the names RabbitMQ gives them (its
// definitions files and HTTP API carry them as hashing_algorithm). A hash
// is base64(salt ++ H(salt ++ password)) with a 4-byte random salt, as
// rabbit_password does.
const (
	HashSHA256 = "rabbit_password_hashing_sha256" // the default
	HashSHA512 = "rabbit_password_hashing_sha512"
	HashMD5    = "rabbit_password_hashing_md5"
)

const saltLen = 4

type hashAlg struct {
	name string
	sum  func([]byte) []byte
}

var hashAlgs = []*hashAlg{
	{HashSHA256, func(b []byte) []byte { h := sha256.Sum256(b); return h[:] }},
	{HashSHA512, func(b []byte) []byte { h := sha512.Sum512(b); return h[:] }},
	{HashMD5, func(b []byte) []byte { h := md5.Sum(b); return h[:] }},
}

// hashAlgorithm returns the algorithm named name ("" is the default,
// SHA-256), or nil.
func hashAlgorithm(name string) *hashAlg {
	if name == "" {
		return hashAlgs[0]
	}
	for _, a := range hashAlgs {
		if a.name == name {
			return a
		}
	}
	return nil
}

func (a *hashAlg) salted(salt []byte, password string) []byte {
	return append(append([]byte(nil), salt...), a.sum(append(append([]byte(nil), salt...), password...))...)
}

// HashPassword returns a RabbitMQ-compatible SHA-256 password hash of
// password with a fresh random salt, in base64 as RabbitMQ's definitions
// files and `rabbitmqctl hash_password` carry it.
func HashPassword(password string) string {
	return base64.StdEncoding.EncodeToString(hashAlgs[0].salted(newSalt(), password))
}

func newSalt() []byte {
	salt := make([]byte, saltLen)
	if _, err := rand.Read(salt); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err)) // never fails on supported platforms
	}
	return salt
}

// user is an account. A record is never changed once made: PutUser
// replaces it, so a pointer read under Broker.mu may be used without it.
type user struct {
	name string
	alg  *hashAlg
	hash []byte // salt ++ digest; empty: no password, no password login
	tags []string
}

// checkPassword reports whether password matches the stored hash, in time
// independent of where they differ. A user without a hash matches nothing.
func (u *user) checkPassword(password string) bool {
	if len(u.hash) < saltLen {
		return false
	}
	want := u.alg.salted(u.hash[:saltLen], password)
	return subtle.ConstantTimeCompare(want, u.hash) == 1
}

func (u *user) hasTag(tag string) bool { return slices.Contains(u.tags, tag) }

func (u *user) info() UserInfo {
	ui := UserInfo{Name: u.name, HashingAlgorithm: u.alg.name, Tags: slices.Clone(u.tags)}
	if len(u.hash) > 0 {
		ui.PasswordHash = base64.StdEncoding.EncodeToString(u.hash)
	}
	return ui
}

// UserInfo describes a user as RabbitMQ's HTTP API and definitions show
// it: the password only as its hash (base64, "" when the user has none)
// and the algorithm that made it.
type UserInfo struct {
	Name, PasswordHash, HashingAlgorithm string
	Tags                                 []string
}

// UserSpec creates or replaces a user. At most one of Password (hashed
// here with HashingAlgorithm) and PasswordHash (base64 of salt ++ digest,
// as RabbitMQ exports it, made with HashingAlgorithm) is set; "" is
// SHA-256 (HashSHA256);
// with neither the user has no password and cannot log in with one, as
// RabbitMQ allows. Tags are free-form, as in RabbitMQ (administrator,
// monitoring, policymaker, management, impersonator mean something).
type UserSpec struct {
	Name, Password, PasswordHash, HashingAlgorithm string
	Tags                                           []string
}

// newUser validates spec and makes its record.
func newUser(spec UserSpec) (*user, error) {
	if spec.Name == "" {
		return nil, invalidf("user name must not be empty")
	}
	if spec.Password != "" && spec.PasswordHash != "" {
		return nil, invalidf("both_password_and_password_hash_are_provided")
	}
	alg := hashAlgorithm(spec.HashingAlgorithm)
	if alg == nil {
		return nil, invalidf("unknown password hashing algorithm '%s': want one of %s, %s, %s",
			spec.HashingAlgorithm, HashSHA256, HashSHA512, HashMD5)
	}
	u := &user{name: spec.Name, alg: alg}
	switch {
	case spec.Password != "":
		u.hash = alg.salted(newSalt(), spec.Password)
	case spec.PasswordHash != "":
		h, err := base64.StdEncoding.DecodeString(spec.PasswordHash)
		if err != nil {
			return nil, invalidf("not_base64: password_hash '%s' of user '%s' is not base64", spec.PasswordHash, spec.Name)
		}
		// RabbitMQ takes a hash of any length; one shorter than a salt
		// and digest just never matches a password.
		u.hash = h
	}
	for _, t := range spec.Tags {
		if t != "" && !slices.Contains(u.tags, t) {
			u.tags = append(u.tags, t)
		}
	}
	return u, nil
}

// Users returns every user, sorted by name. Safe for concurrent use.
func (b *Broker) Users() []UserInfo {
	b.mu.RLock()
	out := make([]UserInfo, 0, len(b.users))
	for _, u := range b.users {
		out = append(out, u.info())
	}
	b.mu.RUnlock()
	slices.SortFunc(out, func(a, b UserInfo) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// User returns the named user.
func (b *Broker) User(name string) (UserInfo, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	u := b.users[name]
	if u == nil {
		return UserInfo{}, false
	}
	return u.info(), true
}

// PutUser creates a user or replaces one (password, tags), keeping its
// permissions, and returns once the change is durable. Open connections of
// the user stay open (as in RabbitMQ) and see the new tags at once.
// Invalid specs are refused with an *InvalidError and change nothing.
func (b *Broker) PutUser(spec UserSpec) error {
	u, err := newUser(spec)
	if err != nil {
		return err
	}
	b.authMu.Lock()
	defer b.authMu.Unlock()
	b.mu.Lock()
	old := b.users[u.name]
	b.setUserLocked(u.name, u)
	var mb defs.Batch
	mb.Put(defs.EncodeUser(userDefOf(u)))
	w := b.startMeta(&mb)
	b.mu.Unlock()
	if err := w.waitErr(); err != nil {
		b.mu.Lock()
		b.setUserLocked(u.name, old)
		b.mu.Unlock()
		return fmt.Errorf("put user '%s': %w", u.name, err)
	}
	return nil
}

// setUserLocked installs u (nil: none) as the record of name, for new
// logins and for the open connections of name. Caller holds b.mu.
func (b *Broker) setUserLocked(name string, u *user) {
	if u == nil {
		delete(b.users, name)
		return
	}
	b.users[name] = u
	for c := range b.conns {
		if c.userName == name {
			c.user.Store(u)
		}
	}
}

// DeleteUser deletes a user and its permissions in every vhost, and closes
// its open connections with 320 CONNECTION_FORCED, as RabbitMQ does. It
// returns once the deletion is durable; the connections close after.
func (b *Broker) DeleteUser(name string) error {
	b.authMu.Lock()
	defer b.authMu.Unlock()
	b.mu.Lock()
	old := b.users[name]
	if old == nil {
		b.mu.Unlock()
		return notFoundf("no user '%s'", name)
	}
	delete(b.users, name)
	var mb defs.Batch
	mb.Delete(defs.UserKey(name))
	oldPerms := map[permKey]*permission{}
	for k, p := range b.perms {
		if k.user == name {
			oldPerms[k] = p
			delete(b.perms, k)
			mb.Delete(defs.PermKey(k.vhost, k.user))
		}
	}
	// Until they are gone its connections may do nothing.
	var conns []*conn
	for c := range b.conns {
		if c.userName == name {
			c.perm.Store(nil)
			conns = append(conns, c)
		}
	}
	w := b.startMeta(&mb)
	b.mu.Unlock()
	if err := w.waitErr(); err != nil {
		b.mu.Lock()
		b.users[name] = old
		for k, p := range oldPerms {
			b.perms[k] = p
		}
		b.refreshConnPermsLocked(func(c *conn) bool { return c.userName == name })
		b.mu.Unlock()
		return fmt.Errorf("delete user '%s': %w", name, err)
	}
	for _, c := range conns {
		c.ac.Close(amqp.Errorf(amqp.ConnectionForced, "user '%s' is deleted", name))
	}
	return nil
}

// Login checks a user's password and, for the loopback users
// (Options.LoopbackUsers), that remote is a loopback address (a nil remote
// is not): the rules of an AMQP login, for the HTTP API's basic auth. Each
// attempt spends the failed-login budget of remote's source
// (Options.LoginLimit) unless it succeeds; an attempt over the budget is
// refused without the password being checked. The error says why, for the
// log; callers show clients one generic refusal, the same for every
// reason. Safe for concurrent use.
func (b *Broker) Login(name, password string, remote net.Addr) (UserInfo, error) {
	var info UserInfo
	var err error
	_, checked := b.opts.LoginLimit.Check(remote, func() bool {
		info, err = b.checkLogin(name, password, remote)
		return err == nil
	})
	if !checked {
		return UserInfo{}, fmt.Errorf("user '%s' - too many failed logins from %s; refused without checking the password", name, sourceName(remote))
	}
	return info, err
}

// checkLogin checks name's password, and that it may log in from remote.
func (b *Broker) checkLogin(name, password string, remote net.Addr) (UserInfo, error) {
	b.mu.RLock()
	u := b.users[name]
	b.mu.RUnlock()
	if u == nil {
		// Spend the time a check takes, so a refusal does not tell
		// whether the user exists.
		(&user{alg: hashAlgs[0], hash: make([]byte, saltLen+sha256.Size)}).checkPassword(password)
		return UserInfo{}, fmt.Errorf("user '%s' - invalid credentials", name)
	}
	if !u.checkPassword(password) {
		return UserInfo{}, fmt.Errorf("user '%s' - invalid credentials", name)
	}
	if slices.Contains(b.opts.LoopbackUsers, name) && !isLoopback(remote) {
		return UserInfo{}, fmt.Errorf("user '%s' can only connect via localhost", name)
	}
	return u.info(), nil
}

// Authenticate implements amqp.Handler with Login's rules.
func (b *Broker) Authenticate(user, password string, remote net.Addr) error {
	_, err := b.Login(user, password, remote)
	return err
}

// sourceName names the source whose failed-login budget remote spends.
func sourceName(remote net.Addr) string {
	if p := loginlimit.Source(remote); p.IsValid() {
		return p.String()
	}
	if remote == nil {
		return "an unknown address"
	}
	return remote.String()
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
