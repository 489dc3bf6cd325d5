package broker

import (
	"maps"

	"github.com/brokerd/brokerd/broker/stats"
	"github.com/brokerd/brokerd/deadletter"
)

// How a message was delivered: the keys of Stats.Delivered (RabbitMQ's
// messages_delivered_<how>_total).
const (
	DeliveredConsumeManualAck = "consume_manual_ack"
	DeliveredConsumeAutoAck   = "consume_auto_ack"
	DeliveredGetManualAck     = "get_manual_ack"
	DeliveredGetAutoAck       = "get_auto_ack"
)

// Stats is a snapshot of the broker's counters.
type Stats struct {
	// Published counts messages received from publishers (RabbitMQ's
	// messages_received); Unroutable those routed to no queue, of which
	// Returned were mandatory and sent back with basic.return; Routed
	// those routed to at least one queue.
	Published, Unroutable, Returned, Routed uint64
	// ReceivedConfirm counts publishes on channels in confirm mode;
	// Confirmed and Nacked the publisher confirms sent (per message, a
	// multiple ack counting every tag it covers).
	ReceivedConfirm, Confirmed, Nacked uint64
	// Delivered counts messages delivered, by how: consume_manual_ack,
	// consume_auto_ack, get_manual_ack, get_auto_ack.
	Delivered map[string]uint64
	// GetEmpty counts basic.get answered with get-empty.
	GetEmpty uint64
	// Redelivered counts deliveries flagged redelivered; Acknowledged
	// deliveries settled by basic.ack.
	Redelivered, Acknowledged uint64
	// Discarded counts messages removed for a dead-letter reason that
	// reached no dead letter queue, by reason (RabbitMQ's "disabled"
	// strategy counters count the same).
	Discarded map[string]uint64
	// DeadLettered counts messages delivered to at least one dead letter
	// queue, by reason.
	DeadLettered map[string]uint64
	// Died counts messages that left a queue for a dead-letter reason,
	// whether dead-lettered, dropped or waiting for a route, by the
	// queue's dead-letter strategy (disabled, at_most_once,
	// at_least_once) then reason: RabbitMQ's
	// messages_dead_lettered_<reason>_total{dead_letter_strategy}.
	Died map[string]map[string]uint64
	// DeadLetteredConfirmed counts dead letters of at-least-once queues
	// delivered to their targets (RabbitMQ's
	// messages_dead_lettered_confirmed_total).
	DeadLetteredConfirmed uint64
	// Dropped counts dead letters dropped, by cause: no_dlx, dlx_missing,
	// unroutable, cycle, target_full.
	Dropped map[string]uint64
	// Cycles counts dead-letter targets skipped to break a cycle.
	Cycles uint64
	// Overflowed counts messages evicted (drop-head) or refused
	// (reject-publish, reject-publish-dlx) by length limits.
	Overflowed uint64
	// Backlogged counts dead letters that waited for a route
	// (at-least-once).
	Backlogged uint64
	// Damaged counts messages lost to damaged data on disk (a segment
	// block that fails its checksum): taken out of their queues, and
	// dead-lettered with reason damaged where that was possible.
	Damaged uint64
	// StoreReadErrors counts store reads that failed for a reason other
	// than damage (out of file descriptors, an I/O error) and were made
	// again after a pause.
	StoreReadErrors uint64
}

// Stats returns the current counters.
func (b *Broker) Stats() Stats {
	c := &b.env.Counters
	// returned is read before unroutable, which every return adds to
	// first, so Returned <= Unroutable in every snapshot.
	returned := c.Returned.Load()
	st := Stats{
		Published:       c.Published.Load(),
		Unroutable:      c.Unroutable.Load(),
		Returned:        returned,
		Routed:          c.Routed.Load(),
		ReceivedConfirm: c.ReceivedConfirm.Load(),
		Confirmed:       c.Confirmed.Load(),
		Nacked:          c.Nacked.Load(),
		Delivered: map[string]uint64{
			DeliveredConsumeManualAck: c.Delivered.ConsumeManual.Load(),
			DeliveredConsumeAutoAck:   c.Delivered.ConsumeAuto.Load(),
			DeliveredGetManualAck:     c.Delivered.GetManual.Load(),
			DeliveredGetAutoAck:       c.Delivered.GetAuto.Load(),
		},
		GetEmpty:     c.GetEmpty.Load(),
		Redelivered:  c.Delivered.Redelivered.Load(),
		Acknowledged: c.Acked.Load(),
		Discarded: map[string]uint64{
			string(deadletter.Rejected):      c.DiscardedRejected.Load(),
			string(deadletter.Expired):       c.DiscardedExpired.Load(),
			string(deadletter.MaxLen):        c.DiscardedMaxLen.Load(),
			string(deadletter.DeliveryLimit): c.DiscardedDeliveryLimit.Load(),
			string(deadletter.Damaged):       c.DiscardedDamaged.Load(),
		},
		DeadLettered:          map[string]uint64{},
		Died:                  map[string]map[string]uint64{},
		DeadLetteredConfirmed: c.DeadLetteredConfirmed.Load(),
		Dropped:               map[string]uint64{},
		Cycles:                c.Cycles.Load(),
		Overflowed:            c.Overflowed.Load(),
		Backlogged:            c.Backlogged.Load(),
		Damaged:               c.Damaged.Load(),
		StoreReadErrors:       c.ReadErrors.Load(),
	}
	for i, r := range stats.Reasons {
		st.DeadLettered[string(r)] = c.DeadLettered[i].Load()
	}
	for si, sn := range stats.StrategyNames {
		m := map[string]uint64{}
		for i, r := range stats.Reasons {
			m[string(r)] = c.DeadLetteredBy[si][i].Load()
		}
		st.Died[sn] = m
	}
	for i, n := range stats.DropCauseNames {
		st.Dropped[n] = c.Drops[i].Load()
	}
	return st
}

// QueueStats are one queue's counters.
type QueueStats struct {
	Ready, Unacked, Consumers int
	// DeadLetterBacklog is the number of dead letters waiting for a
	// route (at-least-once); they count as messages, not as ready.
	DeadLetterBacklog int
	// DeadLettered counts messages dead-lettered from this queue to at
	// least one target, by reason.
	DeadLettered map[string]uint64
	// Policy is the name of the policy applied, "" if none.
	Policy string
	// OperatorPolicy is the name of the operator policy applied, "" if
	// none.
	OperatorPolicy string
	// EffectivePolicyDefinition is the policy and the operator policy
	// merged key by key (RabbitMQ's effective_policy_definition; not
	// combined with the queue's arguments), nil when neither applies. The
	// map is the caller's.
	EffectivePolicyDefinition map[string]any
}

// QueueStats returns the counters of a queue, false if it does not exist.
func (b *Broker) QueueStats(vhost, name string) (QueueStats, bool) {
	v := b.VHost(vhost)
	if v == nil {
		return QueueStats{}, false
	}
	v.mu.RLock()
	q := v.topo.Queues[name]
	v.mu.RUnlock()
	if q == nil {
		return QueueStats{}, false
	}
	l, cfg := q.Lengths(), q.Settings()
	st := QueueStats{Ready: l.Ready, Unacked: l.Unacked, Consumers: l.Consumers, DeadLetterBacklog: l.Backlog,
		DeadLettered: map[string]uint64{}, Policy: cfg.Policy, OperatorPolicy: cfg.OpPolicy,
		EffectivePolicyDefinition: maps.Clone(cfg.Effective)}
	for i, r := range stats.Reasons {
		st.DeadLettered[string(r)] = q.Stats.DeadLettered[i].Load()
	}
	return st, true
}
