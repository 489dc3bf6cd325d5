package broker

import (
	"fmt"

	"github.com/brokerd/brokerd/broker/auth"
	"github.com/brokerd/brokerd/store"
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
func (b *Broker) Peek(vhost, queue string, from uint64, count int) ([]PeekedMessage, error) {
	return b.peek(vhost, queue, -1, from, count)
}

// PeekLevel is Peek from a position in delivery order: priority level
// prio from seq from, then every lower level whole (levels above prio are
// skipped). A page's next position is the priority and seq of the
// message after its last, so pages of a priority queue follow delivery
// order exactly.
func (b *Broker) PeekLevel(vhost, queue string, prio uint8, from uint64, count int) ([]PeekedMessage, error) {
	return b.peek(vhost, queue, int(prio), from, count)
}

// peek is Peek (level < 0) or PeekLevel.
func (b *Broker) peek(vhost, queue string, level int, from uint64, count int) ([]PeekedMessage, error) {
	v := b.VHost(vhost)
	if v == nil {
		return nil, notFoundf("no vhost '%s'", vhost)
	}
	v.mu.RLock()
	q := v.queues[queue]
	v.mu.RUnlock()
	if q == nil {
		return nil, notFoundf("no queue '%s' in vhost '%s'", queue, vhost)
	}
	want := max(min(count, PeekMaxCount), 0)

	parts, spilled, marks, ok := q.planPeek(level, from, want)
	if !ok {
		return nil, notFoundf("no queue '%s' in vhost '%s'", queue, vhost)
	}
	var out []PeekedMessage
	var bytes int64
	full := func() bool {
		return len(out) >= want || len(out) > 0 && bytes >= PeekMaxBytes
	}
	add := func(m PeekedMessage) {
		out = append(out, m)
		bytes += int64(len(m.Body))
	}
	rg := q.ranges()
	for _, p := range parts {
		if !p.mid {
			for _, m := range p.resident {
				if full() {
					break
				}
				add(m)
			}
			continue
		}
		for pos := p.from; !full() && pos <= p.to; {
			r, err := rg.ReadMiddle(spilled, p.prio, pos, p.to, want-len(out), max(PeekMaxBytes-bytes, 1), 0, nil)
			if err != nil {
				return nil, fmt.Errorf("peek queue '%s' in vhost '%s': read paged messages: %w", queue, vhost, err)
			}
			for i := range r.Metas {
				m := &r.Metas[i]
				pos = m.Seq + 1
				if m.DeadLetter != "" || full() {
					continue // waiting in the dead-letter backlog: not ready
				}
				e := store.Entry{Ref: m.Ref, Msg: r.Msgs[i], Header: m.Header}
				redelivered := m.DeliveryCount > 0 || int(m.Prio) < len(marks) && m.Seq <= marks[m.Prio]
				add(peeked(&e, m.Prio, redelivered))
			}
			if r.Done || len(r.Metas) == 0 {
				break
			}
		}
		if full() {
			break
		}
	}
	return out, nil
}

// Peek is Broker.Peek as this Direct's user may do it: the queue's read
// permission is checked as a basic.get checks it (an access-refused
// error otherwise), in the Direct's vhost.
func (d *Direct) Peek(queue string, from uint64, count int) ([]PeekedMessage, error) {
	return d.PeekLevel(queue, -1, from, count)
}

// PeekLevel is Broker.PeekLevel as Peek does it; prio < 0 is Peek.
func (d *Direct) PeekLevel(queue string, prio int, from uint64, count int) ([]PeekedMessage, error) {
	if aerr := d.c.checkPerm(auth.Read, "queue", queue); aerr != nil {
		return nil, aerr
	}
	return d.c.b.peek(d.c.vhost.Name, queue, prio, from, count)
}
