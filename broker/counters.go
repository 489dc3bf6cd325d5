package broker

import "sync/atomic"

// Dead-letter reasons as they appear in x-death.
const (
	reasonRejected      = "rejected"
	reasonExpired       = "expired"
	reasonMaxLen        = "maxlen"
	reasonDeliveryLimit = "delivery_limit"
)

// counters are broker-wide totals, read by the metrics exporter.
type counters struct {
	published  atomic.Uint64
	unroutable atomic.Uint64
	// discardedRejected etc. count messages removed for a dead-letter
	// reason while no dead letter exchange was in effect.
	discardedRejected      atomic.Uint64
	discardedExpired       atomic.Uint64
	discardedMaxLen        atomic.Uint64
	discardedDeliveryLimit atomic.Uint64
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
	}
}

// Stats is a snapshot of the broker's counters.
type Stats struct {
	Published, Unroutable uint64
	// Discarded counts messages dropped for a dead-letter reason with no
	// dead letter exchange in effect, by reason.
	Discarded map[string]uint64
}

// Stats returns the current counters.
func (b *Broker) Stats() Stats {
	c := &b.counters
	return Stats{
		Published:  c.published.Load(),
		Unroutable: c.unroutable.Load(),
		Discarded: map[string]uint64{
			reasonRejected:      c.discardedRejected.Load(),
			reasonExpired:       c.discardedExpired.Load(),
			reasonMaxLen:        c.discardedMaxLen.Load(),
			reasonDeliveryLimit: c.discardedDeliveryLimit.Load(),
		},
	}
}
