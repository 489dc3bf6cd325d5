package broker

import (
	"github.com/brokerd/brokerd/broker/auth"
	"github.com/brokerd/brokerd/broker/queue"
)

// Peek returns up to count (at most PeekMaxCount) ready messages of the
// queue in delivery order (priority levels high to low, FIFO within),
// skipping those with a seq below from, and beyond the first no more than
// PeekMaxBytes of bodies. The following page starts from the seq of the
// message after the last returned (ask for one more to learn it). Nothing about the queue
// changes: no message is consumed, reordered, marked redelivered or
// counted as delivered. With a priority queue, from filters every level
// (seqs are shared by the levels), so pages follow delivery order only
// within what they return.
//
// Concurrency: resident messages are copied under the queue's lock; paged
// ones (a level's middle) are read from the store after it is released,
// so a peek never makes a publisher wait for a disk. A message consumed
// while the read runs may still be returned. The error wraps ErrNotFound
// for an unknown vhost or queue.
func (b *Broker) Peek(vhost, queue string, from uint64, count int) ([]queue.PeekedMessage, error) {
	return b.peek(vhost, queue, -1, from, count)
}

// PeekLevel is Peek from a position in delivery order: priority level
// prio from seq from, then every lower level whole (levels above prio are
// skipped). A page's next position is the priority and seq of the
// message after its last, so pages of a priority queue follow delivery
// order exactly.
func (b *Broker) PeekLevel(vhost, queue string, prio uint8, from uint64, count int) ([]queue.PeekedMessage, error) {
	return b.peek(vhost, queue, int(prio), from, count)
}

// peek is Peek (level < 0) or PeekLevel.
func (b *Broker) peek(vhost, queue string, level int, from uint64, count int) ([]queue.PeekedMessage, error) {
	v := b.VHost(vhost)
	if v == nil {
		return nil, notFoundf("no vhost '%s'", vhost)
	}
	v.mu.RLock()
	q := v.topo.Queues[queue]
	v.mu.RUnlock()
	if q == nil {
		return nil, notFoundf("no queue '%s' in vhost '%s'", queue, vhost)
	}
	out, ok, err := q.Peek(level, from, count)
	if !ok {
		return nil, notFoundf("no queue '%s' in vhost '%s'", queue, vhost)
	}
	return out, err
}

// Peek is Broker.Peek as this Direct's user may do it: the queue's read
// permission is checked as a basic.get checks it (an access-refused
// error otherwise), in the Direct's vhost.
func (d *Direct) Peek(queue string, from uint64, count int) ([]queue.PeekedMessage, error) {
	return d.PeekLevel(queue, -1, from, count)
}

// PeekLevel is Broker.PeekLevel as Peek does it; prio < 0 is Peek.
func (d *Direct) PeekLevel(queue string, prio int, from uint64, count int) ([]queue.PeekedMessage, error) {
	if aerr := d.c.checkPerm(auth.Read, "queue", queue); aerr != nil {
		return nil, aerr
	}
	return d.c.b.peek(d.c.vhost.Name, queue, prio, from, count)
}

// PeekedMessage is one ready message of a queue as Peek sees it
// (queue.PeekedMessage).
type PeekedMessage = queue.PeekedMessage

// Peek bounds: a peek never returns more than PeekMaxCount messages, nor
// (beyond its first message) more than PeekMaxBytes of bodies.
const (
	PeekMaxCount = queue.PeekMaxCount
	PeekMaxBytes = queue.PeekMaxBytes
)
