package policy

import (
	"maps"
	"slices"
)

// Operator policies (RabbitMQ's operator_policy parameters) let an
// operator cap what users' policies and queue arguments set: at most one
// operator policy applies to a queue besides its user policy (P2), chosen
// the same way (pattern, apply-to, key support, highest priority:
// ForQueue), and each key's effective policy value is the two policies'
// values merged as rabbit_policies:merge_policy_value does (P4,
// EffectiveDefinition); that value then meets the queue's argument as a
// user policy's value would (P5, broker's queueconfig.go).
//
// They hold only the keys RabbitMQ allows in them (policyKey.operator):
// expires, message-ttl, max-length, max-length-bytes, max-in-memory-length,
// max-in-memory-bytes, delivery-limit, and, as in RabbitMQ 3.13+,
// overflow and queue-version (RabbitMQ 3.10 refuses those two in operator
// policies), and delayed-retry-type, -min and -max, as RabbitMQ 4.3.1.
// Any other key is refused with "... are not recognised policy settings".

// EffectiveDefinition is rabbit_policy:merge_operator_definitions: every
// key of either policy, with the value merged where both have it. nil when
// neither policy applies (qp nil). The result is a new map; its values are
// shared with the policies' (they are never mutated).
func EffectiveDefinition(qp *QueuePolicies) map[string]any {
	if qp == nil {
		return nil
	}
	var user, op map[string]any
	if qp.User != nil {
		user = qp.User.Definition
	}
	if qp.Operator != nil {
		op = qp.Operator.Definition
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
	case "message-ttl", "expires", "max-length", "max-length-bytes", "max-in-memory-length", "max-in-memory-bytes", "delayed-retry-max":
		u, _ := Int(userVal)
		o, _ := Int(opVal)
		if u < o {
			return userVal
		}
		return opVal
	case "delivery-limit":
		u, _ := Int(userVal)
		o, _ := Int(opVal)
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
	case "delayed-retry-min":
		// RabbitMQ 4.3's merge: an operator's minimum raises a user's.
		u, _ := Int(userVal)
		o, _ := Int(opVal)
		if u > o {
			return userVal
		}
		return opVal
	}
	// overflow, queue-version, delayed-retry-type, booleans: the operator
	// policy wins. No other key can be in both (operator policies take no other).
	return opVal
}
