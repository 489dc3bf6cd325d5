package broker

import (
	"slices"
	"sync"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/store"
)

// entry is a message's place in a queue, with the in-memory state that is
// not persisted.
type entry struct {
	store.Entry
	// redelivered is set once the entry has been delivered and returned,
	// or recovered after a restart (it may have been delivered before).
	redelivered bool
	// stored reports whether the entry is in the store (persistent
	// message in a durable queue): settling it writes a delete.
	stored bool
	// prio is the message's priority property (0 without one).
	prio uint8
}

func (e *entry) bodySize() int { return len(e.Msg.Body) }

// Queue is a message queue. Definition fields are fixed at declaration.
//
// Concurrency: a queue is guarded by its own mutex, mu. Code holding mu may
// take a channel's lock (to hand it a delivery) and a connection's write
// lock, never a vhost lock or another queue's lock — except publish, which
// locks all its target queues in id order before touching any.
type Queue struct {
	Name       string
	Durable    bool
	Exclusive  bool
	AutoDelete bool
	Args       amqp.Table

	id          store.QueueID
	vhost       *VHost
	maxPriority uint8 // x-max-priority; 0 = no priorities
	sac         bool  // x-single-active-consumer
	owner       *conn // exclusive owner; nil otherwise

	bindings []*Binding // bindings with this queue as destination; vhost.mu

	mu          sync.Mutex
	ready       readyQueue
	readyBytes  int64
	unacked     int
	nextSeq     uint64
	consumers   []*consumer // highest priority first; round-robin within a priority
	exclusiveC  bool        // the single consumer is exclusive
	hadConsumer bool
	deleted     bool
}

// consumer is a basic.consume subscription.
type consumer struct {
	tag       string
	ch        *channel
	q         *Queue
	noAck     bool
	exclusive bool
	priority  int64
	prefetch  int // per-consumer prefetch count; 0 = unlimited
	unacked   int // guarded by ch.mu
}

// newQueue builds a queue from its declaration; arguments were validated.
func newQueue(v *VHost, id store.QueueID, name string, durable, exclusive, autoDelete bool, args amqp.Table) *Queue {
	q := &Queue{Name: name, Durable: durable, Exclusive: exclusive, AutoDelete: autoDelete, Args: args, vhost: v, id: id}
	if x, ok := args.Get("x-max-priority"); ok {
		if n, ok := asInt(x); ok && n > 0 {
			q.maxPriority = uint8(min(n, 255))
		}
	}
	if x, ok := args.Get("x-single-active-consumer"); ok {
		q.sac, _ = x.(bool)
	}
	q.ready = newReadyQueue(q.maxPriority)
	return q
}

func (q *Queue) isStoredFor(m *store.Message) bool { return q.Durable && m.Persistent }

// counts returns (ready, unacked, consumers).
func (q *Queue) counts() (ready, unacked, consumers int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.ready.len(), q.unacked, len(q.consumers)
}

// enqueueLocked appends a new entry and offers it to consumers.
func (q *Queue) enqueueLocked(e *entry) {
	q.ready.pushBack(e)
	q.readyBytes += int64(e.bodySize())
	q.dispatchLocked()
}

// takeLocked removes and returns the head of the ready list.
func (q *Queue) takeLocked() *entry {
	e := q.ready.popFront()
	if e != nil {
		q.readyBytes -= int64(e.bodySize())
	}
	return e
}

// dispatchLocked delivers ready entries to consumers with credit, highest
// priority first, round-robin among equals.
func (q *Queue) dispatchLocked() {
	for q.ready.len() > 0 && len(q.consumers) > 0 {
		e := q.ready.front()
		var got *consumer
		if q.sac {
			// Only the active (longest-registered) consumer receives.
			if c := q.consumers[0]; c.ch.tryDeliver(c, q, e) {
				got = c
			}
		} else {
			for i, c := range q.consumers {
				if c.ch.tryDeliver(c, q, e) {
					got = c
					q.rotateLocked(i)
					break
				}
			}
		}
		if got == nil {
			return
		}
		q.takeLocked()
		if got.noAck {
			q.settleLocked(e)
		} else {
			q.unacked++
		}
	}
}

// rotateLocked moves consumer i behind the others of its priority so the
// next delivery goes to the next one.
func (q *Queue) rotateLocked(i int) {
	c := q.consumers[i]
	j := i
	for j+1 < len(q.consumers) && q.consumers[j+1].priority == c.priority {
		q.consumers[j] = q.consumers[j+1]
		j++
	}
	q.consumers[j] = c
}

// settleLocked forgets an entry that left the queue for good (acked,
// delivered without ack, dropped), deleting it from the store if stored.
func (q *Queue) settleLocked(e *entry) {
	if e.stored && !q.deleted {
		q.vhost.b.store.Apply(&store.Batch{Deletes: []store.Ref{e.Ref}}, q.vhost.b.storeFailed)
	}
}

// dispatch is dispatchLocked for callers without the lock (credit freed by
// an ack, a consumer added, a connection drained).
func (q *Queue) dispatch() {
	q.mu.Lock()
	if !q.deleted {
		q.dispatchLocked()
	}
	q.mu.Unlock()
}

// ack settles delivered entries.
func (q *Queue) ack(es []*entry) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.unacked -= len(es)
	if q.deleted {
		return
	}
	var b store.Batch
	for _, e := range es {
		if e.stored {
			b.Deletes = append(b.Deletes, e.Ref)
		}
	}
	if len(b.Deletes) > 0 {
		q.vhost.b.store.Apply(&b, q.vhost.b.storeFailed)
	}
}

// requeue returns delivered entries to the ready list at their original
// positions, marked redelivered.
func (q *Queue) requeue(es []*entry) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.unacked -= len(es)
	if q.deleted {
		return
	}
	var b store.Batch
	for _, e := range es {
		e.redelivered = true
		e.DeliveryCount++
		if e.stored {
			b.Updates = append(b.Updates, store.Update{Ref: e.Ref, DeliveryCount: e.DeliveryCount})
		}
		q.ready.insertSorted(e)
		q.readyBytes += int64(e.bodySize())
	}
	if len(b.Updates) > 0 {
		q.vhost.b.store.Apply(&b, q.vhost.b.storeFailed)
	}
	q.dispatchLocked()
}

// reject removes delivered entries that were rejected without requeue.
// Without a dead letter exchange they are discarded.
func (q *Queue) reject(es []*entry) {
	q.ack(es)
	q.vhost.b.counters.discarded(reasonRejected, len(es))
}

// get takes the head for basic.get. It returns nil when the queue is empty.
func (q *Queue) get(ch *channel, noAck bool) (e *entry, tag uint64, remaining int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.deleted {
		return nil, 0, 0
	}
	e = q.takeLocked()
	if e == nil {
		return nil, 0, 0
	}
	tag = ch.recordGet(q, e, noAck)
	if noAck {
		q.settleLocked(e)
	} else {
		q.unacked++
	}
	return e, tag, q.ready.len()
}

// addConsumer subscribes c; it fails if an exclusive consumer is present or
// c is exclusive and others are.
func (q *Queue) addConsumer(c *consumer) *amqp.Error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.deleted {
		return errNoQueue(q.vhost.Name, q.Name)
	}
	if q.exclusiveC || (c.exclusive && len(q.consumers) > 0) {
		return amqp.Errorf(amqp.AccessRefused, "queue '%s' in vhost '%s' in exclusive use", q.Name, q.vhost.Name)
	}
	i := len(q.consumers)
	for !q.sac && i > 0 && q.consumers[i-1].priority < c.priority {
		i--
	}
	q.consumers = slices.Insert(q.consumers, i, c)
	q.exclusiveC = c.exclusive
	q.hadConsumer = true
	return nil
}

// removeConsumer unsubscribes c and reports whether the queue is now an
// auto-delete queue without consumers (and must be deleted).
func (q *Queue) removeConsumer(c *consumer) (autoDelete bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := len(q.consumers)
	q.consumers = slices.DeleteFunc(q.consumers, func(x *consumer) bool { return x == c })
	if len(q.consumers) == n {
		return false
	}
	q.exclusiveC = false
	return q.AutoDelete && len(q.consumers) == 0 && !q.deleted
}

// purge drops every ready entry and returns how many there were.
func (q *Queue) purge() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	es := q.ready.clear()
	q.readyBytes = 0
	var b store.Batch
	for _, e := range es {
		if e.stored {
			b.Deletes = append(b.Deletes, e.Ref)
		}
	}
	if len(b.Deletes) > 0 {
		q.vhost.b.store.Apply(&b, q.vhost.b.storeFailed)
	}
	return len(es)
}

// markDeleted empties the queue and returns its consumers (to be told) and
// the number of ready messages it held.
func (q *Queue) markDeleted() (consumers []*consumer, ready int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.deleted = true
	ready = q.ready.len()
	q.ready.clear()
	q.readyBytes = 0
	consumers, q.consumers = q.consumers, nil
	return consumers, ready
}
