package broker

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/auth"
	"github.com/brokerd/brokerd/broker/defs"
	"github.com/brokerd/brokerd/broker/policy"
	"github.com/brokerd/brokerd/broker/queue"
	"github.com/brokerd/brokerd/broker/topology"
	"github.com/brokerd/brokerd/store"
)

// A definitions import (RabbitMQ's definitions file, through the
// management API) is all or nothing: ImportDefinitions checks every
// object of the file against the broker and the rest of the file first,
// and changes nothing when any is refused; otherwise it makes every change
// in memory and writes them all in ONE store batch, so a crash leaves
// either the whole file or none of it. (RabbitMQ imports object by object
// and stops at the first failure, keeping what came before.)
//
// Concurrency: Broker.authMu is held throughout, so users, vhosts and
// permissions change only here meanwhile; the vhosts the file puts objects
// in are locked (policyMu, then mu, each in name order) from the check of
// their contents to the store write, so no declaration in them slips in
// between; the batch is applied under those locks, as every definition
// change is (see the package doc). New vhosts are filled while no one can
// reach them and published, with the users and permissions, under
// Broker.mu once the vhost locks are released; the policies are then
// applied to the queues under each vhost's policyMu, as SetPolicy applies
// them. A failure of the store is reported like any other definition
// change's: the broker's store is failed then, for good.

// Definitions is what a definitions file holds, as ImportDefinitions
// takes it. Each object carries its vhost; a VHost that the file creates
// may hold objects of the same file.
type Definitions struct {
	Users       []UserSpec
	VHosts      []DefVHost
	Permissions []PermissionInfo
	// Policies and OperatorPolicies carry their vhost in Policy.VHost.
	Policies, OperatorPolicies []Policy
	Queues                     []DefQueue
	Exchanges                  []DefExchange
	Bindings                   []DefBinding
	// Parameters are runtime parameters, each checked by its component
	// as SetParameter does; GlobalParameters are stored as they are.
	Parameters       []Parameter
	GlobalParameters []GlobalParameter
	// VHostLimits replace their vhost's limits; UserLimits are added to
	// their user's (RabbitMQ's import of a user's limits);
	// TopicPermissions replace the user's on their exchange (tenancy.go).
	VHostLimits, UserLimits []LimitsInfo
	TopicPermissions        []TopicPermissionInfo
}

// DefVHost is a vhost of a definitions file. When the vhost exists and
// the file gives no metadata (Metadata false), it is left as it is.
type DefVHost struct {
	Info     VHostInfo
	Metadata bool
}

// DefQueue is a queue of a definitions file, declared as queue.declare
// would (not exclusive).
type DefQueue struct {
	VHost, Name         string
	Durable, AutoDelete bool
	Arguments           amqp.Table
}

// DefExchange is an exchange of a definitions file.
type DefExchange struct {
	VHost, Name, Type             string
	Durable, AutoDelete, Internal bool
	Arguments                     amqp.Table
}

// DefBinding is a binding of a definitions file; DestinationType is
// "queue" or "exchange".
type DefBinding struct {
	VHost, Source, Destination, DestinationType, RoutingKey string
	Arguments                                               amqp.Table
}

// DefinitionsError is an import refused: every problem found, each
// naming its object. Nothing was changed.
type DefinitionsError struct{ Problems []string }

func (e *DefinitionsError) Error() string {
	return fmt.Sprintf("definitions refused, nothing imported: %s", strings.Join(e.Problems, "; "))
}

// CheckDefinitions checks d as ImportDefinitions would, against the
// broker as it is, and changes nothing: a *DefinitionsError lists every
// problem, nil means an import would have been taken (unless the broker
// changes before it).
func (b *Broker) CheckDefinitions(d *Definitions) error {
	b.authMu.Lock()
	defer b.authMu.Unlock()
	p := b.planImport(d)
	p.lock()
	defer p.unlock()
	p.checkContents()
	return p.err()
}

// ImportDefinitions imports d whole, or refuses it whole with a
// *DefinitionsError and changes nothing (see above). Objects that exist
// already are replaced (users, permissions, policies, vhost metadata) or,
// for queues and exchanges, kept when the file declares them equivalently
// and refused otherwise, as a redeclaration is. It returns once the
// import is durable.
func (b *Broker) ImportDefinitions(d *Definitions) error {
	b.paramMu.Lock() // the parameters' notifications follow the import in order
	defer b.paramMu.Unlock()
	changed, err := b.importDefinitions(d)
	if err != nil {
		return err
	}
	for _, prm := range changed {
		if c := b.opts.Components[prm.Component]; c.Notify != nil {
			c.Notify(prm.VHost, prm.Name, prm.Value)
		}
	}
	return nil
}

func (b *Broker) importDefinitions(d *Definitions) ([]Parameter, error) {
	b.authMu.Lock()
	defer b.authMu.Unlock()
	p := b.planImport(d)
	p.lock()
	p.checkContents()
	if err := p.err(); err != nil {
		p.unlock()
		return nil, err
	}
	w := p.apply()
	p.unlockMu()
	p.publish()
	err := w.WaitErr()
	p.finish()
	if err != nil {
		return nil, fmt.Errorf("import definitions: %w", err)
	}
	return p.params, nil
}

// importPlan is an import being checked and made.
type importPlan struct {
	b        *Broker
	d        *Definitions
	problems []string

	// Read under Broker.mu at the start; authMu keeps them current.
	vhosts map[string]*VHost
	users  map[string]bool

	newUsers []*auth.User
	perms    []struct {
		k permKey
		p *auth.Permission
	}
	vmeta map[string]defs.VHost // vhosts the file creates or whose metadata it sets
	// tenancy is the file's limits and topic permissions, checked
	// (importtenancy.go).
	tenancy importTenancy
	// dqt is each vhost's default queue type as the import leaves it (the
	// file's metadata, else the vhost's); queueArgs are the file's queues'
	// arguments with it applied (withDefaultQueueType), by index in
	// Definitions.Queues, as a queue.declare in the vhost would have them.
	dqt       map[string]string
	queueArgs []amqp.Table
	// targets are the vhosts the file puts objects in, by name: existing
	// ones (locked by lock) and new ones (newVHost, reachable only once
	// published).
	targets map[string]*importTarget
	locked  []*VHost // in name order

	// params are the file's runtime parameters that are new or changed,
	// checked, their values compacted; globals its global parameters.
	params  []Parameter
	globals []GlobalParameter

	mb defs.Batch
}

// importTarget is what the file puts in one vhost.
type importTarget struct {
	v        *VHost
	created  bool
	policies []*Policy
	ops      []*Policy
	queues   []*queue.Queue // created by the import
	touched  bool           // policies changed: they are applied after
	xs       map[string]*topology.Exchange
}

func (p *importPlan) problem(format string, args ...any) {
	p.problems = append(p.problems, fmt.Sprintf(format, args...))
}

func (p *importPlan) err() error {
	if len(p.problems) == 0 {
		return nil
	}
	return &DefinitionsError{Problems: p.problems}
}

// planImport checks the users, vhosts and permissions of d and finds the
// vhosts its objects go to. Caller holds authMu.
func (b *Broker) planImport(d *Definitions) *importPlan {
	p := &importPlan{b: b, d: d, vhosts: map[string]*VHost{}, users: map[string]bool{},
		vmeta: map[string]defs.VHost{}, targets: map[string]*importTarget{}}
	b.mu.RLock()
	maps.Copy(p.vhosts, b.vhosts)
	p.dqt = map[string]string{}
	for name, v := range b.vhosts {
		p.dqt[name] = v.meta.DefaultQueueType
	}
	for name := range b.users {
		p.users[name] = true
	}
	b.mu.RUnlock()

	for _, spec := range d.Users {
		u, err := auth.NewUser(spec)
		if err != nil {
			p.problem("user '%s': %s", spec.Name, errText(err))
			continue
		}
		p.newUsers = append(p.newUsers, u)
		p.users[u.Name()] = true
	}
	newVHosts := map[string]bool{}
	for _, dv := range d.VHosts {
		if _, exists := p.vhosts[dv.Info.Name]; exists && !dv.Metadata {
			continue // nothing to change: keep its metadata
		}
		vd, err := vhostDefOf(dv.Info)
		if err != nil {
			p.problem("vhost '%s': %s", dv.Info.Name, errText(err))
			continue
		}
		p.vmeta[dv.Info.Name] = vd
		p.dqt[dv.Info.Name] = vd.DefaultQueueType
		if p.vhosts[dv.Info.Name] == nil {
			newVHosts[dv.Info.Name] = true
		}
	}
	vhostKnown := func(name string) bool { return p.vhosts[name] != nil || newVHosts[name] }
	for _, pi := range d.Permissions {
		what := fmt.Sprintf("permissions of user '%s' in vhost '%s'", pi.User, pi.VHost)
		switch {
		case !p.users[pi.User]:
			p.problem("%s: no user '%s' in the broker or the file", what, pi.User)
			continue
		case !vhostKnown(pi.VHost):
			p.problem("%s: no vhost '%s' in the broker or the file", what, pi.VHost)
			continue
		}
		perm, err := auth.NewPermission(pi.Configure, pi.Write, pi.Read)
		if err != nil {
			p.problem("%s: %s", what, errText(err))
			continue
		}
		p.perms = append(p.perms, struct {
			k permKey
			p *auth.Permission
		}{permKey{user: pi.User, vhost: pi.VHost}, perm})
	}
	p.planTenancy(vhostKnown)
	target := func(vhost, what string) *importTarget {
		if t := p.targets[vhost]; t != nil {
			return t
		}
		switch {
		case p.vhosts[vhost] != nil:
			p.targets[vhost] = &importTarget{v: p.vhosts[vhost], xs: map[string]*topology.Exchange{}}
		case newVHosts[vhost]:
			p.targets[vhost] = &importTarget{v: newVHost(b, vhost), created: true, xs: map[string]*topology.Exchange{}}
		default:
			p.problem("%s: no vhost '%s' in the broker or the file", what, vhost)
			return nil
		}
		return p.targets[vhost]
	}
	for _, pol := range d.Policies {
		target(pol.VHost, fmt.Sprintf("policy '%s' in vhost '%s'", pol.Name, pol.VHost))
	}
	p.planParameters(vhostKnown)
	for _, pol := range d.OperatorPolicies {
		target(pol.VHost, fmt.Sprintf("operator policy '%s' in vhost '%s'", pol.Name, pol.VHost))
	}
	for _, q := range d.Queues {
		target(q.VHost, fmt.Sprintf("queue '%s' in vhost '%s'", q.Name, q.VHost))
	}
	for _, x := range d.Exchanges {
		target(x.VHost, fmt.Sprintf("exchange '%s' in vhost '%s'", x.Name, x.VHost))
	}
	for _, bd := range d.Bindings {
		target(bd.VHost, bindingWhat(bd))
	}
	// A vhost the file creates exists even with nothing in it.
	for name := range newVHosts {
		if p.targets[name] == nil {
			p.targets[name] = &importTarget{v: newVHost(b, name), created: true, xs: map[string]*topology.Exchange{}}
		}
	}
	return p
}

// vhostDefOf checks a vhost's metadata as PutVHost does and returns its
// record.
func vhostDefOf(info VHostInfo) (defs.VHost, error) {
	if info.Name == "" {
		return defs.VHost{}, invalidf("vhost name must not be empty")
	}
	if info.DefaultQueueType == "undefined" {
		info.DefaultQueueType = ""
	}
	if !slices.Contains(queueTypes, info.DefaultQueueType) {
		return defs.VHost{}, invalidf("unsupported default queue type '%s' for vhost '%s': want classic, quorum or stream", info.DefaultQueueType, info.Name)
	}
	d := defs.VHost{Name: info.Name, Description: info.Description, DefaultQueueType: info.DefaultQueueType}
	for _, t := range info.Tags {
		if t != "" && !slices.Contains(d.Tags, t) {
			d.Tags = append(d.Tags, t)
		}
	}
	return d, nil
}

func bindingWhat(bd DefBinding) string {
	return fmt.Sprintf("binding from '%s' to %s '%s' in vhost '%s'", bd.Source, bd.DestinationType, bd.Destination, bd.VHost)
}

// errText is an error's text for a problem line: an AMQP error's
// without its reply name.
func errText(err error) string {
	if ae, ok := err.(*amqp.Error); ok {
		return ae.Text
	}
	return err.Error()
}

// lock locks the existing vhosts the file puts objects in: every
// policyMu, then every mu, in name order. No other code holds two vhosts'
// locks, so the order cannot deadlock with it.
func (p *importPlan) lock() {
	for _, name := range slices.Sorted(maps.Keys(p.targets)) {
		if t := p.targets[name]; !t.created {
			p.locked = append(p.locked, t.v)
		}
	}
	for _, v := range p.locked {
		v.policyMu.Lock()
	}
	for _, v := range p.locked {
		v.mu.Lock()
	}
}

func (p *importPlan) unlockMu() {
	for _, v := range slices.Backward(p.locked) {
		v.mu.Unlock()
	}
}

func (p *importPlan) unlockPolicies() {
	for _, v := range slices.Backward(p.locked) {
		v.policyMu.Unlock()
	}
}

func (p *importPlan) unlock() {
	p.unlockMu()
	p.unlockPolicies()
}

// checkContents checks the policies, queues, exchanges and bindings
// against the locked vhosts and the file, and builds what they become
// (nothing is installed yet). Caller holds the locks (lock).
func (p *importPlan) checkContents() {
	d := p.d
	for _, k := range []*policyKind{userPolicies, operatorPolicies} {
		list := d.Policies
		if k.operator {
			list = d.OperatorPolicies
		}
		for _, pol := range list {
			t := p.targets[pol.VHost]
			if t == nil {
				continue // no vhost: reported
			}
			pol.Definition = maps.Clone(pol.Definition)
			if err := policy.Validate(&pol, k.operator); err != nil {
				p.problem("%s '%s' in vhost '%s': %s", k.what, pol.Name, pol.VHost, errText(err))
				continue
			}
			pol.VHost = ""
			c := pol
			if k.operator {
				t.ops = append(t.ops, &c)
			} else {
				t.policies = append(t.policies, &c)
			}
		}
	}
	for _, dx := range d.Exchanges {
		t := p.targets[dx.VHost]
		if t == nil {
			continue
		}
		what := fmt.Sprintf("exchange '%s' in vhost '%s'", dx.Name, dx.VHost)
		m := &amqp.ExchangeDeclare{Exchange: dx.Name, Type: dx.Type, Durable: dx.Durable, AutoDelete: dx.AutoDelete,
			Internal: dx.Internal, Arguments: dx.Arguments}
		switch {
		case !topology.ValidExchangeType(dx.Type):
			p.problem("%s: unknown exchange type '%s'", what, dx.Type)
			continue
		case dx.Name == "":
			p.problem("%s: %s", what, errDefaultExchange().Text)
			continue
		}
		if x := t.v.topo.Exchanges[dx.Name]; x != nil {
			if err := exchangeEquivalent(dx.VHost, x, m); err != nil {
				p.problem("%s: %s", what, err.Text)
			}
			continue
		}
		if x := t.xs[dx.Name]; x != nil {
			if err := exchangeEquivalent(dx.VHost, x, m); err != nil {
				p.problem("%s: declared twice in the file: %s", what, err.Text)
			}
			continue
		}
		if reservedName(dx.Name) {
			p.problem("%s: exchange name '%s' contains reserved prefix 'amq.*'", what, dx.Name)
			continue
		}
		if v, ok := dx.Arguments.Get("alternate-exchange"); ok {
			if _, ok := v.(string); !ok {
				p.problem("%s: invalid type '%s' for arg 'alternate-exchange'", what, amqp.TypeName(v))
				continue
			}
		}
		if dx.Type == topology.TypeDelayed {
			if err := topology.ValidateDelayed(dx.Arguments); err != nil {
				p.problem("%s: %s", what, err.Text)
				continue
			}
		}
		t.xs[dx.Name] = topology.NewExchange(dx.Name, dx.Type, dx.Durable, dx.AutoDelete, dx.Internal, dx.Arguments)
	}
	newQueues := map[string]map[string]*DefQueue{}
	p.queueArgs = make([]amqp.Table, len(d.Queues))
	for i := range d.Queues {
		dq := &d.Queues[i]
		p.queueArgs[i] = queue.WithDefaultType(dq.Arguments, p.dqt[dq.VHost], dq.Durable, false, dq.AutoDelete)
		t := p.targets[dq.VHost]
		if t == nil {
			continue
		}
		what := fmt.Sprintf("queue '%s' in vhost '%s'", dq.Name, dq.VHost)
		m := &amqp.QueueDeclare{Queue: dq.Name, Durable: dq.Durable, AutoDelete: dq.AutoDelete, Arguments: p.queueArgs[i]}
		if dq.Name == "" {
			p.problem("%s: a queue in a definitions file needs a name", what)
			continue
		}
		if q := t.v.topo.Queues[dq.Name]; q != nil {
			if q.Exclusive {
				p.problem("%s: %s", what, errLocked(dq.VHost, dq.Name).Text)
			} else if err := queue.Equivalent(dq.VHost, q, m); err != nil {
				p.problem("%s: %s", what, err.Text)
			}
			continue
		}
		if newQueues[dq.VHost][dq.Name] != nil {
			p.problem("%s: declared twice in the file", what)
			continue
		}
		if reservedName(dq.Name) {
			p.problem("%s: queue name '%s' contains reserved prefix 'amq.*'", what, dq.Name)
			continue
		}
		if err := queue.ValidateDeclare(dq.VHost, dq.Name, m); err != nil {
			p.problem("%s: %s", what, err.Text)
			continue
		}
		if newQueues[dq.VHost] == nil {
			newQueues[dq.VHost] = map[string]*DefQueue{}
		}
		newQueues[dq.VHost][dq.Name] = dq
	}
	p.checkQueueLimits(newQueues)
	for _, bd := range d.Bindings {
		t := p.targets[bd.VHost]
		if t == nil {
			continue
		}
		what := bindingWhat(bd)
		src := t.exchange(bd.Source)
		switch {
		case bd.Source == "":
			p.problem("%s: %s", what, errDefaultExchange().Text)
			continue
		case src == nil:
			p.problem("%s: no exchange '%s' in the vhost or the file", what, bd.Source)
			continue
		}
		switch bd.DestinationType {
		case "queue":
			if t.v.topo.Queues[bd.Destination] == nil && newQueues[bd.VHost][bd.Destination] == nil {
				p.problem("%s: no queue '%s' in the vhost or the file", what, bd.Destination)
				continue
			}
			if q := t.v.topo.Queues[bd.Destination]; q != nil && q.Exclusive {
				p.problem("%s: %s", what, errLocked(bd.VHost, bd.Destination).Text)
				continue
			}
		case "exchange":
			if bd.Destination == "" {
				p.problem("%s: %s", what, errDefaultExchange().Text)
				continue
			}
			if t.exchange(bd.Destination) == nil {
				p.problem("%s: no exchange '%s' in the vhost or the file", what, bd.Destination)
				continue
			}
		default:
			p.problem("%s: destination_type must be queue or exchange", what)
			continue
		}
		if err := topology.ValidateBinding(src, bd.Arguments); err != nil {
			p.problem("%s: %s", what, err.Text)
		}
	}
}

// exchange returns the exchange name of t: the vhost's, or one the file
// declares.
func (t *importTarget) exchange(name string) *topology.Exchange {
	if x := t.v.topo.Exchanges[name]; x != nil {
		return x
	}
	return t.xs[name]
}

// apply installs the checked contents in the vhosts (locked or new) and
// hands the whole import to the store in one batch. Caller holds the
// locks; the write is awaited after they are released.
func (p *importPlan) apply() *queue.StoreWrite {
	b, d := p.b, p.d
	names := slices.Sorted(maps.Keys(p.targets))
	var durable int
	for _, dq := range d.Queues {
		if t := p.targets[dq.VHost]; t != nil && t.v.topo.Queues[dq.Name] == nil && dq.Durable {
			durable++
		}
	}
	for _, t := range p.targets {
		for _, x := range t.xs {
			if x.Type == topology.TypeDelayed && x.Durable {
				durable++ // its holding queue
			}
		}
	}
	ids := b.newDurableQueueIDs(durable)
	for _, name := range names {
		t := p.targets[name]
		v := t.v
		for _, pol := range t.policies {
			v.policiesForWriteLocked(userPolicies)[pol.Name] = pol
			p.mb.Put(defs.EncodePolicy(policyDefOf(userPolicies, name, pol)))
			t.touched = true
		}
		for _, pol := range t.ops {
			v.policiesForWriteLocked(operatorPolicies)[pol.Name] = pol
			p.mb.Put(defs.EncodePolicy(policyDefOf(operatorPolicies, name, pol)))
			t.touched = true
		}
		ps := policy.Sorted(v.policies)
		for _, xname := range slices.Sorted(maps.Keys(t.xs)) {
			x := t.xs[xname]
			x.ApplyPolicy(ps)
			if x.Type == topology.TypeDelayed {
				id := b.newQueueID()
				if x.Durable {
					id, ids = ids[0], ids[1:]
				}
				b.newHold(v, x, id)
			}
			v.topo.Exchanges[xname] = x
			if x.Durable {
				p.mb.Put(defs.EncodeExchange(x.Def(name)))
				if x.Hold != nil {
					p.mb.Put(holdRecord(x))
				}
			}
		}
	}
	for i, dq := range d.Queues {
		t := p.targets[dq.VHost]
		if t == nil || t.v.topo.Queues[dq.Name] != nil {
			continue // equivalent, or declared twice (refused)
		}
		v := t.v
		var id store.QueueID
		if dq.Durable {
			id, ids = ids[0], ids[1:]
		} else {
			id = b.newQueueID()
		}
		q := queue.New(b.env, &v.Host, id, dq.Name, dq.Durable, false, dq.AutoDelete, p.queueArgs[i])
		if qp := v.policyForQueueLocked(dq.Name, q.Type); qp != nil {
			q.InitPolicy(qp)
		}
		v.topo.Queues[dq.Name] = q
		if q.Durable {
			p.mb.Put(defs.EncodeQueue(q.Def()))
		}
		t.queues = append(t.queues, q)
	}
	for _, bd := range d.Bindings {
		t := p.targets[bd.VHost]
		v := t.v
		src := v.topo.Exchanges[bd.Source]
		bnd := &topology.Binding{Source: bd.Source, Key: bd.RoutingKey, Args: bd.Arguments}
		durable := src.Durable
		if bd.DestinationType == "queue" {
			q := v.topo.Queues[bd.Destination]
			if src.FindBinding(q, nil, bd.RoutingKey, bd.Arguments) != nil {
				continue
			}
			bnd.Queue = q
			v.topo.QueueBindings[q] = append(v.topo.QueueBindings[q], bnd)
			durable = durable && q.Durable
		} else {
			dx := v.topo.Exchanges[bd.Destination]
			if src.FindBinding(nil, dx, bd.RoutingKey, bd.Arguments) != nil {
				continue
			}
			bnd.Exchange = dx
			durable = durable && dx.Durable
		}
		src.AddBinding(bnd)
		if durable {
			p.mb.Put(defs.EncodeBinding(bnd.Def(v.Name)))
		}
	}
	for name, vd := range p.vmeta {
		p.mb.Put(defs.EncodeVHost(vd))
		if t := p.targets[name]; t != nil && t.created {
			t.v.meta = vd
		}
	}
	for _, u := range p.newUsers {
		p.mb.Put(defs.EncodeUser(userDefOf(u)))
	}
	for _, prm := range p.params {
		p.mb.Put(defs.EncodeParameter(prm))
	}
	for _, g := range p.globals {
		p.mb.Put(defs.EncodeGlobalParameter(g))
	}
	for _, pm := range p.perms {
		p.mb.Put(defs.EncodePerm(permDefOf(pm.k.vhost, pm.k.user, pm.p)))
	}
	p.applyTenancy()
	return b.startMeta(&p.mb)
}

// publish makes the new vhosts, the users, the permissions and the vhost
// metadata visible. Caller holds authMu, no vhost lock.
func (p *importPlan) publish() {
	b := p.b
	b.mu.Lock()
	defer b.mu.Unlock()
	for name, t := range p.targets {
		if t.created {
			b.vhosts[name] = t.v
		}
	}
	for name, vd := range p.vmeta {
		if v := b.vhosts[name]; v != nil {
			v.meta = vd
		}
	}
	for _, u := range p.newUsers {
		b.setUserLocked(u.Name(), u)
	}
	for _, prm := range p.params {
		b.params[paramKey{prm.VHost, prm.Component, prm.Name}] = prm.Value
	}
	for _, g := range p.globals {
		b.globals[g.Name] = g.Value
	}
	changed := map[permKey]bool{}
	for _, pm := range p.perms {
		b.perms[pm.k] = pm.p
		changed[pm.k] = true
	}
	b.refreshConnPermsLocked(func(c *conn) bool { return changed[permKey{user: c.userName, vhost: c.vhost.Name}] })
	p.publishTenancy()
}

// finish applies the new policies to every queue of the vhosts that got
// some, starts the new queues' x-expires leases (a declaration starts
// them), and retries waiting dead letters, which a new route may serve.
// Caller holds the policyMu of the locked vhosts (released here); new
// vhosts' are taken here.
func (p *importPlan) finish() {
	for _, name := range slices.SortedFunc(maps.Keys(p.targets), cmp.Compare[string]) {
		t := p.targets[name]
		if t.created {
			t.v.policyMu.Lock()
		}
		if t.touched {
			p.b.applyPolicies(t.v)
		}
		if t.created {
			t.v.policyMu.Unlock()
		}
		for _, q := range t.queues {
			q.Touch()
		}
		p.b.retryBacklogs(t.v)
	}
	p.unlockPolicies()
}

// newDurableQueueIDs allocates n ids as newDurableQueueID does, with one
// high-water mark for them all.
func (b *Broker) newDurableQueueIDs(n int) []store.QueueID {
	if n == 0 {
		return nil
	}
	b.idMu.Lock()
	defer b.idMu.Unlock()
	ids := make([]store.QueueID, n)
	for i := range ids {
		ids[i] = b.newQueueID()
	}
	var mb defs.Batch
	mb.Put(defs.EncodeQueueIDMark(uint64(ids[n-1])))
	b.startMeta(&mb) // ordered before the queues' definitions
	return ids
}

// planParameters checks the file's runtime parameters (their component's
// Validate, their vhost in the broker or the file) and global parameters,
// keeping the parameters that are new or changed. Caller holds authMu and
// paramMu.
func (p *importPlan) planParameters(vhostKnown func(string) bool) {
	b := p.b
	for _, prm := range p.d.Parameters {
		what := fmt.Sprintf("parameter '%s' of component '%s' in vhost '%s'", prm.Name, prm.Component, prm.VHost)
		_, v, err := b.checkParameter(prm.VHost, prm.Component, prm.Name, prm.Value)
		if err != nil {
			p.problem("%s: %s", what, errText(err))
			continue
		}
		if !vhostKnown(prm.VHost) {
			p.problem("%s: no vhost '%s' in the broker or the file", what, prm.VHost)
			continue
		}
		if old, ok := b.LookupParameter(prm.VHost, prm.Component, prm.Name); ok && bytes.Equal(old, v) {
			continue
		}
		prm.Value = v
		p.params = append(p.params, prm)
	}
	for _, g := range p.d.GlobalParameters {
		var compact bytes.Buffer
		if err := json.Compact(&compact, g.Value); err != nil {
			p.problem("global parameter '%s': JSON decoding error. Reason: %s", g.Name, err.Error())
			continue
		}
		p.globals = append(p.globals, GlobalParameter{Name: g.Name, Value: compact.Bytes()})
	}
}
