package defs

import (
	"errors"
	"fmt"
	"strings"
)

// Key prefixes of the meta space, one per record kind (see the package
// doc for each kind's parts).
const (
	PrefixVHost          = "v/" // on-disk format; never renumber
	PrefixExchange       = "x/" // on-disk format; never renumber
	PrefixQueue          = "q/" // on-disk format; never renumber
	PrefixBinding        = "b/" // on-disk format; never renumber
	PrefixPolicy         = "p/" // on-disk format; never renumber
	PrefixOperatorPolicy = "o/" // on-disk format; never renumber
	PrefixPerm           = "a/" // on-disk format; never renumber
	PrefixUser           = "u/" // on-disk format; never renumber
	// PrefixRedriveTask and PrefixRedriveFailure hold the broker's
	// redrive tasks and their failures; it encodes their values itself.
	PrefixRedriveTask    = "t/" // on-disk format; never renumber
	PrefixRedriveFailure = "f/" // on-disk format; never renumber
	// PrefixQueueState holds each durable queue's mutable state
	// (QueueState), keyed by the queue's id.
	PrefixQueueState = "s/" // on-disk format; never renumber
	// PrefixParameter holds the runtime parameters (Parameter), and
	// PrefixGlobalParameter the global ones (GlobalParameter).
	PrefixParameter       = "r/" // on-disk format; never renumber
	PrefixGlobalParameter = "g/" // on-disk format; never renumber
	// PrefixVHostLimits holds a vhost's limits (RabbitMQ's vhost-limits
	// runtime parameter), PrefixUserLimits a user's, PrefixTopicPerm a
	// user's topic permissions on an exchange of a vhost.
	PrefixVHostLimits = "vl/" // on-disk format; never renumber
	PrefixUserLimits  = "ul/" // on-disk format; never renumber
	PrefixTopicPerm   = "tp/" // on-disk format; never renumber

	// KeyQueueIDMark holds the highest queue id ever given to a durable
	// queue, so ids are never reused after a restart even when that queue
	// is gone (its entries could otherwise surface in a new queue).
	KeyQueueIDMark = "n/queue-id" // on-disk format; never renumber
	// KeyBootstrapMark is written when the bootstrap vhosts and users
	// have been created: they are created once, on a fresh data dir, as
	// RabbitMQ's default_vhost and default_user.
	KeyBootstrapMark = "n/bootstrapped" // on-disk format; never renumber
)

const (
	partEscape byte = 0xff // 0x00 0xff: a 0x00 inside a part; on-disk format
	partEnd    byte = 0x01 // 0x00 0x01: end of a part; on-disk format

	bindToQueue    = "q" // on-disk format
	bindToExchange = "x" // on-disk format
)

// VHostPrefixes returns the prefixes of the kinds whose records belong to
// one vhost (their first part is the vhost's name), in a new slice. A
// vhost's deletion removes every record under Key(prefix, vhost) for each
// of them, so a per-vhost kind added here is deleted with its vhost
// without more code.
func VHostPrefixes() []string {
	return []string{PrefixExchange, PrefixQueue, PrefixBinding, PrefixPolicy, PrefixOperatorPolicy, PrefixPerm, PrefixParameter, PrefixVHostLimits, PrefixTopicPerm}
}

// ErrCorrupt is wrapped by every error decoding a definition record or
// key: the store holds something this package did not write. (Its text is
// the broker's, as before the package existed: it shows in Open's error.)
var ErrCorrupt = errors.New("broker: corrupt definition record")

// Key returns prefix followed by the encoded parts.
func Key(prefix string, parts ...string) string {
	n := len(prefix)
	for _, p := range parts {
		n += len(p) + 2
	}
	var sb strings.Builder
	sb.Grow(n)
	sb.WriteString(prefix)
	for _, p := range parts {
		for i := 0; i < len(p); i++ {
			sb.WriteByte(p[i])
			if p[i] == 0 {
				sb.WriteByte(partEscape)
			}
		}
		sb.WriteByte(0)
		sb.WriteByte(partEnd)
	}
	return sb.String()
}

// SplitKey decodes the parts of a key after its prefix. Its error wraps
// ErrCorrupt.
func SplitKey(rest string) ([]string, error) {
	var parts []string
	var cur []byte
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		if c != 0 {
			cur = append(cur, c)
			continue
		}
		if i+1 == len(rest) {
			return nil, fmt.Errorf("%w: key ends inside a part", ErrCorrupt)
		}
		i++
		switch rest[i] {
		case partEscape:
			cur = append(cur, 0)
		case partEnd:
			parts = append(parts, string(cur))
			cur = cur[:0]
		default:
			return nil, fmt.Errorf("%w: bad escape 0x00 0x%02x in key", ErrCorrupt, rest[i])
		}
	}
	if len(cur) > 0 {
		return nil, fmt.Errorf("%w: key ends inside a part", ErrCorrupt)
	}
	return parts, nil
}

// Parts decodes a key of a kind with exactly n parts. Its error wraps
// ErrCorrupt.
func Parts(key, prefix string, n int) ([]string, error) {
	if !strings.HasPrefix(key, prefix) {
		return nil, fmt.Errorf("%w: key %q lacks prefix %q", ErrCorrupt, key, prefix)
	}
	p, err := SplitKey(key[len(prefix):])
	if err != nil {
		return nil, err
	}
	if len(p) != n {
		return nil, fmt.Errorf("%w: key %q has %d parts, want %d", ErrCorrupt, key, len(p), n)
	}
	return p, nil
}

// VHostKey is the key of vhost name's record.
func VHostKey(name string) string { return Key(PrefixVHost, name) }

// UserKey is the key of user name's record.
func UserKey(name string) string { return Key(PrefixUser, name) }

// PermKey is the key of user's permissions in vhost.
func PermKey(vhost, user string) string { return Key(PrefixPerm, vhost, user) }

// VHostLimitsKey is the key of vhost's limits.
func VHostLimitsKey(vhost string) string { return Key(PrefixVHostLimits, vhost) }

// UserLimitsKey is the key of user's limits.
func UserLimitsKey(user string) string { return Key(PrefixUserLimits, user) }

// TopicPermKey is the key of user's topic permissions on exchange in
// vhost.
func TopicPermKey(vhost, user, exchange string) string {
	return Key(PrefixTopicPerm, vhost, user, exchange)
}

// ExchangeKey is the key of exchange name's record in vhost.
func ExchangeKey(vhost, name string) string { return Key(PrefixExchange, vhost, name) }

// QueueKey is the key of queue name's record in vhost.
func QueueKey(vhost, name string) string { return Key(PrefixQueue, vhost, name) }

// PolicyKey is the key of policy name's record in vhost: an operator
// policy's if operator is set.
func PolicyKey(operator bool, vhost, name string) string {
	return Key(policyPrefix(operator), vhost, name)
}

func policyPrefix(operator bool) string {
	if operator {
		return PrefixOperatorPolicy
	}
	return PrefixPolicy
}

// BindingKey is the key of d's record: a binding is all key.
func BindingKey(d Binding) string {
	kind := bindToQueue
	if d.ToExchange {
		kind = bindToExchange
	}
	return Key(PrefixBinding, d.VHost, d.Source, kind, d.Dest, d.Key, string(EncodeArgs(d.Args)))
}
