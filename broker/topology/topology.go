package topology

import (
	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/defs"
	"github.com/brokerd/brokerd/broker/queue"
)

// Topology is a vhost's routing graph: its exchanges, its queues (by
// name, for the default exchange) and the bindings between them. It does
// not lock: its owner's lock (VHost.mu) guards all of it, and the
// bindings lists of its exchanges; routing holds that lock shared,
// changes hold it exclusively.
type Topology struct {
	name      string // the vhost's, for definition keys
	Exchanges map[string]*Exchange
	Queues    map[string]*queue.Queue
	// QueueBindings are the bindings with each queue as destination.
	QueueBindings map[*queue.Queue][]*Binding
	// Unheld are auto-delete delayed exchanges left without bindings:
	// their owner deletes each with its holding queue, whose lock it
	// cannot take while it holds the topology's (TakeUnheld).
	Unheld []*Exchange
}

// New returns the topology of a new vhost named name: its
// default exchange and the amq.* exchanges.
func New(name string) *Topology {
	t := &Topology{name: name, Exchanges: make(map[string]*Exchange), Queues: make(map[string]*queue.Queue), QueueBindings: make(map[*queue.Queue][]*Binding)}
	t.Exchanges[""] = NewExchange("", typeDirect, true, false, false, nil)
	for _, x := range []struct{ name, typ string }{
		{"amq.direct", typeDirect}, {"amq.fanout", typeFanout}, {"amq.topic", typeTopic},
		{"amq.headers", typeHeaders}, {"amq.match", typeHeaders},
	} {
		t.Exchanges[x.name] = NewExchange(x.name, x.typ, true, false, false, nil)
	}
	return t
}

// Route returns the queues a message published to x with the given routing
// keys and headers reaches, following exchange-to-exchange bindings and
// alternate exchanges, each queue once. A delayed exchange routes it now,
// as its underlying type. Caller holds the owner's lock (shared).
func (t *Topology) Route(x *Exchange, keys []string, headers amqp.Table) []*queue.Queue {
	return t.RouteInto(nil, x, keys, headers)
}

// RouteInto is Route appending to dst (a publisher's reused buffer):
// routing a message to one exchange's queues allocates nothing.
func (t *Topology) RouteInto(dst []*queue.Queue, x *Exchange, keys []string, headers amqp.Table) []*queue.Queue {
	r := router{t: t, queues: dst[:0]}
	r.route(x, keys, headers)
	return r.queues
}

// RouteHeldInto is RouteInto for a message due later (queue.DueAt): a
// delayed exchange on its route takes it into its holding queue, which is
// then among the queues returned, instead of routing it through its
// bindings or its alternate exchange, which it does at the due time.
func (t *Topology) RouteHeldInto(dst []*queue.Queue, x *Exchange, keys []string, headers amqp.Table) []*queue.Queue {
	r := router{t: t, queues: dst[:0], held: true}
	r.route(x, keys, headers)
	return r.queues
}

// router collects a route's queues. The exchanges it has visited are
// first, then seenX once it has visited more than one (an exchange-to-
// exchange binding or an alternate exchange), so the common route makes
// no map.
type router struct {
	t      *Topology
	first  *Exchange
	seenX  map[*Exchange]bool
	seenQ  map[*queue.Queue]bool
	queues []*queue.Queue
	held   bool // the message is due later: delayed exchanges hold it
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
	if r.held && x.Hold != nil {
		r.addQueue(x.Hold)
		return
	}
	found := false
	visit := func(b *Binding) {
		found = true
		if b.Queue != nil {
			r.addQueue(b.Queue)
		} else {
			r.route(b.Exchange, keys, headers)
		}
	}
	switch {
	case x.Name == "":
		for _, k := range keys {
			if q := r.t.Queues[k]; q != nil {
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
		for _, b := range x.Bindings {
			if x.matches(b, keys, headers) {
				visit(b)
			}
		}
	}
	if name, ok := x.alternateExchange(); !found && ok {
		if ae := r.t.Exchanges[name]; ae != nil {
			r.route(ae, keys, headers)
		}
	}
}

// DeleteExchange removes x and every binding to or from it, then
// auto-deletes exchanges left without bindings. It returns the store
// operations for the durable definitions removed. The caller deletes a
// delayed exchange's holding queue with it (the owner's deletion holds
// that queue's lock around this call), and the delayed exchanges this
// leaves to auto-delete (Unheld) after.
func (t *Topology) DeleteExchange(x *Exchange, m *defs.Batch) {
	delete(t.Exchanges, x.Name)
	if x.Durable {
		m.Delete(defs.ExchangeKey(t.name, x.Name))
	}
	for _, b := range x.Bindings {
		t.unlinkDestLocked(b)
		if x.Durable && b.durable() {
			m.Delete(defs.BindingKey(b.Def(t.name)))
		}
	}
	x.Bindings = nil
	// Bindings that have x as destination.
	for _, src := range t.Exchanges {
		for _, b := range append([]*Binding(nil), src.Bindings...) {
			if b.Exchange == x {
				t.RemoveBinding(src, b, m)
			}
		}
	}
}

// RemoveBinding removes b from its source exchange, and auto-deletes
// the source if that was its last binding: at once, or, for a delayed
// exchange, by its owner (Unheld).
func (t *Topology) RemoveBinding(src *Exchange, b *Binding, m *defs.Batch) {
	src.removeBinding(b)
	t.unlinkDestLocked(b)
	if b.durable() && src.Durable {
		m.Delete(defs.BindingKey(b.Def(t.name)))
	}
	if src.AutoDelete && len(src.Bindings) == 0 {
		if src.Hold != nil {
			t.Unheld = append(t.Unheld, src)
		} else {
			t.DeleteExchange(src, m)
		}
	}
}

// TakeUnheld returns and forgets the delayed exchanges left to
// auto-delete (Unheld).
func (t *Topology) TakeUnheld() []*Exchange {
	xs := t.Unheld
	t.Unheld = nil
	return xs
}

func (t *Topology) unlinkDestLocked(b *Binding) {
	if q := b.Queue; q != nil {
		if t.QueueBindings[q] = removePtr(t.QueueBindings[q], b); len(t.QueueBindings[q]) == 0 {
			delete(t.QueueBindings, q)
		}
	}
}

// durable reports whether the binding is persisted: both ends durable.
func (b *Binding) durable() bool {
	if b.Queue != nil {
		return b.Queue.Durable
	}
	return b.Exchange.Durable
}
