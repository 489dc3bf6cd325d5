package queue

import (
	"fmt"
	"math"
	"sync"

	"github.com/brokerd/brokerd/broker/queue/engine"
	"github.com/brokerd/brokerd/store"
	"github.com/brokerd/brokerd/ttl"
)

// Deadlines of entries that are not resident (in a middle, see
// engine.Ready) live in the store's expiry keys. The timer wheel holds a
// timer only for those due within a short horizon: a scan of the store's
// expiry keys (Store.DeadlineRefs) arms them, each scan covering the next
// stretch of time, so a million pending deadlines cost memory only for
// the few seconds ahead. A paged-out entry whose deadline the last scan
// already passed is armed as it pages out; one that pages back in takes a
// resident timer instead. A paged timer fires readAheadMS or a little
// more before the deadline (readAheadAt: the deadlines of one readBatchMS
// span are read together): the entry is read from the store then (off the
// queue's lock), kept with a timer at its deadline, and dead-lettered (or
// released, on a holding queue) then like any other that expired, so the
// read's time does not make it late. A read that ends late (under load)
// makes the expired entries behind its own wait for it, not overtake
// them (waitForReadsLocked): dead letters leave in queue order.

// HorizonMS is how far ahead of now a scan arms deadlines; scans run every
// half of it.
const HorizonMS = 2000

// readAheadMS is how long before its deadline a paged entry is read at
// least; the entries read ahead (the expiries of up to readAheadMS +
// readBatchMS) are held in memory.
const readAheadMS = 100

// readBatchMS groups the reads ahead: every entry whose read falls in one
// span of readBatchMS (aligned to the Unix epoch) is read at the span's
// start, in one store read, on one wake-up of the scheduler. A deep queue
// with deadlines every millisecond (scheduled messages, per-message TTLs)
// would otherwise start a read of one or two entries each millisecond,
// each with its store snapshot and goroutine.
const readBatchMS = 50

// readAheadAt is when the entry due at deadline is read: readAheadMS
// before it, rounded down to a multiple of readBatchMS.
func readAheadAt(deadline int64) int64 {
	at := deadline - readAheadMS
	if deadline < math.MinInt64+readAheadMS {
		at = math.MinInt64
	}
	if r := at % readBatchMS; r != 0 {
		if r < 0 {
			r += readBatchMS
		}
		if at >= math.MinInt64+r {
			at -= r
		}
	}
	return at
}

// pagedTimer is the timer of an entry in a middle: first the read-ahead
// timer (read ahead of the deadline), then, once read (pre set), the timer
// of its deadline.
type pagedTimer struct {
	timer ttl.Timer
	q     *Queue
	ref   store.Ref
	pre   *Entry // the entry, read ahead; nil before the read
}

type PagedRef struct {
	Deadline int64
	Ref      store.Ref
}

// ArmPaged arms the timers of refs that are in q's middles.
func (q *Queue) ArmPaged(refs []PagedRef) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.isDeleted() {
		return
	}
	for _, r := range refs {
		if _, ok := q.ready.InMiddle(r.Ref.Prio, r.Ref.Seq); ok {
			q.armPagedLocked(r.Deadline, r.Ref)
		}
	}
}

// armPagedLocked arms the paged timer of the middle entry ref, unless it
// has one.
func (q *Queue) armPagedLocked(deadline int64, ref store.Ref) {
	if q.paged[ref.Seq] != nil {
		return
	}
	if q.paged == nil {
		q.paged = make(map[uint64]*pagedTimer)
	}
	pt := &pagedTimer{q: q, ref: ref}
	pt.timer.Deadline, pt.timer.Value = readAheadAt(deadline), pt
	q.paged[ref.Seq] = pt
	q.Env.Timers.Add(&pt.timer)
}

// pagedOutLocked marks e paged out (the store holds it; it comes back as
// a new entry, so a timer of e's that the scheduler took before e paged
// out must find it not ready and let it be), and moves its timer into
// the store: armed as a paged timer if a scan has passed its deadline
// already.
func (q *Queue) pagedOutLocked(e *Entry) {
	e.state = stPaged
	if pagedOutHook != nil {
		pagedOutHook(e)
	}
	if e.Deadline == 0 {
		return
	}
	b := q.Env
	b.Timers.Remove(&e.timer)
	if e.Deadline <= b.Horizon.Load() {
		q.armPagedLocked(e.Deadline, e.Ref)
	}
}

// pagedOutHook, if set (by tests), is called with each entry that pages
// out.
var pagedOutHook func(*Entry)

// unpageTimerLocked drops the paged timer of seq (its entry is paging in,
// with a resident timer).
func (q *Queue) unpageTimerLocked(seq uint64) {
	if pt := q.paged[seq]; pt != nil {
		q.Env.Timers.Remove(&pt.timer)
		delete(q.paged, seq)
	}
}

// dropPagedLocked drops every paged timer (the middles are gone), and
// what waited for a read of them to expire (the queue was purged or
// deleted: the reads under way find nothing left to expire).
func (q *Queue) dropPagedLocked() {
	for _, pt := range q.paged {
		q.Env.Timers.Remove(&pt.timer)
	}
	q.paged = nil
	q.expReads, q.expWait = nil, nil
}

// duePagedLocked takes the fired paged timers pts whose entry is still in
// a middle: the refs to read (read-ahead timers that are due) and the
// entries read ahead whose deadline has come.
func (q *Queue) duePagedLocked(pts []*pagedTimer, now int64) (read []store.Ref, expired []*Entry) {
	b := q.Env
	for _, pt := range pts {
		if q.paged[pt.ref.Seq] != pt {
			continue // paged in or dropped meanwhile
		}
		if pt.timer.Deadline > now {
			b.Timers.Add(&pt.timer) // fired early by our clock: wait again
			continue
		}
		if _, ok := q.ready.InMiddle(pt.ref.Prio, pt.ref.Seq); !ok {
			delete(q.paged, pt.ref.Seq)
			continue
		}
		if pt.pre != nil {
			delete(q.paged, pt.ref.Seq)
			expired = append(expired, pt.pre)
			continue
		}
		read = append(read, pt.ref)
	}
	return read, expired
}

// holdReadLocked keeps the entries read ahead (readPaged) whose deadline
// is still ahead, each on its paged timer, now set to its deadline, and
// returns those due now. An entry whose timer went meanwhile (paged in,
// dropped) is left out.
func (q *Queue) holdReadLocked(read []*Entry, now int64) []*Entry {
	var due []*Entry
	for _, e := range read {
		pt := q.paged[e.Seq]
		if pt == nil || pt.pre != nil {
			continue
		}
		if e.Deadline <= now {
			delete(q.paged, e.Seq)
			due = append(due, e)
			continue
		}
		pt.pre = e
		pt.timer.Deadline = e.Deadline
		q.Env.Timers.Add(&pt.timer)
	}
	return due
}

// readPaged reads the due entries refs name, with their messages, as
// entries to expire (one point read, Store.ReadRefs, wherever they lie).
// It takes no lock: the caller checks under the queue's lock that each is
// still in its middle. A gone entry, or a dead letter waiting for a route,
// is left out.
func (q *Queue) readPaged(refs []store.Ref) ([]*Entry, error) {
	if dueReadHook != nil {
		dueReadHook(len(refs))
	}
	metas, msgs, err := engine.ReadDue(q.Env.Store, refs)
	if err != nil {
		return nil, err
	}
	out := make([]*Entry, len(metas))
	for i := range metas {
		e := q.entryFromMeta(&metas[i], msgs[i])
		e.state = stGone
		out[i] = e
	}
	return out, nil
}

// dueReadHook, if set (by tests), is called with the number of refs of
// each read of paged entries that are due (or about to be).
var dueReadHook func(refs int)

// horizonTick is the Value of the scheduler timer that starts the next
// scan.
type horizonTick struct{}

// horizonState is the scan's progress; scanned and the timer are touched
// only by the scan goroutine.
type horizonState struct {
	queues  func(ids map[store.QueueID][]PagedRef) []*Queue // set by StartHorizon
	scanned int64                                           // deadlines up to this have been scanned
	kick    chan struct{}                                   // wakes the scan goroutine (cap 1)
	timer   ttl.Timer
}

// StartHorizon starts the scan of paged deadlines on a goroutine of its
// own (wg counts it; it ends when quit is closed), which scans at once:
// deadlines that passed while the broker was down fire then. queues
// returns the queues whose store ranges (durable or volatile) are keys of
// ids.
func (b *Env) StartHorizon(quit <-chan struct{}, wg *sync.WaitGroup, queues func(ids map[store.QueueID][]PagedRef) []*Queue) {
	b.horizonScan.queues = queues
	b.horizonScan.kick = make(chan struct{}, 1)
	b.horizonScan.timer.Value = horizonTick{}
	b.horizonScan.kick <- struct{}{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-quit:
				return
			case <-b.horizonScan.kick:
				b.scanHorizon()
			}
		}
	}()
}

// kickHorizon asks for a scan (the horizon timer fired).
func (b *Env) kickHorizon() {
	select {
	case b.horizonScan.kick <- struct{}{}:
	default:
	}
}

// scanHorizon arms the paged timers of the deadlines from the last scan
// to now + horizonMS, then sets the timer for the next scan.
func (b *Env) scanHorizon() {
	h := &b.horizonScan
	from := h.scanned + 1
	if h.scanned == 0 {
		from = math.MinInt64 // the first scan: whatever is overdue too
	}
	until := b.NowMS() + HorizonMS
	// Publish the new horizon before reading: an entry that pages out
	// from now on with a deadline up to it is armed as it pages out, and
	// one that paged out before is in the store for this read.
	b.Horizon.Store(until)
	byQueue := map[store.QueueID][]PagedRef{}
	err := b.Store.DeadlineRefs(from, until, func(d int64, r store.Ref) bool {
		byQueue[r.Queue] = append(byQueue[r.Queue], PagedRef{Deadline: d, Ref: r})
		return true
	})
	if err != nil {
		// The same range is read again after a pause (readretry.go).
		b.ReadFailed(fmt.Errorf("read deadlines: %w", err))
		h.timer.Deadline = b.NowMS() + ReadRetryDelay.Milliseconds()
		b.Timers.Add(&h.timer)
		return
	}
	h.scanned = until
	if len(byQueue) > 0 {
		for _, q := range h.queues(byQueue) {
			q.ArmPaged(append(byQueue[q.ID], byQueue[q.VolatileID()]...))
		}
	}
	h.timer.Deadline = until - HorizonMS/2
	b.Timers.Add(&h.timer)
}
