package broker

import (
	"cmp"
	"fmt"
	"math"
	"sync"

	"github.com/brokerd/brokerd/broker/queue"
	"github.com/brokerd/brokerd/store"
	"github.com/brokerd/brokerd/ttl"
)

// startHorizon starts the scan goroutine, which scans at once (deadlines
// that passed while the broker was down fire then).
func (b *Broker) startHorizon() {
	b.horizonScan.kick = make(chan struct{}, 1)
	b.horizonScan.timer.Value = horizonTick{}
	b.horizonScan.kick <- struct{}{}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		for {
			select {
			case <-b.quit:
				return
			case <-b.horizonScan.kick:
				b.scanHorizon()
			}
		}
	}()
}

// kickHorizon asks for a scan (the horizon timer fired).
func (b *Broker) kickHorizon() {
	select {
	case b.horizonScan.kick <- struct{}{}:
	default:
	}
}

// scanHorizon arms the paged timers of the deadlines from the last scan
// to now + horizonMS, then sets the timer for the next scan.
func (b *Broker) scanHorizon() {
	h := &b.horizonScan
	from := h.scanned + 1
	if h.scanned == 0 {
		from = math.MinInt64 // the first scan: whatever is overdue too
	}
	until := b.env.NowMS() + queue.HorizonMS
	// Publish the new horizon before reading: an entry that pages out
	// from now on with a deadline up to it is armed as it pages out, and
	// one that paged out before is in the store for this read.
	b.env.Horizon.Store(until)
	byQueue := map[store.QueueID][]queue.PagedRef{}
	err := b.env.Store.DeadlineRefs(from, until, func(d int64, r store.Ref) bool {
		byQueue[r.Queue] = append(byQueue[r.Queue], queue.PagedRef{Deadline: d, Ref: r})
		return true
	})
	if err != nil {
		// The same range is read again after a pause (readretry.go).
		b.env.ReadFailed(fmt.Errorf("read deadlines: %w", err))
		h.timer.Deadline = b.env.NowMS() + queue.ReadRetryDelay.Milliseconds()
		b.env.Timers.Add(&h.timer)
		return
	}
	h.scanned = until
	if len(byQueue) > 0 {
		for _, q := range b.queuesByID(byQueue) {
			q.ArmPaged(append(byQueue[q.ID], byQueue[q.VolatileID()]...))
		}
	}
	h.timer.Deadline = until - queue.HorizonMS/2
	b.env.Timers.Add(&h.timer)
}

// queuesByID returns the queues whose store ranges (durable or volatile)
// are keys of ids.
func (b *Broker) queuesByID(ids map[store.QueueID][]queue.PagedRef) []*queue.Queue {
	b.mu.RLock()
	vhosts := make([]*VHost, 0, len(b.vhosts))
	for _, v := range b.vhosts {
		vhosts = append(vhosts, v)
	}
	b.mu.RUnlock()
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
	b.mu.RLock()
	vhosts := make([]*VHost, 0, len(b.vhosts))
	for _, v := range b.vhosts {
		vhosts = append(vhosts, v)
	}
	b.mu.RUnlock()
	var (
		wg    sync.WaitGroup
		errMu sync.Mutex
		first error
	)
	for _, v := range vhosts {
		// The queues are listed under the vhost's lock and locked after
		// it is released: a deletion holds a queue's lock while it takes
		// the vhost's (lock order, doc.go).
		v.mu.RLock()
		qs := make([]*queue.Queue, 0, len(v.topo.Queues))
		for _, q := range v.topo.Queues {
			qs = append(qs, q)
		}
		v.mu.RUnlock()
		for _, q := range qs {
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
	v.mu.RLock()
	qs := make([]*queue.Queue, 0, len(v.topo.Queues))
	for _, q := range v.topo.Queues {
		qs = append(qs, q)
	}
	v.mu.RUnlock()
	for _, q := range qs {
		q.RetryBacklogIfChanged(gen)
	}
}

// horizonTick is the Value of the scheduler timer that starts the next
// scan.
type horizonTick struct{}

// horizonState is the scan's progress; scanned and the timer are touched
// only by the scan goroutine.
type horizonState struct {
	scanned int64         // deadlines up to this have been scanned
	kick    chan struct{} // wakes the scan goroutine (cap 1)
	timer   ttl.Timer
}

// fireTimers runs on the scheduler's goroutine: the queues' timers that
// are due (fireTimers in expiry.go), and the horizon scan's.
func (b *Broker) fireTimers(due []*ttl.Timer) {
	queue.FireTimers(due, func(v any) {
		if _, ok := v.(horizonTick); ok {
			b.kickHorizon()
		}
	})
}

// exactMarksHook, if set (by tests), is called by storeExactMarks with
// each queue before it takes the queue's lock.
var exactMarksHook func(q *queue.Queue)
