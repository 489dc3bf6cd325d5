package queue

import (
	"fmt"
	"math"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/policy"
)

// argScope says which queue types accept an argument.
type argScope int

const (
	scopeBoth    argScope = iota // classic and quorum
	scopeClassic                 // classic only
	scopeQuorum                  // quorum only
	scopeStream                  // streams only: always refused here
)

// queueArgs lists every x- argument RabbitMQ gives meaning to, with the
// queue types that accept it. x-delivery-limit and x-dead-letter-strategy
// are accepted on classic queues too (SPEC §2, §5: beyond RabbitMQ).
// Arguments not listed are stored and otherwise ignored, as RabbitMQ does.
var queueArgs = map[string]argScope{
	"x-queue-type":                    scopeBoth,
	"x-message-ttl":                   scopeBoth,
	"x-expires":                       scopeBoth,
	"x-max-length":                    scopeBoth,
	"x-max-length-bytes":              scopeBoth,
	"x-overflow":                      scopeBoth,
	"x-dead-letter-exchange":          scopeBoth,
	"x-dead-letter-routing-key":       scopeBoth,
	"x-dead-letter-strategy":          scopeBoth,
	"x-delivery-limit":                scopeBoth,
	"x-consumer-timeout":              scopeBoth,
	"x-single-active-consumer":        scopeBoth,
	"x-queue-leader-locator":          scopeBoth,
	"x-max-priority":                  scopeClassic,
	"x-queue-mode":                    scopeClassic,
	"x-queue-version":                 scopeClassic,
	"x-queue-master-locator":          scopeClassic,
	"x-quorum-initial-group-size":     scopeQuorum,
	"x-quorum-target-group-size":      scopeQuorum,
	"x-max-in-memory-length":          scopeQuorum,
	"x-max-in-memory-bytes":           scopeQuorum,
	"x-max-age":                       scopeStream,
	"x-stream-max-segment-size-bytes": scopeStream,
	"x-stream-filter-size-bytes":      scopeStream,
	"x-initial-cluster-size":          scopeStream,

	// Delayed retry (retry.go): RabbitMQ 4.3's (quorum queues only
	// there), LavinMQ's multiplier, brokerd's jitter; on every type.
	"x-delayed-retry-type":       scopeBoth,
	"x-delayed-retry-min":        scopeBoth,
	"x-delayed-retry-max":        scopeBoth,
	"x-delayed-retry-multiplier": scopeBoth,
	"x-delayed-retry-jitter":     scopeBoth,
}

func argKnownTo(key, qtype string) bool {
	s, ok := queueArgs[key]
	if !ok {
		return false
	}
	switch s {
	case scopeBoth:
		return true
	case scopeClassic:
		return qtype == policy.QueueClassic
	case scopeQuorum:
		return qtype == policy.QueueQuorum
	}
	return false
}

// WithDefaultType returns the arguments a queue.declare has in a
// vhost whose default queue type is dqt ("" for none), as RabbitMQ 3.13
// and 4.x compute them (rabbit_amqqueue:augment_declare_args) before the
// declare is checked against an existing queue or validated: when the
// client names no x-queue-type and the vhost has a default, x-queue-type
// is set to that default if the queue's properties suit it (a quorum
// queue is durable, not exclusive and not auto-delete), else to classic.
// So the queue shows its type in its arguments, a redeclare without
// x-queue-type is equivalent to the declare that made it, and a classic
// queue made before the default was set is refused as inequivalent by a
// redeclare without x-queue-type, as RabbitMQ refuses it. args is not
// changed; with nothing to add it is returned as is.
//
// RabbitMQ 4.x also writes x-queue-type classic (its node-wide default)
// into the arguments of a queue declared without one in a vhost without
// a default; brokerd leaves those arguments as the client sent them, as
// RabbitMQ 3.13 does.
func WithDefaultType(args amqp.Table, dqt string, durable, exclusive, autoDelete bool) amqp.Table {
	if dqt == "" {
		return args
	}
	if _, named := args.Get("x-queue-type"); named {
		return args
	}
	qtype := dqt
	if dqt != policy.QueueClassic && (!durable || exclusive || autoDelete) {
		// rabbit_queue_type:is_compatible of quorum and stream queues;
		// the fallback is classic.
		qtype = policy.QueueClassic
	}
	out := make(amqp.Table, 0, len(args)+1)
	out = append(out, args...)
	return append(out, amqp.Field{Key: "x-queue-type", Value: qtype})
}

// ValidateDeclare checks a new queue's properties and arguments with
// RabbitMQ's codes and texts (reference §2).
func ValidateDeclare(vhost, name string, m *amqp.QueueDeclare) *amqp.Error {
	rs := fmt.Sprintf("queue '%s' in vhost '%s'", name, vhost)
	invalid := func(key string, term string) *amqp.Error {
		return amqp.Errorf(amqp.PreconditionFailed, "invalid arg '%s' for %s: %s", key, rs, term)
	}
	// The channel checks the DLX's type before any argument validation,
	// with its own text (rabbit_channel queue.declare).
	if v, ok := m.Arguments.Get("x-dead-letter-exchange"); ok {
		if _, ok := v.(string); !ok {
			return amqp.Errorf(amqp.PreconditionFailed, "invalid type '%s' for arg 'x-dead-letter-exchange' in %s", amqp.TypeName(v), rs)
		}
	}
	if v, ok := m.Arguments.Get("x-queue-type"); ok {
		s, ok := v.(string)
		if !ok {
			return invalid("x-queue-type", "{unacceptable_type,"+amqp.TypeName(v)+"}")
		}
		switch s {
		case policy.QueueClassic, policy.QueueQuorum:
		case policy.QueueStream:
			return amqp.Errorf(amqp.PreconditionFailed, "invalid arg 'x-queue-type' for %s: stream queues are not supported by brokerd; use a classic or quorum queue", rs)
		default:
			return invalid("x-queue-type", fmt.Sprintf("unknown queue type '%s'", s))
		}
	}
	qtype := TypeOf(m.Arguments)
	if qtype == policy.QueueQuorum {
		switch {
		case !m.Durable:
			return amqp.Errorf(amqp.PreconditionFailed, "invalid property 'non-durable' for %s", rs)
		case m.AutoDelete:
			return amqp.Errorf(amqp.PreconditionFailed, "invalid property 'auto-delete' for %s", rs)
		case m.Exclusive:
			return amqp.Errorf(amqp.PreconditionFailed, "invalid property 'exclusive-owner' for %s", rs)
		}
	}
	for _, f := range m.Arguments {
		if _, known := queueArgs[f.Key]; known && !argKnownTo(f.Key, qtype) {
			return amqp.Errorf(amqp.PreconditionFailed, "invalid arg '%s' for %s of queue type %s", f.Key, rs, policy.RabbitTypeName(qtype))
		}
		if err := checkQueueArg(f.Key, f.Value, m.Arguments); err != "" {
			return invalid(f.Key, err)
		}
	}
	return nil
}

// checkQueueArg validates one argument's type and value and returns the
// Erlang-style error term RabbitMQ reports, or "".
func checkQueueArg(key string, v any, all amqp.Table) string {
	intArg := func(min, max int64) string {
		n, ok := intArgValue(v)
		if !ok {
			return fmt.Sprintf("{unacceptable_type,%s}", amqp.TypeName(v))
		}
		switch {
		case n < 0 && min >= 0:
			return fmt.Sprintf("{value_negative,%d}", n)
		case n == 0 && min > 0:
			return fmt.Sprintf("{value_zero,%d}", n)
		case max > 0 && n > max:
			return fmt.Sprintf("{value_too_large,%d}", n)
		}
		return ""
	}
	strArg := func() string {
		if _, ok := v.(string); !ok {
			return fmt.Sprintf("{unacceptable_type,%s}", amqp.TypeName(v))
		}
		return ""
	}
	switch key {
	case "x-message-ttl":
		if _, ok := intArgValue(v); !ok {
			return fmt.Sprintf("expected integer, got %s", amqp.TypeName(v))
		}
		return intArg(0, MaxExpiration)
	case "x-expires":
		if _, ok := intArgValue(v); !ok {
			return fmt.Sprintf("expected integer, got %s", amqp.TypeName(v))
		}
		return intArg(1, MaxExpiration)
	case "x-max-length", "x-max-length-bytes", "x-consumer-timeout":
		return intArg(0, 0)
	case "x-overflow":
		if e := strArg(); e != "" {
			return e
		}
		switch v.(string) {
		case "drop-head", "reject-publish", "reject-publish-dlx":
			return ""
		}
		return "invalid_overflow"
	case "x-dead-letter-exchange":
		return strArg()
	case "x-dead-letter-routing-key":
		if e := strArg(); e != "" {
			return e
		}
		if _, ok := all.Get("x-dead-letter-exchange"); !ok {
			return "routing_key_but_no_dlx_defined"
		}
	case "x-dead-letter-strategy":
		if e := strArg(); e != "" {
			return e
		}
		switch v.(string) {
		case "at-most-once", "at-least-once":
			return ""
		}
		return "invalid_dlx_strategy"
	case "x-delivery-limit":
		// Not validated at declare, as RabbitMQ: an integer is used, a
		// negative one means no limit.
	case "x-delayed-retry-min", "x-delayed-retry-max":
		return intArg(0, MaxExpiration)
	case "x-delayed-retry-multiplier":
		return intArg(1, math.MaxInt32)
	case "x-delayed-retry-type", "x-delayed-retry-jitter":
		return checkRetryArg(key, v)
	case "x-max-priority":
		return intArg(0, 255)
	case "x-single-active-consumer":
		if _, ok := v.(bool); !ok {
			return fmt.Sprintf("{unacceptable_type,%s}", amqp.TypeName(v))
		}
	case "x-queue-mode":
		if e := strArg(); e != "" {
			return e
		}
	}
	return ""
}

// intArgValue accepts the AMQP integer types RabbitMQ allows for numeric
// arguments (?INTEGER_ARG_TYPES: byte, short, signedint, long and the
// unsigned ones); timestamps, floats, decimals and strings are refused.
func intArgValue(v any) (int64, bool) { return amqp.AsInt(v) }

// Equivalent checks a redeclare against the existing queue (B64).
func Equivalent(vhost string, q *Queue, m *amqp.QueueDeclare) *amqp.Error {
	if q.Durable != m.Durable {
		return amqp.Errorf(amqp.PreconditionFailed, "inequivalent arg 'durable' for queue '%s' in vhost '%s': received '%t' but current is '%t'",
			q.Name, vhost, m.Durable, q.Durable)
	}
	if q.AutoDelete != m.AutoDelete {
		return amqp.Errorf(amqp.PreconditionFailed, "inequivalent arg 'auto_delete' for queue '%s' in vhost '%s': received '%t' but current is '%t'",
			q.Name, vhost, m.AutoDelete, q.AutoDelete)
	}
	qtype := TypeOf(q.Args)
	if TypeOf(m.Arguments) != qtype {
		got, _ := m.Arguments.Get("x-queue-type")
		cur, _ := q.Args.Get("x-queue-type")
		return InequivalentError("queue", "x-queue-type", q.Name, vhost, got, cur)
	}
	keys := map[string]bool{}
	for _, f := range append(append(amqp.Table(nil), q.Args...), m.Arguments...) {
		if f.Key != "x-queue-type" && argKnownTo(f.Key, qtype) && !keys[f.Key] {
			keys[f.Key] = true
			got, gok := m.Arguments.Get(f.Key)
			cur, cok := q.Args.Get(f.Key)
			if gok != cok || !SameArg(got, cur) {
				if !gok {
					got = noneArg{}
				}
				if !cok {
					cur = noneArg{}
				}
				return InequivalentError("queue", f.Key, q.Name, vhost, got, cur)
			}
		}
	}
	return nil
}

// noneArg renders an absent argument in an equivalence error.
type noneArg struct{}

// SameArg compares argument values as RabbitMQ's equivalence check does:
// all integer types are one class, float and double another, and values
// must be equal within the class.
func SameArg(a, b any) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	if typeClass(a) != typeClass(b) {
		return false
	}
	return amqp.ValuesEqual(a, b)
}

func typeClass(v any) string {
	switch v.(type) {
	case int8, uint8, int16, uint16, int32, uint32, int64, int, amqp.Decimal:
		return "int"
	case float32, float64:
		return "float"
	}
	return amqp.TypeName(v)
}

// renderEquiv renders one side of an inequivalent-arg error.
func renderEquiv(v any) string {
	switch x := v.(type) {
	case nil, noneArg:
		return "none"
	case string:
		return fmt.Sprintf("the value '%s' of type 'longstr'", x)
	case []byte:
		return fmt.Sprintf("the value '%s' of type 'binary'", x)
	}
	return fmt.Sprintf("the value '%v' of type '%s'", v, amqp.TypeName(v))
}

// InequivalentError is the precondition-failed error of a declaration
// whose argument key differs from the existing what (queue or exchange)'s,
// in RabbitMQ's words.
func InequivalentError(what, key, name, vhost string, received, current any) *amqp.Error {
	return amqp.Errorf(amqp.PreconditionFailed,
		"inequivalent arg '%s' for %s '%s' in vhost '%s': received %s but current is %s",
		key, what, name, vhost, renderEquiv(received), renderEquiv(current))
}

// MaxExpiration is RabbitMQ's upper bound for TTL values: ten years in ms.
const MaxExpiration = 315360000000
