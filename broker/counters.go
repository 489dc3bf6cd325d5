package broker

import (
	"maps"

	"github.com/brokerd/brokerd/broker/stats"
)

// How a message was delivered: the keys of Stats.Delivered (RabbitMQ's
// messages_delivered_<how>_total).
const (
	DeliveredConsumeManualAck = stats.DeliveredConsumeManualAck
	DeliveredConsumeAutoAck   = stats.DeliveredConsumeAutoAck
	DeliveredGetManualAck     = stats.DeliveredGetManualAck
	DeliveredGetAutoAck       = stats.DeliveredGetAutoAck
)

// Stats is a snapshot of the broker's counters (stats.Snapshot).
type Stats = stats.Snapshot

// Stats returns the current counters.
func (b *Broker) Stats() Stats { return b.env.Counters.Snapshot() }

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
