// Helpers of the scheduled delivery tests (sd*).

package broker_test

// Helpers, prefixed sd, for the tests of delayed exchanges
// (x-delayed-message): declaring one, publishing with a delay, reading
// how many messages it holds. Where time is the point the broker runs on
// a brokertest.Clock that the test moves: a held message must not come
// before its due time (asserted after the clock reaches the millisecond
// before it) and must come once the clock reaches it (awaited as a
// delivery).

import (
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker/brokertest"
)

// sdDeclare declares delayed exchange name routing as kind, with extra
// arguments args (may be nil).
func sdDeclare(t testing.TB, ch *brokertest.Session, name, kind string, args amqp091.Table, opts ...brokertest.DeclareOption) {
	t.Helper()
	a := amqp091.Table{"x-delayed-type": kind}
	for k, v := range args {
		a[k] = v
	}
	ch.DeclareExchange(name, "x-delayed-message", a, opts...)
}

// sdPub is a publishing with body and headers h.
func sdPub(body string, h amqp091.Table) amqp091.Publishing {
	return amqp091.Publishing{Body: []byte(body), Headers: h}
}

// sdDelay is the headers of a message delayed by ms (a long).
func sdDelay(ms int64) amqp091.Table { return amqp091.Table{"x-delay": ms} }

// sdHeld returns how many messages delayed exchange name of vhost "/"
// holds (messages_delayed), failing the test if it is not one.
func sdHeld(t testing.TB, b *brokertest.Instance, name string) int64 {
	t.Helper()
	xi, err := b.Broker.Exchange("/", name)
	if err != nil {
		t.Fatalf("exchange %q: %v", name, err)
	}
	if !xi.Delayed {
		t.Fatalf("exchange %q (%s) is not a delayed exchange", name, xi.Type)
	}
	return xi.MessagesDelayed
}

// sdWantHeld fails the test unless delayed exchange name holds want.
func sdWantHeld(t testing.TB, b *brokertest.Instance, name string, want int64) {
	t.Helper()
	if got := sdHeld(t, b, name); got != want {
		t.Fatalf("exchange %q holds %d messages, want %d", name, got, want)
	}
}

// sdAdvanceTo moves clk to start+at and lets every timer due by then
// fire: what is due has been released (its copies may still be on their
// way into their queues: await them).
func sdAdvanceTo(b *brokertest.Instance, clk *brokertest.Clock, start time.Time, at time.Duration) {
	if d := start.Add(at).Sub(clk.Now()); d > 0 {
		clk.Advance(d)
	}
	tlSettleTimers(b)
}

// sdRunClock moves clk ahead by d in steps of 10 ms, letting the timers
// of each step fire, as time passes: messages that wait in the store are
// read ahead of their due time (100 ms) as they would be, rather than
// after those in memory that a jump of the clock fires at once.
func sdRunClock(b *brokertest.Instance, clk *brokertest.Clock, d time.Duration) {
	const step = 10 * time.Millisecond
	for ; d > 0; d -= step {
		clk.Advance(min(step, d))
		tlSettleTimers(b)
	}
}

// sdXDelay returns the x-delay header of d, failing unless it is a long.
func sdXDelay(t testing.TB, d amqp091.Delivery) int64 {
	t.Helper()
	v, ok := d.Headers["x-delay"]
	if !ok {
		t.Fatalf("delivery %q has no x-delay header (headers %v)", d.Body, d.Headers)
	}
	n, ok := v.(int64)
	if !ok {
		t.Fatalf("delivery %q: x-delay is %T %v, want a long", d.Body, v, v)
	}
	return n
}
