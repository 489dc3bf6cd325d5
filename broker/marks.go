package broker

import (
	"slices"

	"github.com/brokerd/brokerd/store"
)

// Delivered marks: so that a restart tells a message that may have been
// delivered before (redelivered=true) from one that never was (false),
// each priority level of a durable queue keeps a mark in the queue's
// stored definition — every entry of the level with a higher seq has
// never been delivered. A level delivers in seq order (a requeued entry
// goes back below the mark it was delivered under), so one number per
// level suffices. The mark is written ahead of deliveries by a chunk
// (Options.DeliveredMarkChunk): a delivery past the durable mark waits
// for the write, which the write-ahead makes rare, and after a crash at
// most a chunk of never-delivered entries per level come back marked
// redelivered.

// marksLocked returns the marks to store with q's definition: the highest
// asked for, nil for a queue without them.
func (q *Queue) marksLocked() []uint64 { return q.markAsked }

// initMarks sets q's marks as recovered (nil: none stored).
func (q *Queue) initMarks(recovered []uint64) {
	if !q.Durable || q.Exclusive {
		return
	}
	n := q.ready.Levels()
	q.recMarks = make([]uint64, n)
	copy(q.recMarks, recovered)
	q.marks = slices.Clone(q.recMarks)
	q.markAsked = slices.Clone(q.recMarks)
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
func (q *Queue) markReadyLocked(e *entry) bool {
	if q.marks == nil || !e.durable() || q.vhost.b.storeErr.Load() != nil {
		return true // nothing to mark, or nothing durable any more
	}
	lv := min(int(e.Prio), len(q.marks)-1)
	chunk := uint64(q.vhost.b.opts.DeliveredMarkChunk)
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
// definition with the asked marks; they become durable marks when the
// write completes.
func (q *Queue) writeMarksLocked(lv int, v uint64) {
	if q.isDeleted() {
		return
	}
	q.markAsked[lv] = max(q.markAsked[lv], v)
	asked := slices.Clone(q.markAsked)
	b := q.vhost.b
	batch := &store.Batch{Meta: []store.MetaOp{{Key: metaKey(metaQueue, q.vhost.Name, q.Name), Value: encodeQueueDef(q)}}}
	b.store.Apply(batch, func(err error) {
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
	q.mu.Unlock()
	if wake != nil {
		close(wake)
	}
	if waiting {
		q.dispatch()
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
