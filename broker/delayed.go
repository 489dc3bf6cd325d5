package broker

import (
	"fmt"

	"github.com/brokerd/brokerd/broker/defs"
	"github.com/brokerd/brokerd/broker/queue"
	"github.com/brokerd/brokerd/broker/topology"
	"github.com/brokerd/brokerd/store"
)

// Delayed exchanges (x-delayed-message): the broker's side of scheduled
// delivery, whose engine is broker/queue/delayed.go. Each delayed exchange
// has a holding queue (topology.Exchange.Hold) made with it, durable when
// it is, whose definition record is a queue's named queue.HoldName(x) and
// written in the same batch as the exchange's; it is in no vhost's queue
// map, so no client, listing or policy sees it. It is recovered with its
// exchange (a record of a holding queue whose exchange is gone is dropped
// with its messages, as any dangling definition), and deleted with it in
// one batch: the exchange, its bindings, the holding queue's record and
// its stored messages (deleteDelayed).

// newHold gives the new delayed exchange x of v its holding queue, with
// id (holdID). Caller holds v.mu, before x is reachable.
func (b *Broker) newHold(v *VHost, x *topology.Exchange, id store.QueueID) {
	x.Hold = queue.NewHold(b.env, &v.Host, id, x.Name, x.Durable)
}

// holdID allocates the id of a new holding queue: a durable one's is
// recorded as a durable queue's (newDurableQueueID).
func (b *Broker) holdID(durable bool) store.QueueID {
	if durable {
		return b.newDurableQueueID()
	}
	return b.newQueueID()
}

// holdRecord returns the definition record of delayed exchange x's
// holding queue (only a durable exchange's is stored).
func holdRecord(x *topology.Exchange) store.MetaOp {
	return defs.EncodeQueue(x.Hold.Def())
}

// IsHoldLocked implements queue.Router.
func (r *vhostRouter) IsHoldLocked(exchange string, hold *queue.Queue) bool {
	x := r.topo.Exchanges[exchange]
	return x != nil && x.Hold == hold
}

// deleteDelayed deletes delayed exchange x of v, with its bindings, its
// holding queue and the messages it holds, as one store batch, if x is
// still v's and ok (checked under v.mu; nil: always) allows. The batch is
// handed to the store under the holding queue's lock, then v's (lock order
// Queue.mu → VHost.mu, as a queue's deletion), so no held message is put
// after it nor released before it is written. It reports whether it
// deleted x, and the batch's write; a deletion of x already under way
// reports false with that deletion's write. Delayed exchanges it leaves to
// auto-delete are deleted after (deleteUnheld). Caller holds no lock.
func (b *Broker) deleteDelayed(v *VHost, x *topology.Exchange, ok func() bool) (bool, *queue.StoreWrite) {
	hold := x.Hold
	deleted := false
	_, _, w, _ := hold.Delete(func() ([]store.MetaOp, bool) {
		v.mu.Lock()
		if v.topo.Exchanges[x.Name] != x || (ok != nil && !ok()) {
			return nil, false
		}
		var mb defs.Batch
		v.topo.DeleteExchange(x, &mb)
		if x.Durable {
			mb.Delete(defs.QueueKey(v.Name, hold.Name))
		}
		deleted = true
		return mb.Ops, true
	}, v.mu.Unlock)
	b.deleteUnheld(v)
	return deleted, w
}

// deleteUnheld deletes the auto-delete delayed exchanges of v left without
// bindings (topology.Topology.Unheld), which a removal of bindings under
// v.mu could not delete with their holding queues. Caller holds no lock.
func (b *Broker) deleteUnheld(v *VHost) {
	for {
		v.mu.Lock()
		xs := v.topo.TakeUnheld()
		v.mu.Unlock()
		if len(xs) == 0 {
			return
		}
		for _, x := range xs {
			// Unless a binding came back meanwhile.
			b.deleteDelayed(v, x, func() bool { return x.AutoDelete && len(x.Bindings) == 0 })
		}
	}
}

// delayedExchanges returns v's delayed exchanges.
func (v *VHost) delayedExchanges() []*topology.Exchange {
	v.mu.RLock()
	defer v.mu.RUnlock()
	var xs []*topology.Exchange
	for _, x := range v.topo.Exchanges {
		if x.Hold != nil {
			xs = append(xs, x)
		}
	}
	return xs
}

// recoverMissingHolds gives each recovered delayed exchange that has no
// holding queue record a new, empty holding queue, and stores its record.
// A brokerd writes the two records in one batch, so it finds none; an
// exchange record written by hand or by another tool may lack it. Called
// by recoverDefinitions once queue ids are known.
func (b *Broker) recoverMissingHolds() error {
	var mb defs.Batch
	for _, v := range b.vhosts {
		for _, x := range v.topo.Exchanges {
			if x.Type != topology.TypeDelayed || x.Hold != nil {
				continue
			}
			b.env.Log.Warn("recovery: delayed exchange without held messages' record; creating it", "vhost", v.Name, "exchange", x.Name)
			b.newHold(v, x, b.holdID(true))
			mb.Put(holdRecord(x))
		}
	}
	if err := b.startMeta(&mb).WaitErr(); err != nil {
		return fmt.Errorf("store holding queues: %w", err)
	}
	return nil
}
