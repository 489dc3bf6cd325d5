// Tests of message TTL: how a deadline is computed and kept.

package broker_test

// Tests of message TTL (SPEC §3): how a message's
// deadline is computed from x-message-ttl, the expiration property and
// policy, that it is fixed at enqueue and kept across requeues, and how
// invalid values are refused. Helpers (tl*) are in ttl_helpers_test.go.

import (
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
)

// B31: the effective TTL is the smaller of x-message-ttl and expiration,
// whichever of the two is smaller.
func TestTTLEffectiveIsSmaller(t *testing.T) {
	t.Parallel()
	for _, qtype := range []string{"classic", "quorum"} {
		t.Run(qtype, func(t *testing.T) {
			t.Parallel()
			b := brokertest.Start(t, brokertest.Config{})
			ch := b.Session(t)
			ch.Declare("dlq", nil)
			ch.Declare("queue-ttl-smaller", tlDLX("dlq", amqp091.Table{"x-message-ttl": int32(100)}), brokertest.Type(qtype))
			ch.Declare("msg-ttl-smaller", tlDLX("dlq", amqp091.Table{"x-message-ttl": int64(600_000)}), brokertest.Type(qtype))
			start := time.Now()
			ch.Publish("", "queue-ttl-smaller", amqp091.Publishing{Body: []byte("a"), Expiration: "600000"})
			ch.Publish("", "msg-ttl-smaller", amqp091.Publishing{Body: []byte("b"), Expiration: "100"})
			ds := dvRecvN(t, dvConsume(t, ch, "dlq", "", false, nil), 2)
			tlNotBefore(t, "dead-lettered", start, 100*time.Millisecond)
			sort.Slice(ds, func(i, j int) bool { return string(ds[i].Body) < string(ds[j].Body) })
			tlWantDeath(t, ds[0], "queue-ttl-smaller", "expired")
			tlWantDeath(t, ds[1], "msg-ttl-smaller", "expired")
			if oe := tlDeath(t, ds[0])["original-expiration"]; oe != "600000" {
				t.Errorf("a: original-expiration %#v, want \"600000\"", oe)
			}
			if oe := tlDeath(t, ds[1])["original-expiration"]; oe != "100" {
				t.Errorf("b: original-expiration %#v, want \"100\"", oe)
			}
			if ds[1].Expiration != "" {
				t.Errorf("dead-lettered message keeps expiration %q", ds[1].Expiration)
			}
		})
	}
}

// SPEC §3, P5: policy message-ttl combines with x-message-ttl by minimum,
// in both directions.
func TestTTLPolicyCombinesByMin(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t)
	tlSetPolicy(t, b, broker.Policy{Name: "short", Pattern: "^lo-", Definition: map[string]any{"message-ttl": 100}})
	tlSetPolicy(t, b, broker.Policy{Name: "long", Pattern: "^hi-", Definition: map[string]any{"message-ttl": 600_000}})
	ch.Declare("dlq", nil)
	ch.Declare("lo-arg-long", tlDLX("dlq", amqp091.Table{"x-message-ttl": int32(600_000)}))
	ch.Declare("lo-no-arg", tlDLX("dlq", nil))
	ch.Declare("hi-arg-short", tlDLX("dlq", amqp091.Table{"x-message-ttl": int32(100)}))
	ch.Declare("hi-no-arg", tlDLX("dlq", nil))
	start := time.Now()
	for _, q := range []string{"lo-arg-long", "lo-no-arg", "hi-arg-short", "hi-no-arg"} {
		ch.PublishBodies(q, q)
	}
	ds := dvRecvN(t, dvConsume(t, ch, "dlq", "", false, nil), 3)
	tlNotBefore(t, "dead-lettered", start, 100*time.Millisecond)
	got := tlBodies(ds)
	sort.Strings(got)
	if want := []string{"hi-arg-short", "lo-arg-long", "lo-no-arg"}; !slices.Equal(got, want) {
		t.Fatalf("expired %q, want %q", got, want)
	}
	tlWantReady(t, b, "hi-no-arg", 1) // 600 s policy TTL, no argument
	if p := tlQueueStats(t, b, "hi-arg-short").Policy; p != "long" {
		t.Fatalf("policy %q, want long", p)
	}
}

// B38, SPEC §3: the deadline is fixed at enqueue. A policy that later
// lowers, raises or removes the TTL changes no existing message.
func TestTTLDeadlineFixedAtEnqueue(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t)
	ch.Declare("dlq", nil)
	ch.Declare("fixed", tlDLX("dlq", nil))
	dlq := dvConsume(t, ch, "dlq", "", false, nil)

	ch.PublishBodies("fixed", "old") // no TTL at all
	set := func(ms int) {
		tlSetPolicy(t, b, broker.Policy{Name: "ttl", Pattern: "^fixed$", Definition: map[string]any{"message-ttl": ms}})
	}
	set(150)
	start := time.Now()
	ch.PublishBodies("fixed", "mid")  // deadline +150 ms
	set(600_000)                      // raising it does not extend "mid"
	ch.PublishBodies("fixed", "late") // deadline +600 s
	d := dvRecv(t, dlq)
	el := tlNotBefore(t, "mid expired", start, 150*time.Millisecond)
	if string(d.Body) != "mid" {
		t.Fatalf("dead-lettered %q, want mid", d.Body)
	}
	if el > 2*time.Second {
		t.Fatalf("mid expired after %v: its 150 ms deadline was extended", el)
	}
	tlWantDeath(t, d, "fixed", "expired")

	set(1) // lowering it does not shorten "old" or "late"
	tlNoRecv(t, ch, dlq, "after lowering the policy TTL")
	tlClearPolicy(t, b, "ttl")
	tlWantReady(t, b, "fixed", 2)
	ch.WantDrain("fixed", "old", "late")
}

// A message never expires before its arrival plus its TTL, though
// deadlines are whole milliseconds: arriving 0.6 ms into a millisecond, a
// 100 ms TTL (queue or message) is still alive 99.4 ms later and gone
// 100.4 ms later; a dead-lettered copy arriving 0.4 ms into a millisecond
// under its target's TTL is alive 99.7 ms later, gone 100.7 ms later. The
// timers are frozen: basic.get's own expiry check is what is observed.
func TestTTLNeverExpiresEarly(t *testing.T) {
	t.Parallel()
	clk, frozen := brokertest.NewClock(), brokertest.NewClock()
	clk.Advance(600 * time.Microsecond)
	b := brokertest.Start(t, brokertest.Config{Broker: broker.Options{Now: clk.Now, TimerClock: frozen.Timers()}})
	ch := b.Session(t)
	ch.Declare("q", amqp091.Table{"x-message-ttl": int32(100)})
	ch.Declare("per-msg", nil)
	ch.Declare("dlq", amqp091.Table{"x-message-ttl": int32(100)})
	ch.Declare("src", tlDLX("dlq", nil))
	expired := func() uint64 { return b.Broker.Stats().Discarded["expired"] }

	for _, q := range []string{"q", "per-msg"} {
		ch.Publish("", q, amqp091.Publishing{Body: []byte(q + " 1"), Expiration: "100"})
		ch.Publish("", q, amqp091.Publishing{Body: []byte(q + " 2"), Expiration: "100"})
	}
	ch.PublishBodies("src", "rejected")
	clk.Advance(99400 * time.Microsecond) // 99.4 ms after they arrived
	for _, q := range []string{"q", "per-msg"} {
		d, ok := ch.TryGet(q)
		if !ok || string(d.Body) != q+" 1" {
			t.Fatalf("%s: basic.get 99.4 ms after arrival with a TTL of 100 ms: %q, %v; want %q", q, d.Body, ok, q+" 1")
		}
		dvAck(t, d, false)
	}
	if got := expired(); got != 0 {
		t.Fatalf("%d expired 99.4 ms after arrival, want 0", got)
	}
	clk.Advance(time.Millisecond) // 100.4 ms
	for _, q := range []string{"q", "per-msg"} {
		if d, ok := ch.TryGet(q); ok {
			t.Fatalf("%s: basic.get 100.4 ms after arrival returned %q, expired", q, d.Body)
		}
	}
	if got := expired(); got != 2 {
		t.Fatalf("%d expired 100.4 ms after arrival, want 2", got)
	}

	// The copy arrives in dlq 0.4 ms into a millisecond.
	clk.Advance(400 * time.Microsecond)
	if err := ch.Get("src").Reject(false); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, "the copy in dlq", func() bool { return tlReady(t, b, "dlq") == 1 })
	clk.Advance(99700 * time.Microsecond) // 99.7 ms after the copy arrived
	d, ok := ch.TryGet("dlq")
	if !ok || string(d.Body) != "rejected" {
		t.Fatalf("dlq: basic.get 99.7 ms after the copy arrived: %q, %v; want the copy", d.Body, ok)
	}
	if err := d.Nack(false, true); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Millisecond) // 100.7 ms
	if d, ok := ch.TryGet("dlq"); ok {
		t.Fatalf("dlq: basic.get 100.7 ms after the copy arrived returned %q, expired", d.Body)
	}
}

// B32: requeue keeps the original deadline; it is not restarted.
func TestTTLRequeueKeepsDeadline(t *testing.T) {
	t.Parallel()
	clk := brokertest.NewClock()
	b := brokertest.Start(t, brokertest.Config{Clock: clk})
	ch := b.Session(t)
	ch.Declare("dlq", nil)
	for _, q := range []string{"by-queue", "by-message"} {
		args := tlDLX("dlq", nil)
		exp := "1000"
		if q == "by-queue" {
			args["x-message-ttl"] = int32(1000)
			exp = ""
		}
		ch.Declare(q, args)
		ch.Publish("", q, amqp091.Publishing{Body: []byte(q), Expiration: exp})
	}
	clk.Advance(600 * time.Millisecond)
	for _, q := range []string{"by-queue", "by-message"} {
		if err := ch.Get(q).Nack(false, true); err != nil {
			t.Fatal(err)
		}
	}
	ch.Sync()
	clk.Advance(300 * time.Millisecond) // 900 ms after publish
	tlSettleTimers(b)
	tlWantReady(t, b, "by-queue", 1)
	tlWantReady(t, b, "by-message", 1)
	clk.Advance(200 * time.Millisecond) // 1100 ms: past the original deadline
	tlEventuallyReady(t, b, "dlq", 2)
	tlWantReady(t, b, "by-queue", 0)
	tlWantReady(t, b, "by-message", 0)
}

// B39: an invalid expiration property closes the channel with 406 and
// RabbitMQ's parse_expiration reason.
func TestTTLInvalidExpiration(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, brokertest.Config{})
	c := b.Dial(t)
	ch0 := brokertest.NewSession(t, c)
	ch0.Declare("q", nil)
	for _, tc := range []struct{ exp, reason string }{
		{"abc", "no_integer"},
		{" 5", "no_integer"},
		{"-", "no_integer"},
		{"10abc", `{leftover_string,"abc"}`},
		{"1.5", `{leftover_string,".5"}`},
		{"-1", "{value_negative,-1}"},
		{"315360000001", "{value_too_large,315360000001}"},
		{"99999999999999999999", "{value_too_large,99999999999999999999}"},
	} {
		ch, err := c.Channel()
		if err != nil {
			t.Fatal(err)
		}
		closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
		if err := ch.Publish("", "q", false, false, amqp091.Publishing{Expiration: tc.exp, Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("PRECONDITION_FAILED - invalid expiration '%s': %s", tc.exp, tc.reason)
		select {
		case e := <-closed:
			if e == nil || e.Code != 406 || e.Reason != want {
				t.Errorf("expiration %q: closed with %v, want 406 %q", tc.exp, e, want)
			}
		case <-time.After(brokertest.Wait):
			t.Fatalf("expiration %q: channel not closed", tc.exp)
		}
	}
	// Leading zeros are taken ("0060000": a minute, long enough not to
	// expire before the count below on a loaded machine, as "007" did).
	for _, exp := range []string{"0", "0060000", "315360000000"} {
		if !ch0.PublishAck("", "q", amqp091.Publishing{Expiration: exp, Body: []byte(exp)}) {
			t.Fatalf("expiration %q: nacked", exp)
		}
	}
	tlWantReady(t, b, "q", 2) // "0" expired at once
}

// Reference §2: x-message-ttl validation, classic and quorum.
func TestTTLMessageTTLArgumentValidation(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, brokertest.Config{})
	c := b.Dial(t)
	for _, qtype := range []string{"classic", "quorum"} {
		for i, tc := range []struct {
			v    any
			term string
		}{
			{int64(-10), "{value_negative,-10}"},
			{"1000", "expected integer, got longstr"},
			{1000.0, "expected integer, got double"},
			{int64(315360000001), "{value_too_large,315360000001}"},
			{int32(0), ""},
			{int64(315360000000), ""},
		} {
			name := fmt.Sprintf("ttl-%s-%d", qtype, i)
			args := amqp091.Table{"x-message-ttl": tc.v}
			if qtype == "quorum" {
				args["x-queue-type"] = "quorum"
			}
			ch, err := c.Channel()
			if err != nil {
				t.Fatal(err)
			}
			_, err = ch.QueueDeclare(name, true, false, false, false, args)
			if tc.term == "" {
				if err != nil {
					t.Errorf("%s x-message-ttl %v: %v", qtype, tc.v, err)
				}
				continue
			}
			tlWantChannelError(t, err, 406, fmt.Sprintf("PRECONDITION_FAILED - invalid arg 'x-message-ttl' for queue '%s' in vhost '/': %s", name, tc.term))
		}
	}
}
