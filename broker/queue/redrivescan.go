package queue

import (
	"cmp"
	"fmt"
	"sort"
	"time"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/queue/engine"
	"github.com/brokerd/brokerd/deadletter"
	"github.com/brokerd/brokerd/store"
)

// RedrivenCountHeader counts how many times a message was redriven.
const RedrivenCountHeader = "x-redriven-count"

// RedriveChunk bounds the moves made under one hold of the source queue's
// lock, so publishers and consumers of it are not held off for long.
const RedriveChunk = 64

// RedriveOptions says which ready messages Redrive moves and where.
type RedriveOptions struct {
	// Max is the most messages moved or failed; 0 or less means all.
	Max int
	// Exchange, when set (or when ToExchange), is where each message is
	// published, with RoutingKey; otherwise each goes to its origin: the
	// queue the broker dead-lettered it from, by the record it kept with
	// the message (store.Origin), never by its x-death header, which a
	// publisher can write. A message without that record (published
	// into the queue, or dead-lettered by a broker before records were
	// kept) is a failure, and so is an origin that is an exclusive queue
	// (it belongs to a connection, not to whoever redrives).
	ToExchange bool
	Exchange   string
	RoutingKey string
	// Filters on the message's latest death — the broker's record of it,
	// or for a message without one its latest x-death entry: its reason,
	// its queue, and at least MinAge since its time. Empty / zero
	// matches all.
	Reason      string
	SourceQueue string
	MinAge      time.Duration
}

// NoOriginRecord is the failure of a redrive to origin of a message the
// broker has no dead-letter record for: published into the queue rather
// than dead-lettered there (whatever its x-death says), or dead-lettered
// before the broker kept records.
const NoOriginRecord = "no dead-letter record: not dead-lettered by this broker (or before it recorded origins), so its origin is unknown"

// RedriveFailure is one message a target refused; it stays in the source.
type RedriveFailure struct {
	Seq    uint64 // its position in the source queue
	Reason string
}

// RedriveResult counts what a Redrive did.
type RedriveResult struct {
	Moved     int
	Failed    int
	Failures  []RedriveFailure
	Remaining int // ready messages left in the source queue
}

// latestDeath is what Redrive reads of a message: its latest x-death
// entry (ok: there is one, naming a queue) and its redrive count.
type latestDeath struct {
	deadletter.Latest
	ok         bool
	redriveCnt int64
}

func readLatestDeath(h amqp.Table) latestDeath {
	var d latestDeath
	if v, ok := h.Get(RedrivenCountHeader); ok {
		d.redriveCnt, _ = amqp.AsInt(v) // 0 when not an integer
	}
	d.Latest, d.ok = deadletter.LatestDeath(h)
	return d
}

// RedriveRecorder is a redrive task as its scan reports to it: each move
// and each failure, recorded within the txn that makes it.
type RedriveRecorder interface {
	NoteMove(t *Txn)
	NoteFailure(t *Txn, f RedriveFailure)
}

// Redrive is one redrive's scan of its source queue: a synchronous
// Redrive's or a task's (then its record rides in each move's batch).
type Redrive struct {
	Queue *Queue
	ToX   bool
	Opts  RedriveOptions
	// Allow, if set, says whether a message may go to its origin queue
	// (a task's user's write permission).
	Allow func(queue string) bool
	Task  RedriveRecorder // nil for Redrive
	Skip  map[uint64]bool // seqs not to examine (a resumed task's failures)
	Res   RedriveResult

	// UpTo bounds the scan: only messages the queue held when the
	// redrive began (seq <= upTo) are examined, so one that comes back
	// (its origin dead-letters it again at once) is not moved again.
	UpTo uint64
	// after is, per priority level, the last seq examined: the scan goes
	// on from there instead of stepping over what it left in place. A
	// message returned to the queue behind it (a nack of one delivered
	// meanwhile) is not examined.
	after [256]uint64
	// Exhausted is set once the scan has found nothing more to examine.
	Exhausted bool

	// idleReads counts the reads of a middle in a row that examined
	// nothing.
	idleReads int
}

// redriveIdleReads is how many reads of a middle in a row that examine
// nothing (the level changed under each) end a scan.
const redriveIdleReads = 3

// Chunk makes up to min(n, redriveChunk) moves under one hold of the
// source queue's lock (released only while a paged middle is read). It
// reports whether it examined any message, a read to wait for when one of
// a middle is under way, and whether the queue is gone.
func (r *Redrive) Chunk(n int) (progressed bool, wait *FillWait, gone bool, err error) {
	q := r.Queue
	n = min(n, RedriveChunk)
	var txns []*Txn
	var later []func()
	q.mu.Lock()
	defer func() {
		q.mu.Unlock()
		for _, t := range txns {
			t.finish()
		}
		for _, f := range later {
			f()
		}
	}()
	if q.isDeleted() {
		return false, nil, true, nil
	}
	now := r.Queue.Env.Now()
	for budget := redriveScanBudget; n > 0; budget-- {
		if budget == 0 {
			// Messages filtered out cost a look each: let the
			// queue's publishers and consumers in between.
			return true, nil, false, nil
		}
		e, l := r.candidateLocked()
		if e == nil && l != nil {
			if l.Filling { // a read of it is under way: wait for it
				return progressed, q.fillWaitLocked(), false, nil
			}
			examined, took, err := r.scanMiddleLocked(l, n, now, &txns, &later)
			if err != nil {
				return progressed, nil, false, err
			}
			if q.isDeleted() {
				return progressed, nil, true, nil
			}
			n -= took
			if examined > 0 {
				progressed, r.idleReads = true, 0
			} else if r.idleReads++; r.idleReads >= redriveIdleReads {
				r.Exhausted = true
				return progressed, nil, false, nil
			}
			continue
		}
		if e == nil {
			r.Exhausted = true
			return progressed, nil, false, nil
		}
		progressed = true
		r.after[e.prio] = e.Seq
		props, d, ok := r.match(e, now)
		if !ok {
			continue
		}
		n--
		t := r.Queue.Env.newTxn()
		if why := q.planRedriveLocked(t, e, props, d, r.ToX, r.Opts, r.Allow); why != "" {
			r.fail(t, e.Seq, why)
			continue
		}
		if q.ready.Front() == e {
			q.takeLocked() // reads ahead from a paged middle
			e.state = stGone
		} else {
			q.removeReadyLocked(e)
		}
		r.moved(t)
		txns = append(txns, t)
	}
	if e, l := r.candidateLocked(); e == nil && l == nil {
		r.Exhausted = true // a paced task ends now, not at its next turn
	}
	return progressed, nil, false, nil
}

// match decodes e's properties and reports whether it passes the filters
// on its latest death: the broker's record of it (e.Origin), or for a
// message without one its latest x-death.
func (r *Redrive) match(e *Entry, now time.Time) (amqp.Properties, latestDeath, bool) {
	props, err := amqp.DecodeProperties(e.EffectiveHeader().Props)
	if err != nil {
		return props, latestDeath{}, false
	}
	d := readLatestDeath(props.Headers)
	queue, reason, died := d.Queue, d.Reason, d.Time
	if o := e.Origin; o != nil {
		queue, reason, died = o.Queue, o.Reason, time.UnixMilli(o.At)
	}
	opts := r.Opts
	if (opts.Reason != "" && reason != opts.Reason) ||
		(opts.SourceQueue != "" && queue != opts.SourceQueue) ||
		(opts.MinAge > 0 && (died.IsZero() || now.Sub(died) < opts.MinAge)) {
		return props, d, false
	}
	return props, d, true
}

// fail counts a message its target refused and applies t (a task's
// records only; it releases the vhost lock).
func (r *Redrive) fail(t *Txn, seq uint64, why string) {
	f := RedriveFailure{Seq: seq, Reason: why}
	r.Res.Failed++
	if r.Task != nil {
		r.Task.NoteFailure(t, f)
	} else {
		r.Res.Failures = append(r.Res.Failures, f)
	}
	t.apply(nil)
}

// moved counts a move planned in t and applies t.
func (r *Redrive) moved(t *Txn) {
	if r.Task != nil {
		r.Task.NoteMove(t)
	}
	t.apply(nil)
	r.Res.Moved++
}

// scanMiddleLocked examines the next window of l's paged middle after the
// scan's position without bringing it into memory: it reads the window
// from the store with the queue's lock released (holding the level's read,
// as a consumer's prefetch does, so no other read merges it meanwhile),
// then, locked again, moves the matching messages straight out of the
// middle, each in its own batch as a resident one. What it leaves stays
// in the store only, so a filtered redrive of a deep queue keeps no more
// in memory than a window. It returns how many messages it examined and
// how many it moved or failed. The queue may be deleted on return.
func (r *Redrive) scanMiddleLocked(l *level, n int, now time.Time, txns *[]*Txn, later *[]func()) (examined, took int, err error) {
	q, b := r.Queue, r.Queue.Env
	prio, gen, spilled, per := l.Prio, l.Gen, q.spilled, l.MeanResident()
	from, to := max(l.Mid.From, r.after[prio]+1), min(l.Mid.To, r.UpTo)
	want, wantBytes := q.ready.HeadRoom(l)
	l.Filling = true
	q.mu.Unlock()
	read, rerr := q.ranges().ReadMiddle(spilled, prio, from, to, want, wantBytes, per, nil)
	q.mu.Lock()
	l = q.ready.Level(prio)
	if rerr == nil && !q.isDeleted() && l.Gen == gen {
		for i := range read.Metas {
			if took == n {
				break
			}
			m := &read.Metas[i]
			examined++
			r.after[prio] = max(r.after[prio], m.Seq)
			if m.DeadLetter != "" || l.Taken(m.Seq) || !l.Mid.Contains(m.Seq) || r.Skip[m.Seq] {
				continue // waiting in the backlog, or gone from the middle
			}
			e := q.entryFromMeta(m, read.Msgs[i])
			e.state = stReady
			props, d, ok := r.match(e, now)
			if !ok {
				continue
			}
			took++
			t := b.newTxn()
			if why := q.planRedriveLocked(t, e, props, d, r.ToX, r.Opts, r.Allow); why != "" {
				r.fail(t, e.Seq, why)
				continue
			}
			q.unpageTimerLocked(m.Seq)
			q.ready.TakeOut(l, m.Seq, int64(m.Size), true)
			e.state = stGone
			r.moved(t)
			*txns = append(*txns, t)
		}
		if read.Done && examined == len(read.Metas) {
			r.after[prio] = max(r.after[prio], to) // nothing more up to its bound
		}
		q.syncCounts()
	}
	t := b.newTxn()
	evicted := q.endReadLocked(l, t, rerr)
	evictedDone := func(applyErr error) {
		for _, w := range evicted {
			w(cmp.Or(rerr, applyErr))
		}
	}
	if !t.write(evictedDone) {
		*later = append(*later, func() { evictedDone(nil) })
	}
	q.wakeFillWaitersLocked(rerr)
	*txns = append(*txns, t)
	if rerr != nil {
		return examined, took, fmt.Errorf("read paged messages: %w", rerr)
	}
	return examined, took, nil
}

// candidateLocked returns the first ready resident message in delivery
// order after the scan's position (r.after) and within its bound (r.upTo)
// or, where the resident messages of a level are all behind the position,
// the level whose paged middle comes next (its tail and the lower levels
// are behind that middle in delivery order). Caller holds r.q.mu.
func (r *Redrive) candidateLocked() (*Entry, *level) {
	q := r.Queue
	for i := q.ready.Levels() - 1; i >= 0; i-- {
		l := q.ready.Level(uint8(i))
		if e := r.firstAfter(&l.Head, l.Prio); e != nil {
			return e, nil
		}
		if l.Mid.N > 0 && max(l.Mid.From, r.after[l.Prio]+1) <= min(l.Mid.To, r.UpTo) {
			return nil, l
		}
		if e := r.firstAfter(&l.Tail, l.Prio); e != nil {
			return e, nil
		}
	}
	return nil, nil
}

// firstAfter returns the first ready entry of d (in seq order) after the
// scan's position on level prio, within its bound and not in r.skip,
// moving the position past the entries it steps over.
func (r *Redrive) firstAfter(d *engine.Deque[*Entry], prio uint8) *Entry {
	after := r.after[prio]
	j := sort.Search(d.Len(), func(j int) bool { return d.At(j).Seq > after })
	for ; j < d.Len(); j++ {
		e := d.At(j)
		if e.Seq > r.UpTo {
			return nil
		}
		if e.Ready() && !r.Skip[e.Seq] {
			return e
		}
		r.after[prio] = e.Seq
	}
	return nil
}

// planRedriveLocked plans e's copies into its targets within t, beside
// the delete of e, as planDeadLetterLocked does, and returns "" or why no
// target takes it (t then changes nothing). Caller holds q.mu; t holds
// the vhost lock shared until applied.
func (q *Queue) planRedriveLocked(t *Txn, e *Entry, props amqp.Properties, d latestDeath, toX bool, opts RedriveOptions, allow func(string) bool) string {
	b := q.Env
	r := q.Host.Router
	t.hold(r)
	var targets []*Queue
	header := &store.Header{}
	if toX {
		if !r.HasExchangeLocked(opts.Exchange) {
			return fmt.Sprintf("no exchange '%s'", opts.Exchange)
		}
		props.Headers = props.Headers.With(RedrivenCountHeader, d.redriveCnt+1)
		targets = r.RouteLocked(opts.Exchange, []string{opts.RoutingKey}, props.Headers)
		if len(targets) == 0 {
			return "unroutable"
		}
		header.Exchange, header.RoutingKeys = opts.Exchange, []string{opts.RoutingKey}
	} else {
		// The origin is the broker's own record, never x-death: a
		// publisher may write any x-death, naming any queue.
		o := e.Origin
		if o == nil {
			return NoOriginRecord
		}
		tq := r.QueueLocked(o.Queue)
		if tq == nil {
			return fmt.Sprintf("no queue '%s'", o.Queue)
		}
		if tq == q {
			return "origin is the source queue"
		}
		if tq.Exclusive {
			return fmt.Sprintf("queue '%s' is exclusive to a connection", o.Queue)
		}
		if allow != nil && !allow(o.Queue) {
			return fmt.Sprintf("write access to queue '%s' refused", o.Queue)
		}
		targets = []*Queue{tq}
		props.Headers = props.Headers.With(RedrivenCountHeader, d.redriveCnt+1)
		// Delivered as the message was before it died, as x-death says
		// where it agrees with the record; else as sent to the queue by
		// the default exchange.
		header.Exchange, header.RoutingKeys = "", []string{o.Queue}
		if d.ok && d.Queue == o.Queue && d.Reason == o.Reason && len(d.RoutingKeys) > 0 {
			header.Exchange, header.RoutingKeys = d.Exchange, d.RoutingKeys
		}
	}
	props.Flags |= amqp.FlagHeaders
	size := e.BodySize()
	var taking []*Queue
	why := ""
	for _, tq := range targets {
		switch {
		case tq == q:
			why = "origin is the source queue"
		case tq.isDeleted():
			why = fmt.Sprintf("queue '%s' deleted", tq.Name)
		case !tq.reserve(size):
			why = fmt.Sprintf("queue '%s' full (reject-publish)", tq.Name)
		default:
			taking = append(taking, tq)
		}
	}
	if len(taking) == 0 {
		return why
	}
	raw, err := props.Append(nil)
	if err != nil {
		for _, tq := range taking {
			tq.release(size)
		}
		return fmt.Sprintf("cannot encode properties: %v", err)
	}
	header.Props = raw
	var clone *store.Message
	for _, tq := range taking {
		// As in planDeadLetterLocked: a copy shares e's stored body
		// only while e itself is durably stored.
		msg := e.Msg
		if !e.durable() && tq.isStoredFor(msg) {
			if clone == nil {
				clone = b.ownMessage(msg)
			}
			msg = clone
		}
		ne := tq.newCopyEntry(msg, header, props.Priority, -1, &arrival{env: b})
		if ne.stored {
			t.put(ne)
		}
		t.inserts = append(t.inserts, ne)
	}
	t.del(e)
	return ""
}

// redriveScanBudget bounds the messages one hold of the source queue's
// lock looks at, moved or not.
const redriveScanBudget = 1024
