package queue

import (
	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/policy"
	"github.com/brokerd/brokerd/overflow"
)

// Settings is a queue's effective dead-letter, TTL, limit and delivery
// limit settings: its arguments combined, key by key (reference P5), with
// the effective definition of the policies that apply to it (its user
// policy merged with its operator policy, P4). It is recomputed when
// policies change; a queue swaps it whole (Queue.cfg), never mutates it.
type Settings struct {
	Policy   string // name of the applied user policy, "" if none
	OpPolicy string // name of the applied operator policy, "" if none
	// Effective is the merged policy definition (RabbitMQ's
	// effective_policy_definition), nil when no policy applies. Read-only.
	Effective map[string]any

	dlx, dlrk       string
	hasDLX, hasDLRK bool
	atLeastOnce     bool

	messageTTL    int64 // ms; -1 = none
	expires       int64 // ms; -1 = none
	limits        overflow.Limits
	deliveryLimit int64 // -1 = none
	// consumerTimeout is the queue's own consumer timeout (ms), -1 when
	// neither argument nor policy sets one (the broker's applies).
	consumerTimeout int64
	// retry is the delayed retry of returned messages (retry.go).
	retry retryConfig
}

// quorumDeliveryLimit is the quorum queue default (RabbitMQ 4.x), and the
// default of any queue with delayed retry (LavinMQ: "20 when retry is
// enabled").
const quorumDeliveryLimit = 20

// resolveQueueConfig computes the settings of a queue of type qtype with
// arguments args under policies qp (nil: none).
func resolveQueueConfig(qtype string, args amqp.Table, qp *policy.QueuePolicies) Settings {
	c := Settings{messageTTL: -1, expires: -1, limits: overflow.None, deliveryLimit: -1, consumerTimeout: -1}
	if qp != nil {
		if qp.User != nil {
			c.Policy = qp.User.Name
		}
		if qp.Operator != nil {
			c.OpPolicy = qp.Operator.Name
		}
		c.Effective = policy.EffectiveDefinition(qp)
	}
	pol := c.Effective
	argInt := func(key string) (int64, bool) {
		v, ok := args.Get(key)
		if !ok {
			return 0, false
		}
		return amqp.AsInt(v)
	}
	polInt := func(key string) (int64, bool) {
		v, ok := pol[key]
		if !ok {
			return 0, false
		}
		return policy.Int(v)
	}
	// min of argument and policy, -1 when neither is set.
	minOf := func(arg, key string) int64 {
		a, aok := argInt(arg)
		b, bok := polInt(key)
		switch {
		case aok && bok:
			return min(a, b)
		case aok:
			return a
		case bok:
			return b
		}
		return -1
	}
	argStr := func(key string) (string, bool) {
		v, ok := args.Get(key)
		if !ok {
			return "", false
		}
		s, ok := v.(string)
		return s, ok
	}
	polStr := func(key string) (string, bool) {
		v, ok := pol[key]
		if !ok {
			return "", false
		}
		s, ok := v.(string)
		return s, ok
	}
	// The argument wins, key by key.
	argOrPolicy := func(arg, key string) (string, bool) {
		if s, ok := argStr(arg); ok {
			return s, true
		}
		return polStr(key)
	}

	c.messageTTL = minOf("x-message-ttl", "message-ttl")
	c.expires = minOf("x-expires", "expires")
	c.limits.MaxLen = minOf("x-max-length", "max-length")
	c.limits.MaxBytes = minOf("x-max-length-bytes", "max-length-bytes")
	c.consumerTimeout = minOf("x-consumer-timeout", "consumer-timeout")

	// Overflow: a classic queue's argument wins, a quorum queue's policy
	// (so an operator policy cannot override a classic queue's argument).
	ov, ok := argStr("x-overflow")
	if ps, pok := polStr("overflow"); pok && (!ok || qtype == policy.QueueQuorum) {
		ov, ok = ps, true
	}
	if ok {
		if m, err := overflow.ParseMode(ov); err == nil {
			c.limits.Mode = m
		}
	}

	c.dlx, c.hasDLX = argOrPolicy("x-dead-letter-exchange", "dead-letter-exchange")
	c.dlrk, c.hasDLRK = argOrPolicy("x-dead-letter-routing-key", "dead-letter-routing-key")
	if s, ok := argOrPolicy("x-dead-letter-strategy", "dead-letter-strategy"); ok {
		c.atLeastOnce = s == "at-least-once"
	}

	c.retry = resolveRetry(args, pol)

	// Delivery limit: either negative → the larger (no limit wins);
	// otherwise the smaller. Quorum queues, and queues with delayed
	// retry, default to 20.
	a, aok := argInt("x-delivery-limit")
	b, bok := polInt("delivery-limit")
	switch {
	case aok && bok:
		if a < 0 || b < 0 {
			c.deliveryLimit = max(a, b)
		} else {
			c.deliveryLimit = min(a, b)
		}
	case aok:
		c.deliveryLimit = a
	case bok:
		c.deliveryLimit = b
	case qtype == policy.QueueQuorum || c.retry.enabled():
		c.deliveryLimit = quorumDeliveryLimit
	}
	if c.deliveryLimit < 0 {
		c.deliveryLimit = -1
	}
	return c
}

// TypeOf returns the x-queue-type of args, "classic" when absent.
func TypeOf(args amqp.Table) string {
	if v, ok := args.Get("x-queue-type"); ok {
		if s, ok := v.(string); ok {
			return s
		}
	}
	return policy.QueueClassic
}

// ConsumerTimeout returns q's consumer timeout in ms, -1 for none.
func (q *Queue) ConsumerTimeout() int64 {
	if ms := q.Settings().consumerTimeout; ms >= 0 {
		return ms
	}
	return q.Env.globalConsumerTimeout()
}

// ApplyPolicy computes q's effective settings with the policies qp that
// apply to it, installs them and applies what changes at
// once. Message deadlines already set are not recomputed (B38).
func (q *Queue) ApplyPolicy(qp *policy.QueuePolicies) {
	cfg := resolveQueueConfig(q.Type, q.Args, qp)
	q.locked(func(t *Txn) {
		if q.isDeleted() {
			return
		}
		old := q.cfg.Swap(&cfg)
		q.Env.noteConsumerTimeout(cfg.consumerTimeout)
		if old.expires != cfg.expires {
			q.touchLocked()
		}
		q.enforceLimitsLocked(t)
		q.retryBacklogLocked(t)
	})
}

// InitPolicy sets q's effective settings from its arguments and the
// policies qp that apply to it, at its declaration (q is not reachable
// yet).
func (q *Queue) InitPolicy(qp *policy.QueuePolicies) {
	cfg := resolveQueueConfig(q.Type, q.Args, qp)
	q.cfg.Store(&cfg)
	q.Env.noteConsumerTimeout(cfg.consumerTimeout)
}
