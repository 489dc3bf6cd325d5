package queue

import (
	"slices"

	"github.com/brokerd/brokerd/broker/defs"
	"github.com/brokerd/brokerd/store"
)

// Delivered marks: so that a restart tells a message that may have been
// delivered before (redelivered=true) from one that never was (false),
// each priority level of a durable queue keeps a mark in the queue's
// stored state record — every entry of the level with a higher seq has
// never been delivered. A level delivers in seq order (a requeued entry
// goes back below the mark it was delivered under), so one number per
// level suffices. The mark is written ahead of deliveries by a chunk
// (Options.DeliveredMarkChunk): a delivery past the durable mark waits
// for the write, which the write-ahead makes rare, and after a crash at
// most a chunk of never-delivered entries per level come back marked
// redelivered.

//
// A clean stop stores exact marks instead (finalMarksLocked): each level's
// highest seq delivered since the start, or the recovered mark if higher,
// so that after it only what was delivered comes back redelivered=true.

// marksLocked returns the marks to store in q's state record: the highest
// asked for, nil for a queue without them.
func (q *Queue) marksLocked() []uint64 { return q.markAsked }

// deliveringLocked records that e, taken from the ready list, is being
// delivered (to a consumer or a basic.get).
func (q *Queue) deliveringLocked(e *Entry) {
	if q.delivered == nil || !e.durable() {
		return
	}
	lv := min(int(e.Prio), len(q.delivered)-1)
	q.delivered[lv] = max(q.delivered[lv], e.Seq)
}

// finalMarksLocked makes q's marks exact for a clean stop: each level's
// highest seq delivered since the start, no lower than the recovered mark
// (entries up to it may have been delivered before the start), where that
// is below the mark asked for. It stops q's deliveries (markReadyLocked):
// a delivery after the exact marks are taken could go unmarked. It
// reports whether a mark changed, so that the state record is written.
func (q *Queue) finalMarksLocked() bool {
	if q.marks == nil || q.isDeleted() {
		return false
	}
	q.marksFinal = true
	if q.markWake != nil { // a basic.get waiting for a mark write gets nothing
		close(q.markWake)
		q.markWake = nil
	}
	changed := false
	for lv := range q.markAsked {
		if exact := max(q.delivered[lv], q.recMarks[lv]); exact < q.markAsked[lv] {
			q.markAsked[lv], q.marks[lv] = exact, exact
			changed = true
		}
	}
	return changed
}

// InitMarks sets q's marks as recovered (nil: none stored).
func (q *Queue) InitMarks(recovered []uint64) {
	if !q.Durable || q.Exclusive {
		return
	}
	n := q.ready.Levels()
	q.recMarks = make([]uint64, n)
	copy(q.recMarks, recovered)
	q.marks = slices.Clone(q.recMarks)
	q.markAsked = slices.Clone(q.recMarks)
	q.delivered = make([]uint64, n)
}

// deliveredBefore reports whether a recovered entry may have been
// delivered before the restart.
func (q *Queue) deliveredBefore(prio uint8, seq uint64, deliveryCount uint32) bool {
	if deliveryCount > 0 {
		return true
	}
	return int(prio) < len(q.recMarks) && seq <= q.recMarks[prio]
}

// markReadyLocked reports whether e may be delivered now: it is not a
// stored entry, or its level's durable mark covers it. Otherwise it asks
// for a mark write and the caller waits for it (markWaitLocked). It also
// writes the mark ahead while deliveries approach it.
func (q *Queue) markReadyLocked(e *Entry) bool {
	if q.marks == nil || !e.durable() {
		return true // nothing to mark
	}
	if q.marksFinal {
		return false // stopping: the exact marks are taken
	}
	if q.Env.StoreErr.Load() != nil {
		// The store failed (on a cluster node: it lost the leadership):
		// no mark can be written, so only what the durable mark covers is
		// delivered. A delivery past it would come back, after a restart
		// or on the next leader, marked as never delivered.
		lv := min(int(e.Prio), len(q.marks)-1)
		return e.Seq <= q.marks[lv]
	}
	lv := min(int(e.Prio), len(q.marks)-1)
	chunk := uint64(q.Env.cfg.DeliveredMarkChunk)
	if e.Seq <= q.marks[lv] {
		if q.markAsked[lv] == q.marks[lv] && e.Seq+chunk/2 > q.marks[lv] {
			q.writeMarksLocked(lv, q.marks[lv]+chunk)
		}
		return true
	}
	if q.markAsked[lv] < e.Seq {
		q.writeMarksLocked(lv, e.Seq+chunk)
	}
	return false
}

// writeMarksLocked raises level lv's asked mark to v and writes the
// state record with the asked marks; they become durable marks when the
// write completes.
func (q *Queue) writeMarksLocked(lv int, v uint64) {
	if q.isDeleted() {
		return
	}
	q.markAsked[lv] = max(q.markAsked[lv], v)
	q.markPending++
	asked := slices.Clone(q.markAsked)
	b := q.Env
	batch := &store.Batch{Meta: []store.MetaOp{defs.EncodeQueueState(q.stateLocked())}}
	b.Store.Apply(batch, func(err error) {
		if err != nil {
			b.storeFailed(err)
		}
		if !b.goAsync() {
			return
		}
		go func() {
			defer b.asyncDone()
			q.marksWritten(asked, err)
		}()
	})
}

// marksWritten records a completed mark write and wakes what waited.
func (q *Queue) marksWritten(asked []uint64, err error) {
	q.mu.Lock()
	if err == nil {
		for i, v := range asked {
			q.marks[i] = max(q.marks[i], v)
		}
	}
	wake, waiting := q.markWake, q.markWaiting
	q.markWake, q.markWaiting = nil, false
	q.markPending--
	q.markDone++
	q.mu.Unlock()
	if wake != nil {
		close(wake)
	}
	if waiting {
		q.Dispatch()
	}
}

// DeliverDue waits for the mark write that holds back deliveries due now,
// if one does, and delivers them: a consumer cancelled meanwhile was
// eligible for them before its cancel, and RabbitMQ would have delivered
// them before cancel-ok (kombu's priority test saw them left in the
// queue). Each level's first delivery waits for a write, so a few rounds
// at most.
func (q *Queue) DeliverDue() {
	for range q.ready.Levels() + 2 {
		q.mu.Lock()
		done := q.markDone
		q.mu.Unlock()
		q.Dispatch() // what the marks let through, the consumer still attached
		q.mu.Lock()
		if q.marksFinal || q.isDeleted() || q.markPending == 0 && q.markDone == done {
			// No write is under way, and none completed during that
			// dispatch: it saw the final marks. (A completion's own
			// dispatch runs on another goroutine, maybe after the cancel.)
			q.mu.Unlock()
			return
		}
		var wake chan struct{}
		if q.markPending > 0 {
			wake = q.markWaitLocked()
		}
		q.mu.Unlock()
		if wake != nil {
			<-wake
		}
	}
}

// markWaitLocked returns a channel closed when the next mark write
// completes (basic.get waits on it).
func (q *Queue) markWaitLocked() chan struct{} {
	if q.markWake == nil {
		q.markWake = make(chan struct{})
	}
	return q.markWake
}

// StoreFinalMarks takes q's exact delivered marks at a clean stop
// (finalMarksLocked) and writes them in its state record, then
// done runs with the store's answer. It reports false, and done does not
// run, when there is nothing to write (q deleted). The record is written
// under q's lock, as every change to its state is: a deletion after
// it reaches the store after it.
func (q *Queue) StoreFinalMarks(done func(error)) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.finalMarksLocked() {
		return false
	}
	q.Env.Store.Apply(&store.Batch{Meta: []store.MetaOp{defs.EncodeQueueState(q.stateLocked())}}, done)
	return true
}
