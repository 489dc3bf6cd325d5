package queue

import "github.com/brokerd/brokerd/deadletter"

// Settling delivered entries: what an ack, a requeue or a reject does to
// a queue. The channel takes the deliveries out of its unacked list and
// hands their entries here, queue by queue (channel.settleRuns).

// SettleAction is what a client's ack, nack or reject asks for.
type SettleAction int

const (
	SettleAck SettleAction = iota
	// SettleRequeue is a failed return (RabbitMQ 4.3's delivery_failed):
	// basic.reject requeue=true, a channel or connection closed with the
	// delivery unacked.
	SettleRequeue
	SettleReject
	// SettleReturn is a return that is not a failure: basic.nack
	// requeue=true, basic.recover, the consumer timeout. It differs from
	// SettleRequeue only in a queue with delayed retry (retry.go).
	SettleReturn
)

// settleLocked applies an ack, requeue or reject to delivered entries of
// q within t. Caller holds q.mu.
//
//   - ack: the entries are gone.
//   - requeue and return: they return to the ready list at their original
//     positions, marked redelivered. An entry returned more often than the
//     queue's delivery limit is dead-lettered (delivery_limit); one past its
//     deadline expires at once; a drop-head queue pushed over its limit
//     drops from the head (B46). In a queue with delayed retry an entry
//     whose return is delayed is parked instead until its due time
//     (retry.go).
//   - reject: they are dead-lettered (rejected).
func (q *Queue) settleLocked(t *Txn, es []*Entry, action SettleAction) {
	if action == SettleAck {
		q.Env.Counters.Acked.Add(uint64(len(es)))
		q.Stats.Ack.Add(uint64(len(es)))
	}
	q.unacked -= len(es)
	if q.isDeleted() {
		return
	}
	switch action {
	case SettleAck:
		for _, e := range es {
			e.state = stGone
			t.del(e)
		}
	case SettleReject:
		for _, e := range es {
			e.state = stGone
		}
		q.deadLetterLocked(t, es, deadletter.Rejected, true)
	case SettleRequeue, SettleReturn:
		cfg := q.Settings()
		rc := &cfg.retry
		failed := action == SettleRequeue
		now := q.Env.NowMS()
		var arrival int64 // a due time counts from now rounded up (never early)
		var overLimit, expired []*Entry
		for _, e := range es {
			q.countReturnLocked(e, rc, failed)
			switch {
			case cfg.deliveryLimit >= 0 && int64(e.DeliveryCount) > cfg.deliveryLimit:
				e.state = stGone
				overLimit = append(overLimit, e)
			case e.expiredAt(now):
				e.state = stGone
				expired = append(expired, e)
			default:
				if rc.enabled() && arrival == 0 {
					arrival = q.Env.arrivalMS()
				}
				e.ReadyAt = retryAt(rc, e, failed, arrival)
				t.update(e)
				if e.ReadyAt != 0 {
					q.parkLocked(e)
				} else {
					q.makeReadyLocked(e, false)
				}
			}
		}
		q.deadLetterLocked(t, overLimit, deadletter.DeliveryLimit, true)
		q.deadLetterLocked(t, expired, deadletter.Expired, true)
		q.enforceLimitsLocked(t)
		q.dispatchLocked(t)
	}
}

// SettleRun is a run of n deliveries settled with one action.
type SettleRun struct {
	N      int
	Action SettleAction
}

// SettleRuns settles es, entries of q a channel's deliveries held, in
// runs of one action in order (runs' counts add up to len(es)), under one
// hold of q's lock and in one store operation, in which q then delivers
// into the credit its consumers got back.
func (q *Queue) SettleRuns(es []*Entry, runs []SettleRun) {
	q.mu.Lock()
	t := q.Env.newTxn()
	for _, r := range runs {
		q.settleLocked(t, es[:r.N], r.Action)
		es = es[r.N:]
	}
	if !q.isDeleted() {
		q.dispatchLocked(t)
	}
	t.apply(nil)
	q.mu.Unlock()
	t.finish()
}
