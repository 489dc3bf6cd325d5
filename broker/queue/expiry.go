package queue

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/brokerd/brokerd/deadletter"
	"github.com/brokerd/brokerd/store"
	"github.com/brokerd/brokerd/ttl"
)

// Now is the broker's clock (Options.Now, for tests that move time).
func (b *Env) Now() time.Time { return b.cfg.Now() }

func (b *Env) NowMS() int64 { return b.cfg.Now().UnixMilli() }

// arrivalMS is the broker's clock in milliseconds rounded up: the time a
// message's deadline counts from. Deadlines are whole milliseconds, and
// an entry expires once the clock, rounded down, reaches its deadline;
// rounding the arrival up makes that never earlier than arrival + TTL.
func (b *Env) arrivalMS() int64 { return ceilMS(b.cfg.Now()) }

// ArrivalMS is arrivalMS, for the broker's publishes: the time a delayed
// message's x-delay counts from (DueAt).
func (b *Env) ArrivalMS() int64 { return b.arrivalMS() }

// arrival is the arrival time of a publish (arrivalMS), read from the
// clock when a deadline first needs it and then kept, so a message with
// no TTL costs no clock read and every queue of one publish counts from
// the same instant.
type arrival struct {
	env *Env
	ms  int64 // 0: not read yet
}

// arrivedAt is an arrival already known.
func arrivedAt(ms int64) arrival { return arrival{ms: ms} }

func (a *arrival) get() int64 {
	if a.ms == 0 {
		a.ms = a.env.arrivalMS()
	}
	return a.ms
}

// ceilMS returns t in Unix milliseconds, rounded up.
func ceilMS(t time.Time) int64 {
	ms := t.UnixMilli()
	if t.Sub(time.UnixMilli(ms)) > 0 {
		ms++
	}
	return ms
}

// FireTimers runs on the scheduler's goroutine: message deadlines and
// queue leases that are due. A message expires where it stands in its
// queue (not only at the head) and is dead-lettered with reason expired;
// a queue whose lease ran out is deleted; the horizon timer starts the
// next scan of paged deadlines.
func (b *Env) FireTimers(due []*ttl.Timer) {
	byQueue := map[*Queue][]*Entry{}
	var order []*Queue
	var leases []*Queue
	paged := map[*Queue][]*pagedTimer{}
	for _, tm := range due {
		switch v := tm.Value.(type) {
		case *Entry:
			if _, ok := byQueue[v.q]; !ok {
				order = append(order, v.q)
			}
			byQueue[v.q] = append(byQueue[v.q], v)
		case *pagedTimer:
			if _, ok := byQueue[v.q]; !ok {
				order = append(order, v.q)
				byQueue[v.q] = nil
			}
			paged[v.q] = append(paged[v.q], v)
		case *Queue:
			leases = append(leases, v)
		case horizonTick:
			b.kickHorizon()
		}
	}
	for _, q := range order {
		q.expireEntries(byQueue[q], paged[q])
	}
	for _, q := range leases {
		q.expireLease()
	}
}

// expireEntries dead-letters those of es still ready, and the middle
// entries of the paged timers pts that are due, in deadline order, then
// seq order. Paged entries are read ahead of their deadline (pagedexpiry.go):
// a read-ahead timer starts a read of the store outside the queue's lock
// (on a goroutine of its own, so the scheduler goes on); what it reads
// waits on timers at the deadlines, or expires at once if due (a timer
// armed late). A due entry waits for a read only if that read is of an
// entry ahead of it in its level (waitForReadsLocked), so that dead
// letters leave in queue order however slow the read: it waits for the
// read, never for the other entry's deadline.
func (q *Queue) expireEntries(es []*Entry, pts []*pagedTimer) {
	b := q.Env
	if q.holdFor != "" {
		runHook(&releaseHook, q)
	}
	q.mu.Lock()
	now := b.NowMS()
	var toRead []store.Ref
	var pre []*Entry
	if len(pts) > 0 {
		toRead, pre = q.duePagedLocked(pts, now)
	}
	// Registered before this batch expires: an entry of es behind one
	// this read is of waits for it.
	var r *expRead
	if len(toRead) > 0 && b.goAsync() {
		r = q.startExpReadLocked(toRead)
	}
	es, pre = q.waitForReadsLocked(es, pre, now)
	t := b.newTxn()
	q.expireLocked(t, es, pre)
	t.apply(nil)
	q.mu.Unlock()
	t.finish()
	if r == nil {
		return // nothing to read, or closing
	}
	go func() {
		defer b.asyncDone()
		q.expireRead(r)
	}()
}

// expireRead reads the paged entries r names, which are due, and expires
// them, with the entries that waited for r and no other read. A read
// that fails is made again after a pause (readretry.go).
func (q *Queue) expireRead(r *expRead) {
	b := q.Env
	read, err := q.readPaged(r.refs)
	q.locked(func(t *Txn) {
		if q.isDeleted() {
			return
		}
		if err != nil {
			// Still under way: what waits for it waits on.
			b.ReadFailed(fmt.Errorf("expire in queue '%s' in vhost '%s': %w", q.Name, q.Host.Name, err))
			b.retryRead(func() { q.expireRead(r) })
			return
		}
		if i := slices.Index(q.expReads, r); i >= 0 {
			q.expReads = slices.Delete(q.expReads, i, i+1)
		}
		now := b.NowMS()
		es, paged := q.releaseWaitingLocked()
		_, due := q.waitForReadsLocked(nil, q.holdReadLocked(read, now), now)
		// Sorted together by expireLocked.
		q.expireLocked(t, es, append(paged, due...))
	})
}

// expRead is a read of due paged entries under way (expireRead).
type expRead struct {
	refs []store.Ref
	gen  uint64           // q.expGen when it started
	head map[uint8]uint64 // the lowest seq it reads, by level
}

// expWait is an expired entry that waits for reads under way.
type expWait struct {
	e     *Entry
	paged bool   // read from a middle (else resident)
	upTo  uint64 // it waits for the reads started up to this gen, not later ones
}

// startExpReadLocked registers the read of refs, which is starting.
func (q *Queue) startExpReadLocked(refs []store.Ref) *expRead {
	q.expGen++
	r := &expRead{refs: refs, gen: q.expGen, head: map[uint8]uint64{}}
	for _, ref := range refs {
		if s, ok := r.head[ref.Prio]; !ok || ref.Seq < s {
			r.head[ref.Prio] = ref.Seq
		}
	}
	q.expReads = append(q.expReads, r)
	return r
}

// behindReadLocked reports whether a read under way, started up to gen
// upTo, reads an entry ahead of e in its level.
func (q *Queue) behindReadLocked(e *Entry, upTo uint64) bool {
	for _, r := range q.expReads {
		if s, ok := r.head[e.Prio]; ok && r.gen <= upTo && s < e.Seq {
			return true
		}
	}
	return false
}

// waitForReadsLocked returns the entries of es and paged that may expire
// now, and keeps back (in q.expWait) the expired ones behind an entry of
// their level that a read under way (q.expReads) is reading: that entry
// may be due too, and must be dead-lettered first. RabbitMQ dead-letters
// expired messages from the head, in queue order; paged entries are read
// ahead on goroutines of their own, and under load a read can end after
// its entries' deadlines, after the deadlines of entries behind them
// (resident in the tail, or read by a later read that ended first). An
// entry waits only for the reads under way now, never for one started
// later, so a queue that always has a read under way does not hold it
// for ever. One kept back stays where it is (ready, or in its middle): a
// delivery, purge or paging in meanwhile is seen when the read ends and
// expireLocked looks at it again. A holding queue (delayed.go) releases
// in deadline order, and keeps nothing back.
func (q *Queue) waitForReadsLocked(es, paged []*Entry, now int64) (readyNow, pagedNow []*Entry) {
	if q.holdFor != "" || len(q.expReads) == 0 {
		return es, paged
	}
	for _, e := range paged {
		if q.behindReadLocked(e, q.expGen) {
			q.expWait = append(q.expWait, expWait{e: e, paged: true, upTo: q.expGen})
		} else {
			pagedNow = append(pagedNow, e)
		}
	}
	for _, e := range es {
		if e.state == stReady && e.expiredAt(now) && q.behindReadLocked(e, q.expGen) {
			q.expWait = append(q.expWait, expWait{e: e, upTo: q.expGen})
		} else {
			readyNow = append(readyNow, e)
		}
	}
	return readyNow, pagedNow
}

// releaseWaitingLocked takes out of q.expWait the entries that no longer
// wait for a read (a read ended).
func (q *Queue) releaseWaitingLocked() (es, paged []*Entry) {
	keep := q.expWait[:0]
	for _, w := range q.expWait {
		switch {
		case q.behindReadLocked(w.e, w.upTo):
			keep = append(keep, w)
		case w.paged:
			paged = append(paged, w.e)
		default:
			es = append(es, w.e)
		}
	}
	clear(q.expWait[len(keep):])
	q.expWait = keep
	return es, paged
}

// expireLocked dead-letters those of es still ready and expired, and
// those of paged (read from the store) still in their middle.
func (q *Queue) expireLocked(t *Txn, es []*Entry, paged []*Entry) {
	if q.isDeleted() {
		return
	}
	now := q.Env.NowMS()
	var expired []*Entry
	for _, e := range paged {
		if l, ok := q.ready.InMiddle(e.Prio, e.Seq); ok {
			q.ready.TakeOut(l, e.Seq, int64(e.BodySize()), false)
			expired = append(expired, e)
		}
	}
	q.syncCounts()
	var parked []*Entry
	for _, e := range es {
		switch {
		case e.state == stParked:
			parked = append(parked, e)
		case e.state != stReady:
		case e.expiredAt(now):
			q.removeReadyLocked(e)
			expired = append(expired, e)
		default:
			// Fired early by our clock (it stepped back between
			// the scheduler's reading and ours): wait again.
			q.armLocked(e)
		}
	}
	if len(parked) > 0 {
		expired = append(expired, q.dueParkedLocked(t, parked, now)...)
	}
	if q.holdFor != "" {
		q.releaseLocked(t, expired) // due: routed now (delayed.go)
		return
	}
	if len(expired) > 1 {
		slices.SortFunc(expired, func(a, b *Entry) int {
			return cmp.Or(cmp.Compare(a.Deadline, b.Deadline), cmp.Compare(a.Seq, b.Seq))
		})
	}
	q.deadLetterLocked(t, expired, deadletter.Expired, true)
}

// touchLocked records a use of the queue (declare, basic.get, the last
// consumer going) for x-expires: the lease runs from now while the queue
// has no consumers.
func (q *Queue) touchLocked() {
	exp := q.Settings().expires
	s := q.Env.Timers
	s.Remove(&q.lease)
	if exp < 0 || len(q.consumers) > 0 || q.isDeleted() {
		return
	}
	q.lease.Deadline = q.Env.arrivalMS() + exp // never early, as message deadlines
	s.Add(&q.lease)
}

// Touch is touchLocked for callers without the lock.
func (q *Queue) Touch() {
	q.mu.Lock()
	q.touchLocked()
	q.mu.Unlock()
}

// expireLease deletes the queue if it is still unused (x-expires). Its
// messages are not dead-lettered.
func (q *Queue) expireLease() {
	q.mu.Lock()
	exp := q.Settings().expires
	unused := !q.isDeleted() && exp >= 0 && len(q.consumers) == 0
	if unused && q.lease.Deadline > q.Env.NowMS() {
		// Fired early by our clock: wait again.
		unused = false
		q.Env.Timers.Add(&q.lease)
	}
	// From here no consumer may attach: the queue is going.
	q.closing = q.closing || unused
	q.mu.Unlock()
	if unused {
		q.Env.Log.Info("queue expired (x-expires)", "vhost", q.Host.Name, "queue", q.Name)
		q.Env.expired(q)
	}
}
