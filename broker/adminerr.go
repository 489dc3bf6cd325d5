package broker

import (
	"fmt"

	"github.com/brokerd/brokerd/broker/base"
)

// The management operations (users, vhosts, permissions, policies, the
// HTTP API's declarations) report two kinds of refusal a caller maps onto
// its own codes (HTTP 404 and 400); they are defined in package base,
// where broker's subpackages return them too, and re-exported here.

// ErrNotFound is wrapped by the error of a management operation whose
// subject (user, vhost, permission, policy, queue, exchange) does not
// exist.
var ErrNotFound = base.ErrNotFound

// InvalidError is a management request refused for its content (a bad
// pattern, an unknown tag, an invalid policy value); Msg says why in
// RabbitMQ's words where RabbitMQ has them. It changes nothing.
type InvalidError = base.InvalidError

func invalidf(format string, args ...any) error { return base.Invalidf(format, args...) }

func notFoundf(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrNotFound)
}
