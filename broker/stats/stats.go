// Package stats holds the broker's event counters: the broker-wide
// totals the metrics exporter reads (Counters) and each queue's (Queue).
// Every counter is one atomic add where the event happens — no lock, no
// map, no allocation on the per-message path — and only grows; a reader
// loads each on its own, so a snapshot is not one instant across
// counters, and computes rates from the change between two reads.
//
// The package is pure: the queue engine (broker/queue) and the AMQP layer
// (broker) bump the counters, broker.Stats and the admin views read them.
package stats

import (
	"sync/atomic"

	"github.com/brokerd/brokerd/deadletter"
)

// ReasonIndex numbers the dead-letter reasons for counters.
func ReasonIndex(r deadletter.Reason) int {
	switch r {
	case deadletter.Rejected:
		return 0
	case deadletter.Expired:
		return 1
	case deadletter.MaxLen:
		return 2
	case deadletter.Damaged:
		return 4
	}
	return 3 // delivery_limit
}

// NumReasons is the number of dead-letter reasons (ReasonIndex).
const NumReasons = 5

// Reasons are the dead-letter reasons by ReasonIndex.
var Reasons = [NumReasons]deadletter.Reason{deadletter.Rejected, deadletter.Expired, deadletter.MaxLen, deadletter.DeliveryLimit, deadletter.Damaged}

// Why a dead letter was dropped instead of delivered.
const (
	DropNoDLX      = iota // the queue has no dead letter exchange
	DropDLXMissing        // its dead letter exchange does not exist
	DropUnroutable        // the exchange routed it to no queue
	DropCycle             // every target would close a cycle
	DropTargetFull        // every target refused it (reject-publish)
	NumDropCauses
)

// DropCauseNames are the drop causes' names, by cause.
var DropCauseNames = [NumDropCauses]string{"no_dlx", "dlx_missing", "unroutable", "cycle", "target_full"}

// Dead-letter strategies, as RabbitMQ's dead_letter_strategy label names
// them: disabled (no dead letter exchange), at_most_once, at_least_once.
const (
	StrategyDisabled = iota
	StrategyAtMostOnce
	StrategyAtLeastOnce
	NumStrategies
)

// StrategyNames are the strategies' names, by strategy.
var StrategyNames = [NumStrategies]string{"disabled", "at_most_once", "at_least_once"}

// Counters are broker-wide totals, read by the metrics exporter.
type Counters struct {
	Published  atomic.Uint64
	Unroutable atomic.Uint64
	// Returned counts unroutable mandatory publishes sent back with
	// basic.return (a subset of Unroutable).
	Returned atomic.Uint64
	// ReceivedConfirm counts publishes on channels in confirm mode;
	// Confirmed and Nacked the basic.ack and basic.nack tags sent back.
	ReceivedConfirm atomic.Uint64
	Confirmed       atomic.Uint64
	Nacked          atomic.Uint64
	// Routed counts publishes routed to at least one queue.
	Routed atomic.Uint64
	// Delivered counts deliveries by how the client took them.
	Delivered Deliveries
	GetEmpty  atomic.Uint64
	// Acked counts deliveries settled by basic.ack (at commit in a
	// transaction).
	Acked atomic.Uint64
	// DiscardedRejected etc. count messages removed for a dead-letter
	// reason while no dead letter exchange was in effect (Discarded).
	DiscardedRejected      atomic.Uint64
	DiscardedExpired       atomic.Uint64
	DiscardedMaxLen        atomic.Uint64
	DiscardedDeliveryLimit atomic.Uint64
	DiscardedDamaged       atomic.Uint64
	// Damaged counts messages lost to damaged data: their entries were
	// taken out of their queues.
	Damaged atomic.Uint64
	// ReadErrors counts store reads that failed and were retried.
	ReadErrors atomic.Uint64

	DeadLettered [NumReasons]atomic.Uint64 // by ReasonIndex
	// DeadLetteredBy counts messages that died (left a queue for a
	// reason) by the queue's dead-letter strategy and reason, once each,
	// when they die: RabbitMQ's messages_dead_lettered_<reason>_total.
	DeadLetteredBy [NumStrategies][NumReasons]atomic.Uint64
	// DeadLetteredConfirmed counts dead letters of at-least-once queues
	// delivered to their targets.
	DeadLetteredConfirmed atomic.Uint64
	Drops                 [NumDropCauses]atomic.Uint64
	Cycles                atomic.Uint64 // targets skipped because of a cycle
	Overflowed            atomic.Uint64 // evicted by drop-head or refused by reject-publish(-dlx)
	Backlogged            atomic.Uint64 // dead letters that had to wait for a route
	// Delayed counts messages a delayed exchange took to hold until their
	// due time; DelayedReleased those of them routed at their due time to
	// at least one queue, DelayedDropped those that then reached none,
	// DelayedCancelled those cancelled (the API's cancel) before it.
	Delayed, DelayedReleased, DelayedDropped, DelayedCancelled atomic.Uint64
}

// Discarded counts n messages removed for reason with no dead letter
// exchange in effect.
func (c *Counters) Discarded(reason deadletter.Reason, n int) {
	switch reason {
	case deadletter.Rejected:
		c.DiscardedRejected.Add(uint64(n))
	case deadletter.Expired:
		c.DiscardedExpired.Add(uint64(n))
	case deadletter.MaxLen:
		c.DiscardedMaxLen.Add(uint64(n))
	case deadletter.DeliveryLimit:
		c.DiscardedDeliveryLimit.Add(uint64(n))
	case deadletter.Damaged:
		c.DiscardedDamaged.Add(uint64(n))
	}
}

// Deliveries counts deliveries by how the client took them (consume or
// basic.get, acknowledged or not), and those flagged redelivered: the
// broker's (Counters) and each queue's (Queue).
type Deliveries struct {
	ConsumeManual, ConsumeAuto, GetManual, GetAuto atomic.Uint64
	Redelivered                                    atomic.Uint64
}

// Add counts one delivery made by consume (or get) with or without
// acknowledgement, flagged redelivered or not.
func (d *Deliveries) Add(get, noAck, redelivered bool) {
	switch {
	case !get && !noAck:
		d.ConsumeManual.Add(1)
	case !get:
		d.ConsumeAuto.Add(1)
	case !noAck:
		d.GetManual.Add(1)
	default:
		d.GetAuto.Add(1)
	}
	if redelivered {
		d.Redelivered.Add(1)
	}
}

// Queue are one queue's counters: RabbitMQ's queue message_stats and
// brokerd's dead-letter totals. Each is one atomic add next to the
// broker-wide counter of the same event. Atomics rather than fields
// under the queue's lock because not every site holds it: publish,
// deliver and ack are counted under it, but basic.get is counted after
// the get has released it, and readers load them without it.
type Queue struct {
	DeadLettered [NumReasons]atomic.Uint64 // by ReasonIndex
	// Damaged counts messages lost to damaged data.
	Damaged atomic.Uint64
	// Publish counts messages a publish put into the queue (not those
	// it refused for a length limit).
	Publish atomic.Uint64
	Consumption
}

// Consumption counts how a queue's or a channel's messages were taken:
// Delivered the deliveries by how the client took them, GetEmpty the
// basic.gets answered get-empty, Ack the deliveries settled by basic.ack
// (a channel's in a transaction when the ack arrives). RabbitMQ's
// message_stats deliver, deliver_no_ack, get, get_no_ack, redeliver,
// get_empty and ack.
type Consumption struct {
	Delivered     Deliveries
	GetEmpty, Ack atomic.Uint64
}

// Channel are a channel's publish counters, RabbitMQ's channel "fine"
// stats: publishes, publisher confirms sent (a multiple ack counts every
// tag it covers), unroutable mandatory publishes returned and unroutable
// others dropped.
type Channel struct{ Publish, Confirm, Returned, Dropped atomic.Uint64 }

// How a message was delivered: the keys of Snapshot.Delivered (RabbitMQ's
// messages_delivered_<how>_total).
const (
	DeliveredConsumeManualAck = "consume_manual_ack"
	DeliveredConsumeAutoAck   = "consume_auto_ack"
	DeliveredGetManualAck     = "get_manual_ack"
	DeliveredGetAutoAck       = "get_auto_ack"
)

// Snapshot is a reading of Counters, as the metrics exporter and the
// management API show it.
type Snapshot struct {
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
	// Delayed counts messages held by delayed exchanges (x-delayed-message)
	// until their due time; DelayedReleased those routed at their due time
	// to at least one queue; DelayedDropped those that reached none then;
	// DelayedCancelled those cancelled before it.
	Delayed, DelayedReleased, DelayedDropped, DelayedCancelled uint64
	// Damaged counts messages lost to damaged data on disk (a segment
	// block that fails its checksum): taken out of their queues, and
	// dead-lettered with reason damaged where that was possible.
	Damaged uint64
	// StoreReadErrors counts store reads that failed for a reason other
	// than damage (out of file descriptors, an I/O error) and were made
	// again after a pause.
	StoreReadErrors uint64
}

// Snapshot reads the counters, each on its own.
func (c *Counters) Snapshot() Snapshot {
	// returned is read before unroutable, which every return adds to
	// first, so Returned <= Unroutable in every snapshot.
	returned := c.Returned.Load()
	st := Snapshot{
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
		Delayed:               c.Delayed.Load(),
		DelayedReleased:       c.DelayedReleased.Load(),
		DelayedDropped:        c.DelayedDropped.Load(),
		DelayedCancelled:      c.DelayedCancelled.Load(),
		Damaged:               c.Damaged.Load(),
		StoreReadErrors:       c.ReadErrors.Load(),
	}
	for i, r := range Reasons {
		st.DeadLettered[string(r)] = c.DeadLettered[i].Load()
	}
	for si, sn := range StrategyNames {
		m := map[string]uint64{}
		for i, r := range Reasons {
			m[string(r)] = c.DeadLetteredBy[si][i].Load()
		}
		st.Died[sn] = m
	}
	for i, n := range DropCauseNames {
		st.Dropped[n] = c.Drops[i].Load()
	}
	return st
}
