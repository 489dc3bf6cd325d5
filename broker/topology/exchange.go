package topology

import (
	"sync/atomic"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/defs"
	"github.com/brokerd/brokerd/broker/policy"
	"github.com/brokerd/brokerd/broker/queue"
)

// Exchange types.
const (
	typeDirect  = "direct"
	typeFanout  = "fanout"
	typeTopic   = "topic"
	typeHeaders = "headers"
	// TypeDelayed is the delayed-message exchange (the
	// rabbitmq-delayed-message-exchange plugin's type): it routes as the
	// type its x-delayed-type argument names, and holds a message that is
	// due later in its holding queue (Exchange.Hold) until then.
	TypeDelayed = "x-delayed-message"
)

// ValidExchangeType reports whether t is an exchange type brokerd has.
func ValidExchangeType(t string) bool {
	switch t {
	case typeDirect, typeFanout, typeTopic, typeHeaders, TypeDelayed:
		return true
	}
	return false
}

// ValidateDelayed checks the arguments of a new delayed exchange as the
// plugin's validate/1 does: x-delayed-type must name an existing exchange
// type, other than x-delayed-message itself. A type that is not a string
// (a longstr or byte array: Erlang binaries both) is refused with 406 as a
// missing one; an unknown name is 503 COMMAND_INVALID, as
// exchange.declare's own type (rabbit_exchange:check_type, which the
// plugin calls).
func ValidateDelayed(args amqp.Table) *amqp.Error {
	s, ok := delayedType(args)
	switch {
	case !ok:
		return amqp.Errorf(amqp.PreconditionFailed, "Invalid argument, 'x-delayed-type' must be an existing exchange type")
	case s == TypeDelayed:
		return amqp.Errorf(amqp.PreconditionFailed, "Invalid argument, 'x-delayed-message' can't be used for 'x-delayed-type'")
	case !ValidExchangeType(s):
		return amqp.Errorf(amqp.CommandInvalid, "unknown exchange type '%s'", s)
	}
	return nil
}

// delayedType returns a delayed exchange's x-delayed-type argument, if it
// is a string.
func delayedType(args amqp.Table) (string, bool) {
	switch v, _ := args.Get("x-delayed-type"); s := v.(type) {
	case string:
		return s, true
	case []byte:
		return string(s), true
	}
	return "", false
}

// Exchange is a routing node. Its fields other than bindings are fixed at
// declaration; bindings are guarded by the owning vhost's lock.
type Exchange struct {
	Name       string
	Type       string
	Durable    bool
	AutoDelete bool
	Internal   bool
	Args       amqp.Table

	// kind is the type it routes as: Type, or a delayed exchange's
	// x-delayed-type.
	kind string
	// Hold is a delayed exchange's holding queue (its messages not due
	// yet), set by its owner before the exchange is reachable; nil for
	// other types. It is no queue of the topology's: no binding, no name
	// a client can use.
	Hold *queue.Queue

	alternate string // alternate-exchange argument, "" if none
	hasAE     bool
	// PolicyAE is the alternate-exchange of the applied policy; the
	// argument wins over it. Guarded by the vhost lock.
	PolicyAE    string
	HasPolicyAE bool

	// Bindings with this exchange as source, in binding order.
	Bindings []*Binding
	// byKey indexes direct-exchange bindings by routing key.
	byKey map[string][]*Binding

	Stats PublishCounters
}

// Binding routes from a source exchange to a queue or an exchange.
type Binding struct {
	Source string
	Key    string
	Args   amqp.Table
	// Exactly one of queue and exchange is set.
	Queue    *queue.Queue
	Exchange *Exchange
}

func (b *Binding) DestName() string {
	if b.Queue != nil {
		return b.Queue.Name
	}
	return b.Exchange.Name
}

func NewExchange(name, typ string, durable, autoDelete, internal bool, args amqp.Table) *Exchange {
	x := &Exchange{Name: name, Type: typ, Durable: durable, AutoDelete: autoDelete, Internal: internal, Args: args, kind: typ}
	if v, ok := args.Get("alternate-exchange"); ok {
		if s, ok := v.(string); ok {
			x.alternate, x.hasAE = s, true
		}
	}
	if typ == TypeDelayed {
		x.kind, _ = delayedType(args) // validated: ValidateDelayed
	}
	if x.kind == typeDirect {
		x.byKey = make(map[string][]*Binding)
	}
	return x
}

// alternateExchange returns the effective alternate exchange name.
func (x *Exchange) alternateExchange() (string, bool) {
	if x.hasAE {
		return x.alternate, true
	}
	return x.PolicyAE, x.HasPolicyAE
}

func (x *Exchange) AddBinding(b *Binding) {
	x.Bindings = append(x.Bindings, b)
	if x.byKey != nil {
		x.byKey[b.Key] = append(x.byKey[b.Key], b)
	}
}

// FindBinding returns the binding equal to (dest, key, args), if any.
func (x *Exchange) FindBinding(q *queue.Queue, dx *Exchange, key string, args amqp.Table) *Binding {
	for _, b := range x.Bindings {
		if b.Queue == q && b.Exchange == dx && b.Key == key && tablesEqual(b.Args, args) {
			return b
		}
	}
	return nil
}

func (x *Exchange) removeBinding(b *Binding) {
	x.Bindings = removePtr(x.Bindings, b)
	if x.byKey != nil {
		l := removePtr(x.byKey[b.Key], b)
		if len(l) == 0 {
			delete(x.byKey, b.Key)
		} else {
			x.byKey[b.Key] = l
		}
	}
}

func removePtr[T comparable](s []T, v T) []T {
	for i, e := range s {
		if e == v {
			return append(s[:i:i], s[i+1:]...)
		}
	}
	return s
}

// matches reports whether binding b of exchange x takes a message with the
// given routing keys and headers.
func (x *Exchange) matches(b *Binding, keys []string, headers amqp.Table) bool {
	switch x.kind {
	case typeFanout:
		return true
	case typeDirect:
		for _, k := range keys {
			if k == b.Key {
				return true
			}
		}
	case typeTopic:
		for _, k := range keys {
			if topicMatch(b.Key, k) {
				return true
			}
		}
	case typeHeaders:
		return headersMatch(b.Args, headers)
	}
	return false
}

// ValidateBinding checks a new binding's arguments for x's type, as
// RabbitMQ's validate_binding: a headers binding's x-match must be one of
// the four modes.
func ValidateBinding(x *Exchange, args amqp.Table) *amqp.Error {
	if x.kind != typeHeaders {
		return nil
	}
	v, ok := args.Get("x-match")
	if !ok {
		return nil
	}
	s, ok := v.(string)
	if !ok {
		return amqp.Errorf(amqp.PreconditionFailed, "Invalid x-match field type %s (value %v); expected longstr", amqp.TypeName(v), v)
	}
	switch s {
	case "all", "any", "all-with-x", "any-with-x":
		return nil
	}
	return amqp.Errorf(amqp.PreconditionFailed, "Invalid x-match field value <<\"%s\">>; expected all, any, all-with-x, or any-with-x", s)
}

// tablesEqual compares two argument tables as binding identities: same
// keys, same values, in any order.
func tablesEqual(a, b amqp.Table) bool {
	if len(a) != len(b) {
		return false
	}
	for _, f := range a {
		v, ok := b.Get(f.Key)
		if !ok || !amqp.ValuesEqual(f.Value, v) || amqp.TypeName(f.Value) != amqp.TypeName(v) {
			return false
		}
	}
	return true
}

// Def returns x's record in vhost.
func (x *Exchange) Def(vhost string) defs.Exchange {
	return defs.Exchange{VHost: vhost, Name: x.Name, Type: x.Type, AutoDelete: x.AutoDelete, Internal: x.Internal, Args: x.Args}
}

// Def returns b's record in vhost.
func (b *Binding) Def(vhost string) defs.Binding {
	return defs.Binding{VHost: vhost, Source: b.Source, Dest: b.DestName(), ToExchange: b.Exchange != nil, Key: b.Key, Args: b.Args}
}

// PublishCounters are an exchange's counters: RabbitMQ's publish_in
// (messages published into the exchange by clients, routed or not) and
// publish_out (queue copies the exchange routed them to).
type PublishCounters struct{ PublishIn, PublishOut atomic.Uint64 }

// ApplyPolicy sets x's policy alternate exchange from the policies
// ps of its vhost (sorted by name). Operator policies hold no exchange
// key. Caller holds v.mu.
func (x *Exchange) ApplyPolicy(ps []*policy.Policy) {
	x.PolicyAE, x.HasPolicyAE = "", false
	if p := policy.Best(ps, func(p *policy.Policy) bool { return p.AppliesToExchange(x.Name) }); p != nil {
		if ae, ok := p.Definition["alternate-exchange"].(string); ok {
			x.PolicyAE, x.HasPolicyAE = ae, true
		}
	}
}
