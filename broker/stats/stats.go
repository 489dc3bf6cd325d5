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
	// Delivered counts deliveries by how the client took them; GetEmpty
	// the basic.gets answered get-empty; Ack the deliveries settled by
	// basic.ack.
	Delivered     Deliveries
	GetEmpty, Ack atomic.Uint64
}
