package broker

import (
	"fmt"

	"github.com/brokerd/brokerd/store"
)

// Paging: a durable queue keeps about two windows of entries per priority
// level in memory (see readyQueue); the rest of a deep level lives in the
// store only. A level's head is topped up ahead of need by a read outside
// the queue's lock (prefetchLocked: one window of entries and their
// bodies, from the store's memory for recent entries, its block cache or
// segments for older ones), merged under the lock if the middle has not
// changed meanwhile. Only when the head is empty and an entry is needed
// now (a delivery, basic.get, a length limit) is the read made under the
// lock (fillLocked).

// pageRead is one read of a level's middle.
type pageRead struct {
	metas []store.EntryMeta
	msgs  []*store.Message
	// done: the read covered the middle as it was bounded then (to).
	done bool
}

// readMiddle reads up to want entries of level prio from seq from, up to
// seq to, with their messages. It touches no queue state: callers hold
// the queue's lock or not.
func (q *Queue) readMiddle(spilled bool, prio uint8, from, to uint64, want int, buf []store.EntryMeta) (pageRead, error) {
	st := q.vhost.b.store
	metas, err := q.readLevel(spilled, prio, from, want, buf)
	if err != nil {
		return pageRead{}, err
	}
	r := pageRead{metas: metas, done: len(metas) < want}
	for i, m := range metas {
		if m.Seq > to { // resident in the tail, or paged after the read began
			r.metas, r.done = metas[:i], true
			break
		}
	}
	ids := make([]store.MsgID, len(r.metas))
	for i := range r.metas {
		ids[i] = r.metas[i].Msg
	}
	r.msgs = make([]*store.Message, len(ids))
	err = st.LoadMessages(ids, func(i int, m *store.Message) { r.msgs[i] = m })
	return r, err
}

// readLevel reads up to want entries of level prio with seq >= from, in
// seq order, from the store ranges q's middles may lie in: its durable
// range (a durable queue) and its volatile range (if spilled, q.spilled
// as the caller saw it under the lock: a read that began before a first
// spill is stale anyway, as the spill paged entries out), merged. Fewer
// than want means the level has no more.
func (q *Queue) readLevel(spilled bool, prio uint8, from uint64, want int, buf []store.EntryMeta) ([]store.EntryMeta, error) {
	st := q.vhost.b.store
	durable := q.Durable && !q.Exclusive
	if !spilled {
		if !durable {
			return buf, nil
		}
		return st.ReadEntries(q.id, prio, from, want, buf)
	}
	if !durable {
		return st.ReadEntries(q.volID(), prio, from, want, buf)
	}
	a, err := st.ReadEntries(q.id, prio, from, want, buf)
	if err != nil {
		return nil, err
	}
	v, err := st.ReadEntries(q.volID(), prio, from, want, nil)
	if err != nil {
		return nil, err
	}
	return mergeBySeq(a, v, want), nil
}

// mergeBySeq merges a and v, each in seq order, into the first max entries
// in seq order (a itself when v is empty).
func mergeBySeq(a, v []store.EntryMeta, max int) []store.EntryMeta {
	if len(v) == 0 {
		return a
	}
	if len(a) == 0 {
		return append(a, v...)
	}
	merged := make([]store.EntryMeta, 0, min(len(a)+len(v), max))
	i, j := 0, 0
	for len(merged) < max && (i < len(a) || j < len(v)) {
		if j == len(v) || i < len(a) && a[i].Seq < v[j].Seq {
			merged = append(merged, a[i])
			i++
		} else {
			merged = append(merged, v[j])
			j++
		}
	}
	clear(a)
	return merged
}

// fillLocked reads the next window of l's middle into its head, under the
// queue's lock. A store failure leaves the head as it was (delivery from
// the level stops and the store alarm is raised).
func (q *Queue) fillLocked(l *level) {
	want := max(q.ready.window-l.head.len(), q.ready.window/2, 1)
	r, err := q.readMiddle(q.spilled, l.prio, l.mid.from, l.mid.to, want, q.pageBuf[:0])
	if err != nil {
		q.vhost.b.storeFailed(fmt.Errorf("page in queue '%s' in vhost '%s': %w", q.Name, q.vhost.Name, err))
		return
	}
	q.mergeLocked(l, r)
	clear(r.metas)
	q.pageBuf = r.metas[:0]
}

// prefetchLocked starts a read of l's next window outside the lock, unless
// one is under way: when it completes, it is merged if l's middle is as it
// was (same start, no entry taken out of it), else dropped.
func (q *Queue) prefetchLocked(l *level) {
	b := q.vhost.b
	if l.filling || q.recovering || !b.goAsync() {
		return
	}
	l.filling = true
	prio, from, to, gen, spilled := l.prio, l.mid.from, l.mid.to, l.gen, q.spilled
	want := max(q.ready.window-l.head.len(), q.ready.window/2, 1)
	go func() {
		defer b.asyncDone()
		r, err := q.readMiddle(spilled, prio, from, to, want, nil)
		q.locked(func(t *txn) {
			l := &q.ready.levels[prio]
			l.filling = false
			if err != nil {
				if !q.isDeleted() && l.gen == gen && l.mid.from == from {
					b.storeFailed(fmt.Errorf("page in queue '%s' in vhost '%s': %w", q.Name, q.vhost.Name, err))
				}
				return
			}
			if q.isDeleted() || l.gen != gen || l.mid.n == 0 || l.mid.from != from {
				return // the middle changed meanwhile: the read may be stale
			}
			// Entries paged out since the read began are read next time.
			r.done = r.done && l.mid.to == to
			q.mergeLocked(l, r)
			q.dispatchLocked(t)
		})
	}()
}

// mergeLocked moves the entries of read r into l's head.
func (q *Queue) mergeLocked(l *level, r pageRead) {
	b := q.vhost.b
	for i := range r.metas {
		m := &r.metas[i]
		l.mid.from = m.Seq + 1
		if m.DeadLetter != "" && !q.unreadBacklog(m.Seq) {
			// A dead letter that waits in the backlog (it was
			// resident when it died): not part of the middle.
			continue
		}
		q.unpageTimerLocked(m.Seq)
		e := q.entryFromMeta(m, r.msgs[i])
		l.mid.n--
		l.mid.bytes -= int64(m.Size)
		if m.DeadLetter != "" {
			// Recovered with the queue, found now: it joins the
			// backlog and leaves the ready count.
			e.state = stBacklog
			q.addBacklogLocked(e)
			l.n--
			q.ready.n--
			q.readyBytes -= int64(m.Size)
			continue
		}
		e.state = stReady
		l.intoHead(e)
		if !q.recovering {
			q.armLocked(e)
		}
	}
	if r.done && l.mid.n != 0 {
		// The counters disagree with the store: trust the store, and
		// say so (a broker or store bug).
		b.log.Error("paging: queue level counters disagree with the store; correcting",
			"vhost", q.vhost.Name, "queue", q.Name, "level", l.prio, "missing", l.mid.n, "bytes", l.mid.bytes)
		l.n -= l.mid.n
		q.ready.n -= l.mid.n
		q.readyBytes -= l.mid.bytes
		l.mid.n = 0
	}
	if l.mid.n == 0 {
		l.mid = midRange{}
		l.gen++
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

// dropMiddleLocked forgets l's middle entry of size bytes that left it
// from where it stood (it expired).
func (q *Queue) dropMiddleLocked(l *level, size int64) {
	l.gen++ // a read under way may hold it
	l.mid.n--
	l.mid.bytes -= size
	l.n--
	q.ready.n--
	q.readyBytes -= size
	if l.mid.n == 0 {
		l.mid = midRange{}
	}
}

// inMiddle reports whether seq of level prio lies in that level's middle.
func (q *Queue) inMiddle(prio uint8, seq uint64) (*level, bool) {
	if int(prio) >= len(q.ready.levels) {
		return nil, false
	}
	l := &q.ready.levels[prio]
	return l, l.mid.n > 0 && seq >= l.mid.from && seq <= l.mid.to
}

// middleRefs returns the refs of the entries in q's middles, read from the
// store (purge deletes them). Dead letters waiting in the backlog are left
// out, unless they were recovered and not read back yet.
func (q *Queue) middleRefsLocked() ([]store.Ref, error) {
	var refs []store.Ref
	for i := range q.ready.levels {
		l := &q.ready.levels[i]
		if l.mid.n == 0 {
			continue
		}
		from := l.mid.from
		for {
			metas, err := q.readLevel(q.spilled, l.prio, from, 4096, q.pageBuf[:0])
			if err != nil {
				return nil, err
			}
			done := len(metas) < 4096
			for _, m := range metas {
				if m.Seq > l.mid.to {
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
		if int(ls.Prio) >= len(q.ready.levels) {
			return false
		}
	}
	q.recoveredSeq, q.backlogUnread = st.LastSeq, true
	for _, ls := range st.Levels {
		l := &q.ready.levels[ls.Prio]
		l.mid = midRange{from: 0, to: st.LastSeq, n: int(ls.Count), bytes: ls.Bytes}
		l.n += int(ls.Count)
		q.ready.n += int(ls.Count)
		q.readyBytes += ls.Bytes
	}
	q.syncCounts()
	return true
}
