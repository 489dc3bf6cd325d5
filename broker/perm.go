package broker

import (
	"fmt"
	"slices"
	"strings"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/auth"
	"github.com/brokerd/brokerd/broker/defs"
)

// permKey names the permissions of a user in a vhost.
type permKey struct{ user, vhost string }

// PermissionInfo is a user's permissions in a vhost: the sources of the
// configure, write and read patterns (auth.PermissionInfo).
type PermissionInfo = auth.PermissionInfo

// Permissions returns every user's permissions, sorted by vhost, then
// user. Safe for concurrent use.
func (b *Broker) Permissions() []PermissionInfo {
	b.mu.RLock()
	out := make([]PermissionInfo, 0, len(b.perms))
	for k, p := range b.perms {
		out = append(out, PermissionInfo{User: k.user, VHost: k.vhost, Configure: p.Configure, Write: p.Write, Read: p.Read})
	}
	b.mu.RUnlock()
	slices.SortFunc(out, func(a, b PermissionInfo) int {
		if c := strings.Compare(a.VHost, b.VHost); c != 0 {
			return c
		}
		return strings.Compare(a.User, b.User)
	})
	return out
}

// SetPermissions gives user the configure, write and read patterns in
// vhost, replacing those it had there, and returns once that is durable.
// Open connections of the user to the vhost use them from their next
// operation: RabbitMQ lets a channel keep up to 12 rights it checked
// before the change (its permission cache), brokerd keeps none, which is
// stricter. A missing user or vhost is an error wrapping ErrNotFound, a
// bad pattern an *InvalidError.
func (b *Broker) SetPermissions(user, vhost, configure, write, read string) error {
	p, err := auth.NewPermission(configure, write, read)
	if err != nil {
		return err
	}
	return b.changePermissions(user, vhost, p)
}

// ClearPermissions takes away every permission of user in vhost, and
// returns once that is durable. Open connections of the user to the vhost
// stay open, as in RabbitMQ, but every operation they try is refused.
func (b *Broker) ClearPermissions(user, vhost string) error {
	return b.changePermissions(user, vhost, nil)
}

// changePermissions installs p (nil: none) as user's permissions in vhost.
func (b *Broker) changePermissions(user, vhost string, p *auth.Permission) error {
	b.authMu.Lock()
	defer b.authMu.Unlock()
	k := permKey{user: user, vhost: vhost}
	b.mu.Lock()
	old := b.perms[k]
	switch {
	case b.users[user] == nil:
		b.mu.Unlock()
		return notFoundf("no user '%s'", user)
	case b.vhosts[vhost] == nil:
		b.mu.Unlock()
		return notFoundf("no vhost '%s'", vhost)
	case p == nil && old == nil:
		b.mu.Unlock()
		return notFoundf("no permissions for user '%s' in vhost '%s'", user, vhost)
	}
	var mb defs.Batch
	if p != nil {
		b.perms[k] = p
		mb.Put(defs.EncodePerm(permDefOf(vhost, user, p)))
	} else {
		delete(b.perms, k)
		mb.Delete(defs.PermKey(vhost, user))
	}
	mine := func(c *conn) bool { return c.userName == user && c.vhost.Name == vhost }
	b.refreshConnPermsLocked(mine)
	w := b.startMeta(&mb)
	b.mu.Unlock()
	if err := w.WaitErr(); err != nil {
		b.mu.Lock()
		if old != nil {
			b.perms[k] = old
		} else {
			delete(b.perms, k)
		}
		b.refreshConnPermsLocked(mine)
		b.mu.Unlock()
		return fmt.Errorf("set permissions of user '%s' in vhost '%s': %w", user, vhost, err)
	}
	return nil
}

// refreshConnPermsLocked makes the open connections that match use their
// user's current permissions in their vhost. Caller holds b.mu.
func (b *Broker) refreshConnPermsLocked(match func(*conn) bool) {
	for c := range b.conns {
		if match(c) && !c.internal {
			c.perm.Store(b.perms[permKey{user: c.userName, vhost: c.vhost.Name}])
		}
	}
}

// checkPerm enforces the user's permission on a resource of the
// connection's vhost. The default exchange is named amq.default in
// permission patterns and errors, as in RabbitMQ.
//
// The text names the kind of access ("write access to exchange ..."), as
// RabbitMQ does since 3.11 and as reference B63 gives it; RabbitMQ 3.10
// says only "access to exchange ...".
func (c *conn) checkPerm(k auth.Access, kind, name string) *amqp.Error {
	if kind == "exchange" && name == "" {
		name = "amq.default"
	}
	if p := c.perm.Load(); p != nil && p.Allows(k, name) {
		return nil
	}
	return amqp.Errorf(amqp.AccessRefused, "%s access to %s '%s' in vhost '%s' refused for user '%s'",
		k, kind, name, c.vhost.Name, c.userName)
}

// checkDLXPerms: declaring a queue with x-dead-letter-exchange also needs
// read on the queue and write on the DLX (B63), checked (with the DLX's
// type) before the queue's other arguments, as rabbit_channel does. A DLX
// set by policy is not checked.
func (c *conn) checkDLXPerms(queue string, args amqp.Table) *amqp.Error {
	v, ok := args.Get("x-dead-letter-exchange")
	if !ok {
		return nil
	}
	dlx, ok := v.(string)
	if !ok {
		return amqp.Errorf(amqp.PreconditionFailed, "invalid type '%s' for arg 'x-dead-letter-exchange' in queue '%s' in vhost '%s'",
			amqp.TypeName(v), queue, c.vhost.Name)
	}
	if err := c.checkPerm(auth.Read, "queue", queue); err != nil {
		return err
	}
	return c.checkPerm(auth.Write, "exchange", dlx)
}

// Access kinds, as CheckAccess takes them.
const (
	Configure = "configure"
	Write     = "write"
	Read      = "read"
)

// CheckAccess reports whether user may configure, write or read (access:
// Configure, Write or Read) the queue or exchange (kind "queue" or
// "exchange") name in vhost: nil, or the 403 ACCESS_REFUSED a channel of
// the user's would close with (for an unknown user or vhost too). The
// management API checks it before reading a request's body; the method
// the request then runs checks it again, with the rest. An exchange named
// "" is the default exchange (amq.default in patterns). Safe for
// concurrent use.
func (b *Broker) CheckAccess(user, vhost, access, kind, name string) *amqp.Error {
	var k auth.Access
	switch access {
	case Configure:
		k = auth.Configure
	case Write:
		k = auth.Write
	case Read:
		k = auth.Read
	default:
		return amqp.Errorf(amqp.InternalError, "unknown access kind %q", access)
	}
	b.mu.RLock()
	p := b.perms[permKey{user: user, vhost: vhost}]
	b.mu.RUnlock()
	if kind == "exchange" && name == "" {
		name = "amq.default"
	}
	if p != nil && p.Allows(k, name) {
		return nil
	}
	return amqp.Errorf(amqp.AccessRefused, "%s access to %s '%s' in vhost '%s' refused for user '%s'", k, kind, name, vhost, user)
}

// revokeLocked is a user's or a vhost's deletion's change to permissions:
// it takes the permissions whose key matches out of b.perms, adding their
// deletions to mb, and stops the connections stop matches (their cached
// permission cleared: until they are closed they may do nothing). It
// returns the permissions taken, for unrevokeLocked should the store
// refuse the change, and the connections. Caller holds authMu and mu.
func (b *Broker) revokeLocked(key func(permKey) bool, stop func(*conn) bool, mb *defs.Batch) (map[permKey]*auth.Permission, []*conn) {
	old := map[permKey]*auth.Permission{}
	for k, p := range b.perms {
		if key(k) {
			old[k] = p
			delete(b.perms, k)
			mb.Delete(defs.PermKey(k.vhost, k.user))
		}
	}
	var conns []*conn
	for c := range b.conns {
		if stop(c) {
			c.perm.Store(nil)
			conns = append(conns, c)
		}
	}
	return old, conns
}

// unrevokeLocked puts back the permissions revokeLocked took and gives
// the connections stopped matches theirs again. Caller holds authMu and mu.
func (b *Broker) unrevokeLocked(old map[permKey]*auth.Permission, stopped func(*conn) bool) {
	for k, p := range old {
		b.perms[k] = p
	}
	b.refreshConnPermsLocked(stopped)
}
