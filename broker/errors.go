package broker

import (
	"fmt"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/base"
)

// The errors the package returns. AMQP methods fail with *amqp.Error,
// whose texts follow RabbitMQ's word for word where clients or operators
// are known to match on them; the management operations (users, vhosts,
// permissions, policies, the HTTP API's declarations) report two kinds of
// refusal a caller maps onto its own codes (HTTP 404 and 400), defined in
// package base, where broker's subpackages return them too, and
// re-exported here. The queue engine's own are queue.NoQueueError (404 to
// queue.bind, queue.purge, basic.get and basic.consume of a queue that
// does not exist: lookupQueue) and queue.InequivalentError (406 to a
// declaration that differs from the existing queue or exchange).
var (
	// ErrNotFound is wrapped by the error of a management operation whose
	// subject (user, vhost, permission, policy, queue, exchange, redrive
	// task) does not exist.
	ErrNotFound = base.ErrNotFound
)

// InvalidError is a management request refused for its content (a bad
// pattern, an unknown tag, an invalid policy value); Msg says why in
// RabbitMQ's words where RabbitMQ has them. It changes nothing.
type InvalidError = base.InvalidError

func invalidf(format string, args ...any) error { return base.Invalidf(format, args...) }

func notFoundf(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrNotFound)
}

// errNoExchange (404) answers exchange.declare passive, exchange.bind and
// queue.bind naming an exchange that does not exist, and basic.publish to
// one.
func errNoExchange(vhost, name string) *amqp.Error {
	return amqp.Errorf(amqp.NotFound, "no exchange '%s' in vhost '%s'", name, vhost)
}

// errDefaultExchange (403) answers exchange.declare, exchange.delete,
// exchange.bind and queue.bind that would change the default exchange.
func errDefaultExchange() *amqp.Error {
	return amqp.Errorf(amqp.AccessRefused, "operation not permitted on the default exchange")
}

// errLocked (405) answers a connection's use of another connection's
// exclusive queue: queue.declare, queue.bind, queue.delete, queue.purge,
// basic.get and basic.consume (lookupQueue).
func errLocked(vhost, name string) *amqp.Error {
	return amqp.Errorf(amqp.ResourceLocked,
		"cannot obtain exclusive access to locked queue '%s' in vhost '%s'. It could be originally declared on another connection or the exclusive property value does not match that of the original declaration.",
		name, vhost)
}
