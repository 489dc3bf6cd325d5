package broker

// Operator policies (RabbitMQ's operator_policy parameters) cap what
// users' policies and queue arguments set; package policy holds what they
// may contain and how they merge with a user policy (policy/operator.go).
// They are durable (meta kind "o/", broker/defs).

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
