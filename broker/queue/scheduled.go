package queue

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/brokerd/brokerd/broker/queue/engine"
	"github.com/brokerd/brokerd/store"
)

// Browsing and cancelling what a delayed exchange holds (its holding
// queue, delayed.go): Scheduled lists the held messages in due-time order,
// a page at a time, and Cancel takes messages out by seq, durably, never
// to be routed.
//
// Due-time order over a queue whose entries page out: the resident ones
// are sorted in memory; those in a middle are found through the store's
// expiry keys (Store.DeadlineRefs, in deadline order), so a page costs
// about what it returns, however many messages are held.
//
// A message is released or cancelled, never both: both take it out of the
// ready list under q.mu, checking that it is still there. A resident entry
// is there while its state is stReady; for one in a middle, Cancel reads
// it holding the level's read (Level.Filling, as a redrive's scan does),
// so an expiry that takes it out meanwhile is recorded (Level.Taken) and
// Cancel leaves it, and Cancel drops its paged timer as it takes it, so a
// release that would read it ahead finds it gone.

// ScheduledMessage is one message a holding queue holds, due at Due
// (Unix ms). Seq is its id: stable while it is held, across restarts
// too. Its byte slices are the broker's own: callers must not modify them.
type ScheduledMessage struct {
	PeekedMessage
	Due int64
}

// ScheduledPos is a position in due-time order: a page starts after it.
// The zero value is the start.
type ScheduledPos struct {
	Due int64
	Seq uint64
}

// After reports whether (due, seq) comes after p.
func (p ScheduledPos) after(due int64, seq uint64) bool {
	return due > p.Due || due == p.Due && seq > p.Seq
}

// Pos returns m's position: the next page's start when m is the last.
func (m *ScheduledMessage) Pos() ScheduledPos { return ScheduledPos{Due: m.Due, Seq: m.Seq} }

func cmpScheduled(a, b ScheduledMessage) int {
	return cmp.Or(cmp.Compare(a.Due, b.Due), cmp.Compare(a.Seq, b.Seq))
}

// midRange is a level's middle as it stood under the lock.
type midRange struct {
	prio     uint8
	from, to uint64
}

// Scheduled returns up to count (at most PeekMaxCount) of the messages
// holding queue q holds, in due-time order (then seq order) after
// position after, and beyond the first no more than PeekMaxBytes of
// bodies. It reports false if q was deleted. Nothing changes: resident
// messages are copied under q's lock, paged ones are read after it is
// released, so a message released or cancelled while the read runs may
// still be listed, and one that pages out meanwhile may be missed by this
// page (not by a later one).
func (q *Queue) Scheduled(after ScheduledPos, count int) ([]ScheduledMessage, bool, error) {
	want := max(min(count, PeekMaxCount), 0)
	if want == 0 {
		return nil, !q.isDeleted(), nil
	}
	q.mu.Lock()
	if q.isDeleted() {
		q.mu.Unlock()
		return nil, false, nil
	}
	var res []ScheduledMessage
	var mids []midRange
	for i := range q.ready.Levels() {
		l := q.ready.Level(uint8(i))
		for _, d := range []*engine.Deque[*Entry]{&l.Head, &l.Tail} {
			for j := range d.Len() {
				e := d.At(j)
				if e.Ready() && e.Deadline != 0 && after.after(e.Deadline, e.Seq) {
					res = append(res, ScheduledMessage{PeekedMessage: peeked(&e.Entry, e.prio, false), Due: e.Deadline})
				}
			}
		}
		if l.Mid.N > 0 {
			mids = append(mids, midRange{prio: l.Prio, from: l.Mid.From, to: l.Mid.To})
		}
	}
	q.mu.Unlock()
	slices.SortFunc(res, cmpScheduled)
	res = res[:min(len(res), want)]

	if len(mids) > 0 {
		paged, err := q.scheduledPaged(after, want, mids, res)
		if err != nil {
			return nil, true, fmt.Errorf("list scheduled messages of exchange '%s' in vhost '%s': %w", q.holdFor, q.Host.Name, err)
		}
		res = append(res, paged...)
		slices.SortFunc(res, cmpScheduled)
		// One that paged in while the read ran may be in both.
		res = slices.CompactFunc(res, func(a, b ScheduledMessage) bool { return a.Seq == b.Seq })
	}
	var bytes int
	for i := range res {
		if i == want || i > 0 && bytes >= PeekMaxBytes {
			res = res[:i]
			break
		}
		bytes += len(res[i].Body)
	}
	return res, true, nil
}

// scheduledPaged reads the first want messages after position after that
// lie in the middles mids, in due-time order; it stops early once they
// would come after the want-th of resident (sorted) anyway. The store's
// expiry keys may name entries deleted since its last checkpoint: a scan
// that found want refs of which some were gone goes on past them.
func (q *Queue) scheduledPaged(after ScheduledPos, want int, mids []midRange, resident []ScheduledMessage) ([]ScheduledMessage, error) {
	vol := q.VolatileID()
	var out []ScheduledMessage
	for pos := after; len(out) < want; {
		var refs []store.Ref
		var last ScheduledPos
		n := want - len(out)
		err := q.Env.Store.DeadlineRefs(pos.Due, math.MaxInt64, func(d int64, r store.Ref) bool {
			if len(resident) == want && resident[want-1].Pos().after(d, r.Seq) {
				return false // the resident ones fill the page before this
			}
			if r.Queue != q.ID && r.Queue != vol || !pos.after(d, r.Seq) {
				return true
			}
			for _, m := range mids {
				if m.prio == r.Prio && r.Seq >= m.from && r.Seq <= m.to {
					refs = append(refs, r)
					last = ScheduledPos{Due: d, Seq: r.Seq}
					break
				}
			}
			return len(refs) < n
		})
		if err != nil {
			return nil, fmt.Errorf("read due times: %w", err)
		}
		if len(refs) == 0 {
			break
		}
		metas, msgs, err := engine.ReadDue(q.Env.Store, refs)
		if err != nil {
			return nil, fmt.Errorf("read paged messages: %w", err)
		}
		for i := range metas {
			m := &metas[i]
			if msgs[i] == nil {
				continue // damaged: its middle's read takes it out as lost
			}
			e := store.Entry{Ref: m.Ref, Msg: msgs[i], Header: m.Header}
			out = append(out, ScheduledMessage{PeekedMessage: peeked(&e, m.Prio, false), Due: m.Deadline})
		}
		if len(refs) < n {
			break // the scan ended before it found n
		}
		pos = last
	}
	return out, nil
}

// Cancel takes the messages with the given seqs out of holding queue q,
// never to be routed, and returns the seqs it took, sorted (those still
// held: a seq already released, cancelled or never held is left out), and
// wait, which returns once their deletes are durable (call it before
// saying they are gone; it returns the store's error). It reports false
// if q was deleted. A message is released or cancelled, never both (the
// file's comment).
func (q *Queue) Cancel(seqs []uint64) (done []uint64, wait func() error, ok bool, err error) {
	var writes []*StoreWrite
	wait = func() error {
		for _, w := range writes {
			if err := w.WaitErr(); err != nil {
				return err
			}
		}
		return nil
	}
	// apply hands t to the store (q.mu held), noting its write.
	apply := func(t *Txn) {
		w := &StoreWrite{Done: make(chan struct{})}
		if t.write(func(err error) { w.Err = err; close(w.Done) }) {
			writes = append(writes, w)
		}
	}
	want := map[uint64]bool{}
	for _, s := range seqs {
		want[s] = true
	}
	for len(want) > 0 {
		q.mu.Lock()
		if q.isDeleted() {
			q.mu.Unlock()
			return done, wait, false, nil
		}
		t := q.Env.newTxn()
		var l *level
		var inMid []uint64
		for s := range want {
			if e := q.residentLocked(s); e != nil {
				delete(want, s)
				if !e.Ready() {
					continue // released, or on its way out
				}
				if q.ready.Front() == e {
					q.takeLocked()
					e.state = stGone
				} else {
					q.removeReadyLocked(e)
				}
				t.del(e)
				done = append(done, s)
				continue
			}
			ml := q.middleOfLocked(s)
			switch {
			case ml == nil:
				delete(want, s) // not held
			case l == nil || ml == l:
				l = ml
				inMid = append(inMid, s)
			} // else a later round takes the other level's
		}
		q.syncCounts()
		var rerr error
		switch {
		case l == nil:
		case l.Filling:
			// Another read of the middle is under way: wait for it,
			// then look again (it may have moved them into the head).
			fw := q.fillWaitLocked()
			apply(t)
			q.mu.Unlock()
			t.finish()
			if fw != nil {
				<-fw.Done
			}
			continue
		default:
			var took []uint64
			took, rerr = q.cancelMiddleLocked(t, l, inMid)
			done = append(done, took...)
			for _, s := range inMid {
				delete(want, s)
			}
		}
		apply(t)
		q.mu.Unlock()
		t.finish()
		if rerr != nil {
			return done, wait, true, fmt.Errorf("cancel scheduled messages of exchange '%s' in vhost '%s': %w", q.holdFor, q.Host.Name, rerr)
		}
	}
	slices.Sort(done)
	return done, wait, true, nil
}

// cancelMiddleLocked takes the entries seqs of l's middle out, within t:
// it reads them with q's lock released, holding the level's read
// (Filling), then, locked again, takes those still in the middle (not
// taken out meanwhile by an expiry: Taken). It returns the seqs it took.
// Caller holds q.mu, and holds it again on return.
func (q *Queue) cancelMiddleLocked(t *Txn, l *level, seqs []uint64) ([]uint64, error) {
	prio, gen := l.Prio, l.Gen
	vol := q.VolatileID()
	refs := make([]store.Ref, 0, 2*len(seqs))
	for _, s := range seqs {
		// Stored in the durable range or spilled to the volatile one:
		// a read finds it in one of them.
		refs = append(refs, store.Ref{Queue: q.ID, Prio: prio, Seq: s}, store.Ref{Queue: vol, Prio: prio, Seq: s})
	}
	l.Filling = true
	q.mu.Unlock()
	metas, err := q.Env.Store.ReadRefs(refs, nil)
	runHook(&cancelReadHook, q)
	q.mu.Lock()
	l = q.ready.Level(prio)
	var took []uint64
	if err == nil && !q.isDeleted() && l.Gen == gen {
		for i := range metas {
			m := &metas[i]
			if m.DeadLetter != "" || l.Taken(m.Seq) || !l.Mid.Contains(m.Seq) || slices.Contains(took, m.Seq) {
				continue
			}
			q.unpageTimerLocked(m.Seq)
			q.ready.TakeOut(l, m.Seq, int64(m.Size), true)
			// Its put is in the store (it paged out): delete it there.
			t.Batch.Deletes = append(t.Batch.Deletes, m.Ref)
			took = append(took, m.Seq)
		}
		q.syncCounts()
	}
	evicted := q.endReadLocked(l, t, err)
	for _, f := range evicted {
		f(err) // a holding queue has no length limit: nothing waits
	}
	q.wakeFillWaitersLocked(err)
	if err != nil {
		return took, fmt.Errorf("read paged messages: %w", err)
	}
	return took, nil
}

// residentLocked returns the resident entry with seq (in a head or a
// tail), ready or not, or nil.
func (q *Queue) residentLocked(seq uint64) *Entry {
	for i := range q.ready.Levels() {
		l := q.ready.Level(uint8(i))
		for _, d := range []*engine.Deque[*Entry]{&l.Head, &l.Tail} {
			j := sort.Search(d.Len(), func(j int) bool { return d.At(j).Seq >= seq })
			if j < d.Len() && d.At(j).Seq == seq {
				return d.At(j)
			}
		}
	}
	return nil
}

// middleOfLocked returns the level whose middle's range holds seq, or nil.
func (q *Queue) middleOfLocked(seq uint64) *level {
	for i := range q.ready.Levels() {
		if l, ok := q.ready.InMiddle(uint8(i), seq); ok {
			return l
		}
	}
	return nil
}
