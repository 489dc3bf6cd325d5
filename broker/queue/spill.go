package queue

import (
	"github.com/brokerd/brokerd/store"
)

// Transient paging. An entry the store does not hold — a transient
// message, or any message of a queue that does not survive a restart — can
// page out too: once a level's tail is a chunk past the window, the
// transient entries at its front are written, in one batch, to the
// queue's volatile range (store.VolatileQueue | q.id), and from then on
// they are stored entries like any other: they page out, are read back,
// expire where they lie and are deleted when settled. Nothing of the
// volatile range survives a restart: the store never fsyncs a batch that
// changes volatile queues only, and recovery drops every volatile queue
// (dropVolatileQueues). A queue that stays within its window never writes.
//
// A message written to a volatile range must never be what a durable put
// refers to (store.VolatileQueue), and the store may forget a body once
// its last stored entry goes, which it cannot tell the other holders of
// the message. The same message may be on its way into a durable range
// (a publish to a quorum queue too, under way) or stored already. So an
// entry goes to the volatile range with a message of its own: a new id,
// the body shared in memory (written once per queue that pages it).

// VolatileID is the store queue of q's volatile range.
func (q *Queue) VolatileID() store.QueueID { return q.ranges().VolatileID() }

// durable reports whether e is stored in a range that survives a restart.
func (e *Entry) durable() bool { return e.stored && !e.Queue.Volatile() }

// spillChunk reports whether a tail over the window by n entries and
// bytes resident bytes (Ready.TailOverBy) is a chunk over: how far past the
// window a level's tail grows before its transient front is written, a
// write per chunk, not per arrival.
func (q *Queue) spillChunk(n int, bytes int64) bool {
	wb := q.ready.WindowBytes
	return n >= max(q.ready.Window/8, 1) || wb > 0 && bytes >= max(wb/8, 1)
}

// pageOutLevelLocked pages out the front of l's tail (see engine.Ready.PageOut)
// and, where a transient entry stops it a chunk past the window, spills
// the transient entries among those to page out and pages them out too.
func (q *Queue) pageOutLevelLocked(l *level, limit uint64) {
	q.ready.PageOut(l, limit)
	if l.Tail.Len() == 0 || l.Tail.Front().stored || !q.spillChunk(q.ready.TailOverBy(l)) {
		return // within the chunk, or stopped by what a spill cannot help
	}
	q.spillLocked(l, limit)
	q.ready.PageOut(l, limit)
}

// spillLocked writes the transient entries among the front of l's tail
// that are to page out (those beyond the window) to q's volatile range,
// so PageOut can move them into the middle. It stops where PageOut would
// (an entry that may not page out, or a stored one whose put is still on
// its way), so its cost follows what then pages out.
func (q *Queue) spillLocked(l *level, limit uint64) {
	n := q.ready.TailExcess(l)
	var b store.Batch
	var es []*Entry
	for i := 0; i < n; i++ {
		e := l.Tail.At(i)
		if e.state != stReady {
			continue
		}
		if e.zeroTTL || e.Seq >= limit || e.stored && !e.inStore {
			break
		}
		if e.stored {
			continue
		}
		e.Msg = q.Env.ownMessage(e.Msg)
		e.Ref.Queue = q.VolatileID()
		e.stored = true
		b.Messages = append(b.Messages, e.Msg)
		b.Puts = append(b.Puts, e.Entry)
		es = append(es, e)
	}
	if len(es) == 0 {
		return
	}
	q.spilled = true
	q.Env.Store.Apply(&b, func(err error) {
		if err != nil {
			q.Env.storeFailed(err)
		}
	})
	for _, e := range es {
		e.inStore = true
	}
}
