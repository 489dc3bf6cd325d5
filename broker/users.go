package broker

import (
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/auth"
	"github.com/brokerd/brokerd/broker/defs"
)

// Password hashing algorithms, by the names RabbitMQ gives them (package
// auth).
const (
	HashSHA256 = auth.HashSHA256 // the default
	HashSHA512 = auth.HashSHA512
	HashMD5    = auth.HashMD5
)

// UserInfo describes a user as RabbitMQ's HTTP API and definitions show
// it (auth.UserInfo).
type UserInfo = auth.UserInfo

// UserSpec creates or replaces a user (auth.UserSpec).
type UserSpec = auth.UserSpec

// Users returns every user, sorted by name. Safe for concurrent use.
func (b *Broker) Users() []UserInfo {
	b.mu.RLock()
	out := make([]UserInfo, 0, len(b.users))
	for _, u := range b.users {
		out = append(out, u.Info())
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
	return u.Info(), true
}

// PutUser creates a user or replaces one (password, tags), keeping its
// permissions, and returns once the change is durable. Open connections of
// the user stay open (as in RabbitMQ) and see the new tags at once.
// Invalid specs are refused with an *InvalidError and change nothing.
func (b *Broker) PutUser(spec UserSpec) error {
	u, err := auth.NewUser(spec)
	if err != nil {
		return err
	}
	b.authMu.Lock()
	defer b.authMu.Unlock()
	b.mu.Lock()
	old := b.users[u.Name()]
	b.setUserLocked(u.Name(), u)
	var mb defs.Batch
	mb.Put(defs.EncodeUser(userDefOf(u)))
	w := b.startMeta(&mb)
	b.mu.Unlock()
	if err := w.WaitErr(); err != nil {
		b.mu.Lock()
		b.setUserLocked(u.Name(), old)
		b.mu.Unlock()
		return fmt.Errorf("put user '%s': %w", u.Name(), err)
	}
	return nil
}

// setUserLocked installs u (nil: none) as the record of name, for new
// logins and for the open connections of name. Caller holds b.mu.
func (b *Broker) setUserLocked(name string, u *auth.User) {
	if u == nil {
		delete(b.users, name)
		return
	}
	b.users[name] = u
	for c := range b.conns {
		if c.userName == name && !c.internal {
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
	mine := func(c *conn) bool { return c.userName == name && !c.internal }
	oldPerms, conns := b.revokeLocked(func(k permKey) bool { return k.user == name }, mine, &mb)
	undoTenancy := b.deleteUserTenancyLocked(name, &mb)
	w := b.startMeta(&mb)
	b.mu.Unlock()
	if err := w.WaitErr(); err != nil {
		b.mu.Lock()
		b.users[name] = old
		b.unrevokeLocked(oldPerms, mine)
		undoTenancy()
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
		return UserInfo{}, fmt.Errorf("user '%s' - too many failed logins from %s; refused without checking the password", name, auth.SourceName(remote))
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
		auth.SpendCheck(password)
		return UserInfo{}, fmt.Errorf("user '%s' - invalid credentials", name)
	}
	if !u.CheckPassword(password) {
		return UserInfo{}, fmt.Errorf("user '%s' - invalid credentials", name)
	}
	if slices.Contains(b.opts.LoopbackUsers, name) && !auth.IsLoopback(remote) {
		return UserInfo{}, fmt.Errorf("user '%s' can only connect via localhost", name)
	}
	return u.Info(), nil
}

// Authenticate implements amqp.Handler with Login's rules.
func (b *Broker) Authenticate(user, password string, remote net.Addr) error {
	_, err := b.Login(user, password, remote)
	return err
}

// AuthenticateExternal implements amqp.ExternalAuthenticator: a login by
// TLS client certificate (SASL EXTERNAL) as user, who must exist and, if
// a loopback user, connect from a loopback address; no password is
// checked (rabbit_auth_backend_internal with no credentials). It spends
// no failed-login budget: a certificate cannot be guessed.
func (b *Broker) AuthenticateExternal(user string, remote net.Addr) error {
	b.mu.RLock()
	u := b.users[user]
	b.mu.RUnlock()
	if u == nil {
		return fmt.Errorf("user '%s' - invalid credentials", user)
	}
	if slices.Contains(b.opts.LoopbackUsers, user) && !auth.IsLoopback(remote) {
		return fmt.Errorf("user '%s' can only connect via localhost", user)
	}
	return nil
}
