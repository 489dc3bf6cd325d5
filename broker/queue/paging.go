package queue

import (
	"cmp"
	"fmt"

	"github.com/brokerd/brokerd/broker/queue/engine"
	"github.com/brokerd/brokerd/store"
)

// Paging: a durable queue keeps about two windows of entries per priority
// level in memory (the engine package's Ready); the rest of a deep level
// lives in the store only. A level's head is refilled by a read outside
// the queue's lock (prefetchLocked: one window of entries and their
// bodies, from the store's memory for recent entries, its block cache or
// segments for older ones), merged under the lock. The read starts ahead
// of need, when the head runs low; when the head is empty before it
// completes, the level has nothing to give until it does: deliveries
// resume, a drop-head limit evicts and a waiting basic.get answers when
// it is merged. So no store read ever runs under a queue's lock while
// clients are served: a publisher never waits for a disk. Only while the
// broker recovers or closes (no goroutine may start) is the read made
// under the lock (fillLocked).

// ranges names q's store ranges for the engine's reads.
func (q *Queue) ranges() engine.Ranges {
	return engine.Ranges{Store: q.Env.Store, ID: q.ID, Durable: q.Durable && !q.Exclusive}
}

// The queue's ready list, as the engine holds it.
type (
	readyQueue = engine.Ready[*Entry]
	level      = engine.Level[*Entry]
)

// What the engine asks of an entry (engine.Entry).
func (e *Entry) EntrySeq() uint64 { return e.Seq }
func (e *Entry) EntryPrio() uint8 { return e.prio }
func (e *Entry) EntrySize() int64 { return int64(len(e.Msg.Body)) }
func (e *Entry) Ready() bool      { return e.state == stReady }
func (e *Entry) Pageable() bool   { return e.inStore && !e.zeroTTL }

// EntryResident counts its body and its properties: a header can be far
// larger than a body, and the windows bound what is held (the properties
// of several entries sharing one dead-lettered header count for each).
func (e *Entry) EntryResident() int64 {
	return int64(len(e.Msg.Body)) + int64(len(e.EffectiveHeader().Props))
}

// fillLocked refills l's head from its middle now that it is empty: by a
// read outside the lock (prefetchLocked) while the broker serves, under
// the lock while it recovers or closes. A store failure leaves the head
// as it was (delivery from the level stops and the store alarm is
// raised).
func (q *Queue) fillLocked(l *level) {
	if q.prefetchLocked(l) {
		return
	}
	want, wantBytes := q.readWantLocked(l)
	r, err := q.ranges().ReadMiddle(q.spilled, l.Prio, l.Mid.From, l.Mid.To, want, wantBytes, l.MeanResident(), q.pageBuf[:0])
	if err = pageErr(r, err); err != nil {
		// Made again at the level's next refill (readretry.go).
		q.Env.ReadFailed(fmt.Errorf("page in queue '%s' in vhost '%s': %w", q.Name, q.Host.Name, err))
		return
	}
	q.mergeLocked(l, r)
	if len(q.damaged) > 0 {
		// No dead-lettering here: its copies go to their queues after
		// this lock is released, and this read runs under it.
		t := q.Env.newTxn()
		q.dropDamagedLocked(t, false)
		t.apply(nil)
		t.finish()
	}
	clear(r.Metas)
	q.pageBuf = r.Metas[:0]
}

// prefetchLocked starts a read of l's next window outside the lock,
// unless one is under way, and reports whether one is (false while the
// broker recovers or closes). When it completes it is merged if l's
// middle is still the one it read (entries taken out of it meanwhile are
// skipped), else dropped; then waiting gets are woken and the queue
// delivers and enforces its limits, which starts the next read if the
// head still needs one.
func (q *Queue) prefetchLocked(l *level) bool {
	b := q.Env
	if l.Filling {
		return true
	}
	if q.recovering || !b.goAsync() {
		return false
	}
	l.Filling = true
	prio, from, to, gen, spilled, per := l.Prio, l.Mid.From, l.Mid.To, l.Gen, q.spilled, l.MeanResident()
	want, wantBytes := q.readWantLocked(l)
	go func() {
		defer b.asyncDone()
		r, err := q.ranges().ReadMiddle(spilled, prio, from, to, want, wantBytes, per, nil)
		err = pageErr(r, err)
		q.mu.Lock()
		t := b.newTxn()
		l := q.ready.Level(prio)
		current := !q.isDeleted() && l.Gen == gen && l.Mid.N > 0 && l.Mid.From == from
		switch {
		case err != nil:
			if current {
				b.ReadFailed(fmt.Errorf("page in queue '%s' in vhost '%s': %w", q.Name, q.Host.Name, err))
				q.retryPageLocked()
			}
		case current:
			// Entries paged out since the read began are read next time.
			r.Done = r.Done && l.Mid.To == to
			q.mergeLocked(l, r)
			q.dropDamagedLocked(t, true)
		}
		evicted := q.endReadLocked(l, t, err)
		evictedDone := func(applyErr error) {
			for _, w := range evicted {
				w(cmp.Or(err, applyErr))
			}
		}
		wrote := t.write(evictedDone)
		q.wakeFillWaitersLocked(err)
		q.mu.Unlock()
		t.finish()
		if !wrote {
			evictedDone(nil)
		}
	}()
	return true
}

// retryPageLocked has the queue deliver again, and so read the level it
// could not, after readRetryDelay; one retry is pending at a time.
func (q *Queue) retryPageLocked() {
	if q.pageRetry {
		return
	}
	q.pageRetry = true
	q.Env.retryRead(func() {
		q.locked(func(t *Txn) {
			q.pageRetry = false
			if !q.isDeleted() {
				q.dispatchLocked(t)
			}
		})
	})
}

// endReadLocked ends the read of l's middle under way (Filling), merged,
// dropped or failed with err: it evicts what a drop-head limit owes (before
// anything is delivered) and delivers, within t, and returns the publishers
// waiting for an eviction to call once t is written (all of them unless an
// eviction is still owed). The caller then wakes the gets waiting for a
// read (wakeFillWaitersLocked).
func (q *Queue) endReadLocked(l *level, t *Txn, err error) []func(error) {
	l.EndRead()
	if err == nil && !q.isDeleted() {
		q.enforceLimitsLocked(t)
		q.dispatchLocked(t)
	}
	var evicted []func(error)
	if err != nil || !q.evictionOwedLocked() {
		evicted, q.evictWaiters = q.evictWaiters, nil
	}
	return evicted
}

// Bounds of what a read of a middle brings in beyond the head's room for
// a drop-head limit to evict (readWantLocked).
const (
	evictReadMax      = 16384
	evictReadMaxBytes = 16 << 20
)

// readWantLocked is how much a read of l's middle asks for: the head's
// room, plus, while q is over a length limit, the excess (up to
// evictReadMax entries and evictReadMaxBytes). The excess is evicted as
// soon as the read is merged, so it is resident only for that moment;
// without it eviction went one window per read, and a publisher that did
// not wait for confirms could take a queue far over its limit (a
// max-length 5000 queue held 6,500 with the default window, one of 50
// held 99,000 with a window of 4) until the reads caught up.
func (q *Queue) readWantLocked(l *level) (int, int64) {
	want, wantBytes := q.ready.HeadRoom(l)
	lim := q.Settings().limits
	ln, lb := q.limitLenLocked()
	if !lim.Over(ln, lb) {
		return want, wantBytes
	}
	n := evictReadMax
	if lim.MaxLen >= 0 {
		n = min(n, ln-int(lim.MaxLen))
	}
	bytes := int64(evictReadMaxBytes)
	if lim.MaxBytes >= 0 {
		bytes = min(bytes, lb-lim.MaxBytes)
	}
	want += max(n, 0)
	if wantBytes > 0 {
		wantBytes += max(bytes, 0)
	}
	return want, wantBytes
}

// evictionOwedLocked reports whether q is a drop-head queue over its
// limits that could not evict yet: its head is being read back from the
// store (a publish that took it over waits for its eviction: awaitEvictions).
func (q *Queue) evictionOwedLocked() bool {
	if q.isDeleted() {
		return false
	}
	lim := q.Settings().limits
	return lim.Limited() && lim.Over(q.limitLenLocked()) && q.readingLocked()
}

// readingLocked reports whether a read of one of q's middles is under way.
func (q *Queue) readingLocked() bool {
	for i := range q.ready.Levels() {
		if q.ready.Level(uint8(i)).Filling {
			return true
		}
	}
	return false
}

// FillWait is a wait for the reads of a queue's middles under way.
type FillWait struct {
	Done chan struct{} // closed when one completes
	Err  error         // its error, set before done is closed
}

// fillWaitLocked returns a wait that ends when a read of q's middles under
// way completes (a basic.get that found the head empty waits on it), or
// nil when none is under way.
func (q *Queue) fillWaitLocked() *FillWait {
	if !q.readingLocked() {
		return nil
	}
	if q.fillWake == nil {
		q.fillWake = &FillWait{Done: make(chan struct{})}
	}
	return q.fillWake
}

// wakeFillWaitersLocked ends the wait of fillWaitLocked's callers: a read
// completed, with err.
func (q *Queue) wakeFillWaitersLocked(err error) {
	if w := q.fillWake; w != nil {
		q.fillWake = nil
		w.Err = err
		close(w.Done)
	}
}

// mergeLocked moves the entries of read r into l's head.
func (q *Queue) mergeLocked(l *level, r engine.PageRead) {
	for i := range r.Metas {
		m := &r.Metas[i]
		l.Skip(m.Seq)
		if l.Taken(m.Seq) {
			continue // taken out (expired) while the read ran
		}
		if m.DeadLetter != "" && !q.unreadBacklog(m.Seq) {
			// A dead letter that waits in the backlog (it was
			// resident when it died): not part of the middle.
			continue
		}
		if r.Msgs[i] == nil { // its message is damaged (damage.go)
			q.takeDamagedLocked(l, m, r.Damage.Where(m.Msg))
			continue
		}
		q.unpageTimerLocked(m.Seq)
		e := q.entryFromMeta(m, r.Msgs[i])
		if m.DeadLetter != "" {
			// Recovered with the queue, found now: it joins the
			// backlog and leaves the ready count.
			e.state = stBacklog
			q.addBacklogLocked(e)
			q.ready.TakeOut(l, m.Seq, int64(m.Size), true)
			continue
		}
		if e.ReadyAt != 0 && e.ReadyAt > q.Env.NowMS() {
			// Recovered while waiting out a retry delay: parked
			// until its due time, not part of the middle (retry.go).
			q.ready.TakeOut(l, m.Seq, int64(m.Size), true)
			q.parkLocked(e)
			continue
		}
		e.ReadyAt = 0
		e.state = stReady
		q.ready.MoveIn(l, e)
		if !q.recovering {
			q.armLocked(e)
		}
	}
	if n, bytes := q.ready.ReadDone(l, r.Done); n != 0 {
		// The counters disagreed with the store: they follow the store
		// now (a broker or store bug).
		q.Env.Log.Error("paging: queue level counters disagree with the store; corrected",
			"vhost", q.Host.Name, "queue", q.Name, "level", l.Prio, "missing", n, "bytes", bytes)
	}
	q.syncCounts()
}

// unreadBacklog reports whether a dead letter at seq, found in a middle,
// was recovered with the queue's counters and not read yet (rather than
// already in the backlog).
func (q *Queue) unreadBacklog(seq uint64) bool { return q.backlogUnread && seq <= q.recoveredSeq }

// entryFromMeta makes the resident entry of a stored one read back.
func (q *Queue) entryFromMeta(m *store.EntryMeta, msg *store.Message) *Entry {
	e := &Entry{q: q, prio: m.Prio, stored: true, inStore: true, Redelivered: q.deliveredBefore(m.Prio, m.Seq, m.DeliveryCount)}
	e.Ref, e.Msg, e.Header = m.Ref, msg, m.Header
	e.Deadline, e.DeliveryCount, e.DeadLetter, e.DeadAt = m.Deadline, m.DeliveryCount, m.DeadLetter, m.DeadAt
	e.AcquiredCount, e.ReadyAt = m.AcquiredCount, m.ReadyAt
	e.Origin = m.Origin
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
