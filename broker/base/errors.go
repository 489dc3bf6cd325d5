package base

import (
	"errors"
	"fmt"
)

// The management operations (users, vhosts, permissions, policies, the
// HTTP API's declarations) report two kinds of refusal a caller maps onto
// its own codes (HTTP 404 and 400).
var (
	// ErrNotFound is wrapped by the error of a management operation
	// whose subject (user, vhost, permission, policy, queue, exchange)
	// does not exist: broker's Set/Clear/Delete calls on an unknown
	// vhost, user, policy or permission, OpenDirect for an unknown vhost
	// or user, and the admin views of an unknown queue or exchange. Test
	// for it with errors.Is.
	ErrNotFound = errors.New("broker: not found")
)

// InvalidError is a management request refused for its content (a bad
// pattern, an unknown tag, an invalid policy value); Msg says why in
// RabbitMQ's words where RabbitMQ has them. It changes nothing. It is
// returned by policy.Validate (an invalid policy or operator policy),
// auth.NewUser (an invalid user spec), auth.NewPermission (a pattern that
// does not compile), and by broker's calls built on them or checking
// their own input (SetPolicy, SetOperatorPolicy, PutUser, SetPermissions,
// PutVHost, StartRedrive, the definitions import). Test for it with
// errors.As.
type InvalidError struct{ Msg string }

func (e *InvalidError) Error() string { return e.Msg }

// Invalidf returns an *InvalidError whose Msg is formatted as fmt.Sprintf
// does.
func Invalidf(format string, args ...any) error {
	return &InvalidError{Msg: fmt.Sprintf(format, args...)}
}
