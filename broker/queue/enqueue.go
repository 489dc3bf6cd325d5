package queue

import (
	"cmp"
	"errors"
	"slices"
	"sync"

	"github.com/brokerd/brokerd/deadletter"
	"github.com/brokerd/brokerd/overflow"
	"github.com/brokerd/brokerd/store"
)

// Incoming is a message on its way into queues: a publish's, routed.
type Incoming struct {
	Msg  *store.Message
	TTL  int64 // per-message TTL in ms from the expiration property; -1 = none
	Prio uint8 // priority property
	// Due is when a delayed exchange on its route releases it (Unix ms;
	// queue.DueAt): the Deadline of its entry in that exchange's holding
	// queue. 0 when it is not held.
	Due int64
	// Entry, if not nil, is memory for the message's first queue entry,
	// allocated with the publish; enqueueLocked uses it once.
	Entry *Entry
	// Redelivered: the message was delivered before, elsewhere (a
	// shovel's copy of a redelivered message: broker.RedeliveredHeader).
	// Its entries start delivered once, so that they are delivered
	// flagged redelivered, after a restart too (the count is stored).
	Redelivered bool
}

// TxPublish is a transaction's publish, with the queues it was routed to.
type TxPublish struct {
	In     *Incoming
	Queues []*Queue
}

// TxSettle is a transaction's settlement of entries of one queue.
type TxSettle struct {
	Queue   *Queue
	Entries []*Entry
	Action  SettleAction
}

// Commit performs a transaction's publishes and settlements (tx.commit)
// as one store operation, and calls done once that is durable: at once if
// it needs no store, with the error if the store failed. qs are every
// queue they touch: locked together in id order, as a publish locks its
// targets, so the store sees the transaction after every earlier change
// to them and before any later one.
func (b *Env) Commit(qs []*Queue, pubs []TxPublish, settles []TxSettle, done func(error)) {
	qs = lockQueues(qs)
	t := b.newTxn()
	at := arrival{env: b}
	for _, p := range pubs {
		// A message a reject-publish queue refuses is dropped: a
		// transaction has no per-message nack.
		b.enqueueLocked(t, p.Queues, p.In, &at)
	}
	for _, s := range settles {
		s.Queue.settleLocked(t, s.Entries, s.Action)
	}
	done = awaitEvictionsErr(qs, done)
	wrote := t.write(done)
	unlockQueues(qs)
	t.finish()
	if !wrote {
		done(nil)
	}
}

// Enqueue puts a message into every queue of qs as one store operation,
// together with what its arrival causes: drop-head evictions and their
// dead-lettered copies, and the dead-lettered copy of a message a
// reject-publish-dlx queue refuses. Target queues are locked together, in
// id order, so the store sees an entry's put before any later change to
// it. done (may be nil) runs once the operation is durable, or at once,
// after the queues are unlocked, when nothing needs the store: ack is
// false when a queue refused the message (reject-publish) or the store
// failed; inGroup is true when done runs as a successful completion of
// the store's (see groupCompleter).
func (b *Env) Enqueue(qs []*Queue, p *Incoming, done func(ack, inGroup bool)) {
	qs = lockQueues(qs)
	t := b.newTxn()
	refused := b.enqueueLocked(t, qs, p, &arrival{env: b})
	if done != nil {
		done = awaitEvictions(qs, done)
	}
	var wrote bool
	if done == nil {
		t.write(nil)
	} else {
		wrote = t.write(func(err error) { done(err == nil && !refused, err == nil) })
	}
	unlockQueues(qs)
	t.finish()
	if done != nil && !wrote {
		done(!refused, false)
	}
}

// awaitEvictions returns done, made to wait also for the evictions the
// publish owes to queues of qs (locked by the caller) that it took over a
// drop-head limit while their heads were being read back from the store
// (evictionOwedLocked): a publisher sees its confirm only once the queue
// is back within its limits, as if the eviction had been made at once.
// In that (rare) case the confirm flushes itself rather than riding the
// store's group.
func awaitEvictions(qs []*Queue, done func(ack, inGroup bool)) func(ack, inGroup bool) {
	owed := owedEvictions(qs)
	if len(owed) == 0 {
		return done
	}
	arrive := joinEvictions(owed, func(err error) { done(err == nil, false) })
	return func(ack, _ bool) {
		if ack {
			arrive(nil)
		} else {
			arrive(errNotAcked)
		}
	}
}

// awaitEvictionsErr is awaitEvictions for tx.commit's completion: done
// gets the first error of the commit and of the evictions.
func awaitEvictionsErr(qs []*Queue, done func(error)) func(error) {
	owed := owedEvictions(qs)
	if len(owed) == 0 {
		return done
	}
	return joinEvictions(owed, done)
}

// errNotAcked stands for a publish's own nack in joinEvictions.
var errNotAcked = errors.New("publish not acked")

// owedEvictions returns the queues of qs (locked) that owe an eviction.
func owedEvictions(qs []*Queue) []*Queue {
	var owed []*Queue
	for _, q := range qs {
		if q.evictionOwedLocked() {
			owed = append(owed, q)
		}
	}
	return owed
}

// joinEvictions returns the operation's completion: done runs, with the
// first error, once it and a waiter added to each queue of owed (run
// when that queue's eviction is written) have all arrived.
func joinEvictions(owed []*Queue, done func(error)) func(error) {
	var mu sync.Mutex
	left := len(owed) + 1
	var first error
	arrive := func(err error) {
		mu.Lock()
		first = cmp.Or(first, err)
		left--
		last, v := left == 0, first
		mu.Unlock()
		if last {
			done(v)
		}
	}
	for _, q := range owed {
		q.evictWaiters = append(q.evictWaiters, arrive)
	}
	return arrive
}

// enqueueLocked is enqueue's work on queues qs, locked by the caller,
// within t. It reports whether a queue refused the message.
func (b *Env) enqueueLocked(t *Txn, qs []*Queue, p *Incoming, at *arrival) (refused bool) {
	msg := p.Msg
	for _, q := range qs {
		if q.isDeleted() {
			continue
		}
		lim := q.Settings().limits
		pendN, pendB := q.pending()
		n, bytes := q.limitLenLocked()
		if lim.Refuses(n+int(pendN), bytes+pendB, len(msg.Body)) {
			refused = true
			b.Counters.Overflowed.Add(1)
			if lim.Mode == overflow.RejectPublishDLX {
				// Dead-lettered from q although it never entered it; the
				// publisher, nacked, still owns it, so no backlog.
				e := &Entry{q: q, prio: p.Prio, state: stGone}
				e.Msg = msg
				q.deadLetterLocked(t, []*Entry{e}, deadletter.MaxLen, false)
			}
			continue
		}
		e := p.Entry
		if e != nil {
			p.Entry = nil // the first queue's, once
		} else {
			e = new(Entry)
		}
		q.initEntry(e, msg, nil, p.Prio, p.TTL, at)
		if p.Redelivered {
			e.DeliveryCount, e.Redelivered = 1, true
		}
		if q.holdFor != "" {
			// Held until it is due, whatever its TTL: that counts from
			// its release into its queues.
			e.Deadline, e.zeroTTL = cmp.Or(p.Due, at.get()), false
			b.Counters.Delayed.Add(1)
		}
		if e.stored {
			t.put(e)
		}
		q.arriveLocked(t, e)
		q.Stats.Publish.Add(1)
	}
	return refused
}

// lockQueues locks qs in id order, the one order in which code takes
// several queue locks, and returns them sorted, each once.
func lockQueues(qs []*Queue) []*Queue {
	if len(qs) > 1 {
		slices.SortFunc(qs, func(x, y *Queue) int { return cmp.Compare(x.ID, y.ID) })
		qs = slices.Compact(qs)
	}
	for _, q := range qs {
		q.mu.Lock()
	}
	return qs
}

func unlockQueues(qs []*Queue) {
	for _, q := range qs {
		q.mu.Unlock()
	}
}
