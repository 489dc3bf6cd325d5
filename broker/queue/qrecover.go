package queue

import (
	"fmt"

	"github.com/brokerd/brokerd/broker/defs"
	"github.com/brokerd/brokerd/store"
)

// Def returns q's definition record: what its declaration fixed. Its
// mutable state is its own record (stateLocked).
func (q *Queue) Def() defs.Queue {
	return defs.Queue{VHost: q.Host.Name, Name: q.Name, ID: uint64(q.ID), AutoDelete: q.AutoDelete, Args: q.Args}
}

// stateLocked returns q's state record: the backlog flag and the delivered
// marks. Caller holds q.mu (Marks aliases q's, so the record is encoded
// before the lock is released).
func (q *Queue) stateLocked() defs.QueueState {
	return defs.QueueState{ID: uint64(q.ID), Backlog: q.BacklogMarked, Marks: q.marksLocked()}
}

// InitState sets q's backlog flag and delivered marks as recovered (nil
// marks: none stored), before q is reachable.
func (q *Queue) InitState(backlog bool, marks []uint64) {
	q.BacklogMarked = backlog
	q.InitMarks(marks)
}

// RecoverEntries restores durable queue q's stored entries: their counts
// only, where the queue pages and no legacy dead letter waits among its
// entries (the backlog flag), else by loading every entry; and the count
// of its stored backlog. Those that may have been delivered before the
// restart are marked redelivered (deliveredmarks.go).
func (q *Queue) RecoverEntries(states map[store.QueueID]store.QueueState) error {
	b := q.Env
	q.mu.Lock()
	defer q.mu.Unlock()
	if st, ok := states[q.backlogID()]; ok {
		for _, l := range st.Levels {
			q.blStored += int(l.Count)
		}
		q.blSeq = st.LastSeq
		q.Host.Waiting.Add(int64(q.blStored))
	}
	paged := states
	q.recovering = true
	// A queue that may hold dead letters waiting for a route is read
	// whole, to find them.
	if st, ok := paged[q.ID]; ok && q.ready.Window > 0 && !q.BacklogMarked && q.recoverPagedLocked(st) {
		q.Seq.Store(st.LastSeq)
		return nil
	}
	// The sequence continues after the last entry ever stored, even if
	// none is left: seqs are never reused.
	last, err := b.Store.LastSeq(q.ID)
	if err != nil {
		return fmt.Errorf("recover queue '%s' in vhost '%s': %w", q.Name, q.Host.Name, err)
	}
	q.Seq.Store(last)
	err = b.Store.ScanQueue(q.ID, 0, func(se *store.Entry) bool {
		e := &Entry{Entry: *se, q: q, Redelivered: q.deliveredBefore(se.Prio, se.Seq, se.DeliveryCount), stored: true, inStore: true, prio: se.Prio}
		e.timer.Value = e
		switch {
		case e.DeadLetter != "":
			e.state = stBacklog
			q.addBacklogLocked(e)
		case e.ReadyAt > b.NowMS():
			q.parkLocked(e) // waiting out a retry delay (retry.go)
		default:
			e.ReadyAt = 0
			// A deadline that passed while the broker was down fires
			// at once.
			q.makeReadyLocked(e, true)
		}
		if se.Seq > q.Seq.Load() {
			q.Seq.Store(se.Seq)
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("recover queue '%s' in vhost '%s': %w", q.Name, q.Host.Name, err)
	}
	return nil
}
