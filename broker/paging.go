package broker

import (
	"fmt"

	"github.com/brokerd/brokerd/broker/engine"
	"github.com/brokerd/brokerd/store"
)

// Paging: a durable queue keeps about two windows of entries per priority
// level in memory (the engine package's Ready); the rest of a deep level lives in the
// store only. A level's head is topped up ahead of need by a read outside
// the queue's lock (prefetchLocked: one window of entries and their
// bodies, from the store's memory for recent entries, its block cache or
// segments for older ones), merged under the lock if the middle has not
// changed meanwhile. Only when the head is empty and an entry is needed
// now (a delivery, basic.get, a length limit) is the read made under the
// lock (fillLocked).

// ranges names q's store ranges for the engine's reads.
func (q *Queue) ranges() engine.Ranges {
	return engine.Ranges{Store: q.vhost.b.store, ID: q.id, Durable: q.Durable && !q.Exclusive}
}

// The queue's ready list, as the engine holds it.
type (
	readyQueue = engine.Ready[*entry]
	level      = engine.Level[*entry]
)

// What the engine asks of an entry (engine.Entry).
func (e *entry) EntrySeq() uint64 { return e.Seq }
func (e *entry) EntryPrio() uint8 { return e.prio }
func (e *entry) EntrySize() int64 { return int64(len(e.Msg.Body)) }
func (e *entry) Ready() bool      { return e.state == stReady }
func (e *entry) Pageable() bool   { return e.inStore && !e.zeroTTL }

// fillLocked reads the next window of l's middle into its head, under the
// queue's lock. A store failure leaves the head as it was (delivery from
// the level stops and the store alarm is raised).
func (q *Queue) fillLocked(l *level) {
	want := max(q.ready.Window-l.Head.Len(), q.ready.Window/2, 1)
	r, err := q.ranges().ReadMiddle(q.spilled, l.Prio, l.Mid.From, l.Mid.To, want, q.pageBuf[:0])
	if err != nil {
		q.vhost.b.storeFailed(fmt.Errorf("page in queue '%s' in vhost '%s': %w", q.Name, q.vhost.Name, err))
		return
	}
	q.mergeLocked(l, r)
	clear(r.Metas)
	q.pageBuf = r.Metas[:0]
}

// prefetchLocked starts a read of l's next window outside the lock, unless
// one is under way: when it completes, it is merged if l's middle is as it
// was (same start, no entry taken out of it), else dropped.
func (q *Queue) prefetchLocked(l *level) {
	b := q.vhost.b
	if l.Filling || q.recovering || !b.goAsync() {
		return
	}
	l.Filling = true
	prio, from, to, gen, spilled := l.Prio, l.Mid.From, l.Mid.To, l.Gen, q.spilled
	want := max(q.ready.Window-l.Head.Len(), q.ready.Window/2, 1)
	go func() {
		defer b.asyncDone()
		r, err := q.ranges().ReadMiddle(spilled, prio, from, to, want, nil)
		q.locked(func(t *txn) {
			l := q.ready.Level(prio)
			l.Filling = false
			if err != nil {
				if !q.isDeleted() && l.Gen == gen && l.Mid.From == from {
					b.storeFailed(fmt.Errorf("page in queue '%s' in vhost '%s': %w", q.Name, q.vhost.Name, err))
				}
				return
			}
			if q.isDeleted() || l.Gen != gen || l.Mid.N == 0 || l.Mid.From != from {
				return // the middle changed meanwhile: the read may be stale
			}
			// Entries paged out since the read began are read next time.
			r.Done = r.Done && l.Mid.To == to
			q.mergeLocked(l, r)
			q.dispatchLocked(t)
		})
	}()
}

// mergeLocked moves the entries of read r into l's head.
func (q *Queue) mergeLocked(l *level, r engine.PageRead) {
	for i := range r.Metas {
		m := &r.Metas[i]
		l.Skip(m.Seq)
		if m.DeadLetter != "" && !q.unreadBacklog(m.Seq) {
			// A dead letter that waits in the backlog (it was
			// resident when it died): not part of the middle.
			continue
		}
		q.unpageTimerLocked(m.Seq)
		e := q.entryFromMeta(m, r.Msgs[i])
		if m.DeadLetter != "" {
			// Recovered with the queue, found now: it joins the
			// backlog and leaves the ready count.
			e.state = stBacklog
			q.addBacklogLocked(e)
			q.ready.TakeOut(l, int64(m.Size), true)
			continue
		}
		e.state = stReady
		q.ready.MoveIn(l, e)
		if !q.recovering {
			q.armLocked(e)
		}
	}
	if n, bytes := q.ready.ReadDone(l, r.Done); n != 0 {
		// The counters disagreed with the store: they follow the store
		// now (a broker or store bug).
		q.vhost.b.log.Error("paging: queue level counters disagree with the store; corrected",
			"vhost", q.vhost.Name, "queue", q.Name, "level", l.Prio, "missing", n, "bytes", bytes)
	}
	q.syncCounts()
}

// unreadBacklog reports whether a dead letter at seq, found in a middle,
// was recovered with the queue's counters and not read yet (rather than
// already in the backlog).
func (q *Queue) unreadBacklog(seq uint64) bool { return q.backlogUnread && seq <= q.recoveredSeq }

// entryFromMeta makes the resident entry of a stored one read back.
func (q *Queue) entryFromMeta(m *store.EntryMeta, msg *store.Message) *entry {
	e := &entry{q: q, prio: m.Prio, stored: true, inStore: true, redelivered: q.deliveredBefore(m.Prio, m.Seq, m.DeliveryCount)}
	e.Ref, e.Msg, e.Header = m.Ref, msg, m.Header
	e.Deadline, e.DeliveryCount, e.DeadLetter, e.DeadAt = m.Deadline, m.DeliveryCount, m.DeadLetter, m.DeadAt
	e.timer.Value = e
	return e
}

// middleRefs returns the refs of the entries in q's middles, read from the
// store (purge deletes them). Dead letters waiting in the backlog are left
// out, unless they were recovered and not read back yet.
func (q *Queue) middleRefsLocked() ([]store.Ref, error) {
	var refs []store.Ref
	for i := range q.ready.Levels() {
		l := q.ready.Level(uint8(i))
		if l.Mid.N == 0 {
			continue
		}
		from := l.Mid.From
		for {
			metas, err := q.ranges().ReadLevel(q.spilled, l.Prio, from, 4096, q.pageBuf[:0])
			if err != nil {
				return nil, err
			}
			done := len(metas) < 4096
			for _, m := range metas {
				if m.Seq > l.Mid.To {
					done = true
					break
				}
				from = m.Seq + 1
				if m.DeadLetter == "" || q.unreadBacklog(m.Seq) {
					refs = append(refs, m.Ref)
				}
			}
			clear(metas)
			q.pageBuf = metas[:0]
			if done {
				break
			}
		}
	}
	return refs, nil
}

// recoverPagedLocked recovers q with its entries left in the store: the
// counters come from the store's queue state, and each level is one
// middle read back as it is consumed. It reports false (and changes
// nothing) where the state does not fit the queue's levels.
func (q *Queue) recoverPagedLocked(st store.QueueState) bool {
	for _, ls := range st.Levels {
		if int(ls.Prio) >= q.ready.Levels() {
			return false
		}
	}
	q.recoveredSeq, q.backlogUnread = st.LastSeq, true
	for _, ls := range st.Levels {
		q.ready.Recover(ls.Prio, st.LastSeq, int(ls.Count), ls.Bytes)
	}
	q.syncCounts()
	return true
}
