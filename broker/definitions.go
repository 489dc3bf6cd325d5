package broker

import (
	"fmt"
	"slices"

	"github.com/brokerd/brokerd/broker/auth"
	"github.com/brokerd/brokerd/broker/defs"
	"github.com/brokerd/brokerd/broker/policy"
	"github.com/brokerd/brokerd/broker/queue"
	"github.com/brokerd/brokerd/broker/queue/engine"
	"github.com/brokerd/brokerd/broker/topology"
	"github.com/brokerd/brokerd/store"
)

// Durable definitions: the broker's side of broker/defs, which holds the
// record layout and codecs. Here the records of live objects are built
// (as defs values, under the lock that guards what they read: the codec
// sees values only), handed to the store (storeWrite) and read back at
// start (recoverDefinitions).

// userDefOf returns u's record.
func userDefOf(u *auth.User) defs.User {
	return defs.User{Name: u.Name(), Algorithm: u.Algorithm(), Hash: u.Hash(), Tags: u.Tags()}
}

// permDefOf returns the record of user's permissions p in vhost.
func permDefOf(vhost, user string, p *auth.Permission) defs.Perm {
	return defs.Perm{VHost: vhost, User: user, Configure: p.Configure, Write: p.Write, Read: p.Read}
}

// policyDefOf returns the record of p, a policy of kind k in vhost.
func policyDefOf(k *policyKind, vhost string, p *Policy) defs.Policy {
	return defs.Policy{Operator: k.operator, VHost: vhost, Name: p.Name, Pattern: p.Pattern, ApplyTo: p.ApplyTo,
		Priority: p.Priority, Definition: p.Definition}
}

// startMeta is startWrite for definitions only.
func (b *Broker) startMeta(m *defs.Batch) *queue.StoreWrite {
	return b.env.StartWrite(&store.Batch{Meta: m.Ops})
}

// recoverDefinitions rebuilds vhosts, users, permissions, durable
// exchanges, queues, bindings, policies and operator policies from the
// store, then each durable queue's entries.
//
// A definition whose vhost, queue or exchange is missing (a binding to a
// queue that is gone, say) is dropped with a warning and deleted from the
// store: the broker starts with the rest. A record that does not decode
// stops recovery: the store holds something this broker did not write.
func (b *Broker) recoverDefinitions() error {
	var err error
	var drop defs.Batch
	var dropQueues []store.QueueID
	dangling := func(key, what string, args ...any) {
		b.env.Log.Warn("recovery: dropping "+what, args...)
		drop.Delete(key)
	}
	scan := func(prefix string, fn func(key string, v []byte) error) {
		if err != nil {
			return
		}
		serr := b.env.Store.ScanMeta(prefix, func(k string, v []byte) bool {
			if err = fn(k, v); err != nil {
				err = fmt.Errorf("definition %q: %w", k, err)
			}
			return err == nil
		})
		if err == nil && serr != nil {
			err = fmt.Errorf("scan definitions %q: %w", prefix, serr)
		}
	}
	scan(defs.KeyQueueIDMark, func(k string, v []byte) error {
		id, err := defs.DecodeQueueIDMark(k, v)
		if err != nil {
			return err
		}
		if id > b.queueID.Load() {
			b.queueID.Store(id)
		}
		return nil
	})
	scan(defs.KeyBootstrapMark, func(k string, v []byte) error {
		if err := defs.DecodeBootstrapMark(k, v); err != nil {
			return err
		}
		b.bootstrapped = true
		return nil
	})
	scan(defs.PrefixVHost, func(k string, v []byte) error {
		d, err := defs.DecodeVHost(k, v)
		if err != nil {
			return err
		}
		if b.vhosts[d.Name] == nil {
			b.vhosts[d.Name] = newVHost(b, d.Name)
		}
		b.vhosts[d.Name].meta = d
		return nil
	})
	scan(defs.PrefixUser, func(k string, v []byte) error {
		d, err := defs.DecodeUser(k, v)
		if err != nil {
			return err
		}
		if !auth.KnownAlgorithm(d.Algorithm) {
			return fmt.Errorf("%w: unknown password hashing algorithm %q", defs.ErrCorrupt, d.Algorithm)
		}
		b.users[d.Name] = auth.StoredUser(d.Name, d.Algorithm, d.Hash, d.Tags)
		return nil
	})
	scan(defs.PrefixPerm, func(k string, v []byte) error {
		d, err := defs.DecodePerm(k, v)
		if err != nil {
			return err
		}
		switch {
		case b.vhosts[d.VHost] == nil:
			dangling(k, "permissions in unknown vhost", "vhost", d.VHost, "user", d.User)
			return nil
		case b.users[d.User] == nil:
			dangling(k, "permissions of unknown user", "vhost", d.VHost, "user", d.User)
			return nil
		}
		perm, err := auth.NewPermission(d.Configure, d.Write, d.Read)
		if err != nil {
			return fmt.Errorf("stored permissions: %w", err)
		}
		b.perms[permKey{user: d.User, vhost: d.VHost}] = perm
		return nil
	})
	b.recoverTenancy(scan, dangling)
	scan(defs.PrefixExchange, func(k string, v []byte) error {
		d, err := defs.DecodeExchange(k, v)
		if err != nil {
			return err
		}
		vh := b.vhosts[d.VHost]
		if vh == nil {
			dangling(k, "exchange in unknown vhost", "vhost", d.VHost, "exchange", d.Name)
			return nil
		}
		vh.topo.Exchanges[d.Name] = topology.NewExchange(d.Name, d.Type, true, d.AutoDelete, d.Internal, d.Args)
		return nil
	})
	qstates := map[uint64]defs.QueueState{}
	scan(defs.PrefixQueueState, func(k string, v []byte) error {
		d, err := defs.DecodeQueueState(k, v)
		if err != nil {
			return err
		}
		qstates[d.ID] = d
		return nil
	})
	var queues []*queue.Queue
	scan(defs.PrefixQueue, func(k string, v []byte) error {
		d, err := defs.DecodeQueue(k, v)
		if err != nil {
			return err
		}
		if d.ID > b.queueID.Load() {
			b.queueID.Store(d.ID)
		}
		vh := b.vhosts[d.VHost]
		if vh == nil {
			dangling(k, "queue in unknown vhost", "vhost", d.VHost, "queue", d.Name)
			dropQueues = append(dropQueues, store.QueueID(d.ID))
			return nil
		}
		var q *queue.Queue
		if xname, ok := queue.HoldExchange(d.Name); ok {
			// A delayed exchange's holding queue (delayed.go): its
			// exchange's, in no queue map.
			x := vh.topo.Exchanges[xname]
			if x == nil || x.Type != topology.TypeDelayed || x.Hold != nil {
				dangling(k, "the held messages of an unknown delayed exchange", "vhost", d.VHost, "exchange", xname)
				dropQueues = append(dropQueues, store.QueueID(d.ID))
				return nil
			}
			q = queue.NewHold(b.env, &vh.Host, store.QueueID(d.ID), xname, true)
			x.Hold = q
		} else {
			q = queue.New(b.env, &vh.Host, store.QueueID(d.ID), d.Name, true, false, d.AutoDelete, d.Args)
		}
		// A queue written before its state had a record of its own keeps
		// it in its definition; once a state record is stored, it wins.
		if st, ok := qstates[d.ID]; ok {
			q.InitState(st.Backlog, st.Marks)
			delete(qstates, d.ID)
		} else {
			q.InitState(d.Backlog, d.Marks)
		}
		if !q.IsHold() {
			vh.topo.Queues[q.Name] = q
		}
		queues = append(queues, q)
		return nil
	})
	scan(defs.PrefixBinding, func(k string, v []byte) error {
		d, err := defs.DecodeBinding(k, v)
		if err != nil {
			return err
		}
		vh := b.vhosts[d.VHost]
		if vh == nil {
			dangling(k, "binding in unknown vhost", "vhost", d.VHost, "source", d.Source, "destination", d.Dest, "routing_key", d.Key)
			return nil
		}
		src := vh.topo.Exchanges[d.Source]
		if src == nil {
			dangling(k, "binding from unknown exchange", "vhost", d.VHost, "source", d.Source, "destination", d.Dest, "routing_key", d.Key)
			return nil
		}
		bd := &topology.Binding{Source: d.Source, Key: d.Key, Args: d.Args}
		if d.ToExchange {
			if bd.Exchange = vh.topo.Exchanges[d.Dest]; bd.Exchange == nil {
				dangling(k, "binding to unknown exchange", "vhost", d.VHost, "source", d.Source, "exchange", d.Dest, "routing_key", d.Key)
				return nil
			}
		} else {
			if bd.Queue = vh.topo.Queues[d.Dest]; bd.Queue == nil {
				dangling(k, "binding to unknown queue", "vhost", d.VHost, "source", d.Source, "queue", d.Dest, "routing_key", d.Key)
				return nil
			}
			vh.topo.QueueBindings[bd.Queue] = append(vh.topo.QueueBindings[bd.Queue], bd)
		}
		src.AddBinding(bd)
		return nil
	})
	for _, k := range []*policyKind{userPolicies, operatorPolicies} {
		scan(k.meta, func(key string, v []byte) error {
			d, err := defs.DecodePolicy(key, v)
			if err != nil {
				return err
			}
			vh := b.vhosts[d.VHost]
			if vh == nil {
				dangling(key, k.what+" in unknown vhost", "vhost", d.VHost, "policy", d.Name)
				return nil
			}
			pol := &Policy{Name: d.Name, Pattern: d.Pattern, ApplyTo: d.ApplyTo, Priority: d.Priority, Definition: d.Definition}
			if err := policy.Validate(pol, k.operator); err != nil {
				return fmt.Errorf("stored %s: %w", k.what, err)
			}
			vh.policiesForWriteLocked(k)[pol.Name] = pol
			return nil
		})
	}
	b.recoverParameters(scan, dangling)
	if err != nil {
		return err
	}
	for id := range qstates { // no queue has it: its deletion's record went first
		dangling(defs.QueueStateKey(id), "state of unknown queue", "queue_id", id)
	}
	if w := b.env.StartWrite(&store.Batch{Meta: drop.Ops, DropQueues: dropQueues}); w != nil {
		<-w.Done
		if w.Err != nil {
			return fmt.Errorf("delete dangling definitions: %w", w.Err)
		}
	}
	states, err := b.queueStates()
	if err != nil {
		return err
	}
	if err := b.dropVolatileQueues(states); err != nil {
		return err
	}
	if err := b.recoverMissingHolds(); err != nil {
		return err
	}
	progress := b.opts.RecoveryProgress
	if progress == nil {
		progress = func(int, int) {}
	}
	progress(0, len(queues))
	for i, q := range queues {
		if err := q.RecoverEntries(states); err != nil {
			return err
		}
		progress(i+1, len(queues))
	}
	// Policies apply (limits, dead-letter exchanges) and leases start now.
	for _, v := range b.vhosts {
		b.applyPolicies(v)
	}
	for _, q := range queues {
		q.ArmRecovered()
		q.Touch()
	}
	return nil
}

// dropVolatileQueues drops the volatile ranges (spill.go) a previous run
// left in the store, and takes them out of states. Queue ids continue
// above theirs: a non-durable queue's id is not recorded anywhere else.
func (b *Broker) dropVolatileQueues(states map[store.QueueID]store.QueueState) error {
	var drop []store.QueueID
	for id := range states {
		if id.Volatile() {
			drop = append(drop, id)
			delete(states, id)
			if low := uint64(id &^ (store.VolatileQueue | engine.BacklogBit)); low > b.queueID.Load() {
				b.queueID.Store(low)
			}
		}
	}
	if len(drop) == 0 {
		return nil
	}
	slices.Sort(drop)
	b.env.Log.Info("recovery: dropping the paged-out transient messages of the previous run", "queues", len(drop))
	if w := b.env.StartWrite(&store.Batch{DropQueues: drop}); w != nil {
		<-w.Done
		if w.Err != nil {
			return fmt.Errorf("drop transient messages: %w", w.Err)
		}
	}
	return nil
}

// queueStates returns the stored state of every store queue: for
// recovery from counters (deadlines are armed by the horizon scans), and
// of stored backlogs.
func (b *Broker) queueStates() (map[store.QueueID]store.QueueState, error) {
	states := make(map[store.QueueID]store.QueueState)
	err := b.env.Store.Queues(func(id store.QueueID, st store.QueueState) bool {
		states[id] = st
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("recover queue states: %w", err)
	}
	return states, nil
}

// QueueNames names the queues of a store's definition records (records: key
// → value, as Store.ScanMeta gives them), by the store queue ids their
// entries are kept under: "queue 'name' in vhost 'v'", with " (its
// dead-letter backlog)" for a queue's backlog range. brokerd verify uses it to say which queues
// damage affects. Records it cannot decode are left out.
func QueueNames(records map[string][]byte) map[store.QueueID]string {
	out := map[store.QueueID]string{}
	for k, v := range records {
		d, err := defs.DecodeQueue(k, v)
		if err != nil {
			continue
		}
		name := fmt.Sprintf("queue '%s' in vhost '%s'", d.Name, d.VHost)
		if x, ok := queue.HoldExchange(d.Name); ok {
			name = fmt.Sprintf("the held messages of delayed exchange '%s' in vhost '%s'", x, d.VHost)
		}
		id := store.QueueID(d.ID)
		r := engine.Ranges{ID: id}
		out[id] = name
		out[r.VolatileID()] = name
		out[r.BacklogID()] = name + " (its dead-letter backlog)"
		out[r.VolatileBacklogID()] = name + " (its dead-letter backlog)"
	}
	return out
}
