package broker

import (
	"fmt"

	"github.com/brokerd/brokerd/store"
)

// Paging: a durable queue keeps about two windows of entries per priority
// level in memory (see readyQueue); the rest of a deep level lives in the
// store only. The store reads below run under the queue's lock: a refill
// reads one window of entries and their bodies (from the store's memory
// for recent entries, its block cache or segments for older ones).

// fillLocked reads the next window of l's middle into its head. A store
// failure leaves the head as it was (delivery from the level stops and the
// store alarm is raised).
func (q *Queue) fillLocked(l *level) {
	b := q.vhost.b
	want := max(q.ready.window-l.head.len(), q.ready.window/2, 1)
	metas, err := b.store.ReadEntries(q.id, l.prio, l.mid.from, want, q.pageBuf[:0])
	if err != nil {
		b.storeFailed(fmt.Errorf("page in queue '%s' in vhost '%s': %w", q.Name, q.vhost.Name, err))
		return
	}
	// Entries past the middle's end are resident in the tail.
	exhausted := len(metas) < want
	for i, m := range metas {
		if m.Seq > l.mid.to {
			metas, exhausted = metas[:i], true
			break
		}
	}
	ids := q.pageIDs[:0]
	for _, m := range metas {
		ids = append(ids, m.Msg)
	}
	msgs := make([]*store.Message, len(ids))
	if err := b.store.LoadMessages(ids, func(i int, m *store.Message) { msgs[i] = m }); err != nil {
		b.storeFailed(fmt.Errorf("page in queue '%s' in vhost '%s': %w", q.Name, q.vhost.Name, err))
		return
	}
	for i := range metas {
		m := &metas[i]
		l.mid.from = m.Seq + 1
		if m.DeadLetter != "" && !q.unreadBacklog(m.Seq) {
			// A dead letter that waits in the backlog (it was
			// resident when it died): not part of the middle.
			continue
		}
		q.unpageTimerLocked(m.Seq)
		e := q.entryFromMeta(m, msgs[i])
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
		l.head.pushBack(e)
		if !q.recovering {
			q.armLocked(e)
		}
	}
	clear(metas)
	q.pageBuf, q.pageIDs = metas[:0], ids[:0]
	if exhausted && l.mid.n != 0 {
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
	}
	q.syncCounts()
}

// unreadBacklog reports whether a dead letter at seq, found in a middle,
// was recovered with the queue's counters and not read yet (rather than
// already in the backlog).
func (q *Queue) unreadBacklog(seq uint64) bool { return q.backlogUnread && seq <= q.recoveredSeq }

// entryFromMeta makes the resident entry of a stored one read back.
func (q *Queue) entryFromMeta(m *store.EntryMeta, msg *store.Message) *entry {
	e := &entry{q: q, prio: m.Prio, stored: true, inStore: true, redelivered: m.Seq <= q.recoveredSeq}
	e.Ref, e.Msg, e.Header = m.Ref, msg, m.Header
	e.Deadline, e.DeliveryCount, e.DeadLetter, e.DeadAt = m.Deadline, m.DeliveryCount, m.DeadLetter, m.DeadAt
	e.timer.Value = e
	return e
}

// dropMiddleLocked forgets l's middle entry of size bytes that left it
// from where it stood (it expired).
func (q *Queue) dropMiddleLocked(l *level, size int64) {
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
			metas, err := q.vhost.b.store.ReadEntries(q.id, l.prio, from, 4096, q.pageBuf[:0])
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
