package queue

import (
	"errors"
	"fmt"

	"github.com/brokerd/brokerd/deadletter"
	"github.com/brokerd/brokerd/store"
)

// The stored dead-letter backlog. A dead letter that waits for a route
// (at-least-once) moves, in the batch that decides it must wait, to the
// queue's backlog range, one level, in the order the dead letters died: a
// durably stored one to backlogID(q) (its body is not copied), a transient
// one to the volatile volBacklogID(q) (with a message of its own, as
// spill.go writes them; dropped at recovery like every volatile range).
// The two ranges share one seq, and are read merged. Memory holds only the
// count, and a restart reads the durable range's count (Store.Queues).
// Retries read the ranges in bounded chunks outside the queue's lock and
// forward what now has a route; what still has none stays where it is,
// unwritten.

// backlogChunk is how many stored dead letters one retry step reads.
const backlogChunk = 256

// backlogID is the store queue of q's stored backlog.
func (q *Queue) backlogID() store.QueueID { return q.ranges().BacklogID() }

// volBacklogID is the store queue of q's backlog of transient dead letters.
func (q *Queue) volBacklogID() store.QueueID { return q.ranges().VolatileBacklogID() }

// backlogLen is the number of dead letters waiting in q's backlog.
func (q *Queue) backlogLen() int { return len(q.backlog) + q.blStored }

// storeBacklogLocked moves the dead letter e into q's backlog (e has just
// died for reason, or is a legacy waiting entry).
func (q *Queue) storeBacklogLocked(t *Txn, e *Entry, reason deadletter.Reason, nowMS int64) {
	if e.Queue == q.backlogID() || e.Queue == q.volBacklogID() {
		// Read back by a retry and still without a route: it stays.
		q.blStayed++
		q.blStored++
		q.Host.Waiting.Add(1)
		return
	}
	if e.DeadLetter == "" {
		q.Env.Counters.Backlogged.Add(1)
	}
	w := &Entry{q: q, stored: true, state: stBacklog}
	w.Ref = store.Ref{Queue: q.backlogID(), Seq: q.blSeq + 1}
	w.Msg = e.Msg
	if !e.durable() {
		w.Ref.Queue = q.volBacklogID()
		w.Msg = q.Env.ownMessage(e.Msg)
		q.blVolatile = true
	}
	q.blSeq++
	w.Header, w.DeliveryCount = e.Header, e.DeliveryCount
	w.DeadLetter, w.DeadAt = string(reason), nowMS
	if e.DeadLetter != "" { // a legacy waiting entry keeps its death
		w.DeadLetter, w.DeadAt = e.DeadLetter, e.DeadAt
	}
	e.state = stGone
	t.del(e)
	t.put(w)
	q.blStored++
	q.Host.Waiting.Add(1)
}

// retryStoredLocked starts a pass over the stored backlog, unless one is
// under way (then it runs again when that one ends).
func (q *Queue) retryStoredLocked() {
	if q.blStored == 0 || q.isDeleted() {
		return
	}
	if q.blRetrying {
		q.blAgain = true
		return
	}
	b := q.Env
	if !b.goAsync() {
		return
	}
	q.blRetrying = true
	gen, vol := q.blGen, q.blVolatile
	go func() {
		defer b.asyncDone()
		q.retryStored(gen, vol)
	}()
}

// retryStored reads the backlog range chunk by chunk from its start and
// dead-letters each chunk again under the queue's lock; a chunk read
// before a purge or deletion (gen changed) is dropped and the pass ends.
func (q *Queue) retryStored(gen uint64, vol bool) {
	b := q.Env
	var from uint64
	failed := false
	for {
		metas, err := q.ranges().ReadBacklog(vol, from, backlogChunk)
		var msgs []*store.Message
		var damage *store.DamageError
		if err == nil && len(metas) > 0 {
			ids := make([]store.MsgID, len(metas))
			for i := range metas {
				ids[i] = metas[i].Msg
			}
			msgs = make([]*store.Message, len(ids))
			err = b.Store.LoadMessages(ids, func(i int, m *store.Message) { msgs[i] = m })
			if errors.As(err, &damage) {
				err = nil // those messages are lost (damage.go); the rest go on
			}
		}
		more, taken := false, 0
		q.locked(func(t *Txn) {
			if q.isDeleted() || q.blGen != gen {
				return
			}
			if err != nil {
				// The pass is made again after a pause (readretry.go).
				b.ReadFailed(fmt.Errorf("retry dead letters of queue '%s' in vhost '%s': %w", q.Name, q.Host.Name, err))
				failed = true
				return
			}
			es := make([]*Entry, 0, len(metas))
			for i := range metas {
				if msgs[i] == nil { // damaged on disk: a counted loss
					e := q.entryFromMeta(&metas[i], &store.Message{ID: metas[i].Msg})
					e.state = stGone
					q.damaged = append(q.damaged, damagedEntry{e, damage.Where(metas[i].Msg)})
					continue
				}
				e := q.entryFromMeta(&metas[i], msgs[i])
				e.state = stGone
				es = append(es, e)
			}
			q.dropDamagedLocked(t, false)
			// They leave the count once their copies are in their
			// targets (below): a client that sees the backlog shrink
			// finds them there. One still without a route is counted
			// again at once (storeBacklogLocked).
			taken = len(metas)
			q.blStayed = 0
			// Runs of one reason, in order.
			for len(es) > 0 {
				r := deadletter.Reason(es[0].DeadLetter)
				n := 1
				for n < len(es) && es[n].DeadLetter == string(r) {
					n++
				}
				q.deadLetterLocked(t, es[:n], r, true)
				es = es[n:]
			}
			// A pass ends at a chunk in which one stayed: the ones
			// behind it must not overtake it (a route that appears
			// meanwhile starts a pass from the start).
			if len(metas) == backlogChunk && q.blStayed == 0 {
				from, more = metas[len(metas)-1].Seq+1, true
			}
		})
		if taken > 0 {
			q.mu.Lock()
			if q.blGen == gen { // else a purge or deletion zeroed the count
				q.blStored -= taken
				q.Host.Waiting.Add(-int64(taken))
			}
			q.mu.Unlock()
		}
		if !more {
			break
		}
	}
	q.mu.Lock()
	q.blRetrying = false
	again := q.blAgain
	q.blAgain = false
	if again {
		q.retryStoredLocked()
	}
	q.mu.Unlock()
	if failed {
		b.retryRead(func() {
			q.mu.Lock()
			q.retryStoredLocked()
			q.mu.Unlock()
		})
	}
}

// backlogRefsLocked reads the refs of q's stored backlog (purge deletes
// them).
func (q *Queue) backlogRefsLocked() ([]store.Ref, error) {
	var refs []store.Ref
	var from uint64
	for q.blStored > 0 {
		metas, err := q.ranges().ReadBacklog(q.blVolatile, from, 4096)
		if err != nil {
			return nil, err
		}
		for _, m := range metas {
			refs = append(refs, m.Ref)
		}
		if len(metas) < 4096 {
			break
		}
		from = metas[len(metas)-1].Seq + 1
	}
	return refs, nil
}

// dropStoredBacklogLocked forgets the stored backlog (purged or deleted):
// a retry pass under way drops what it read.
func (q *Queue) dropStoredBacklogLocked() {
	q.Host.Waiting.Add(-int64(q.blStored))
	q.blStored = 0
	q.blGen++
}

// RetryBacklogIfChanged retries q's waiting dead letters if that may
// succeed now: the vhost's topology changed since their last try (gen is
// its generation now), or a target was full then.
func (q *Queue) RetryBacklogIfChanged(gen uint64) {
	q.mu.Lock()
	worth := q.backlogLen() > 0 && (q.backlogGen != gen || q.backlogFull)
	q.mu.Unlock()
	if worth {
		q.locked(func(t *Txn) {
			q.backlogGen, q.backlogFull = gen, false
			q.retryBacklogLocked(t)
		})
	}
}
