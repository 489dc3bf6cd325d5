package broker

import (
	"cmp"
	"sync"

	"github.com/brokerd/brokerd/broker/queue"
	"github.com/brokerd/brokerd/store"
)

// queuesByID returns the queues whose store ranges (durable or volatile)
// are keys of ids.
func (b *Broker) queuesByID(ids map[store.QueueID][]queue.PagedRef) []*queue.Queue {
	vhosts := b.vhostsNamed("")
	var out []*queue.Queue
	for _, v := range vhosts {
		v.mu.RLock()
		for _, q := range v.topo.Queues {
			_, durable := ids[q.ID]
			_, volatile := ids[q.VolatileID()]
			if durable && q.Durable && !q.Exclusive || volatile {
				out = append(out, q)
			}
		}
		for _, x := range v.topo.Exchanges {
			if q := x.Hold; q != nil {
				_, durable := ids[q.ID]
				_, volatile := ids[q.VolatileID()]
				if durable && q.Durable || volatile {
					out = append(out, q)
				}
			}
		}
		v.mu.RUnlock()
	}
	return out
}

// storeExactMarks stores every durable queue's exact marks at a clean stop
// (finalMarksLocked), one store operation per queue whose marks change,
// and waits for them: after the next start a message that was never
// delivered comes back with redelivered=false, as RabbitMQ says after a
// clean stop. Broker.Close
// runs it once the connections are closed and the background work is
// done; deliveries stop here.
func (b *Broker) storeExactMarks() {
	if b.env.StoreErr.Load() != nil {
		return
	}
	vhosts := b.vhostsNamed("")
	var (
		wg    sync.WaitGroup
		errMu sync.Mutex
		first error
	)
	for _, v := range vhosts {
		for _, q := range v.queueList() {
			if exactMarksHook != nil {
				exactMarksHook(q)
			}
			wg.Add(1)
			if !q.StoreFinalMarks(func(err error) {
				if err != nil {
					errMu.Lock()
					first = cmp.Or(first, err)
					errMu.Unlock()
				}
				wg.Done()
			}) {
				wg.Done()
			}
		}
	}
	wg.Wait()
	if first != nil {
		// The marks asked for stay: a crash's answer, redelivered=true.
		b.env.Log.Warn("could not store exact delivered marks at shutdown", "err", first)
	}
}

// retryBacklogs retries the waiting dead letters of every queue in v, after
// a topology change that may have given them a route (an exchange declared,
// a binding added, a policy changed).
func (b *Broker) retryBacklogs(v *VHost) {
	v.TopoGen.Add(1)
	b.retryBacklogsIfChanged(v)
}

// retryBacklogsIfChanged retries the backlogs that may succeed now: the
// topology changed since their last try, or a target was full then.
func (b *Broker) retryBacklogsIfChanged(v *VHost) {
	if v.Waiting.Load() == 0 {
		return
	}
	gen := v.TopoGen.Load()
	for _, q := range v.queueList() {
		q.RetryBacklogIfChanged(gen)
	}
}

// exactMarksHook, if set (by tests), is called by storeExactMarks with
// each queue before it takes the queue's lock.
var exactMarksHook func(q *queue.Queue)

// watchLease dispatches every queue each time the lease is regained after
// a lapse (queue.Lease): a dispatch that stopped for the lapse has no other
// wake. It is one of the goroutines Close waits for (b.wg); it ends with
// the broker (the lease's end leaves nothing to wait for).
func (b *Broker) watchLease(l queue.Lease) {
	defer b.wg.Done()
	for {
		select {
		case <-b.quit:
			return
		case <-l.Regained(): // nil once the lease has ended: only quit
		}
		for _, v := range b.vhostsNamed("") {
			v.mu.RLock()
			qs := make([]*queue.Queue, 0, len(v.topo.Queues))
			for _, q := range v.topo.Queues {
				qs = append(qs, q)
			}
			v.mu.RUnlock()
			for _, q := range qs {
				q.Dispatch()
			}
		}
	}
}
