package broker

import (
	"fmt"
	"slices"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/defs"
	"github.com/brokerd/brokerd/broker/engine"
	"github.com/brokerd/brokerd/store"
)

// metaBatch collects the store operations of one definition change (the
// record layout is in metacodec.go).
type metaBatch struct{ ops []store.MetaOp }

func (m *metaBatch) put(key string, v []byte) {
	m.ops = append(m.ops, store.MetaOp{Key: key, Value: v})
}

func (m *metaBatch) del(key string) { m.ops = append(m.ops, store.MetaOp{Key: key}) }

func (m *metaBatch) putVHost(name string, d vhostDef) {
	m.put(metaKey(metaVHost, name), encodeVHostDef(d))
}

func (m *metaBatch) deleteVHost(name string) { m.del(metaKey(metaVHost, name)) }

func (m *metaBatch) putUser(u *user) {
	m.put(metaKey(metaUser, u.name), encodeUserDef(userDef{Algorithm: u.alg.name, Hash: u.hash, Tags: u.tags}))
}

func (m *metaBatch) deleteUser(name string) { m.del(metaKey(metaUser, name)) }

func (m *metaBatch) putPerm(vhost, user string, p *permission) {
	m.put(metaKey(metaPerm, vhost, user), encodePermDef(permDef{Configure: p.Configure, Write: p.Write, Read: p.Read}))
}

func (m *metaBatch) deletePerm(vhost, user string) { m.del(metaKey(metaPerm, vhost, user)) }

func (m *metaBatch) putExchange(vhost string, x *Exchange) {
	m.put(metaKey(metaExchange, vhost, x.Name), encodeExchangeDef(x))
}

func (m *metaBatch) deleteExchange(vhost, name string) { m.del(metaKey(metaExchange, vhost, name)) }

func (m *metaBatch) putQueue(vhost string, q *Queue) {
	m.put(metaKey(metaQueue, vhost, q.Name), encodeQueueDef(q))
}

func (m *metaBatch) deleteQueue(vhost, name string) { m.del(metaKey(metaQueue, vhost, name)) }

func (m *metaBatch) putBinding(vhost string, b *Binding) {
	m.put(bindingKey(vhost, b), []byte{metaVersion})
}

func (m *metaBatch) deleteBinding(vhost string, b *Binding) { m.del(bindingKey(vhost, b)) }

// putPolicy writes a policy of kind (metaPolicy or metaOperatorPolicy).
func (m *metaBatch) putPolicy(kind, vhost string, p *Policy) {
	m.put(metaKey(kind, vhost, p.Name), encodePolicyDef(p))
}

func (m *metaBatch) deletePolicy(kind, vhost, name string) { m.del(metaKey(kind, vhost, name)) }

// The record of a live object is built from it here, as a broker/defs
// value, under the lock that guards what it reads; the codec sees values
// only.

// def returns q's record. Caller holds q.mu (the backlog flag and the
// marks; Marks aliases q's and is read before the lock is released).
func (q *Queue) def() defs.Queue {
	return defs.Queue{VHost: q.vhost.Name, Name: q.Name, ID: uint64(q.id), AutoDelete: q.AutoDelete,
		Backlog: q.backlogMarked, Args: q.Args, Marks: q.marksLocked()}
}

// def returns x's record in vhost.
func (x *Exchange) def(vhost string) defs.Exchange {
	return defs.Exchange{VHost: vhost, Name: x.Name, Type: x.Type, AutoDelete: x.AutoDelete, Internal: x.Internal, Args: x.Args}
}

// def returns b's record in vhost.
func (b *Binding) def(vhost string) defs.Binding {
	return defs.Binding{VHost: vhost, Source: b.Source, Dest: b.destName(), ToExchange: b.exchange != nil, Key: b.Key, Args: b.Args}
}

// userDefOf returns u's record.
func userDefOf(u *user) defs.User {
	return defs.User{Name: u.name, Algorithm: u.alg.name, Hash: u.hash, Tags: u.tags}
}

// permDefOf returns the record of user's permissions p in vhost.
func permDefOf(vhost, user string, p *permission) defs.Perm {
	return defs.Perm{VHost: vhost, User: user, Configure: p.Configure, Write: p.Write, Read: p.Read}
}

// policyDefOf returns the record of p, a policy of kind k in vhost.
func policyDefOf(k *policyKind, vhost string, p *Policy) defs.Policy {
	return defs.Policy{Operator: k.operator, VHost: vhost, Name: p.Name, Pattern: p.Pattern, ApplyTo: p.ApplyTo,
		Priority: p.Priority, Definition: p.Definition}
}

// storeWrite is a batch handed to the store, whose completion is awaited
// later. A nil *storeWrite is a write of nothing, complete at once.
type storeWrite struct {
	done chan struct{}
	err  error // set before done is closed
}

// startWrite hands batch to the store and returns at once (Apply does not
// block). Definition changes call it with the lock under which they
// changed memory still held (the vhost lock; the queue lock too for a
// queue's deletion), so the store sees them in the order memory did;
// they wait after releasing it.
func (b *Broker) startWrite(batch *store.Batch) *storeWrite {
	if batch.Empty() {
		return nil
	}
	w := &storeWrite{done: make(chan struct{})}
	b.store.Apply(batch, func(err error) {
		b.storeFailed(err)
		w.err = err
		close(w.done)
	})
	return w
}

// startMeta is startWrite for definitions only.
func (b *Broker) startMeta(m *metaBatch) *storeWrite {
	return b.startWrite(&store.Batch{Meta: m.ops})
}

// waitErr is wait for management operations: the store's error, wrapped.
func (w *storeWrite) waitErr() error {
	if w == nil {
		return nil
	}
	<-w.done
	if w.err != nil {
		return fmt.Errorf("store failed: %w", w.err)
	}
	return nil
}

// wait blocks until the write is durable. A failure is a connection error
// (541): the reply that depends on it (declare-ok, delete-ok, ...) promises
// the change survives a restart.
func (w *storeWrite) wait() *amqp.Error {
	if w == nil {
		return nil
	}
	<-w.done
	if w.err != nil {
		return amqp.Errorf(amqp.InternalError, "message store failed: %s", w.err)
	}
	return nil
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
	var drop metaBatch
	var dropQueues []store.QueueID
	dangling := func(key, what string, args ...any) {
		b.log.Warn("recovery: dropping "+what, args...)
		drop.del(key)
	}
	scan := func(prefix string, n int, fn func(key string, parts []string, v []byte) error) {
		if err != nil {
			return
		}
		serr := b.store.ScanMeta(prefix, func(k string, v []byte) bool {
			var parts []string
			if parts, err = metaParts(k, prefix, n); err == nil {
				err = fn(k, parts, v)
			}
			if err != nil {
				err = fmt.Errorf("definition %q: %w", k, err)
			}
			return err == nil
		})
		if err == nil && serr != nil {
			err = fmt.Errorf("scan definitions %q: %w", prefix, serr)
		}
	}
	scan(metaQueueIDMark, 0, func(_ string, _ []string, v []byte) error {
		id, err := decodeQueueIDMark(v)
		if err != nil {
			return err
		}
		if id > b.queueID.Load() {
			b.queueID.Store(id)
		}
		return nil
	})
	scan(metaBootstrapMark, 0, func(_ string, _ []string, v []byte) error {
		if err := checkEmptyDef(v); err != nil {
			return err
		}
		b.bootstrapped = true
		return nil
	})
	scan(metaVHost, 1, func(_ string, p []string, v []byte) error {
		d, err := decodeVHostDef(v)
		if err != nil {
			return err
		}
		if b.vhosts[p[0]] == nil {
			b.vhosts[p[0]] = newVHost(b, p[0])
		}
		b.vhosts[p[0]].meta = d
		return nil
	})
	scan(metaUser, 1, func(_ string, p []string, v []byte) error {
		d, err := decodeUserDef(v)
		if err != nil {
			return err
		}
		b.users[p[0]] = &user{name: p[0], alg: hashAlgorithm(d.Algorithm), hash: d.Hash, tags: d.Tags}
		return nil
	})
	scan(metaPerm, 2, func(k string, p []string, v []byte) error {
		d, err := decodePermDef(v)
		if err != nil {
			return err
		}
		switch {
		case b.vhosts[p[0]] == nil:
			dangling(k, "permissions in unknown vhost", "vhost", p[0], "user", p[1])
			return nil
		case b.users[p[1]] == nil:
			dangling(k, "permissions of unknown user", "vhost", p[0], "user", p[1])
			return nil
		}
		perm, err := newPermission(d.Configure, d.Write, d.Read)
		if err != nil {
			return fmt.Errorf("stored permissions: %w", err)
		}
		b.perms[permKey{user: p[1], vhost: p[0]}] = perm
		return nil
	})
	scan(metaExchange, 2, func(k string, p []string, v []byte) error {
		d, err := decodeExchangeDef(v)
		if err != nil {
			return err
		}
		vh := b.vhosts[p[0]]
		if vh == nil {
			dangling(k, "exchange in unknown vhost", "vhost", p[0], "exchange", p[1])
			return nil
		}
		vh.exchanges[p[1]] = newExchange(p[1], d.Type, true, d.AutoDelete, d.Internal, d.Args)
		return nil
	})
	var queues []*Queue
	scan(metaQueue, 2, func(k string, p []string, v []byte) error {
		d, err := decodeQueueDef(v)
		if err != nil {
			return err
		}
		if d.ID > b.queueID.Load() {
			b.queueID.Store(d.ID)
		}
		vh := b.vhosts[p[0]]
		if vh == nil {
			dangling(k, "queue in unknown vhost", "vhost", p[0], "queue", p[1])
			dropQueues = append(dropQueues, store.QueueID(d.ID))
			return nil
		}
		q := newQueue(vh, store.QueueID(d.ID), p[1], true, false, d.AutoDelete, d.Args)
		q.backlogMarked = d.Backlog
		q.initMarks(d.Marks)
		vh.queues[q.Name] = q
		queues = append(queues, q)
		return nil
	})
	scan(metaBinding, 6, func(k string, p []string, v []byte) error {
		if err := checkEmptyDef(v); err != nil {
			return err
		}
		args, err := decodeArgs([]byte(p[5]))
		if err != nil {
			return fmt.Errorf("%w: arguments: %w", errMetaCorrupt, err)
		}
		vhost, source, kind, dest, key := p[0], p[1], p[2], p[3], p[4]
		vh := b.vhosts[vhost]
		if vh == nil {
			dangling(k, "binding in unknown vhost", "vhost", vhost, "source", source, "destination", dest, "routing_key", key)
			return nil
		}
		src := vh.exchanges[source]
		if src == nil {
			dangling(k, "binding from unknown exchange", "vhost", vhost, "source", source, "destination", dest, "routing_key", key)
			return nil
		}
		bd := &Binding{Source: source, Key: key, Args: args}
		switch kind {
		case bindToQueue:
			if bd.queue = vh.queues[dest]; bd.queue == nil {
				dangling(k, "binding to unknown queue", "vhost", vhost, "source", source, "queue", dest, "routing_key", key)
				return nil
			}
			bd.queue.bindings = append(bd.queue.bindings, bd)
		case bindToExchange:
			if bd.exchange = vh.exchanges[dest]; bd.exchange == nil {
				dangling(k, "binding to unknown exchange", "vhost", vhost, "source", source, "exchange", dest, "routing_key", key)
				return nil
			}
		default:
			return fmt.Errorf("%w: binding destination kind %q", errMetaCorrupt, kind)
		}
		src.addBinding(bd)
		return nil
	})
	for _, k := range []*policyKind{userPolicies, operatorPolicies} {
		scan(k.meta, 2, func(key string, p []string, v []byte) error {
			d, err := decodePolicyDef(v)
			if err != nil {
				return err
			}
			vh := b.vhosts[p[0]]
			if vh == nil {
				dangling(key, k.what+" in unknown vhost", "vhost", p[0], "policy", p[1])
				return nil
			}
			pol := &Policy{Name: p[1], Pattern: d.Pattern, ApplyTo: d.ApplyTo, Priority: d.Priority, Definition: d.Definition}
			if err := validatePolicy(pol, k.operator); err != nil {
				return fmt.Errorf("stored %s: %w", k.what, err)
			}
			vh.policiesForWriteLocked(k)[pol.Name] = pol
			return nil
		})
	}
	if err != nil {
		return err
	}
	if w := b.startWrite(&store.Batch{Meta: drop.ops, DropQueues: dropQueues}); w != nil {
		<-w.done
		if w.err != nil {
			return fmt.Errorf("delete dangling definitions: %w", w.err)
		}
	}
	states, err := b.queueStates()
	if err != nil {
		return err
	}
	if err := b.dropVolatileQueues(states); err != nil {
		return err
	}
	progress := b.opts.RecoveryProgress
	if progress == nil {
		progress = func(int, int) {}
	}
	progress(0, len(queues))
	for i, q := range queues {
		if err := b.recoverEntries(q, states); err != nil {
			return err
		}
		progress(i+1, len(queues))
	}
	// Policies apply (limits, dead-letter exchanges) and leases start now.
	for _, v := range b.vhosts {
		b.applyPolicies(v)
	}
	for _, q := range queues {
		q.armRecovered()
		q.touch()
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
	b.log.Info("recovery: dropping the paged-out transient messages of the previous run", "queues", len(drop))
	if w := b.startWrite(&store.Batch{DropQueues: drop}); w != nil {
		<-w.done
		if w.err != nil {
			return fmt.Errorf("drop transient messages: %w", w.err)
		}
	}
	return nil
}

// queueStates returns the stored state of every store queue: for
// recovery from counters (deadlines are armed by the horizon scans), and
// of stored backlogs.
func (b *Broker) queueStates() (map[store.QueueID]store.QueueState, error) {
	states := make(map[store.QueueID]store.QueueState)
	err := b.store.Queues(func(id store.QueueID, st store.QueueState) bool {
		states[id] = st
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("recover queue states: %w", err)
	}
	return states, nil
}

// recoverEntries restores a durable queue's stored entries: their counts
// only, where the queue pages and no legacy dead letter waits among its
// entries (the backlog flag), else by loading every entry; and the count
// of its stored backlog. Those that may have been delivered before the
// restart are marked redelivered (marks.go).
func (b *Broker) recoverEntries(q *Queue, states map[store.QueueID]store.QueueState) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if st, ok := states[q.backlogID()]; ok {
		for _, l := range st.Levels {
			q.blStored += int(l.Count)
		}
		q.blSeq = st.LastSeq
		q.vhost.waiting.Add(int64(q.blStored))
	}
	paged := states
	q.recovering = true
	// A queue that may hold dead letters waiting for a route is read
	// whole, to find them.
	if st, ok := paged[q.id]; ok && q.ready.Window > 0 && !q.backlogMarked && q.recoverPagedLocked(st) {
		q.seq.Store(st.LastSeq)
		return nil
	}
	// The sequence continues after the last entry ever stored, even if
	// none is left: seqs are never reused.
	last, err := b.store.LastSeq(q.id)
	if err != nil {
		return fmt.Errorf("recover queue '%s' in vhost '%s': %w", q.Name, q.vhost.Name, err)
	}
	q.seq.Store(last)
	err = b.store.ScanQueue(q.id, 0, func(se *store.Entry) bool {
		e := &entry{Entry: *se, q: q, redelivered: q.deliveredBefore(se.Prio, se.Seq, se.DeliveryCount), stored: true, inStore: true, prio: se.Prio}
		e.timer.Value = e
		if e.DeadLetter != "" {
			e.state = stBacklog
			q.addBacklogLocked(e)
		} else {
			// A deadline that passed while the broker was down fires
			// at once.
			q.makeReadyLocked(e, true)
		}
		if se.Seq > q.seq.Load() {
			q.seq.Store(se.Seq)
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("recover queue '%s' in vhost '%s': %w", q.Name, q.vhost.Name, err)
	}
	return nil
}
