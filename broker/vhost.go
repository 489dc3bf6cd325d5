package broker

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/defs"
	"github.com/brokerd/brokerd/broker/queue"
	"github.com/brokerd/brokerd/broker/topology"
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
	// limits are the vhost's limits (nil: none), installed under
	// Broker.mu, read without a lock (tenancy.go).
	limits atomic.Pointer[limitSet]

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
	// letters, queue.Txn.hold), exclusively to change them; under
	// Queue.mu, policyMu or Broker.authMu, never with Broker.mu.
	mu sync.RWMutex
	// topo is the vhost's exchanges, queues and bindings.
	topo     *topology.Topology
	policies map[string]*Policy
	// opPolicies are the operator policies (operatorpolicy.go); nil until one
	// is set.
	opPolicies map[string]*Policy
	// (end of mu's fields)
}

func newVHost(b *Broker, name string) *VHost {
	v := &VHost{b: b, topo: topology.New(name), policies: make(map[string]*Policy)}
	v.Host.Name, v.Host.Router = name, (*vhostRouter)(v)
	return v
}

func reservedName(name string) bool { return strings.HasPrefix(name, "amq.") }

// queueList returns v's queues, listed under its lock, for the caller to
// work on each after it is released: a deletion holds a queue's lock
// while it takes the vhost's (lock order, doc.go).
func (v *VHost) queueList() []*queue.Queue {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return slices.Collect(maps.Values(v.topo.Queues))
}

// vhostRouter is a VHost as its queues route through it (Router).
type vhostRouter VHost

// vhostOf returns the vhost q lives in.
func vhostOf(q *queue.Queue) *VHost { return (*VHost)(q.Host.Router.(*vhostRouter)) }

func (r *vhostRouter) RLock()   { r.mu.RLock() }
func (r *vhostRouter) RUnlock() { r.mu.RUnlock() }

func (r *vhostRouter) HasExchangeLocked(name string) bool { return r.topo.Exchanges[name] != nil }

func (r *vhostRouter) RouteLocked(exchange string, keys []string, headers amqp.Table) []*queue.Queue {
	x := r.topo.Exchanges[exchange]
	if x == nil {
		return nil
	}
	return r.topo.Route(x, keys, headers)
}

func (r *vhostRouter) QueueLocked(name string) *queue.Queue { return r.topo.Queues[name] }
