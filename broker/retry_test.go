package broker_test

// Delayed retry (broker/queue/retry.go): RabbitMQ 4.3's
// x-delayed-retry-type/-min/-max and LavinMQ's x-delayed-retry-min/
// -multiplier/-max, with brokerd's jitter, on classic and quorum queues.
// Time is the point of most of these tests, so the broker runs on a
// brokertest.Clock the test moves: a returned message must not be back
// before its due time (asserted with a basic.get once the clock reaches the
// millisecond before it, every timer due by then having fired) and must be
// back at it.

import (
	"errors"
	"slices"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
)

// ryEnv is a broker on a fake clock and a session to it.
type ryEnv struct {
	t   *testing.T
	b   *brokertest.Instance
	clk *brokertest.Clock
	ch  *brokertest.Session
}

func ryStart(t *testing.T) *ryEnv {
	clk := brokertest.NewClock()
	b := brokertest.Start(t, brokertest.Config{Clock: clk})
	return &ryEnv{t: t, b: b, clk: clk, ch: b.Session(t)}
}

// advance moves the clock by d and lets every timer due by then fire.
func (e *ryEnv) advance(d time.Duration) {
	e.clk.Advance(d)
	tlSettleTimers(e.b)
}

// info returns queue q of vhost "/" as the management API sees it, once
// the session's settlements sent before are settled.
func (e *ryEnv) info(q string) broker.QueueInfo {
	e.t.Helper()
	e.ch.Sync()
	qi, err := e.b.Broker.Queue("/", q)
	if err != nil {
		e.t.Fatalf("queue %q: %v", q, err)
	}
	return qi
}

// wantDelayed fails unless q holds want messages waiting out a delay.
func (e *ryEnv) wantDelayed(q string, want int) {
	e.t.Helper()
	if qi := e.info(q); qi.Delayed != want {
		e.t.Fatalf("queue %q: %d delayed (ready %d, unacked %d), want %d", q, qi.Delayed, qi.Ready, qi.Unacked, want)
	}
}

// backAfter asserts that the message returned to q at the clock's current
// time comes back exactly d later: not at d - 1 ms, at d. It returns its
// delivery (by basic.get, to be settled).
func (e *ryEnv) backAfter(q string, d time.Duration) amqp091.Delivery {
	e.t.Helper()
	e.ch.WantEmpty(q) // also settles the return, sent just before
	if d > time.Millisecond {
		e.advance(d - time.Millisecond)
		e.ch.WantEmpty(q)
	}
	e.advance(time.Millisecond)
	return e.ch.Get(q)
}

// ryCounts returns d's x-delivery-count and x-acquired-count headers (-1
// where absent), failing unless each present one is a long.
func ryCounts(t testing.TB, d amqp091.Delivery) (delivery, acquired int64) {
	t.Helper()
	get := func(k string) int64 {
		v, ok := d.Headers[k]
		if !ok {
			return -1
		}
		n, ok := v.(int64)
		if !ok {
			t.Fatalf("message %q: %s is %T %v, want a long", d.Body, k, v, v)
		}
		return n
	}
	return get("x-delivery-count"), get("x-acquired-count")
}

// Each backoff shape, on classic and quorum queues: a rejected message
// comes back no earlier and no later than its delay, which follows the
// formula; a parked message does not block the one behind it.
func TestRetryBackoffShapes(t *testing.T) {
	t.Parallel()
	ms := func(ns ...int) []time.Duration {
		out := make([]time.Duration, len(ns))
		for i, n := range ns {
			out[i] = time.Duration(n) * time.Millisecond
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		args   amqp091.Table
		delays []time.Duration
	}{
		// RabbitMQ 4.3: min(min × delivery-count, max) (its test
		// delayed_retry_backoff: 1000, 2000, 2500).
		{"rabbitmq linear", amqp091.Table{"x-delayed-retry-type": "all", "x-delayed-retry-min": 1000, "x-delayed-retry-max": 2500},
			ms(1000, 2000, 2500, 2500)},
		// RabbitMQ 4.3 without a max: max = min, a constant delay.
		{"rabbitmq no max", amqp091.Table{"x-delayed-retry-type": "failed", "x-delayed-retry-min": int32(300)}, ms(300, 300, 300)},
		// LavinMQ: min alone enables linear backoff, uncapped.
		{"lavinmq linear", amqp091.Table{"x-delayed-retry-min": int16(200)}, ms(200, 400, 600, 800)},
		{"lavinmq constant", amqp091.Table{"x-delayed-retry-min": 250, "x-delayed-retry-multiplier": 1}, ms(250, 250, 250)},
		// LavinMQ's doc: min 500, multiplier 2 → 500, 1 s, 2 s, 4 s,
		// here capped at 3 s.
		{"lavinmq exponential capped", amqp091.Table{"x-delayed-retry-min": 500, "x-delayed-retry-multiplier": 2, "x-delayed-retry-max": 3000},
			ms(500, 1000, 2000, 3000, 3000)},
	} {
		for _, qtype := range []string{"classic", "quorum"} {
			t.Run(tc.name+"/"+qtype, func(t *testing.T) {
				t.Parallel()
				e := ryStart(t)
				e.ch.Declare("q", tc.args, brokertest.Type(qtype), brokertest.Durable)
				e.ch.PublishBodies("q", "a", "b")
				d := e.ch.Get("q")
				if string(d.Body) != "a" {
					t.Fatalf("got %q, want a", d.Body)
				}
				if dc, ac := ryCounts(t, d); dc != -1 || ac != -1 {
					t.Fatalf("first delivery: x-delivery-count %d, x-acquired-count %d, want neither", dc, ac)
				}
				d.Reject(true)
				// b is not held up behind a: delivered at once.
				b := e.ch.Get("q")
				if string(b.Body) != "b" || b.Redelivered {
					t.Fatalf("behind the parked a: got %q (redelivered %v), want b", b.Body, b.Redelivered)
				}
				b.Ack(false)
				e.wantDelayed("q", 1)
				if qi := e.info("q"); qi.Ready != 0 || qi.Messages() != 1 {
					t.Fatalf("ready %d, messages %d: want 0 and 1 (a parked message is a message, not a ready one)", qi.Ready, qi.Messages())
				}
				for i, delay := range tc.delays {
					d = e.backAfter("q", delay)
					if string(d.Body) != "a" || !d.Redelivered {
						t.Fatalf("retry %d: got %q (redelivered %v), want a redelivered", i+1, d.Body, d.Redelivered)
					}
					if dc, ac := ryCounts(t, d); dc != int64(i+1) || ac != int64(i+1) {
						t.Fatalf("retry %d: x-delivery-count %d, x-acquired-count %d, want %d and %d", i+1, dc, ac, i+1, i+1)
					}
					e.wantDelayed("q", 0)
					d.Reject(true)
				}
				e.ch.WantEmpty("q")
				e.wantDelayed("q", 1)
			})
		}
	}
}

// Jitter takes up to its fraction off each delay, at random: never before
// delay × (1 - jitter), never after the delay.
func TestRetryJitter(t *testing.T) {
	t.Parallel()
	e := ryStart(t)
	e.ch.Declare("q", amqp091.Table{"x-delayed-retry-min": 1000, "x-delayed-retry-multiplier": 1, "x-delayed-retry-jitter": 0.5,
		"x-delivery-limit": -1})
	e.ch.PublishBodies("q", "a")
	e.ch.Get("q").Reject(true)
	seen := map[time.Duration]bool{}
	for range 20 {
		// Not back before 500 ms; back by 1000 ms, in one of the 50 ms
		// steps between.
		e.ch.WantEmpty("q")
		e.advance(499 * time.Millisecond)
		e.ch.WantEmpty("q")
		e.advance(time.Millisecond)
		var at time.Duration
		for at = 500 * time.Millisecond; ; at += 50 * time.Millisecond {
			if d, ok := e.ch.TryGet("q"); ok {
				d.Reject(true)
				break
			}
			if at >= time.Second {
				t.Fatal("not back 1000 ms after its return (jitter 0.5 of 1000 ms)")
			}
			e.advance(50 * time.Millisecond)
		}
		seen[at] = true
	}
	if len(seen) < 2 {
		t.Fatalf("20 retries all came back in the same 50 ms step %v: no jitter", seen)
	}
}

// RabbitMQ 4.3's types: failed delays rejects (and their delivery count
// goes up), not nacks; returned the reverse; a nack does not count as a
// delivery (x-delivery-count stays absent) but as an acquisition.
func TestRetryFailedReturned(t *testing.T) {
	t.Parallel()
	e := ryStart(t)
	args := func(kind string) amqp091.Table {
		return amqp091.Table{"x-delayed-retry-type": kind, "x-delayed-retry-min": 100, "x-delayed-retry-max": 1000}
	}
	e.ch.Declare("failed", args("failed"))
	e.ch.Declare("returned", args("returned"))
	e.ch.PublishBodies("failed", "f")
	e.ch.PublishBodies("returned", "r")

	// failed: a nack comes back at once, a reject after 100 ms.
	d := e.ch.Get("failed")
	d.Nack(false, true)
	d = e.ch.Get("failed")
	if dc, ac := ryCounts(t, d); dc != -1 || ac != 1 {
		t.Fatalf("failed, after a nack: x-delivery-count %d, x-acquired-count %d, want absent and 1", dc, ac)
	}
	d.Reject(true)
	d = e.backAfter("failed", 100*time.Millisecond)
	if dc, ac := ryCounts(t, d); dc != 1 || ac != 2 {
		t.Fatalf("failed, after a reject: x-delivery-count %d, x-acquired-count %d, want 1 and 2", dc, ac)
	}

	// returned: a reject comes back at once, a nack and a recover
	// after 100 ms (the delay follows the delivery count: 1 reject).
	d = e.ch.Get("returned")
	d.Reject(true)
	d = e.ch.Get("returned")
	if dc, ac := ryCounts(t, d); dc != 1 || ac != 1 {
		t.Fatalf("returned, after a reject: x-delivery-count %d, x-acquired-count %d, want 1 and 1", dc, ac)
	}
	d.Nack(false, true)
	d = e.backAfter("returned", 100*time.Millisecond)
	if dc, ac := ryCounts(t, d); dc != 1 || ac != 2 {
		t.Fatalf("returned, after a nack: x-delivery-count %d, x-acquired-count %d, want 1 and 2", dc, ac)
	}
	if err := e.ch.Recover(true); err != nil {
		t.Fatalf("recover: %v", err)
	}
	d = e.backAfter("returned", 100*time.Millisecond)
	if dc, ac := ryCounts(t, d); dc != 1 || ac != 3 {
		t.Fatalf("returned, after a recover: x-delivery-count %d, x-acquired-count %d, want 1 and 3", dc, ac)
	}
}

// The delivery limit counts failed deliveries only (RabbitMQ 4.3): the
// reject past it dead-letters with reason delivery_limit; nacks, which do
// not count, never do. Without a limit, a queue with retry takes 20.
func TestRetryDeliveryLimit(t *testing.T) {
	t.Parallel()
	e := ryStart(t)
	e.ch.Declare("dlq", nil)
	e.ch.Declare("q", tlDLX("dlq", amqp091.Table{"x-delayed-retry-type": "all", "x-delayed-retry-min": 10, "x-delivery-limit": 2}))
	e.ch.PublishBodies("q", "m")
	// 25 nacks: each comes back after 10 ms (the delivery count stays
	// 0), none dead-letters.
	d := e.ch.Get("q")
	for range 25 {
		d.Nack(false, true)
		d = e.backAfter("q", 10*time.Millisecond)
	}
	if dc, ac := ryCounts(t, d); dc != -1 || ac != 25 {
		t.Fatalf("after 25 nacks: x-delivery-count %d, x-acquired-count %d, want absent and 25", dc, ac)
	}
	// Two rejects come back (10, then 10: max defaults to min); the
	// third is over the limit of 2.
	for i := range 2 {
		d.Reject(true)
		d = e.backAfter("q", 10*time.Millisecond)
		if dc, _ := ryCounts(t, d); dc != int64(i+1) {
			t.Fatalf("reject %d: x-delivery-count %d", i+1, dc)
		}
	}
	d.Reject(true)
	e.ch.WantEmpty("q")
	e.wantDelayed("q", 0)
	dl := e.ch.Get("dlq")
	death := tlDeath(t, dl)
	if death["reason"] != "delivery_limit" || death["queue"] != "q" || death["count"] != int64(1) {
		t.Fatalf("x-death %v, want reason delivery_limit, queue q, count 1", death)
	}
	if dl.Headers["x-first-death-reason"] != "delivery_limit" {
		t.Fatalf("x-first-death-reason %v, want delivery_limit", dl.Headers["x-first-death-reason"])
	}

	// LavinMQ's arguments alone: every return counts (nacks too), and
	// the limit defaults to 20: the 21st return dead-letters.
	e.ch.Declare("lq", tlDLX("dlq", amqp091.Table{"x-delayed-retry-min": 1, "x-delayed-retry-multiplier": 1}))
	e.ch.PublishBodies("lq", "l")
	d = e.ch.Get("lq")
	for i := range 20 {
		if i%2 == 0 {
			d.Nack(false, true)
		} else {
			d.Reject(true)
		}
		d = e.backAfter("lq", time.Millisecond)
		if dc, ac := ryCounts(t, d); dc != int64(i+1) || ac != int64(i+1) {
			t.Fatalf("lavinmq return %d: x-delivery-count %d, x-acquired-count %d", i+1, dc, ac)
		}
	}
	d.Nack(false, true)
	e.ch.WantEmpty("lq")
	if death := tlDeath(t, e.ch.Get("dlq")); death["reason"] != "delivery_limit" || death["queue"] != "lq" {
		t.Fatalf("x-death %v, want reason delivery_limit from lq", death)
	}
}

// A channel closed with unacked deliveries is a failed delivery: under
// failed they are parked, with their delivery count up; the consumer
// timeout is a plain return (under failed: back at once).
func TestRetryChannelCloseAndTimeout(t *testing.T) {
	t.Parallel()
	e := ryStart(t)
	e.ch.Declare("q", amqp091.Table{"x-delayed-retry-type": "failed", "x-delayed-retry-min": 500, "x-consumer-timeout": 1000})
	e.ch.PublishBodies("q", "a", "b")
	sub := e.b.Session(t, brokertest.NoConfirm)
	msgs := dvConsume(t, sub, "q", "c", false, nil)
	dvRecv(t, msgs)
	dvRecv(t, msgs)
	if err := sub.Channel.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	brokertest.Eventually(t, "both messages parked", func() bool { return e.info("q").Delayed == 2 })
	e.ch.WantEmpty("q")
	e.advance(499 * time.Millisecond)
	e.ch.WantEmpty("q")
	e.advance(time.Millisecond)
	got := e.ch.GetN("q", 2)
	for _, d := range got {
		if dc, ac := ryCounts(t, d); dc != 1 || ac != 1 {
			t.Fatalf("%q after the close: x-delivery-count %d, x-acquired-count %d, want 1 and 1", d.Body, dc, ac)
		}
	}
	if bodies := tlBodies(got); !slices.Equal(bodies, []string{"a", "b"}) {
		t.Fatalf("back in order %q, want a b", bodies)
	}

	// The consumer timeout: the get's channel is closed 406, the
	// message comes back at once (not a failure), counted acquired only.
	e.advance(1001 * time.Millisecond)
	e.b.Broker.CheckConsumerTimeoutsForTest()
	e.ch = e.b.Session(t) // the timeout closed the old one
	brokertest.Eventually(t, "the timed-out messages ready", func() bool { return e.info("q").Ready == 2 })
	d := e.ch.Get("q")
	if dc, ac := ryCounts(t, d); dc != 1 || ac != 2 {
		t.Fatalf("after the consumer timeout: x-delivery-count %d, x-acquired-count %d, want 1 and 2", dc, ac)
	}
}

// A restart keeps parked messages parked until their due times (none
// early), and their counts; the messages behind them, paged out, are not
// held up.
func TestRetryRestart(t *testing.T) {
	t.Parallel()
	e := ryStart(t)
	args := amqp091.Table{"x-delayed-retry-type": "all", "x-delayed-retry-min": 1000, "x-delayed-retry-max": 60000}
	e.ch.Declare("q", args, brokertest.Type("quorum"))
	var bodies []string
	for i := range 12 { // beyond the test page window: the rest pages
		bodies = append(bodies, string(rune('a'+i)))
	}
	e.ch.PublishBodies("q", bodies...)
	// a and b, rejected once, come back after 1 s; rejected again, they
	// are due 2 s later.
	d := e.ch.Get("q")
	d.Reject(true)
	e.ch.Get("q").Reject(true) // b
	e.ch.Sync()                // the reject is settled before the clock moves
	e.advance(time.Second)
	d = e.ch.Get("q")
	if string(d.Body) != "a" {
		t.Fatalf("got %q, want a back first", d.Body)
	}
	d.Reject(true) // due at +2 s
	if d = e.ch.Get("q"); string(d.Body) != "b" {
		t.Fatalf("got %q, want b back second", d.Body)
	}
	d.Reject(true) // due at +2 s too
	e.wantDelayed("q", 2)

	e.b.Restart()
	e.ch = e.b.Session(t)
	e.wantDelayed("q", 2)
	if qi := e.info("q"); qi.Ready != 10 || qi.Messages() != 12 {
		t.Fatalf("after the restart: ready %d, messages %d, want 10 and 12", qi.Ready, qi.Messages())
	}
	// The others are served at once, in order.
	got := e.ch.GetN("q", 10)
	if gb := tlBodies(got); !slices.Equal(gb, bodies[2:]) {
		t.Fatalf("after the restart got %q, want %q", gb, bodies[2:])
	}
	for _, d := range got {
		d.Ack(false)
	}
	e.ch.WantEmpty("q")
	e.advance(2*time.Second - time.Millisecond)
	e.ch.WantEmpty("q")
	e.advance(time.Millisecond)
	back := e.ch.GetN("q", 2)
	if gb := tlBodies(back); !slices.Equal(gb, []string{"a", "b"}) {
		t.Fatalf("due after the restart got %q, want a b", gb)
	}
	for _, d := range back {
		if dc, ac := ryCounts(t, d); dc != 2 || ac != 2 || !d.Redelivered {
			t.Fatalf("%q: x-delivery-count %d, x-acquired-count %d, redelivered %v; want 2, 2, true", d.Body, dc, ac, d.Redelivered)
		}
	}
	e.ch.WantEmpty("q")
}

// A queue without retry in its arguments that held parked messages (a
// policy enabled retry, and is gone after the restart) still keeps them
// until they are due: they are found as the queue pages in.
func TestRetryRestartPolicyGone(t *testing.T) {
	t.Parallel()
	e := ryStart(t)
	tlSetPolicy(t, e.b, broker.Policy{Name: "retry", Pattern: "^q$", Definition: map[string]any{
		"delayed-retry-type": "all", "delayed-retry-min": 5000}})
	e.ch.Declare("q", nil, brokertest.Type("quorum"))
	e.ch.PublishBodies("q", "a", "b")
	e.ch.Get("q").Reject(true)
	e.ch.Sync()
	e.wantDelayed("q", 1)
	tlClearPolicy(t, e.b, "retry")
	e.b.Restart()
	e.ch = e.b.Session(t)
	d := e.ch.Get("q")
	if string(d.Body) != "b" {
		t.Fatalf("got %q, want b (a waits)", d.Body)
	}
	d.Ack(false)
	e.ch.WantEmpty("q")
	e.wantDelayed("q", 1)
	e.advance(5*time.Second - time.Millisecond)
	e.ch.WantEmpty("q")
	e.advance(time.Millisecond)
	if d := e.ch.Get("q"); string(d.Body) != "a" {
		t.Fatalf("got %q, want a", d.Body)
	}
}

// Parked messages count toward max-length (reject-publish refuses, and
// drop-head evicts the ready ones for them), a purge takes them, and a
// parked message expires at its deadline, not at its due time.
func TestRetryPurgeMaxLengthTTL(t *testing.T) {
	t.Parallel()
	e := ryStart(t)
	retry := func(more amqp091.Table) amqp091.Table {
		a := amqp091.Table{"x-delayed-retry-type": "all", "x-delayed-retry-min": 1000}
		for k, v := range more {
			a[k] = v
		}
		return a
	}
	// Purge: two parked, one ready; purge-ok counts 3; none comes back.
	e.ch.Declare("p", retry(nil))
	e.ch.PublishBodies("p", "a", "b", "c")
	e.ch.Get("p").Reject(true)
	e.ch.Get("p").Reject(true)
	e.ch.Sync()
	e.wantDelayed("p", 2)
	if n, err := e.ch.QueuePurge("p", false); err != nil || n != 3 {
		t.Fatalf("purge: %d, %v; want 3", n, err)
	}
	e.wantDelayed("p", 0)
	e.advance(time.Second)
	e.ch.WantEmpty("p")

	// reject-publish: a parked and b ready fill a max-length of 2.
	e.ch.Declare("rp", retry(amqp091.Table{"x-max-length": 2, "x-overflow": "reject-publish"}))
	e.ch.PublishBodies("rp", "a", "b")
	e.ch.Get("rp").Reject(true)
	if acks := tlPubAcks(t, e.ch, "", "rp", "c"); acks != "-" {
		t.Fatalf("publish to a full queue (1 ready, 1 parked): %q, want refused", acks)
	}
	e.advance(time.Second)
	e.ch.Expect("rp", "a", "b")

	// drop-head: a parked, b ready, c arrives: b (the ready head) goes.
	e.ch.Declare("dlq", nil)
	e.ch.Declare("dh", retry(tlDLX("dlq", amqp091.Table{"x-max-length": 2})))
	e.ch.PublishBodies("dh", "a", "b")
	e.ch.Get("dh").Reject(true)
	e.ch.Sync()
	e.ch.PublishBodies("dh", "c")
	d := e.ch.Get("dlq")
	if death := tlDeath(t, d); string(d.Body) != "b" || death["reason"] != "maxlen" {
		t.Fatalf("dead-lettered %q (x-death %v), want b, maxlen", d.Body, death)
	}
	e.ch.Expect("dh", "c")
	e.advance(time.Second)
	e.ch.Expect("dh", "a")

	// TTL: a message with 500 ms left, parked for 1 s, expires at 500 ms.
	e.ch.Declare("ttl", retry(tlDLX("dlq", amqp091.Table{"x-message-ttl": 500})))
	e.ch.PublishBodies("ttl", "t")
	e.ch.Get("ttl").Reject(true)
	e.ch.WantEmpty("ttl")
	e.advance(499 * time.Millisecond)
	e.ch.WantEmpty("dlq")
	e.wantDelayed("ttl", 1)
	e.advance(time.Millisecond)
	d = e.ch.Get("dlq")
	if death := tlDeath(t, d); string(d.Body) != "t" || death["reason"] != "expired" {
		t.Fatalf("dead-lettered %q (x-death %v), want t, expired", d.Body, death)
	}
	e.wantDelayed("ttl", 0)
}

// Policies: delayed-retry-* enable retry on a queue without arguments;
// the policy's type wins over the argument's; the smaller min and max win.
func TestRetryPolicy(t *testing.T) {
	t.Parallel()
	e := ryStart(t)
	e.ch.Declare("plain", nil)
	e.ch.Declare("args", amqp091.Table{"x-delayed-retry-type": "all", "x-delayed-retry-min": 300, "x-delayed-retry-max": 10000})
	e.ch.PublishBodies("plain", "p")
	e.ch.PublishBodies("args", "a")
	tlSetPolicy(t, e.b, broker.Policy{Name: "retry", Pattern: "^(plain|args)$", Definition: map[string]any{
		"delayed-retry-type": "failed", "delayed-retry-min": 1000, "delayed-retry-max": 1500}})
	if qi := e.info("plain"); qi.EffectivePolicyDefinition["delayed-retry-min"] == nil {
		t.Fatalf("plain: effective policy %v", qi.EffectivePolicyDefinition)
	}
	// plain: the policy alone: min 1000, max 1500.
	d := e.ch.Get("plain")
	d.Reject(true)
	d = e.backAfter("plain", time.Second)
	d.Reject(true)
	d = e.backAfter("plain", 1500*time.Millisecond)
	d.Ack(false)
	// args: type failed (the policy's) — a nack is back at once; min
	// 300 (the argument's, smaller), max 1500 (the policy's, smaller).
	d = e.ch.Get("args")
	d.Nack(false, true)
	d = e.ch.Get("args")
	for _, ms := range []time.Duration{300, 600, 900, 1200, 1500, 1500} {
		d.Reject(true)
		d = e.backAfter("args", ms*time.Millisecond)
	}
	d.Ack(false)
	// Cleared: a reject is back at once.
	tlClearPolicy(t, e.b, "retry")
	e.ch.PublishBodies("plain", "q")
	e.ch.Get("plain").Reject(true)
	e.ch.Expect("plain", "q")
}

// Arguments are validated at declare with a 406 and a RabbitMQ-style text.
func TestRetryArgValidation(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, brokertest.Config{})
	for _, tc := range []struct {
		key  string
		v    any
		want string
	}{
		{"x-delayed-retry-type", "sometimes", "invalid arg 'x-delayed-retry-type' for queue 'q' in vhost '/': 'sometimes' is not a valid delayed retry type. Must be one of: all, failed, returned, disabled"},
		{"x-delayed-retry-type", int32(1), "invalid arg 'x-delayed-retry-type' for queue 'q' in vhost '/': {unacceptable_type,signedint}"},
		{"x-delayed-retry-min", "100", "invalid arg 'x-delayed-retry-min' for queue 'q' in vhost '/': {unacceptable_type,longstr}"},
		{"x-delayed-retry-min", int32(-1), "invalid arg 'x-delayed-retry-min' for queue 'q' in vhost '/': {value_negative,-1}"},
		{"x-delayed-retry-max", 1.5, "invalid arg 'x-delayed-retry-max' for queue 'q' in vhost '/': {unacceptable_type,double}"},
		{"x-delayed-retry-multiplier", int32(0), "invalid arg 'x-delayed-retry-multiplier' for queue 'q' in vhost '/': {value_zero,0}"},
		{"x-delayed-retry-multiplier", 1.5, "invalid arg 'x-delayed-retry-multiplier' for queue 'q' in vhost '/': {unacceptable_type,double}"},
		{"x-delayed-retry-jitter", 1.5, "invalid arg 'x-delayed-retry-jitter' for queue 'q' in vhost '/': jitter must be a number from 0 to 1"},
		{"x-delayed-retry-jitter", "0.5", "invalid arg 'x-delayed-retry-jitter' for queue 'q' in vhost '/': {unacceptable_type,longstr}"},
	} {
		ch := b.Session(t)
		_, err := ch.QueueDeclare("q", true, false, false, false, amqp091.Table{tc.key: tc.v})
		var ae *amqp091.Error
		if !errorsAs(err, &ae) || ae.Code != amqp091.PreconditionFailed || ae.Reason != "PRECONDITION_FAILED - "+tc.want {
			t.Errorf("%s = %#v: %v, want 406 %q", tc.key, tc.v, err, tc.want)
		}
	}
	// Valid on both types; a jitter may be an integer.
	ch := b.Session(t)
	ch.Declare("ok-classic", amqp091.Table{"x-delayed-retry-type": "returned", "x-delayed-retry-min": 0, "x-delayed-retry-jitter": 1})
	ch.Declare("ok-quorum", amqp091.Table{"x-delayed-retry-min": 100, "x-delayed-retry-multiplier": 3, "x-delayed-retry-max": 900,
		"x-delayed-retry-jitter": float32(0.1)}, brokertest.Type("quorum"))
}

// In real time, on the broker's own scheduler: a rejected message comes
// back no earlier than its delay after the reject (measured from just
// before the reject is sent), and not absurdly later. Time itself is the
// subject here, so the wall clock is read; the upper bound is generous for
// a loaded machine.
func TestRetryWallClock(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t)
	ch.Declare("q", amqp091.Table{"x-delayed-retry-min": 150, "x-delayed-retry-multiplier": 2})
	ch.PublishBodies("q", "m")
	sub := b.Session(t, brokertest.NoConfirm)
	msgs := dvConsume(t, sub, "q", "c", false, nil)
	d := dvRecv(t, msgs)
	for _, delay := range []time.Duration{150 * time.Millisecond, 300 * time.Millisecond} {
		at := time.Now()
		d.Reject(true)
		d = dvRecv(t, msgs)
		if got := time.Since(at); got < delay || got > delay+3*time.Second {
			t.Fatalf("back after %v, want %v to %v", got, delay, delay+3*time.Second)
		}
	}
	d.Ack(false)
}

func errorsAs(err error, target any) bool { return errors.As(err, target) }
