package broker

import (
	"maps"
	"slices"
)

// Operator policies (RabbitMQ's operator_policy parameters) let an
// operator cap what users' policies and queue arguments set: at most one
// operator policy applies to a queue besides its user policy (P2), chosen
// the same way (pattern, apply-to, key support, highest priority), and
// each key's effective policy value is the two policies' values merged as
// rabbit_policies:merge_policy_value does (P4); that value then meets the
// queue's argument as a user policy's value would (P5, queueconfig.go).
//
// They hold only the keys RabbitMQ allows in them (policyKey.operator):
// expires, message-ttl, max-length, max-length-bytes, max-in-memory-length,
// max-in-memory-bytes, delivery-limit, and, as in RabbitMQ 3.13+,
// overflow and queue-version (RabbitMQ 3.10 refuses those two in operator
// policies). Any other key is refused with "... are not recognised policy
// settings". They are durable (meta kind "o/", broker/defs).

// SetOperatorPolicy adds or replaces an operator policy of vhost and
// applies it at once to existing queues, as SetPolicy does. It returns
// once the policy is durable. An invalid policy (a value RabbitMQ refuses,
// a key operator policies do not take) is refused with a *PolicyError and
// changes nothing; an unknown vhost with an error wrapping ErrNotFound.
// Safe for concurrent use.
func (b *Broker) SetOperatorPolicy(vhost string, p Policy) error {
	return b.setPolicy(operatorPolicies, vhost, p)
}

// ClearOperatorPolicy removes an operator policy; queues fall back at once
// to what remains (their user policy, the next operator policy, their
// arguments). A missing vhost or policy is an error wrapping ErrNotFound.
func (b *Broker) ClearOperatorPolicy(vhost, name string) error {
	return b.clearPolicy(operatorPolicies, vhost, name)
}

// OperatorPolicies returns the operator policies of vhost by name, or, for
// vhost "", every vhost's, by vhost then name. An unknown vhost has none.
func (b *Broker) OperatorPolicies(vhost string) []Policy {
	return b.listPolicies(operatorPolicies, vhost)
}

// effectiveDefinition is rabbit_policy:merge_operator_definitions: every
// key of either policy, with the value merged where both have it. nil when
// neither policy applies. The result is a new map; its values are shared
// with the policies' (they are never mutated).
func effectiveDefinition(qp *queuePolicies) map[string]any {
	if qp == nil {
		return nil
	}
	var user, op map[string]any
	if qp.user != nil {
		user = qp.user.Definition
	}
	if qp.op != nil {
		op = qp.op.Definition
	}
	out := maps.Clone(user)
	if out == nil {
		out = make(map[string]any, len(op))
	}
	for _, k := range slices.Sorted(maps.Keys(op)) {
		if uv, ok := out[k]; ok {
			out[k] = mergePolicyValue(k, uv, op[k])
		} else {
			out[k] = op[k]
		}
	}
	return out
}

// mergePolicyValue is rabbit_policies:merge_policy_value (4.x): the lower
// of two limits; for delivery-limit, the higher when either is negative
// (unlimited) and the lower otherwise; the operator's overflow,
// queue-version and booleans. Values are validated: numeric keys hold
// integers.
func mergePolicyValue(key string, userVal, opVal any) any {
	switch key {
	case "message-ttl", "expires", "max-length", "max-length-bytes", "max-in-memory-length", "max-in-memory-bytes":
		u, _ := policyInt(userVal)
		o, _ := policyInt(opVal)
		if u < o {
			return userVal
		}
		return opVal
	case "delivery-limit":
		u, _ := policyInt(userVal)
		o, _ := policyInt(opVal)
		if u < 0 || o < 0 {
			if u > o {
				return userVal
			}
			return opVal
		}
		if u < o {
			return userVal
		}
		return opVal
	}
	// overflow, queue-version, booleans: the operator policy wins. No
	// other key can be in both (operator policies take no other).
	return opVal
}
