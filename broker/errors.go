package broker

import (
	"github.com/brokerd/brokerd/amqp"
)

// The texts follow RabbitMQ's word for word where clients or operators are
// known to match on them.

func errNoExchange(vhost, name string) *amqp.Error {
	return amqp.Errorf(amqp.NotFound, "no exchange '%s' in vhost '%s'", name, vhost)
}

func errDefaultExchange() *amqp.Error {
	return amqp.Errorf(amqp.AccessRefused, "operation not permitted on the default exchange")
}

func errLocked(vhost, name string) *amqp.Error {
	return amqp.Errorf(amqp.ResourceLocked,
		"cannot obtain exclusive access to locked queue '%s' in vhost '%s'. It could be originally declared on another connection or the exclusive property value does not match that of the original declaration.",
		name, vhost)
}
