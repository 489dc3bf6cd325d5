package broker

import (
	"strings"
	"sync"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/defs"
	"github.com/brokerd/brokerd/broker/queue"
)

// VHost is a namespace of exchanges and queues. Its lock guards the maps and
// every binding list of its exchanges and queues; routing takes it shared,
// declarations take it exclusively. Queue contents have their own locks
// (see Queue), which come first in the lock order (broker/doc.go): code
// holding a queue lock may take the vhost lock (shared to route dead
// letters, exclusively to delete that queue), but no code takes a queue
// lock while it holds the vhost lock. policyMu comes before both.
//
// A definition change is handed to the store (Apply) before the vhost lock
// that made it in memory is released, so the store sees definition
// changes in the order memory did.
type VHost struct {
	// Host is what its queues share (its name, fixed; its router, the
	// vhost itself; the counts of waiting dead letters and topology
	// changes).
	queue.Host
	b *Broker
	// meta is the vhost's description, default queue type and tags;
	// guarded by Broker.mu.
	meta defs.VHost

	// policyMu serializes policy changes from computing the queues' new
	// settings to installing them, so two changes cannot interleave and
	// leave a queue on the older one; it is held while the change waits
	// for the store. It guards no field (the policies are mu's). Taken
	// with no lock held, or under Broker.authMu (a definitions import,
	// which holds several in name order; a vhost's deletion); taken
	// before mu, Queue.mu and Broker.mu, never under them.
	policyMu sync.Mutex

	// mu guards the maps below, the bindings (and byKey, policyAE) of
	// every exchange in them and the bindings of every queue in them.
	// Taken shared to route (under the source queue's lock for dead
	// letters, txn.holdVHost), exclusively to change them; under
	// Queue.mu, policyMu or Broker.authMu, never with Broker.mu.
	mu        sync.RWMutex
	exchanges map[string]*Exchange
	queues    map[string]*queue.Queue
	// queueBindings are the bindings with each queue as destination.
	queueBindings map[*queue.Queue][]*Binding
	policies      map[string]*Policy
	// opPolicies are the operator policies (operatorpolicy.go); nil until one
	// is set.
	opPolicies map[string]*Policy
	// (end of mu's fields)
}

func newVHost(b *Broker, name string) *VHost {
	v := &VHost{b: b, exchanges: make(map[string]*Exchange), queues: make(map[string]*queue.Queue), queueBindings: make(map[*queue.Queue][]*Binding), policies: make(map[string]*Policy)}
	v.Host.Name, v.Host.Router = name, (*vhostRouter)(v)
	v.exchanges[""] = newExchange("", typeDirect, true, false, false, nil)
	for _, x := range []struct{ name, typ string }{
		{"amq.direct", typeDirect}, {"amq.fanout", typeFanout}, {"amq.topic", typeTopic},
		{"amq.headers", typeHeaders}, {"amq.match", typeHeaders},
	} {
		v.exchanges[x.name] = newExchange(x.name, x.typ, true, false, false, nil)
	}
	return v
}

// route returns the queues a message published to x with the given routing
// keys and headers reaches, following exchange-to-exchange bindings and
// alternate exchanges, each queue once. Caller holds v.mu (shared).
func (v *VHost) routeLocked(x *Exchange, keys []string, headers amqp.Table) []*queue.Queue {
	return v.routeIntoLocked(nil, x, keys, headers)
}

// routeIntoLocked is routeLocked appending to dst (a publisher's reused
// buffer): routing a message to one exchange's queues allocates nothing.
func (v *VHost) routeIntoLocked(dst []*queue.Queue, x *Exchange, keys []string, headers amqp.Table) []*queue.Queue {
	r := router{v: v, queues: dst[:0]}
	r.route(x, keys, headers)
	return r.queues
}

// router collects a route's queues. The exchanges it has visited are
// first, then seenX once it has visited more than one (an exchange-to-
// exchange binding or an alternate exchange), so the common route makes
// no map.
type router struct {
	v      *VHost
	first  *Exchange
	seenX  map[*Exchange]bool
	seenQ  map[*queue.Queue]bool
	queues []*queue.Queue
}

// visit reports whether x was visited before, and records it.
func (r *router) visit(x *Exchange) bool {
	switch {
	case r.first == nil:
		r.first = x
		return false
	case r.first == x || r.seenX[x]:
		return true
	case r.seenX == nil:
		r.seenX = map[*Exchange]bool{}
	}
	r.seenX[x] = true
	return false
}

func (r *router) addQueue(q *queue.Queue) {
	if len(r.queues) == 0 {
		r.queues = append(r.queues, q)
		return
	}
	if r.seenQ == nil {
		r.seenQ = make(map[*queue.Queue]bool)
		for _, e := range r.queues {
			r.seenQ[e] = true
		}
	}
	if !r.seenQ[q] {
		r.seenQ[q] = true
		r.queues = append(r.queues, q)
	}
}

func (r *router) route(x *Exchange, keys []string, headers amqp.Table) {
	if r.visit(x) {
		return
	}
	found := false
	visit := func(b *Binding) {
		found = true
		if b.queue != nil {
			r.addQueue(b.queue)
		} else {
			r.route(b.exchange, keys, headers)
		}
	}
	switch {
	case x.Name == "":
		for _, k := range keys {
			if q := r.v.queues[k]; q != nil {
				found = true
				r.addQueue(q)
			}
		}
	case x.byKey != nil:
		for _, k := range keys {
			for _, b := range x.byKey[k] {
				visit(b)
			}
		}
	default:
		for _, b := range x.bindings {
			if x.matches(b, keys, headers) {
				visit(b)
			}
		}
	}
	if name, ok := x.alternateExchange(); !found && ok {
		if ae := r.v.exchanges[name]; ae != nil {
			r.route(ae, keys, headers)
		}
	}
}

func reservedName(name string) bool { return strings.HasPrefix(name, "amq.") }

// deleteExchangeLocked removes x and every binding to or from it, then
// auto-deletes exchanges left without bindings. It returns the store
// operations for the durable definitions removed.
func (v *VHost) deleteExchangeLocked(x *Exchange, m *defs.Batch) {
	delete(v.exchanges, x.Name)
	if x.Durable {
		m.Delete(defs.ExchangeKey(v.Name, x.Name))
	}
	for _, b := range x.bindings {
		v.unlinkDestLocked(b)
		if x.Durable && b.durable() {
			m.Delete(defs.BindingKey(b.def(v.Name)))
		}
	}
	x.bindings = nil
	// Bindings that have x as destination.
	for _, src := range v.exchanges {
		for _, b := range append([]*Binding(nil), src.bindings...) {
			if b.exchange == x {
				v.removeBindingLocked(src, b, m)
			}
		}
	}
}

// removeBindingLocked removes b from its source exchange, and auto-deletes
// the source if that was its last binding.
func (v *VHost) removeBindingLocked(src *Exchange, b *Binding, m *defs.Batch) {
	src.removeBinding(b)
	v.unlinkDestLocked(b)
	if b.durable() && src.Durable {
		m.Delete(defs.BindingKey(b.def(v.Name)))
	}
	if src.AutoDelete && len(src.bindings) == 0 {
		v.deleteExchangeLocked(src, m)
	}
}

func (v *VHost) unlinkDestLocked(b *Binding) {
	if q := b.queue; q != nil {
		if v.queueBindings[q] = removePtr(v.queueBindings[q], b); len(v.queueBindings[q]) == 0 {
			delete(v.queueBindings, q)
		}
	}
}

// durable reports whether the binding is persisted: both ends durable.
func (b *Binding) durable() bool {
	if b.queue != nil {
		return b.queue.Durable
	}
	return b.exchange.Durable
}

// vhostRouter is a VHost as its queues route through it (Router).
type vhostRouter VHost

// vhostOf returns the vhost q lives in.
func vhostOf(q *queue.Queue) *VHost { return (*VHost)(q.Host.Router.(*vhostRouter)) }

func (r *vhostRouter) RLock()   { r.mu.RLock() }
func (r *vhostRouter) RUnlock() { r.mu.RUnlock() }

func (r *vhostRouter) HasExchangeLocked(name string) bool { return r.exchanges[name] != nil }

func (r *vhostRouter) RouteLocked(exchange string, keys []string, headers amqp.Table) []*queue.Queue {
	x := r.exchanges[exchange]
	if x == nil {
		return nil
	}
	return (*VHost)(r).routeLocked(x, keys, headers)
}

func (r *vhostRouter) QueueLocked(name string) *queue.Queue { return r.queues[name] }
