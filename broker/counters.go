package broker

import (
	"maps"
	"sync/atomic"
)

// Dead-letter reasons as they appear in x-death.
const (
	reasonRejected      = "rejected"
	reasonExpired       = "expired"
	reasonMaxLen        = "maxlen"
	reasonDeliveryLimit = "delivery_limit"
	reasonDamaged       = "damaged"
)

// counters are broker-wide totals, read by the metrics exporter. Each is
// an atomic add where the event happens (no lock, no map, no allocation on
// the per-message path); Stats reads them, each on its own, so a snapshot
// is not one instant across counters.
type counters struct {
	published  atomic.Uint64
	unroutable atomic.Uint64
	// returned counts unroutable mandatory publishes sent back with
	// basic.return (a subset of unroutable).
	returned atomic.Uint64
	// receivedConfirm counts publishes on channels in confirm mode;
	// confirmed and nacked the basic.ack and basic.nack tags sent back.
	receivedConfirm atomic.Uint64
	confirmed       atomic.Uint64
	nacked          atomic.Uint64
	// routed counts publishes routed to at least one queue.
	routed atomic.Uint64
	// delivered counts deliveries by how the client took them.
	delivered deliveries
	getEmpty  atomic.Uint64
	// acked counts deliveries settled by basic.ack (at commit in a
	// transaction).
	acked atomic.Uint64
	// discardedRejected etc. count messages removed for a dead-letter
	// reason while no dead letter exchange was in effect.
	discardedRejected      atomic.Uint64
	discardedExpired       atomic.Uint64
	discardedMaxLen        atomic.Uint64
	discardedDeliveryLimit atomic.Uint64
	discardedDamaged       atomic.Uint64
	// damaged counts messages lost to damaged data: their entries were
	// taken out of their queues (damage.go).
	damaged atomic.Uint64
	// readErrors counts store reads that failed and were retried
	// (readretry.go).
	readErrors atomic.Uint64

	deadLettered [numReasons]atomic.Uint64 // by reasonIndex
	// deadLetteredBy counts messages that died (left a queue for a
	// reason) by the queue's dead-letter strategy and reason, once each,
	// when they die: RabbitMQ's messages_dead_lettered_<reason>_total.
	deadLetteredBy [numStrategies][numReasons]atomic.Uint64
	// deadLetteredConfirmed counts dead letters of at-least-once queues
	// delivered to their targets.
	deadLetteredConfirmed atomic.Uint64
	drops                 [numDropCauses]atomic.Uint64
	cycles                atomic.Uint64 // targets skipped because of a cycle
	overflowed            atomic.Uint64 // evicted by drop-head or refused by reject-publish(-dlx)
	backlogged            atomic.Uint64 // dead letters that had to wait for a route
}

func (c *counters) discarded(reason string, n int) {
	switch reason {
	case reasonRejected:
		c.discardedRejected.Add(uint64(n))
	case reasonExpired:
		c.discardedExpired.Add(uint64(n))
	case reasonMaxLen:
		c.discardedMaxLen.Add(uint64(n))
	case reasonDeliveryLimit:
		c.discardedDeliveryLimit.Add(uint64(n))
	case reasonDamaged:
		c.discardedDamaged.Add(uint64(n))
	}
}

// How a message was delivered: the keys of Stats.Delivered (RabbitMQ's
// messages_delivered_<how>_total).
const (
	DeliveredConsumeManualAck = "consume_manual_ack"
	DeliveredConsumeAutoAck   = "consume_auto_ack"
	DeliveredGetManualAck     = "get_manual_ack"
	DeliveredGetAutoAck       = "get_auto_ack"
)

// deliveries counts deliveries by how the client took them (consume or
// basic.get, acknowledged or not), and those flagged redelivered: the
// broker's (counters) and each queue's (queueStats).
type deliveries struct {
	consumeManual, consumeAuto, getManual, getAuto atomic.Uint64
	redelivered                                    atomic.Uint64
}

// add counts one delivery made by consume (or get) with or without
// acknowledgement, flagged redelivered or not.
func (d *deliveries) add(get, noAck, redelivered bool) {
	switch {
	case !get && !noAck:
		d.consumeManual.Add(1)
	case !get:
		d.consumeAuto.Add(1)
	case !noAck:
		d.getManual.Add(1)
	default:
		d.getAuto.Add(1)
	}
	if redelivered {
		d.redelivered.Add(1)
	}
}

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
	c := &b.counters
	// returned is read before unroutable, which every return adds to
	// first, so Returned <= Unroutable in every snapshot.
	returned := c.returned.Load()
	st := Stats{
		Published:       c.published.Load(),
		Unroutable:      c.unroutable.Load(),
		Returned:        returned,
		Routed:          c.routed.Load(),
		ReceivedConfirm: c.receivedConfirm.Load(),
		Confirmed:       c.confirmed.Load(),
		Nacked:          c.nacked.Load(),
		Delivered: map[string]uint64{
			DeliveredConsumeManualAck: c.delivered.consumeManual.Load(),
			DeliveredConsumeAutoAck:   c.delivered.consumeAuto.Load(),
			DeliveredGetManualAck:     c.delivered.getManual.Load(),
			DeliveredGetAutoAck:       c.delivered.getAuto.Load(),
		},
		GetEmpty:     c.getEmpty.Load(),
		Redelivered:  c.delivered.redelivered.Load(),
		Acknowledged: c.acked.Load(),
		Discarded: map[string]uint64{
			reasonRejected:      c.discardedRejected.Load(),
			reasonExpired:       c.discardedExpired.Load(),
			reasonMaxLen:        c.discardedMaxLen.Load(),
			reasonDeliveryLimit: c.discardedDeliveryLimit.Load(),
			reasonDamaged:       c.discardedDamaged.Load(),
		},
		DeadLettered:          map[string]uint64{},
		Died:                  map[string]map[string]uint64{},
		DeadLetteredConfirmed: c.deadLetteredConfirmed.Load(),
		Dropped:               map[string]uint64{},
		Cycles:                c.cycles.Load(),
		Overflowed:            c.overflowed.Load(),
		Backlogged:            c.backlogged.Load(),
		Damaged:               c.damaged.Load(),
		StoreReadErrors:       c.readErrors.Load(),
	}
	for i, r := range reasons {
		st.DeadLettered[string(r)] = c.deadLettered[i].Load()
	}
	for si, sn := range strategyNames {
		m := map[string]uint64{}
		for i, r := range reasons {
			m[string(r)] = c.deadLetteredBy[si][i].Load()
		}
		st.Died[sn] = m
	}
	for i, n := range dropCauseNames {
		st.Dropped[n] = c.drops[i].Load()
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
	q := v.queues[name]
	v.mu.RUnlock()
	if q == nil {
		return QueueStats{}, false
	}
	l, cfg := q.lengths(), q.config()
	st := QueueStats{Ready: l.ready, Unacked: l.unacked, Consumers: l.consumers, DeadLetterBacklog: l.backlog,
		DeadLettered: map[string]uint64{}, Policy: cfg.policy, OperatorPolicy: cfg.opPolicy,
		EffectivePolicyDefinition: maps.Clone(cfg.effective)}
	for i, r := range reasons {
		st.DeadLettered[string(r)] = q.stats.deadLettered[i].Load()
	}
	return st, true
}
