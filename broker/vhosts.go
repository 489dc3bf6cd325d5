package broker

import (
	"fmt"
	"slices"
	"strings"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/auth"
	"github.com/brokerd/brokerd/broker/defs"
	"github.com/brokerd/brokerd/broker/policy"
	"github.com/brokerd/brokerd/store"
)

// VHostInfo is a vhost with its metadata, as RabbitMQ's HTTP API and
// definitions carry it. DefaultQueueType is "" when unset (RabbitMQ shows
// "undefined").
type VHostInfo struct {
	Name, Description, DefaultQueueType string
	Tags                                []string
}

func (v *VHost) infoLocked() VHostInfo {
	return VHostInfo{Name: v.Name, Description: v.meta.Description, DefaultQueueType: v.meta.DefaultQueueType, Tags: slices.Clone(v.meta.Tags)}
}

// bootstrap creates Options.VHosts and Options.Users (users, with full
// permissions on those vhosts) if the store was never bootstrapped, and
// marks it bootstrapped, in one durable batch. A store written before
// users were stored has vhosts but no mark: it is bootstrapped too, its
// vhosts kept as they are.
func (b *Broker) bootstrap(users []*auth.User) error {
	if b.bootstrapped {
		return nil
	}
	var mb defs.Batch
	b.mu.Lock()
	for _, name := range b.opts.VHosts {
		if b.vhosts[name] == nil {
			v := newVHost(b, name)
			v.meta = defs.VHost{Name: name, Description: "Default virtual host"}
			b.vhosts[name] = v
			mb.Put(defs.EncodeVHost(v.meta))
		}
	}
	for _, u := range users {
		b.users[u.Name()] = u
		mb.Put(defs.EncodeUser(userDefOf(u)))
		for _, vhost := range b.opts.VHosts {
			p, err := auth.NewPermission(".*", ".*", ".*")
			if err != nil {
				panic(err) // constant patterns
			}
			b.perms[permKey{user: u.Name(), vhost: vhost}] = p
			mb.Put(defs.EncodePerm(permDefOf(vhost, u.Name(), p)))
		}
	}
	mb.Put(defs.EncodeBootstrapMark())
	b.bootstrapped = true
	w := b.startMeta(&mb)
	b.mu.Unlock()
	if err := w.WaitErr(); err != nil {
		return fmt.Errorf("store bootstrap vhosts and users: %w", err)
	}
	b.env.Log.Info("fresh data dir: created the bootstrap vhosts and users", "vhosts", b.opts.VHosts, "users", len(users))
	return nil
}

// defaultQueueType returns the vhost's default queue type, "" for none.
// It takes Broker.mu (shared), so it is called with no lock held.
func (v *VHost) defaultQueueType() string {
	v.b.mu.RLock()
	defer v.b.mu.RUnlock()
	return v.meta.DefaultQueueType
}

// VHosts returns every vhost, sorted by name. Safe for concurrent use.
func (b *Broker) VHosts() []VHostInfo {
	b.mu.RLock()
	out := make([]VHostInfo, 0, len(b.vhosts))
	for _, v := range b.vhosts {
		out = append(out, v.infoLocked())
	}
	b.mu.RUnlock()
	slices.SortFunc(out, func(a, b VHostInfo) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// queueTypes are the values a vhost's default queue type may take
// ("undefined", RabbitMQ's word for none, is stored as "").
var queueTypes = []string{"", policy.QueueClassic, policy.QueueQuorum, policy.QueueStream}

// PutVHost creates a vhost, or updates the metadata of one that exists,
// and returns once that is durable. Unlike RabbitMQ's HTTP API (which
// also gives the acting user full permissions on a vhost it creates) it
// grants nothing: that is the caller's SetPermissions. An empty name or
// an unknown default queue type is an *InvalidError.
func (b *Broker) PutVHost(info VHostInfo) error {
	if info.Name == "" {
		return invalidf("vhost name must not be empty")
	}
	if info.DefaultQueueType == "undefined" {
		info.DefaultQueueType = ""
	}
	if !slices.Contains(queueTypes, info.DefaultQueueType) {
		return invalidf("unsupported default queue type '%s' for vhost '%s': want classic, quorum or stream", info.DefaultQueueType, info.Name)
	}
	d := defs.VHost{Name: info.Name, Description: info.Description, DefaultQueueType: info.DefaultQueueType}
	for _, t := range info.Tags {
		if t != "" && !slices.Contains(d.Tags, t) {
			d.Tags = append(d.Tags, t)
		}
	}
	b.authMu.Lock()
	defer b.authMu.Unlock()
	b.mu.Lock()
	v := b.vhosts[info.Name]
	created := v == nil
	var old defs.VHost
	if created {
		v = newVHost(b, info.Name)
		b.vhosts[info.Name] = v
	} else {
		old = v.meta
	}
	v.meta = d
	var mb defs.Batch
	mb.Put(defs.EncodeVHost(d))
	w := b.startMeta(&mb)
	b.mu.Unlock()
	if err := w.WaitErr(); err != nil {
		b.mu.Lock()
		if created {
			delete(b.vhosts, info.Name)
		} else {
			v.meta = old
		}
		b.mu.Unlock()
		return fmt.Errorf("put vhost '%s': %w", info.Name, err)
	}
	return nil
}

// DeleteVHost deletes a vhost with everything in it: its connections are
// closed (320 CONNECTION_FORCED, as RabbitMQ), then its queues with their
// messages, exchanges, bindings, policies, permissions and every other
// record of the kinds in defs.VHostPrefixes go. It returns once the deletion
// is durable and the connections have ended.
//
// The vhost's record goes first, with its permissions: from then on no
// connection opens to it, and a crash part-way leaves records of an
// unknown vhost, which recovery drops. Its connections are waited for
// before its contents go, so no operation of theirs adds to it after.
func (b *Broker) DeleteVHost(name string) error {
	// Its runtime parameters go with its record; their components are
	// told once that is durable, under paramMu (params.go).
	b.paramMu.Lock()
	defer b.paramMu.Unlock()
	gone, err := b.deleteVHost(name)
	b.notifyCleared(gone)
	return err
}

func (b *Broker) deleteVHost(name string) ([]Parameter, error) {
	b.authMu.Lock()
	defer b.authMu.Unlock()
	b.mu.Lock()
	v := b.vhosts[name]
	if v == nil {
		b.mu.Unlock()
		return nil, notFoundf("no vhost '%s'", name)
	}
	var mb defs.Batch
	undoTenancy := b.deleteVHostTenancyLocked(name, &mb)
	delete(b.vhosts, name)
	mb.Delete(defs.VHostKey(name))
	in := func(c *conn) bool { return c.vhost == v }
	oldPerms, conns := b.revokeLocked(func(k permKey) bool { return k.vhost == name }, in, &mb)
	gone := b.dropVHostParamsLocked(name, &mb)
	w := b.startMeta(&mb)
	b.mu.Unlock()
	if err := w.WaitErr(); err != nil {
		b.mu.Lock()
		b.vhosts[name] = v
		b.unrevokeLocked(oldPerms, in)
		for _, p := range gone {
			b.params[paramKey{p.VHost, p.Component, p.Name}] = p.Value
		}
		undoTenancy()
		b.mu.Unlock()
		return nil, fmt.Errorf("delete vhost '%s': %w", name, err)
	}
	for _, c := range conns {
		c.ac.Close(amqp.Errorf(amqp.ConnectionForced, "vhost '%s' is deleted", name))
	}
	for _, c := range conns {
		<-c.done
	}
	if err := b.deleteVHostContents(v); err != nil {
		return gone, fmt.Errorf("delete vhost '%s': %w", name, err)
	}
	return gone, nil
}

// deleteVHostContents deletes the queues (with their stored messages),
// exchanges, bindings and policies of v, which is no longer reachable,
// then every record left under v's prefix of each defs.VHostPrefixes kind.
func (b *Broker) deleteVHostContents(v *VHost) error {
	for _, x := range v.delayedExchanges() {
		_, w := b.deleteDelayed(v, x, nil) // with their holding queues
		if err := w.WaitErr(); err != nil {
			return fmt.Errorf("delete exchange '%s': %w", x.Name, err)
		}
	}
	for _, q := range v.queueList() {
		q.MarkClosing()
		_, w := b.deleteQueue(q)
		if err := w.WaitErr(); err != nil {
			return fmt.Errorf("delete queue '%s': %w", q.Name, err)
		}
	}
	v.policyMu.Lock()
	v.mu.Lock()
	var mb defs.Batch
	for _, x := range v.topo.Exchanges {
		if v.topo.Exchanges[x.Name] == x { // not auto-deleted meanwhile
			v.topo.DeleteExchange(x, &mb)
		}
	}
	for pname := range v.policies {
		mb.Delete(defs.PolicyKey(false, v.Name, pname))
	}
	clear(v.policies)
	for pname := range v.opPolicies {
		mb.Delete(defs.PolicyKey(true, v.Name, pname))
	}
	clear(v.opPolicies)
	w := b.startMeta(&mb)
	v.mu.Unlock()
	v.policyMu.Unlock()
	// Once this write is done, so is every earlier one: the scan below
	// sees all the vhost's records.
	if err := w.WaitErr(); err != nil {
		return err
	}
	var rest defs.Batch
	for _, kind := range defs.VHostPrefixes() {
		err := b.env.Store.ScanMeta(defs.Key(kind, v.Name), func(key string, _ []byte) bool {
			rest.Delete(key)
			return true
		})
		if err != nil {
			return fmt.Errorf("scan definitions of vhost: %w", err)
		}
	}
	if len(rest.Ops) > 0 {
		b.env.Log.Info("deleted vhost: removing records left in the store", "vhost", v.Name, "records", len(rest.Ops))
	}
	return b.env.StartWrite(&store.Batch{Meta: rest.Ops}).WaitErr()
}
