// Tests of scheduled delivery: x-delayed-message exchanges.

package broker_test

// Tests of delayed exchanges (x-delayed-message, as the
// rabbitmq-delayed-message-exchange plugin's clients use them): the
// declaration and its validation, when a message is held and when it is
// routed at once, that nothing is delivered before its due time and
// everything is at it, the order of release, what the released message
// looks like, mandatory, the alternate exchange at release, publisher
// confirms, messages_delayed, and the holding queue staying out of
// clients' reach. The restart tests are in delayed_restart_test.go.

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
)

// The plugin's validate/1: x-delayed-type must name an existing type
// other than x-delayed-message (406 with its texts); an unknown name is
// exchange.declare's 503 for an unknown type. A redeclare must be
// equivalent in x-delayed-type too (beyond the plugin, which takes any).
func TestDelayedDeclareValidation(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t)
	for _, tc := range []struct {
		name string
		args amqp091.Table
		code int
		text string
	}{
		{"missing", nil, 406, "PRECONDITION_FAILED - Invalid argument, 'x-delayed-type' must be an existing exchange type"},
		{"not-a-string", amqp091.Table{"x-delayed-type": int32(1)}, 406, "PRECONDITION_FAILED - Invalid argument, 'x-delayed-type' must be an existing exchange type"},
		{"itself", amqp091.Table{"x-delayed-type": "x-delayed-message"}, 406, "PRECONDITION_FAILED - Invalid argument, 'x-delayed-message' can't be used for 'x-delayed-type'"},
		{"unknown", amqp091.Table{"x-delayed-type": "x-nope"}, 503, "COMMAND_INVALID - unknown exchange type 'x-nope'"},
	} {
		c := b.Session(t)
		err := c.ExchangeDeclare("bad-"+tc.name, "x-delayed-message", false, false, false, false, tc.args)
		tlWantChannelError(t, err, tc.code, tc.text)
		if _, err := b.Broker.Exchange("/", "bad-"+tc.name); err == nil {
			t.Fatalf("%s: exchange declared although refused", tc.name)
		}
	}
	for _, kind := range []string{"direct", "topic", "fanout", "headers"} {
		sdDeclare(t, ch, "d-"+kind, kind, nil)
		sdDeclare(t, ch, "d-"+kind, kind, nil) // an equivalent redeclare
		xi, err := b.Broker.Exchange("/", "d-"+kind)
		if err != nil || xi.Type != "x-delayed-message" || xi.Arguments[0].Value != kind || xi.MessagesDelayed != 0 || !xi.Delayed {
			t.Fatalf("d-%s: %+v, %v; want type x-delayed-message with x-delayed-type %s", kind, xi, err, kind)
		}
	}
	c := b.Session(t)
	err := c.ExchangeDeclare("d-direct", "x-delayed-message", false, false, false, false, amqp091.Table{"x-delayed-type": "topic"})
	tlWantChannelError(t, err, 406, "PRECONDITION_FAILED - inequivalent arg 'x-delayed-type' for exchange 'd-direct' in vhost '/': received the value 'topic' of type 'longstr' but current is the value 'direct' of type 'longstr'")
	c = b.Session(t)
	err = c.ExchangeDeclare("d-direct", "direct", false, false, false, false, nil)
	tlWantChannelError(t, err, 406, "PRECONDITION_FAILED - inequivalent arg 'type' for exchange 'd-direct' in vhost '/': received 'direct' but current is 'x-delayed-message'")
}

// x-delay: the message is held until publish + delay, not delivered a
// millisecond before and delivered at it, with x-delay negated (a long),
// its other properties, routing key and exchange as published. Every
// header form the plugin takes holds it; those it does not, and a delay
// of 0 or less, route it at once.
func TestDelayedXDelay(t *testing.T) {
	t.Parallel()
	clk := brokertest.NewClock()
	b := brokertest.Start(t, brokertest.Config{Clock: clk})
	ch := b.Session(t)
	sdDeclare(t, ch, "dx", "direct", nil)
	ch.Declare("q", nil)
	ch.Bind("q", "k", "dx", nil)
	sub := b.Session(t, brokertest.NoConfirm)
	msgs := dvConsume(t, sub, "q", "", true, nil)
	start := clk.Now()

	held := []struct {
		name string
		v    any
	}{
		{"long", int64(5000)}, {"int", int32(5000)}, {"uint", uint32(5000)}, {"short", int16(5000)},
		{"ushort", uint16(5000)}, {"ubyte", uint8(200)}, {"longstr", "5000"}, {"double", 5000.9}, {"float", float32(5000.5)},
	}
	for _, h := range held {
		ch.Publish("dx", "k", amqp091.Publishing{Body: []byte(h.name), Headers: amqp091.Table{"x-delay": h.v, "keep": "me"},
			ContentType: "text/plain", CorrelationId: "c-" + h.name, Priority: 3})
	}
	now := []struct {
		name string
		v    any
	}{
		{"zero", int64(0)}, {"negative", int32(-5)}, {"byte", int8(100)}, {"nan-string", "soon"}, {"decimal-string", "1.5"},
		{"bool", true}, {"over-10-years", int64(10*365*24*3600*1000 + 1)},
	}
	for _, h := range now {
		ch.Publish("dx", "k", sdPub(h.name, amqp091.Table{"x-delay": h.v}))
	}
	ch.Publish("dx", "k", sdPub("no-header", nil))
	got := dvBodies(dvRecvN(t, msgs, len(now)+1))
	want := []string{"zero", "negative", "byte", "nan-string", "decimal-string", "bool", "over-10-years", "no-header"}
	if !slices.Equal(got, want) {
		t.Fatalf("routed at once %q, want %q", got, want)
	}
	sdWantHeld(t, b, "dx", int64(len(held)))

	sdAdvanceTo(b, clk, start, 200*time.Millisecond-time.Millisecond)
	tlNoRecv(t, sub, msgs, "a 200 ms delay at 199 ms")
	sdAdvanceTo(b, clk, start, 200*time.Millisecond)
	if d := dvRecv(t, msgs); string(d.Body) != "ubyte" || sdXDelay(t, d) != -200 {
		t.Fatalf("at 200 ms got %q x-delay %v, want ubyte -200", d.Body, d.Headers["x-delay"])
	}
	sdAdvanceTo(b, clk, start, 5*time.Second-time.Millisecond)
	tlNoRecv(t, sub, msgs, "5 s delays at 4.999 s")
	sdWantHeld(t, b, "dx", int64(len(held)-1))
	sdAdvanceTo(b, clk, start, 5*time.Second)
	ds := dvRecvN(t, msgs, len(held)-1)
	var bodies []string
	for _, d := range ds {
		bodies = append(bodies, string(d.Body))
		if x := sdXDelay(t, d); x != -5000 {
			t.Fatalf("%q: x-delay %d, want -5000", d.Body, x)
		}
		if d.Headers["keep"] != "me" || d.ContentType != "text/plain" || d.CorrelationId != "c-"+string(d.Body) || d.Priority != 3 {
			t.Fatalf("%q: properties changed: %+v", d.Body, d)
		}
		if d.Exchange != "dx" || d.RoutingKey != "k" || d.Redelivered {
			t.Fatalf("%q: exchange %q key %q redelivered %v, want dx k false", d.Body, d.Exchange, d.RoutingKey, d.Redelivered)
		}
	}
	// Published in this order, due at the same millisecond.
	if want := []string{"long", "int", "uint", "short", "ushort", "longstr", "double", "float"}; !slices.Equal(bodies, want) {
		t.Fatalf("released %q, want %q", bodies, want)
	}
	sdWantHeld(t, b, "dx", 0)
	if st := b.Broker.Stats(); st.Delayed != uint64(len(held)) || st.DelayedReleased != uint64(len(held)) || st.DelayedDropped != 0 {
		t.Fatalf("delayed %d released %d dropped %d, want %d %d 0", st.Delayed, st.DelayedReleased, st.DelayedDropped, len(held), len(held))
	}
}

// x-delivery-time: an absolute due time in Unix ms (an integer or a
// numeric string); one in the past routes at once; with x-delay too, it
// wins. A message held by it keeps its x-delay (negated only if it was a
// delay).
func TestDelayedDeliveryTime(t *testing.T) {
	t.Parallel()
	clk := brokertest.NewClock()
	b := brokertest.Start(t, brokertest.Config{Clock: clk})
	ch := b.Session(t)
	sdDeclare(t, ch, "dx", "fanout", nil)
	ch.Declare("q", nil)
	ch.Bind("q", "", "dx", nil)
	sub := b.Session(t, brokertest.NoConfirm)
	msgs := dvConsume(t, sub, "q", "", true, nil)
	start := clk.Now()
	at := func(d time.Duration) int64 { return start.Add(d).UnixMilli() }

	ch.Publish("dx", "", sdPub("past", amqp091.Table{"x-delivery-time": at(-time.Second), "x-delay": int64(1000)}))
	ch.Publish("dx", "", sdPub("now", amqp091.Table{"x-delivery-time": at(0)}))
	if got := dvBodies(dvRecvN(t, msgs, 2)); !slices.Equal(got, []string{"past", "now"}) {
		t.Fatalf("routed at once %q, want past, now", got)
	}
	ch.Publish("dx", "", sdPub("at-3s", amqp091.Table{"x-delivery-time": at(3 * time.Second)}))
	ch.Publish("dx", "", sdPub("at-2s-string", amqp091.Table{"x-delivery-time": fmt.Sprint(at(2 * time.Second))}))
	ch.Publish("dx", "", sdPub("wins-over-delay", amqp091.Table{"x-delivery-time": at(4 * time.Second), "x-delay": int64(1000)}))
	ch.Publish("dx", "", sdPub("bad-time-uses-delay", amqp091.Table{"x-delivery-time": "tomorrow", "x-delay": int32(1000)}))
	sdWantHeld(t, b, "dx", 4)

	for _, step := range []struct {
		at   time.Duration
		want string
	}{{time.Second, "bad-time-uses-delay"}, {2 * time.Second, "at-2s-string"}, {3 * time.Second, "at-3s"}, {4 * time.Second, "wins-over-delay"}} {
		sdAdvanceTo(b, clk, start, step.at-time.Millisecond)
		tlNoRecv(t, sub, msgs, fmt.Sprintf("%s due at %v", step.want, step.at))
		sdAdvanceTo(b, clk, start, step.at)
		d := dvRecv(t, msgs)
		if string(d.Body) != step.want {
			t.Fatalf("at %v got %q, want %q", step.at, d.Body, step.want)
		}
		switch step.want {
		case "wins-over-delay", "bad-time-uses-delay":
			if x := sdXDelay(t, d); x != -1000 {
				t.Fatalf("%s: x-delay %d, want -1000", d.Body, x)
			}
		default:
			if _, ok := d.Headers["x-delay"]; ok {
				t.Fatalf("%s: x-delay %v added", d.Body, d.Headers["x-delay"])
			}
		}
	}
	sdWantHeld(t, b, "dx", 0)
}

// Messages are released in due-time order, and those due at the same
// millisecond in publish order, also those that wait in the store (the
// page window is 4), which are read ahead of their due time.
func TestDelayedReleaseOrder(t *testing.T) {
	t.Parallel()
	clk := brokertest.NewClock()
	b := brokertest.Start(t, brokertest.Config{Clock: clk})
	ch := b.Session(t, brokertest.Persistent)
	sdDeclare(t, ch, "dx", "topic", nil, brokertest.Durable)
	ch.Declare("q", nil, brokertest.Durable)
	ch.Bind("q", "a.*", "dx", nil)
	// Within the first horizon scan (2 s): each is armed as it pages out.
	const n = 60
	type msg struct {
		delay int64
		i     int
	}
	var ms []msg
	for i := range n {
		d := int64((i*37)%19)*100 + int64(i%3) // 0..1802 ms, with ties
		ms = append(ms, msg{d, i})
		ch.Publish("dx", "a.b", sdPub(fmt.Sprintf("%d-%d", d, i), sdDelay(d)))
	}
	var immediate int
	for _, m := range ms {
		if m.delay <= 0 {
			immediate++
		}
	}
	resident, held, armed := b.Broker.HeldResidentForTest("/", "dx")
	if held != n-immediate || resident >= held {
		t.Fatalf("%d held, %d of them in memory; want %d, most paged", held, resident, n-immediate)
	}
	brokertest.Eventually(t, "every paged message's timer armed", func() bool {
		resident, held, armed = b.Broker.HeldResidentForTest("/", "dx")
		return armed == held-resident
	})
	sdRunClock(b, clk, 2*time.Second)
	tlEventuallyReady(t, b, "q", n)
	slices.SortStableFunc(ms, func(a, b msg) int { return cmp.Compare(max(a.delay, 0), max(b.delay, 0)) })
	var want []string
	for _, m := range ms {
		if m.delay <= 0 {
			continue
		}
		want = append(want, fmt.Sprintf("%d-%d", m.delay, m.i))
	}
	got := ch.Drain("q")
	var gotHeld []string
	for _, g := range got {
		if !strings.HasPrefix(g, "0-") {
			gotHeld = append(gotHeld, g)
		}
	}
	if !slices.Equal(gotHeld, want) {
		t.Fatalf("released\n%q\nwant\n%q", gotHeld, want)
	}
}

// mandatory: a held message is returned (312 NO_ROUTE) and not held when
// the exchange routes it to no queue at publish; otherwise it is held and
// not returned (the plugin returns every delayed mandatory message).
func TestDelayedMandatory(t *testing.T) {
	t.Parallel()
	clk := brokertest.NewClock()
	b := brokertest.Start(t, brokertest.Config{Clock: clk})
	ch := b.Session(t)
	returns := ch.NotifyReturn(make(chan amqp091.Return, 4))
	sdDeclare(t, ch, "dx", "direct", nil)
	ch.Declare("q", nil)
	ch.Bind("q", "k", "dx", nil)
	ch.Publish("dx", "nowhere", sdPub("unroutable", sdDelay(1000)), brokertest.Mandatory)
	select {
	case r := <-returns:
		if r.ReplyCode != 312 || r.ReplyText != "NO_ROUTE" || string(r.Body) != "unroutable" || r.Headers["x-delay"] != int64(1000) {
			t.Fatalf("return %d %q %q %v, want 312 NO_ROUTE unroutable with x-delay 1000", r.ReplyCode, r.ReplyText, r.Body, r.Headers)
		}
	case <-time.After(brokertest.Wait):
		t.Fatal("no basic.return for an unroutable delayed mandatory message")
	}
	sdWantHeld(t, b, "dx", 0)
	ch.Publish("dx", "k", sdPub("routable", sdDelay(1000)), brokertest.Mandatory)
	sdWantHeld(t, b, "dx", 1)
	clk.Advance(time.Second)
	tlSettleTimers(b)
	tlEventuallyReady(t, b, "q", 1)
	ch.WantDrain("q", "routable")
	select {
	case r := <-returns:
		t.Fatalf("returned %q (%d), want no return", r.Body, r.ReplyCode)
	default:
	}
	if st := b.Broker.Stats(); st.Returned != 1 {
		t.Fatalf("returned count %d, want 1", st.Returned)
	}

	// An alternate exchange that would take it now counts as a route: held.
	ch.DeclareExchange("ae", "fanout", nil)
	ch.Declare("aeq", nil)
	ch.Bind("aeq", "", "ae", nil)
	sdDeclare(t, ch, "dae", "direct", amqp091.Table{"alternate-exchange": "ae"})
	ch.Publish("dae", "nowhere", sdPub("to-ae", sdDelay(1000)), brokertest.Mandatory)
	sdWantHeld(t, b, "dae", 1)
	ch.WantReady("aeq", 0)
	clk.Advance(time.Second)
	tlSettleTimers(b)
	tlEventuallyReady(t, b, "aeq", 1)
	ch.WantDrain("aeq", "to-ae")
	select {
	case r := <-returns:
		t.Fatalf("returned %q (%d), want no return", r.Body, r.ReplyCode)
	default:
	}
}

// In real time, with the broker's own scheduler: each message comes no
// earlier than its delay after it was published, in due-time order.
func TestDelayedWallClock(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t, brokertest.Persistent)
	sdDeclare(t, ch, "dx", "direct", nil, brokertest.Durable)
	ch.Declare("q", nil, brokertest.Durable)
	ch.Bind("q", "k", "dx", nil)
	sub := b.Session(t, brokertest.NoConfirm)
	msgs := dvConsume(t, sub, "q", "", true, nil)
	start := time.Now()
	for _, d := range []int64{300, 100, 200} {
		ch.Publish("dx", "k", sdPub(fmt.Sprint(d), sdDelay(d)))
	}
	for _, want := range []int64{100, 200, 300} {
		d := dvRecv(t, msgs)
		tlNotBefore(t, "message delayed "+string(d.Body)+" ms", start, time.Duration(want)*time.Millisecond)
		if string(d.Body) != fmt.Sprint(want) {
			t.Fatalf("got %q, want %d", d.Body, want)
		}
	}
}

// Routing is the underlying type's, at release: the exchange's bindings
// then (one removed since the publish no longer counts, one added does),
// headers matching with binding arguments, and the alternate exchange
// (argument or policy) for what no binding takes, at release only (the
// plugin's publish also hits it at once). What reaches no queue then is
// dropped and counted.
func TestDelayedRoutingAtRelease(t *testing.T) {
	t.Parallel()
	clk := brokertest.NewClock()
	b := brokertest.Start(t, brokertest.Config{Clock: clk})
	ch := b.Session(t)
	ch.DeclareExchange("ae", "fanout", nil)
	ch.Declare("aeq", nil)
	ch.Bind("aeq", "", "ae", nil)
	sdDeclare(t, ch, "dh", "headers", amqp091.Table{"alternate-exchange": "ae"})
	ch.Declare("old", nil)
	ch.Declare("new", nil)
	ch.Bind("old", "", "dh", amqp091.Table{"x-match": "all", "kind": "a"})
	start := clk.Now()
	ch.Publish("dh", "", sdPub("a", amqp091.Table{"x-delay": int64(1000), "kind": "a"}))
	ch.Publish("dh", "", sdPub("b", amqp091.Table{"x-delay": int64(1000), "kind": "b"}))
	ch.WantReady("aeq", 0) // not at publish
	if err := ch.QueueUnbind("old", "", "dh", amqp091.Table{"x-match": "all", "kind": "a"}); err != nil {
		t.Fatal(err)
	}
	ch.Bind("new", "", "dh", amqp091.Table{"x-match": "any", "kind": "a"})
	sdAdvanceTo(b, clk, start, time.Second)
	tlEventuallyReady(t, b, "new", 1)
	tlEventuallyReady(t, b, "aeq", 1)
	ch.WantDrain("new", "a")
	ch.WantDrain("aeq", "b")
	ch.WantReady("old", 0)

	// No alternate exchange, no binding: dropped at release, counted.
	sdDeclare(t, ch, "lonely", "fanout", nil)
	ch.Declare("gone", nil)
	ch.Bind("gone", "", "lonely", nil)
	ch.Publish("lonely", "", sdPub("lost", sdDelay(500)))
	if _, err := ch.QueueDelete("gone", false, false, false); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	tlSettleTimers(b)
	sdWantHeld(t, b, "lonely", 0)
	if st := b.Broker.Stats(); st.DelayedDropped != 1 || st.DelayedReleased != 2 {
		t.Fatalf("dropped %d released %d, want 1 2", st.DelayedDropped, st.DelayedReleased)
	}

	// An alternate exchange by policy.
	tlSetPolicy(t, b, broker.Policy{Name: "ae", Pattern: "^lonely$", ApplyTo: "exchanges", Definition: map[string]any{"alternate-exchange": "ae"}})
	ch.Publish("lonely", "", sdPub("by-policy", sdDelay(500)))
	clk.Advance(time.Second)
	tlSettleTimers(b)
	tlEventuallyReady(t, b, "aeq", 1)
	ch.WantDrain("aeq", "by-policy")
}

// A persistent message to a durable delayed exchange is confirmed once it
// is held (stored), long before its release.
func TestDelayedConfirmBeforeRelease(t *testing.T) {
	t.Parallel()
	clk := brokertest.NewClock()
	b := brokertest.Start(t, brokertest.Config{Clock: clk})
	ch := b.Session(t, brokertest.Persistent)
	sdDeclare(t, ch, "dx", "direct", nil, brokertest.Durable)
	ch.Declare("q", nil, brokertest.Durable)
	ch.Bind("q", "k", "dx", nil)
	for i := range 10 {
		// Publish waits for the ack; the clock stands still meanwhile.
		ch.Publish("dx", "k", sdPub(fmt.Sprint(i), sdDelay(int64(60_000+i))))
	}
	sdWantHeld(t, b, "dx", 10)
	ch.WantReady("q", 0)
	clk.Advance(time.Hour)
	tlSettleTimers(b)
	tlEventuallyReady(t, b, "q", 10)
}

// The holding queue is no client's: not listed, not declarable, and a
// passive declare, consume, purge, bind, get or delete by its name finds
// no queue (delete-ok for a queue that does not exist, as RabbitMQ) and
// leaves the held messages alone.
func TestDelayedHoldIsInternal(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t)
	sdDeclare(t, ch, "dx", "direct", nil, brokertest.Durable)
	ch.Publish("dx", "k", sdPub("held", sdDelay(600_000)))
	for _, q := range b.Broker.Queues("") {
		t.Fatalf("queue %q listed, want none", q.Name)
	}
	const hold = "amq.delayed/dx"
	for _, tc := range []struct {
		op   string
		do   func(c *brokertest.Session) error
		code int
		text string
	}{
		{"declare", func(c *brokertest.Session) error {
			_, err := c.QueueDeclare(hold, true, false, false, false, nil)
			return err
		}, 403, "ACCESS_REFUSED - queue name 'amq.delayed/dx' contains reserved prefix 'amq.*'"},
		{"passive", func(c *brokertest.Session) error {
			_, err := c.QueueDeclarePassive(hold, true, false, false, false, nil)
			return err
		}, 404, "NOT_FOUND - no queue 'amq.delayed/dx' in vhost '/'"},
		{"consume", func(c *brokertest.Session) error {
			_, err := c.Consume(hold, "", false, false, false, false, nil)
			return err
		}, 404, "NOT_FOUND - no queue 'amq.delayed/dx' in vhost '/'"},
		{"get", func(c *brokertest.Session) error {
			_, _, err := c.Channel.Get(hold, true)
			return err
		}, 404, "NOT_FOUND - no queue 'amq.delayed/dx' in vhost '/'"},
		{"purge", func(c *brokertest.Session) error {
			_, err := c.QueuePurge(hold, false)
			return err
		}, 404, "NOT_FOUND - no queue 'amq.delayed/dx' in vhost '/'"},
		{"bind", func(c *brokertest.Session) error { return c.QueueBind(hold, "k", "amq.direct", false, nil) },
			404, "NOT_FOUND - no queue 'amq.delayed/dx' in vhost '/'"},
	} {
		tlWantChannelError(t, tc.do(b.Session(t)), tc.code, tc.text)
	}
	if n, err := b.Session(t).QueueDelete(hold, false, false, false); err != nil || n != 0 {
		t.Fatalf("delete of the holding queue's name: %d, %v; want 0 messages, no error", n, err)
	}
	sdWantHeld(t, b, "dx", 1)
	if _, err := b.Broker.Queue("/", hold); err == nil {
		t.Fatal("the holding queue is found by the API")
	}
}
