package brokertest

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// Session is a channel of a test's connection with the verbs the behaviour
// tests share: Declare, DeclareExchange, Bind, Publish (confirmed), Get,
// Drain, Ready. It embeds the amqp091 channel, so every other channel
// method is at hand; its own Publish and Get replace the channel's (reach
// those as s.Channel.Publish and s.Channel.Get).
//
// Every verb fails the test (t.Fatal) when the broker refuses or an
// answer does not come within Wait, so a Session is used from the
// goroutine of the test that made it (see With for a subtest), like any
// testing.TB; it is not safe for concurrent use. The connection of a
// session from Instance.Session closes when that test ends.
type Session struct {
	*amqp091.Channel
	// Conn is the connection the channel is on.
	Conn *amqp091.Connection

	t          testing.TB
	confirm    bool
	persistent bool
}

// SessionOption changes how a Session publishes.
type SessionOption func(*Session)

// NoConfirm leaves the channel out of confirm mode: Publish returns once
// the publish is written, without waiting for the broker (as a client that
// does not use confirms; a test may still select confirms on the channel
// itself and read them with NotifyPublish).
var NoConfirm SessionOption = func(s *Session) { s.confirm = false }

// Persistent makes Publish send delivery mode 2 (persistent) when the
// publishing does not set a mode.
var Persistent SessionOption = func(s *Session) { s.persistent = true }

// Session dials a new connection and opens a channel on it, in confirm
// mode unless NoConfirm is given: then Publish returns once the broker
// has confirmed the publish, so what was published is enqueued (or
// refused) before the test goes on.
func (i *Instance) Session(t testing.TB, opts ...SessionOption) *Session {
	t.Helper()
	return NewSession(t, i.Dial(t), opts...)
}

// NewSession opens a channel on conn as Instance.Session does.
func NewSession(t testing.TB, conn *amqp091.Connection, opts ...SessionOption) *Session {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("open channel: %v", err)
	}
	s := &Session{Channel: ch, Conn: conn, t: t, confirm: true}
	for _, o := range opts {
		o(s)
	}
	if s.confirm {
		if err := ch.Confirm(false); err != nil {
			t.Fatalf("confirm.select: %v", err)
		}
	}
	return s
}

// NewChannel opens another channel on the session's connection, with opts
// (not the session's).
func (s *Session) NewChannel(opts ...SessionOption) *Session {
	s.t.Helper()
	return NewSession(s.t, s.Conn, opts...)
}

// With returns the session bound to t: its verbs fail t. For a subtest
// that uses its parent's session (a test may fail only from its own
// goroutine).
func (s *Session) With(t testing.TB) *Session {
	c := *s
	c.t = t
	return &c
}

// ctx bounds one verb's wait.
func (s *Session) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), Wait)
}

// --- declarations ---

// DeclareOption changes a queue or exchange declaration.
type DeclareOption func(*declaration)

type declaration struct {
	durable bool
	qtype   string
}

// Durable declares a durable queue or exchange (the verbs declare
// transient ones by default).
var Durable DeclareOption = func(d *declaration) { d.durable = true }

// Type declares a queue of type qtype: "" and "classic" add nothing; any
// other type sets x-queue-type, and a quorum queue is durable, as it must
// be.
func Type(qtype string) DeclareOption {
	return func(d *declaration) {
		d.qtype = qtype
		if qtype == "quorum" {
			d.durable = true
		}
	}
}

// Declare declares queue (neither exclusive nor auto-delete) with args,
// which it does not change, and returns its name (the server's for "").
func (s *Session) Declare(queue string, args amqp091.Table, opts ...DeclareOption) string {
	s.t.Helper()
	var d declaration
	for _, o := range opts {
		o(&d)
	}
	if d.qtype != "" && d.qtype != "classic" {
		a := amqp091.Table{}
		maps.Copy(a, args)
		a["x-queue-type"] = d.qtype
		args = a
	}
	q, err := s.QueueDeclare(queue, d.durable, false, false, false, args)
	if err != nil {
		s.t.Fatalf("declare queue %q: %v", queue, err)
	}
	return q.Name
}

// DeclareExchange declares exchange name of kind (not auto-delete, not
// internal) with args.
func (s *Session) DeclareExchange(name, kind string, args amqp091.Table, opts ...DeclareOption) {
	s.t.Helper()
	var d declaration
	for _, o := range opts {
		o(&d)
	}
	if err := s.ExchangeDeclare(name, kind, d.durable, false, false, false, args); err != nil {
		s.t.Fatalf("declare exchange %q (%s): %v", name, kind, err)
	}
}

// Bind binds queue to exchange with key and args.
func (s *Session) Bind(queue, key, exchange string, args amqp091.Table) {
	s.t.Helper()
	if err := s.QueueBind(queue, key, exchange, false, args); err != nil {
		s.t.Fatalf("bind %q to %q with key %q: %v", queue, exchange, key, err)
	}
}

// BindExchange binds exchange dest to source with key and args.
func (s *Session) BindExchange(dest, key, source string, args amqp091.Table) {
	s.t.Helper()
	if err := s.ExchangeBind(dest, key, source, false, args); err != nil {
		s.t.Fatalf("bind exchange %q to %q with key %q: %v", dest, source, key, err)
	}
}

// Ready returns queue's ready count from a passive queue.declare. It is a
// round trip on the channel, so the broker has handled everything sent on
// the channel before it.
func (s *Session) Ready(queue string) int {
	s.t.Helper()
	q, err := s.QueueDeclarePassive(queue, false, false, false, false, nil)
	if err != nil {
		s.t.Fatalf("passive declare %q: %v", queue, err)
	}
	return q.Messages
}

// WantReady fails the test unless Ready(queue) is want.
func (s *Session) WantReady(queue string, want int) {
	s.t.Helper()
	if got := s.Ready(queue); got != want {
		s.t.Fatalf("queue %q has %d ready messages, want %d", queue, got, want)
	}
}

// Sync makes a round trip on the channel (a passive declare of
// amq.direct): everything sent on it before, acks and rejects included,
// has been handled by the broker when it returns.
func (s *Session) Sync() {
	s.t.Helper()
	if err := s.ExchangeDeclarePassive("amq.direct", "direct", true, false, false, false, nil); err != nil {
		s.t.Fatalf("sync round trip: %v", err)
	}
}

// --- publishing ---

// PublishOption changes one publish.
type PublishOption func(*publication)

type publication struct{ mandatory bool }

// Mandatory sets the mandatory flag: an unroutable message comes back in
// a basic.return (see NotifyReturn) before its confirm.
var Mandatory PublishOption = func(p *publication) { p.mandatory = true }

// Publish publishes p to exchange with routing key key. On a confirming
// session it waits for the confirm and fails the test unless the broker
// acks it (PublishAck returns the confirm instead).
func (s *Session) Publish(exchange, key string, p amqp091.Publishing, opts ...PublishOption) {
	s.t.Helper()
	if s.confirm && !s.PublishAck(exchange, key, p, opts...) {
		s.t.Fatalf("publish to %q with key %q was nacked", exchange, key)
	}
	if !s.confirm {
		s.publish(exchange, key, p, opts)
	}
}

// PublishAck publishes p to exchange with key on a confirming session and
// returns the confirm: true for an ack, false for a nack.
func (s *Session) PublishAck(exchange, key string, p amqp091.Publishing, opts ...PublishOption) bool {
	s.t.Helper()
	if !s.confirm {
		s.t.Fatal("PublishAck on a session without confirms")
	}
	ctx, cancel := s.ctx()
	defer cancel()
	dc := s.publish(exchange, key, p, opts)
	ack, err := dc.WaitContext(ctx)
	if err != nil {
		s.t.Fatalf("confirm of publish to %q with key %q: %v", exchange, key, err)
	}
	return ack
}

func (s *Session) publish(exchange, key string, p amqp091.Publishing, opts []PublishOption) *amqp091.DeferredConfirmation {
	s.t.Helper()
	var o publication
	for _, f := range opts {
		f(&o)
	}
	if s.persistent && p.DeliveryMode == 0 {
		p.DeliveryMode = amqp091.Persistent
	}
	ctx, cancel := s.ctx()
	defer cancel()
	dc, err := s.PublishWithDeferredConfirmWithContext(ctx, exchange, key, o.mandatory, false, p)
	if err != nil {
		s.t.Fatalf("publish to %q with key %q: %v", exchange, key, err)
	}
	return dc
}

// TryPublish publishes p on ch, which must be in confirm mode, for a test
// that expects a refusal: it returns nil once the broker acks the
// publish, and otherwise the error that closed the channel (or its
// connection), waiting up to Wait for it.
func TryPublish(ch *amqp091.Channel, exchange, key string, p amqp091.Publishing) error {
	closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, false, false, p)
	if err != nil {
		return err
	}
	if ack, err := dc.WaitContext(ctx); ack {
		return nil
	} else if err != nil && !errors.Is(err, amqp091.ErrClosed) {
		return err
	}
	select {
	case e := <-closed:
		if e == nil {
			return amqp091.ErrClosed
		}
		return e
	case <-ctx.Done():
		return errors.New("publish neither confirmed nor refused")
	}
}

// PublishBodies publishes a message with each body, in order, to queue
// through the default exchange.
func (s *Session) PublishBodies(queue string, bodies ...string) {
	s.t.Helper()
	for _, b := range bodies {
		s.Publish("", queue, amqp091.Publishing{Body: []byte(b)})
	}
}

// --- getting ---

// Get takes the head of queue with basic.get, to be acknowledged, and
// fails the test on get-empty.
func (s *Session) Get(queue string) amqp091.Delivery {
	s.t.Helper()
	d, ok := s.TryGet(queue)
	if !ok {
		s.t.Fatalf("get %q: empty, want a message", queue)
	}
	return d
}

// GetNoAck is Get with no-ack: the broker forgets the message as it sends
// it.
func (s *Session) GetNoAck(queue string) amqp091.Delivery {
	s.t.Helper()
	d, ok, err := s.Channel.Get(queue, true)
	if err != nil {
		s.t.Fatalf("get %q: %v", queue, err)
	}
	if !ok {
		s.t.Fatalf("get %q: empty, want a message", queue)
	}
	return d
}

// TryGet is Get that returns ok false on get-empty.
func (s *Session) TryGet(queue string) (d amqp091.Delivery, ok bool) {
	s.t.Helper()
	d, ok, err := s.Channel.Get(queue, false)
	if err != nil {
		s.t.Fatalf("get %q: %v", queue, err)
	}
	return d, ok
}

// GetN takes n messages of queue with Get.
func (s *Session) GetN(queue string, n int) []amqp091.Delivery {
	s.t.Helper()
	out := make([]amqp091.Delivery, n)
	for i := range out {
		out[i] = s.Get(queue)
	}
	return out
}

// Expect takes one message of queue per body in want with Get and fails
// the test unless their bodies are want, in order.
func (s *Session) Expect(queue string, want ...string) []amqp091.Delivery {
	s.t.Helper()
	out := make([]amqp091.Delivery, len(want))
	for i, w := range want {
		d, ok := s.TryGet(queue)
		if !ok {
			s.t.Fatalf("get %q: empty, want %q (message %d of %q)", queue, w, i+1, want)
		}
		if string(d.Body) != w {
			s.t.Fatalf("get %q: %q, want %q (message %d of %q)", queue, d.Body, w, i+1, want)
		}
		out[i] = d
	}
	return out
}

// WantEmpty fails the test unless a no-ack basic.get of queue answers
// get-empty.
func (s *Session) WantEmpty(queue string) {
	s.t.Helper()
	d, ok, err := s.Channel.Get(queue, true)
	if err != nil {
		s.t.Fatalf("get %q: %v", queue, err)
	}
	if ok {
		s.t.Fatalf("get %q: got %q, want get-empty", queue, d.Body)
	}
}

// Drain takes every ready message of queue with no-ack basic.gets until
// get-empty and returns their bodies in order (nil for none).
func (s *Session) Drain(queue string) []string {
	s.t.Helper()
	var out []string
	for _, d := range s.DrainDeliveries(queue) {
		out = append(out, string(d.Body))
	}
	return out
}

// DrainDeliveries is Drain returning the deliveries.
func (s *Session) DrainDeliveries(queue string) []amqp091.Delivery {
	s.t.Helper()
	var out []amqp091.Delivery
	for {
		d, ok, err := s.Channel.Get(queue, true)
		if err != nil {
			s.t.Fatalf("get %q: %v", queue, err)
		}
		if !ok {
			return out
		}
		out = append(out, d)
	}
}

// WantDrain drains queue and fails the test unless the bodies are want,
// in order.
func (s *Session) WantDrain(queue string, want ...string) {
	s.t.Helper()
	if got := s.Drain(queue); !slices.Equal(got, want) {
		s.t.Fatalf("queue %q holds %q, want %q", queue, got, want)
	}
}
