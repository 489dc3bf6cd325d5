package broker

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/auth"
	"github.com/brokerd/brokerd/broker/defs"
	"github.com/brokerd/brokerd/broker/topology"
)

// Multi-tenancy, as RabbitMQ 3.10 has it: vhost limits (rabbit_vhost_limit:
// max-connections, max-queues), user limits (rabbit_auth_backend_internal:
// max-connections, max-channels) and topic permissions (write and read
// patterns on the routing keys of a topic exchange, per user, vhost and
// exchange). Each is a definition: stored in the meta space (broker/defs),
// so replicated in a cluster as users and permissions are, recovered at
// start, deleted with its vhost or user.
//
// A limit's value is an integer; a negative one (RabbitMQ's -1) is no
// limit, 0 refuses every connection, queue or channel. Limits are checked
// where RabbitMQ checks them, with its reply codes and texts:
// connection.open (rabbit_reader: the vhost's connections, then the
// user's, before the vhost access check; 530 NOT_ALLOWED), channel.open
// (530 NOT_ALLOWED, closing the connection), queue.declare of a new queue
// (rabbit_channel: 406 PRECONDITION_FAILED; the management API's declare
// and a definitions import too). Counts are this node's: in a cluster
// every connection is served by the leader.

// Limit names.
const (
	LimitMaxConnections = "max-connections"
	LimitMaxQueues      = "max-queues"
	LimitMaxChannels    = "max-channels"
)

// limitSet is a vhost's or a user's limits; never changed once installed.
type limitSet map[string]int64

// get returns the limit name when it is set and not negative.
func (l limitSet) get(name string) (int64, bool) {
	v, ok := l[name]
	return v, ok && v >= 0
}

// LimitsInfo is a vhost's or a user's limits (Owner: its name).
type LimitsInfo struct {
	Owner  string
	Limits map[string]int64
}

// TopicPermissionInfo is a user's topic permissions on an exchange of a
// vhost (auth.TopicPermissionInfo).
type TopicPermissionInfo = auth.TopicPermissionInfo

// topicPerms are a user's topic permissions in a vhost, by exchange;
// never changed once installed.
type topicPerms map[string]*auth.TopicPermission

// checkLimitNames refuses a limit RabbitMQ does not know for what
// ("limits" for a vhost, "user-limits" for a user), in its words.
func checkLimitNames(what string, limits map[string]int64, known ...string) error {
	var bad []string
	for _, name := range slices.Sorted(maps.Keys(limits)) {
		if !slices.Contains(known, name) {
			bad = append(bad, fmt.Sprintf("{<<%q>>,%d}", name, limits[name]))
		}
	}
	if len(bad) > 0 {
		return invalidf("Unrecognised terms [%s] in %s", strings.Join(bad, ","), what)
	}
	return nil
}

// ========================= vhost limits =========================

// VHostLimits returns every vhost's limits, sorted by vhost; vhosts
// without any are left out. Safe for concurrent use.
func (b *Broker) VHostLimits() []LimitsInfo {
	b.mu.RLock()
	var out []LimitsInfo
	for name, v := range b.vhosts {
		if l := v.limits.Load(); l != nil {
			out = append(out, LimitsInfo{Owner: name, Limits: maps.Clone(map[string]int64(*l))})
		}
	}
	b.mu.RUnlock()
	slices.SortFunc(out, func(a, b LimitsInfo) int { return strings.Compare(a.Owner, b.Owner) })
	return out
}

// VHostLimitsOf returns vhost's limits (empty: none); ok is false when
// there is no such vhost.
func (b *Broker) VHostLimitsOf(vhost string) (limits map[string]int64, ok bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	v := b.vhosts[vhost]
	if v == nil {
		return nil, false
	}
	limits = map[string]int64{}
	if l := v.limits.Load(); l != nil {
		maps.Copy(limits, *l)
	}
	return limits, true
}

// SetVHostLimits replaces vhost's limits by limits (RabbitMQ's
// set_vhost_limits: the whole definition); none clears them. It returns
// once the change is durable. A missing vhost wraps ErrNotFound, an
// unknown limit is an *InvalidError. Existing connections and queues are
// kept, as in RabbitMQ: a limit is checked on the next open or declare.
func (b *Broker) SetVHostLimits(vhost string, limits map[string]int64) error {
	if err := checkLimitNames("limits", limits, LimitMaxConnections, LimitMaxQueues); err != nil {
		return err
	}
	return b.changeVHostLimits(vhost, func(limitSet) limitSet { return maps.Clone(limits) })
}

// SetVHostLimit sets one limit of vhost, keeping the others (the
// management API's PUT /api/vhost-limits/{vhost}/{name}).
func (b *Broker) SetVHostLimit(vhost, name string, value int64) error {
	if err := checkLimitNames("limits", map[string]int64{name: value}, LimitMaxConnections, LimitMaxQueues); err != nil {
		return err
	}
	return b.changeVHostLimits(vhost, func(old limitSet) limitSet {
		l := maps.Clone(old)
		if l == nil {
			l = limitSet{}
		}
		l[name] = value
		return l
	})
}

// ClearVHostLimit clears one limit of vhost ("": every one; RabbitMQ's
// API has no name for all of them, unlike a user's "all"). Clearing a
// limit that is not set is not an error, as in RabbitMQ.
func (b *Broker) ClearVHostLimit(vhost, name string) error {
	return b.changeVHostLimits(vhost, func(old limitSet) limitSet {
		if name == "" {
			return nil
		}
		l := maps.Clone(old)
		delete(l, name)
		return l
	})
}

// changeVHostLimits installs change(the current limits) as vhost's.
func (b *Broker) changeVHostLimits(vhost string, change func(limitSet) limitSet) error {
	b.authMu.Lock()
	defer b.authMu.Unlock()
	b.mu.Lock()
	v := b.vhosts[vhost]
	if v == nil {
		b.mu.Unlock()
		return notFoundf("no vhost '%s'", vhost)
	}
	old := v.limits.Load()
	var cur limitSet
	if old != nil {
		cur = *old
	}
	next := change(cur)
	var mb defs.Batch
	if len(next) == 0 {
		v.limits.Store(nil)
		mb.Delete(defs.VHostLimitsKey(vhost))
	} else {
		v.limits.Store(&next)
		mb.Put(defs.EncodeVHostLimits(defs.Limits{Owner: vhost, Limits: next}))
	}
	w := b.startMeta(&mb)
	b.mu.Unlock()
	if err := w.WaitErr(); err != nil {
		v.limits.Store(old)
		return fmt.Errorf("set limits of vhost '%s': %w", vhost, err)
	}
	return nil
}

// vhostQueueLimitError is the 406 of a queue.declare of a new queue over
// v's max-queues (rabbit_channel's check_vhost_queue_limit), nil when
// under it. Caller holds v.mu.
func vhostQueueLimitErrorLocked(v *VHost, name string) *amqp.Error {
	l := v.limits.Load()
	if l == nil {
		return nil
	}
	limit, ok := l.get(LimitMaxQueues)
	if !ok || int64(len(v.topo.Queues)) < limit {
		return nil
	}
	return amqp.Errorf(amqp.PreconditionFailed, "cannot declare queue '%s': queue limit in vhost '%s' (%d) is reached", name, v.Name, limit)
}

// ========================= user limits =========================

// UserLimits returns every user's limits, sorted by user; users without
// any are left out. Safe for concurrent use.
func (b *Broker) UserLimits() []LimitsInfo {
	b.mu.RLock()
	out := make([]LimitsInfo, 0, len(b.userLimits))
	for name, l := range b.userLimits {
		out = append(out, LimitsInfo{Owner: name, Limits: maps.Clone(map[string]int64(l))})
	}
	b.mu.RUnlock()
	slices.SortFunc(out, func(a, b LimitsInfo) int { return strings.Compare(a.Owner, b.Owner) })
	return out
}

// UserLimitsOf returns user's limits (empty: none); ok is false when
// there is no such user.
func (b *Broker) UserLimitsOf(user string) (limits map[string]int64, ok bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.users[user] == nil {
		return nil, false
	}
	limits = map[string]int64{}
	maps.Copy(limits, b.userLimits[user])
	return limits, true
}

// SetUserLimits sets the limits of user named in limits, keeping the
// others (RabbitMQ's set_user_limits adds to the user's limits). A
// missing user wraps ErrNotFound, an unknown limit is an *InvalidError.
// It returns once the change is durable.
func (b *Broker) SetUserLimits(user string, limits map[string]int64) error {
	if err := checkLimitNames("user-limits", limits, LimitMaxConnections, LimitMaxChannels); err != nil {
		return err
	}
	return b.changeUserLimits(user, func(old limitSet) limitSet {
		l := maps.Clone(old)
		if l == nil {
			l = limitSet{}
		}
		maps.Copy(l, limits)
		return l
	})
}

// ClearUserLimit clears one limit of user ("all": every one). Clearing a
// limit that is not set is not an error, as in RabbitMQ.
func (b *Broker) ClearUserLimit(user, name string) error {
	return b.changeUserLimits(user, func(old limitSet) limitSet {
		if name == "all" {
			return nil
		}
		l := maps.Clone(old)
		delete(l, name)
		return l
	})
}

// changeUserLimits installs change(the current limits) as user's.
func (b *Broker) changeUserLimits(user string, change func(limitSet) limitSet) error {
	b.authMu.Lock()
	defer b.authMu.Unlock()
	b.mu.Lock()
	if b.users[user] == nil {
		b.mu.Unlock()
		return notFoundf("no user '%s'", user)
	}
	old, had := b.userLimits[user]
	next := change(old)
	var mb defs.Batch
	if len(next) == 0 {
		delete(b.userLimits, user)
		mb.Delete(defs.UserLimitsKey(user))
	} else {
		b.userLimits[user] = next
		mb.Put(defs.EncodeUserLimits(defs.Limits{Owner: user, Limits: next}))
	}
	w := b.startMeta(&mb)
	b.mu.Unlock()
	if err := w.WaitErr(); err != nil {
		b.mu.Lock()
		if had {
			b.userLimits[user] = old
		} else {
			delete(b.userLimits, user)
		}
		b.mu.Unlock()
		return fmt.Errorf("set limits of user '%s': %w", user, err)
	}
	return nil
}

// connectionLimitErrorLocked is the 530 that refuses a connection of user
// to v over v's or user's max-connections (rabbit_reader's
// is_over_vhost_connection_limit, then is_over_user_connection_limit),
// nil when under both. Caller holds b.mu.
func (b *Broker) connectionLimitErrorLocked(v *VHost, user string) *amqp.Error {
	if l := v.limits.Load(); l != nil {
		if limit, ok := l.get(LimitMaxConnections); ok && b.countConnsLocked(func(c *conn) bool { return c.vhost == v }) >= limit {
			return amqp.Errorf(amqp.NotAllowed, "access to vhost '%s' refused for user '%s': connection limit (%d) is reached", v.Name, user, limit)
		}
	}
	if limit, ok := b.userLimits[user].get(LimitMaxConnections); ok && b.countConnsLocked(func(c *conn) bool { return c.userName == user }) >= limit {
		return amqp.Errorf(amqp.NotAllowed, "connection refused for user '%s': user connection limit (%d) is reached", user, limit)
	}
	return nil
}

// countConnsLocked counts the open client connections that match (the
// broker's own, internal, are not limited). Caller holds b.mu.
func (b *Broker) countConnsLocked(match func(*conn) bool) int64 {
	var n int64
	for c := range b.conns {
		if !c.internal && match(c) {
			n++
		}
	}
	return n
}

// admitChannel counts a channel.open of c against its user's
// max-channels: nil, the channel counted in c.nchannels, or the 530
// RabbitMQ's reader closes the connection with. Checks of one user's
// channels are serialized by chanMu, so two opens cannot both take the
// last one.
func (c *conn) admitChannel() *amqp.Error {
	b := c.b
	if c.internal {
		return nil // the broker's own: not limited, not counted
	}
	b.mu.RLock()
	limit, limited := b.userLimits[c.userName].get(LimitMaxChannels)
	if !limited {
		c.nchannels.Add(1)
		b.mu.RUnlock()
		return nil
	}
	b.mu.RUnlock()
	b.chanMu.Lock()
	defer b.chanMu.Unlock()
	b.mu.RLock()
	defer b.mu.RUnlock()
	var n int64
	for o := range b.conns {
		if o.userName == c.userName && !o.internal {
			n += o.nchannels.Load()
		}
	}
	if n >= limit {
		return amqp.Errorf(amqp.NotAllowed, "number of channels opened for user '%s' has reached the maximum allowed user limit of (%d)", c.userName, limit)
	}
	c.nchannels.Add(1)
	return nil
}

// ========================= topic permissions =========================

// TopicPermissions returns the topic permissions of every user, sorted by
// vhost, user and exchange. Safe for concurrent use.
func (b *Broker) TopicPermissions() []TopicPermissionInfo {
	b.mu.RLock()
	var out []TopicPermissionInfo
	for k, tp := range b.topicPerms {
		for x, p := range tp {
			out = append(out, TopicPermissionInfo{User: k.user, VHost: k.vhost, Exchange: x, Write: p.Write, Read: p.Read})
		}
	}
	b.mu.RUnlock()
	slices.SortFunc(out, func(a, b TopicPermissionInfo) int {
		if c := strings.Compare(a.VHost, b.VHost); c != 0 {
			return c
		}
		if c := strings.Compare(a.User, b.User); c != 0 {
			return c
		}
		return strings.Compare(a.Exchange, b.Exchange)
	})
	return out
}

// SetTopicPermissions gives user the write and read patterns on the
// routing keys of exchange in vhost, replacing those it had there, and
// returns once that is durable; open connections of the user to the
// vhost use them from their next publish or bind. A missing user or
// vhost wraps ErrNotFound, a bad pattern is an *InvalidError. The
// exchange need not exist (RabbitMQ does not check it).
func (b *Broker) SetTopicPermissions(user, vhost, exchange, write, read string) error {
	p, err := auth.NewTopicPermission(write, read)
	if err != nil {
		return err
	}
	return b.changeTopicPermissions(user, vhost, func(old topicPerms) (topicPerms, error) {
		next := maps.Clone(old)
		if next == nil {
			next = topicPerms{}
		}
		next[exchange] = p
		return next, nil
	})
}

// ClearTopicPermissions takes away user's topic permissions in vhost on
// exchange, or on every exchange when exchange is "". It returns once
// that is durable. A missing user or vhost wraps ErrNotFound; clearing
// what is not set is not an error, as in RabbitMQ.
func (b *Broker) ClearTopicPermissions(user, vhost, exchange string) error {
	return b.changeTopicPermissions(user, vhost, func(old topicPerms) (topicPerms, error) {
		if exchange == "" {
			return nil, nil
		}
		next := maps.Clone(old)
		delete(next, exchange)
		return next, nil
	})
}

// changeTopicPermissions installs change(user's topic permissions in
// vhost) as theirs.
func (b *Broker) changeTopicPermissions(user, vhost string, change func(topicPerms) (topicPerms, error)) error {
	b.authMu.Lock()
	defer b.authMu.Unlock()
	k := permKey{user: user, vhost: vhost}
	b.mu.Lock()
	switch {
	case b.users[user] == nil:
		b.mu.Unlock()
		return notFoundf("no user '%s'", user)
	case b.vhosts[vhost] == nil:
		b.mu.Unlock()
		return notFoundf("no vhost '%s'", vhost)
	}
	old := b.topicPerms[k]
	next, err := change(old)
	if err != nil {
		b.mu.Unlock()
		return err
	}
	var mb defs.Batch
	for x := range old {
		if next[x] == nil {
			mb.Delete(defs.TopicPermKey(vhost, user, x))
		}
	}
	for x, p := range next {
		if old[x] != p {
			mb.Put(defs.EncodeTopicPerm(defs.TopicPerm{VHost: vhost, User: user, Exchange: x, Write: p.Write, Read: p.Read}))
		}
	}
	b.setTopicPermsLocked(k, next)
	w := b.startMeta(&mb)
	b.mu.Unlock()
	if err := w.WaitErr(); err != nil {
		b.mu.Lock()
		b.setTopicPermsLocked(k, old)
		b.mu.Unlock()
		return fmt.Errorf("set topic permissions of user '%s' in vhost '%s': %w", user, vhost, err)
	}
	return nil
}

// setTopicPermsLocked installs tp (empty: none) as k's and on the open
// connections of k's user to k's vhost. Caller holds b.mu.
func (b *Broker) setTopicPermsLocked(k permKey, tp topicPerms) {
	if len(tp) == 0 {
		delete(b.topicPerms, k)
		tp = nil
	} else {
		b.topicPerms[k] = tp
	}
	for c := range b.conns {
		if c.userName == k.user && c.vhost.Name == k.vhost {
			c.storeTopicPerms(tp)
		}
	}
}

// storeTopicPerms installs tp as the connection's topic permissions.
func (c *conn) storeTopicPerms(tp topicPerms) {
	if tp == nil {
		c.topic.Store(nil)
		return
	}
	c.topic.Store(&tp)
}

// deleteUserTenancyLocked takes user's limits and topic permissions out
// (their deletions added to mb), for its deletion, and returns what to
// put back should the store refuse it. Caller holds authMu and mu.
func (b *Broker) deleteUserTenancyLocked(user string, mb *defs.Batch) (undo func()) {
	limits, hadLimits := b.userLimits[user]
	if hadLimits {
		delete(b.userLimits, user)
		mb.Delete(defs.UserLimitsKey(user))
	}
	tps := map[permKey]topicPerms{}
	for k, tp := range b.topicPerms {
		if k.user == user {
			tps[k] = tp
			for x := range tp {
				mb.Delete(defs.TopicPermKey(k.vhost, k.user, x))
			}
			b.setTopicPermsLocked(k, nil)
		}
	}
	return func() {
		if hadLimits {
			b.userLimits[user] = limits
		}
		for k, tp := range tps {
			b.setTopicPermsLocked(k, tp)
		}
	}
}

// deleteVHostTenancyLocked takes vhost's topic permissions out (their
// deletions, and its limits', added to mb; the vhost's limits go with it),
// for its deletion, and returns what to put back should the store refuse
// it. Caller holds authMu and mu.
func (b *Broker) deleteVHostTenancyLocked(vhost string, mb *defs.Batch) (undo func()) {
	if b.vhosts[vhost] != nil && b.vhosts[vhost].limits.Load() != nil {
		mb.Delete(defs.VHostLimitsKey(vhost))
	}
	tps := map[permKey]topicPerms{}
	for k, tp := range b.topicPerms {
		if k.vhost == vhost {
			tps[k] = tp
			for x := range tp {
				mb.Delete(defs.TopicPermKey(k.vhost, k.user, x))
			}
			b.setTopicPermsLocked(k, nil)
		}
	}
	return func() {
		for k, tp := range tps {
			b.setTopicPermsLocked(k, tp)
		}
	}
}

// checkTopic enforces the user's topic permission (auth.Write on publish,
// auth.Read on bind and unbind) on routing key of exchange x when x is a
// topic exchange (rabbit_channel's check_topic_authorisation): allowed
// when the user has none on x, else when the pattern, its {username} and
// {vhost} expanded, matches key. The variables of an AMQP 0-9-1
// connection are those two; RabbitMQ 3.10 (and 4.x) fills {client_id}
// only for its MQTT and STOMP plugins' connections, so it stays as
// written here.
func (c *conn) checkTopic(k auth.Access, x *topology.Exchange, key string) *amqp.Error {
	tp := c.topic.Load()
	if tp == nil || x.Type != "topic" {
		return nil
	}
	p := (*tp)[x.Name]
	if p == nil || p.Allows(k, key, auth.TopicVars{Username: c.userName, VHost: c.vhost.Name}) {
		return nil
	}
	return amqp.Errorf(amqp.AccessRefused, "access to topic '%s' in exchange '%s' in vhost '%s' refused for user '%s'",
		key, x.Name, c.vhost.Name, c.userName)
}

// recoverTenancy rebuilds the vhosts' and users' limits and the topic
// permissions from the store, after the vhosts and users (recoverDefinitions'
// scan and dangling).
func (b *Broker) recoverTenancy(scan func(prefix string, fn func(key string, v []byte) error), dangling func(key, what string, args ...any)) {
	scan(defs.PrefixVHostLimits, func(k string, v []byte) error {
		d, err := defs.DecodeVHostLimits(k, v)
		if err != nil {
			return err
		}
		vh := b.vhosts[d.Owner]
		if vh == nil {
			dangling(k, "limits of unknown vhost", "vhost", d.Owner)
			return nil
		}
		l := limitSet(d.Limits)
		vh.limits.Store(&l)
		return nil
	})
	scan(defs.PrefixUserLimits, func(k string, v []byte) error {
		d, err := defs.DecodeUserLimits(k, v)
		if err != nil {
			return err
		}
		if b.users[d.Owner] == nil {
			dangling(k, "limits of unknown user", "user", d.Owner)
			return nil
		}
		b.userLimits[d.Owner] = d.Limits
		return nil
	})
	scan(defs.PrefixTopicPerm, func(k string, v []byte) error {
		d, err := defs.DecodeTopicPerm(k, v)
		if err != nil {
			return err
		}
		switch {
		case b.vhosts[d.VHost] == nil:
			dangling(k, "topic permissions in unknown vhost", "vhost", d.VHost, "user", d.User)
			return nil
		case b.users[d.User] == nil:
			dangling(k, "topic permissions of unknown user", "vhost", d.VHost, "user", d.User)
			return nil
		}
		p, err := auth.NewTopicPermission(d.Write, d.Read)
		if err != nil {
			return fmt.Errorf("stored topic permissions: %w", err)
		}
		pk := permKey{user: d.User, vhost: d.VHost}
		if b.topicPerms[pk] == nil {
			b.topicPerms[pk] = topicPerms{}
		}
		b.topicPerms[pk][d.Exchange] = p
		return nil
	})
}
