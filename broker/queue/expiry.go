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
// armed late). Nothing that is due waits for a read.
func (q *Queue) expireEntries(es []*Entry, pts []*pagedTimer) {
	b := q.Env
	if q.holdFor != "" {
		runHook(&releaseHook, q)
	}
	q.mu.Lock()
	var toRead []store.Ref
	var pre []*Entry
	if len(pts) > 0 {
		toRead, pre = q.duePagedLocked(pts, b.NowMS())
	}
	t := b.newTxn()
	q.expireLocked(t, es, pre)
	t.apply(nil)
	reading := len(toRead) > 0 && b.goAsync()
	q.mu.Unlock()
	t.finish()
	if !reading {
		return // nothing to read, or closing
	}
	go func() {
		defer b.asyncDone()
		q.expireRead(toRead)
	}()
}

// expireRead reads the paged entries refs name, which are due, and
// expires them. A read that fails is made again after a pause
// (readretry.go).
func (q *Queue) expireRead(refs []store.Ref) {
	b := q.Env
	read, err := q.readPaged(refs)
	q.locked(func(t *Txn) {
		if q.isDeleted() {
			return
		}
		if err != nil {
			b.ReadFailed(fmt.Errorf("expire in queue '%s' in vhost '%s': %w", q.Name, q.Host.Name, err))
			b.retryRead(func() { q.expireRead(refs) })
			return
		}
		q.expireLocked(t, nil, q.holdReadLocked(read, b.NowMS()))
	})
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
	if len(paged) > 0 {
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
