// Package policy is the pure half of brokerd's policies and operator
// policies (RabbitMQ's "policy" and "operator_policy" parameters; SPEC §6,
// reference §3): the Policy value, its validation against RabbitMQ's key
// table with RabbitMQ's texts, which queues and exchanges a policy applies
// to, which of several applies (priority), and the merge of a queue's user
// policy with its operator policy into one effective definition. It also
// names the queue types (QueueClassic, QueueQuorum, QueueStream), which
// decide what a policy applies to.
//
// It owns no policy registry: package broker keeps each vhost's policies,
// their persistence and their application to live queues
// (broker.SetPolicy, resolveQueueConfig). Everything here is a function of
// its arguments: no I/O, no clock, no state beyond read-only tables.
//
// # Files
//
//	policy.go     Policy, Validate, AppliesToQueue/AppliesToExchange, Best, Sorted, ForQueue
//	keys.go       the definition keys RabbitMQ registers, their checks, RabbitMQ's ~p rendering of values
//	operator.go   EffectiveDefinition: a user policy merged with an operator policy (P4)
//	queuetype.go  the queue types' names
//
// # Concurrency
//
// The package takes no locks and starts no goroutines. Validate writes to
// the Policy it is given (it compiles the pattern and fills a default
// apply-to), so the caller owns that Policy until Validate returns; after
// that a Policy is read-only by contract (broker replaces a policy, it never
// changes one) and its methods may be called from any goroutine. A Policy
// that Validate has not accepted does not match anything: AppliesToQueue and
// AppliesToExchange panic on it. EffectiveDefinition returns a new map whose
// values are shared with the policies' definitions: neither is ever
// mutated.
//
// # Errors
//
// Validate is the only call that fails: an invalid policy is a
// *base.InvalidError (broker.PolicyError) whose Msg is RabbitMQ's text
// for the same refusal (rabbit_policy, rabbit_policies,
// rabbit_mirror_queue_misc), the first one RabbitMQ's validators would
// report. Nothing else here returns an error or panics on a validated
// policy.
package policy
