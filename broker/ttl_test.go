package broker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/internal/brokertest"
	"github.com/brokerd/brokerd/ttl"
)

// Tests of message TTL and queue TTL (SPEC §3, reference B31–B43), through
// amqp091-go against a real broker. The helpers, prefixed tl, are shared
// with limits_test.go and policy_test.go.
//
// Where time is the point, tests either use real time with small TTLs and
// bounded waits, or inject tlClock as both the broker's clock and the
// expiry scheduler's, and move it by hand.

// tlWait bounds every wait for something that must happen.
const tlWait = 5 * time.Second

// tlSettle is how long a test waits before asserting that something did
// NOT happen where there is no event to await (tlNoRecv: a delivery that
// must not come).
const tlSettle = 60 * time.Millisecond

// tlSettleTimers waits until every timer due by the broker's fake timer
// clock has fired (and the reads expiry started): the barrier after a
// clk.Advance, before asserting what the deadlines did or did not do.
func tlSettleTimers(b *brokertest.Instance) { b.Broker.SettleTimersForTest() }

// --- broker and channels ---

func tlStart(t testing.TB) *brokertest.Instance {
	t.Helper()
	return brokertest.Start(t, brokertest.Config{})
}

// tlStartClock starts a broker whose clock and expiry scheduler are both
// driven by clk.
func tlStartClock(t testing.TB, clk *tlClock) *brokertest.Instance {
	t.Helper()
	return brokertest.Start(t, brokertest.Config{Broker: broker.Options{Now: clk.Now, TimerClock: clk.Timers()}})
}

// tlChannel dials and opens a channel in confirm mode: tlPub waits for
// each publish's confirm, so the broker has enqueued it when tlPub returns.
func tlChannel(t testing.TB, b *brokertest.Instance) (*amqp091.Connection, *amqp091.Channel) {
	t.Helper()
	c := b.Dial(t)
	return c, tlConfirmChannel(t, c)
}

func tlConfirmChannel(t testing.TB, c *amqp091.Connection) *amqp091.Channel {
	t.Helper()
	ch, err := c.Channel()
	if err != nil {
		t.Fatalf("open channel: %v", err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatalf("confirm.select: %v", err)
	}
	return ch
}

func tlCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), tlWait)
	t.Cleanup(cancel)
	return ctx
}

// tlSync makes a round trip on ch, so that everything sent on ch before
// (acks, nacks, rejects) has been handled by the broker.
func tlSync(t testing.TB, ch *amqp091.Channel) {
	t.Helper()
	if err := ch.ExchangeDeclarePassive("amq.direct", "direct", true, false, false, false, nil); err != nil {
		t.Fatalf("sync round trip: %v", err)
	}
}

// --- declarations ---

// tlDeclare declares a queue of type qtype ("classic" or "quorum"; a
// quorum queue is durable, as it must be).
func tlDeclare(t testing.TB, ch *amqp091.Channel, name, qtype string, args amqp091.Table) {
	t.Helper()
	tlDeclareDurable(t, ch, name, qtype, qtype == "quorum", args)
}

func tlDeclareDurable(t testing.TB, ch *amqp091.Channel, name, qtype string, durable bool, args amqp091.Table) {
	t.Helper()
	a := amqp091.Table{}
	for k, v := range args {
		a[k] = v
	}
	if qtype == "quorum" {
		a["x-queue-type"] = "quorum"
	}
	if _, err := ch.QueueDeclare(name, durable, false, false, false, a); err != nil {
		t.Fatalf("declare %s queue %q: %v", qtype, name, err)
	}
}

// tlDLX returns args plus dead-lettering to queue dlq through the default
// exchange.
func tlDLX(dlq string, args amqp091.Table) amqp091.Table {
	a := amqp091.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq}
	for k, v := range args {
		a[k] = v
	}
	return a
}

func tlExchange(t testing.TB, ch *amqp091.Channel, name, kind string, args amqp091.Table) {
	t.Helper()
	if err := ch.ExchangeDeclare(name, kind, false, false, false, false, args); err != nil {
		t.Fatalf("declare exchange %q: %v", name, err)
	}
}

func tlBind(t testing.TB, ch *amqp091.Channel, q, key, x string) {
	t.Helper()
	if err := ch.QueueBind(q, key, x, false, nil); err != nil {
		t.Fatalf("bind %q to %q with %q: %v", q, x, key, err)
	}
}

// --- publishing ---

// tlPublish publishes p and returns the confirm (true = ack). ch must be
// in confirm mode.
func tlPublish(t testing.TB, ch *amqp091.Channel, exchange, key string, p amqp091.Publishing) bool {
	t.Helper()
	ctx := tlCtx(t)
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, false, false, p)
	if err != nil {
		t.Fatalf("publish to %q/%q: %v", exchange, key, err)
	}
	ack, err := dc.WaitContext(ctx)
	if err != nil {
		t.Fatalf("confirm of publish to %q/%q: %v", exchange, key, err)
	}
	return ack
}

// tlPub publishes body to queue q with an expiration ("" for none) and
// fails unless the broker acks it.
func tlPub(t testing.TB, ch *amqp091.Channel, q, body, expiration string) {
	t.Helper()
	if !tlPublish(t, ch, "", q, amqp091.Publishing{Body: []byte(body), Expiration: expiration}) {
		t.Fatalf("publish %q to %q: nacked", body, q)
	}
}

// tlPubPersistent is tlPub with delivery mode 2.
func tlPubPersistent(t testing.TB, ch *amqp091.Channel, q, body, expiration string) {
	t.Helper()
	p := amqp091.Publishing{Body: []byte(body), Expiration: expiration, DeliveryMode: amqp091.Persistent}
	if !tlPublish(t, ch, "", q, p) {
		t.Fatalf("publish %q to %q: nacked", body, q)
	}
}

func tlPubAll(t testing.TB, ch *amqp091.Channel, q string, bodies ...string) {
	t.Helper()
	for _, b := range bodies {
		tlPub(t, ch, q, b, "")
	}
}

// --- consuming ---

// tlGet does a basic.get with manual ack; ok is false on get-empty.
func tlGet(t testing.TB, ch *amqp091.Channel, q string) (amqp091.Delivery, bool) {
	t.Helper()
	d, ok, err := ch.Get(q, false)
	if err != nil {
		t.Fatalf("get %q: %v", q, err)
	}
	return d, ok
}

func tlMustGet(t testing.TB, ch *amqp091.Channel, q string) amqp091.Delivery {
	t.Helper()
	d, ok := tlGet(t, ch, q)
	if !ok {
		t.Fatalf("get %q: empty, want a message", q)
	}
	return d
}

// tlDrain takes every ready message of q with no-ack gets and returns the
// bodies in order.
func tlDrain(t testing.TB, ch *amqp091.Channel, q string) []string {
	t.Helper()
	var out []string
	for {
		d, ok, err := ch.Get(q, true)
		if err != nil {
			t.Fatalf("get %q: %v", q, err)
		}
		if !ok {
			return out
		}
		out = append(out, string(d.Body))
	}
}

func tlWantDrain(t testing.TB, ch *amqp091.Channel, q string, want ...string) {
	t.Helper()
	if got := tlDrain(t, ch, q); !slices.Equal(got, want) {
		t.Fatalf("queue %q holds %q, want %q", q, got, want)
	}
}

// tlNoRecv asserts that nothing is delivered: after a round trip on ch,
// the consumer's channel, nothing has come within tlSettle.
func tlNoRecv(t testing.TB, ch *amqp091.Channel, msgs <-chan amqp091.Delivery, why string) {
	t.Helper()
	// A delivery the broker made would precede the answer to this round
	// trip on the consumer's channel; tlSettle only covers the client's
	// hand-off from its reader to msgs.
	tlSync(t, ch)
	select {
	case d := <-msgs:
		t.Fatalf("%s: got delivery %q (redelivered %v), want none", why, d.Body, d.Redelivered)
	case <-time.After(tlSettle):
	}
}

func tlBodies(ds []amqp091.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = string(d.Body)
	}
	return out
}

// --- headers ---

// tlDeath returns the most recent x-death entry of d.
func tlDeath(t testing.TB, d amqp091.Delivery) amqp091.Table {
	t.Helper()
	xs, ok := d.Headers["x-death"].([]any)
	if !ok || len(xs) == 0 {
		t.Fatalf("message %q: x-death is %#v, want a non-empty array", d.Body, d.Headers["x-death"])
	}
	e, ok := xs[0].(amqp091.Table)
	if !ok {
		t.Fatalf("message %q: x-death[0] is %T, want a table", d.Body, xs[0])
	}
	return e
}

// tlWantDeath checks that d was dead-lettered once from queue for reason.
func tlWantDeath(t testing.TB, d amqp091.Delivery, queue, reason string) {
	t.Helper()
	e := tlDeath(t, d)
	if e["queue"] != queue || e["reason"] != reason || e["count"] != int64(1) {
		t.Fatalf("message %q: x-death[0] queue %v reason %v count %#v, want %q %q 1", d.Body, e["queue"], e["reason"], e["count"], queue, reason)
	}
	if d.Headers["x-first-death-reason"] != reason || d.Headers["x-first-death-queue"] != queue {
		t.Fatalf("message %q: x-first-death-reason %v queue %v, want %q %q", d.Body, d.Headers["x-first-death-reason"], d.Headers["x-first-death-queue"], reason, queue)
	}
}

// tlDeliveryCount returns the x-delivery-count header (absent: -1). It
// must be a long.
func tlDeliveryCount(t testing.TB, d amqp091.Delivery) int64 {
	t.Helper()
	v, ok := d.Headers["x-delivery-count"]
	if !ok {
		return -1
	}
	n, ok := v.(int64)
	if !ok {
		t.Fatalf("message %q: x-delivery-count is %T %v, want a long (int64)", d.Body, v, v)
	}
	return n
}

// --- broker state ---

func tlQueueStats(t testing.TB, b *brokertest.Instance, q string) broker.QueueStats {
	t.Helper()
	st, ok := b.Broker.QueueStats("/", q)
	if !ok {
		t.Fatalf("queue %q does not exist", q)
	}
	return st
}

func tlReady(t testing.TB, b *brokertest.Instance, q string) int {
	t.Helper()
	return tlQueueStats(t, b, q).Ready
}

func tlWantReady(t testing.TB, b *brokertest.Instance, q string, want int) {
	t.Helper()
	if got := tlReady(t, b, q); got != want {
		t.Fatalf("queue %q has %d ready messages, want %d", q, got, want)
	}
}

func tlExists(b *brokertest.Instance, q string) bool {
	_, ok := b.Broker.QueueStats("/", q)
	return ok
}

// tlEventually polls cond until it holds, failing after tlWait.
func tlEventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(tlWait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func tlEventuallyReady(t testing.TB, b *brokertest.Instance, q string, want int) {
	t.Helper()
	tlEventually(t, fmt.Sprintf("queue %q to hold %d ready", q, want), func() bool {
		st, ok := b.Broker.QueueStats("/", q)
		return ok && st.Ready == want
	})
}

func tlSetPolicy(t testing.TB, b *brokertest.Instance, p broker.Policy) {
	t.Helper()
	if err := b.Broker.SetPolicy("/", p); err != nil {
		t.Fatalf("set policy %q: %v", p.Name, err)
	}
}

func tlClearPolicy(t testing.TB, b *brokertest.Instance, name string) {
	t.Helper()
	if err := b.Broker.ClearPolicy("/", name); err != nil {
		t.Fatalf("clear policy %q: %v", name, err)
	}
}

// tlWantChannelError checks that err is the channel error code / text.
func tlWantChannelError(t testing.TB, err error, code int, text string) {
	t.Helper()
	var e *amqp091.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T), want %d %q", err, err, code, text)
	}
	if e.Code != code || e.Reason != text {
		t.Fatalf("error %d %q, want %d %q", e.Code, e.Reason, code, text)
	}
}

// tlNotBefore checks that something happened no earlier than ttl after
// start (1 ms of slack: the broker's deadlines are in whole ms).
func tlNotBefore(t testing.TB, what string, start time.Time, ttl time.Duration) time.Duration {
	t.Helper()
	el := time.Since(start)
	if el < ttl-time.Millisecond {
		t.Fatalf("%s after %v, before its TTL of %v", what, el, ttl)
	}
	return el
}

// --- a clock tests move by hand ---

// tlClock is a clock whose time moves only by Advance. Its Now is the
// broker's clock (Options.Now) and Timers() the expiry scheduler's
// (Options.TimerClock), so both see the same time; timers fire as Advance
// passes them.
type tlClock struct {
	mu  sync.Mutex
	now time.Time
	// read is the time the scheduler last read through Timers().Now. It
	// computes a timer's duration from that reading, so a timer is armed
	// relative to it: a test's Advance between the reading and the arming
	// must not push the deadline later.
	read   time.Time
	timers []*tlTimer
}

type tlTimer struct {
	c      *tlClock
	ch     chan time.Time
	at     time.Time
	active bool
}

func tlNewClock() *tlClock {
	now := time.UnixMilli(1_700_000_000_000)
	return &tlClock{now: now, read: now}
}

func (c *tlClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock by d and fires the timers that are due.
func (c *tlClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for _, tm := range c.timers {
		if tm.active && !tm.at.After(c.now) {
			tm.fireLocked()
		}
	}
}

// Timers returns the ttl.Clock view of c for the expiry scheduler (one
// scheduler at a time: a restarted broker's replaces the closed one's).
func (c *tlClock) Timers() ttl.Clock { return tlTimerClock{c} }

type tlTimerClock struct{ c *tlClock }

func (tc tlTimerClock) Now() time.Time {
	c := tc.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.read = c.now
	return c.now
}

func (tc tlTimerClock) NewTimer(d time.Duration) ttl.ClockTimer {
	c := tc.c
	c.mu.Lock()
	defer c.mu.Unlock()
	tm := &tlTimer{c: c, ch: make(chan time.Time, 1)}
	c.timers = append(c.timers, tm)
	tm.armLocked(d)
	return tm
}

func (tm *tlTimer) armLocked(d time.Duration) {
	tm.at, tm.active = tm.c.read.Add(d), true
	if !tm.at.After(tm.c.now) {
		tm.fireLocked()
	}
}

func (tm *tlTimer) fireLocked() {
	tm.active = false
	select {
	case tm.ch <- tm.c.now:
	default:
	}
}

func (tm *tlTimer) C() <-chan time.Time { return tm.ch }

func (tm *tlTimer) Stop() bool {
	tm.c.mu.Lock()
	defer tm.c.mu.Unlock()
	was := tm.active
	tm.active = false
	select { // no stale value after Stop (Go 1.23 timer semantics)
	case <-tm.ch:
	default:
	}
	return was
}

func (tm *tlTimer) Reset(d time.Duration) bool {
	tm.c.mu.Lock()
	defer tm.c.mu.Unlock()
	was := tm.active
	select {
	case <-tm.ch:
	default:
	}
	tm.armLocked(d)
	return was
}

// ===================== per-message and per-queue TTL =====================

// B31: the effective TTL is the smaller of x-message-ttl and expiration,
// whichever of the two is smaller.
func TestTTLEffectiveIsSmaller(t *testing.T) {
	t.Parallel()
	for _, qtype := range []string{"classic", "quorum"} {
		t.Run(qtype, func(t *testing.T) {
			t.Parallel()
			b := tlStart(t)
			_, ch := tlChannel(t, b)
			tlDeclare(t, ch, "dlq", "classic", nil)
			tlDeclare(t, ch, "queue-ttl-smaller", qtype, tlDLX("dlq", amqp091.Table{"x-message-ttl": int32(100)}))
			tlDeclare(t, ch, "msg-ttl-smaller", qtype, tlDLX("dlq", amqp091.Table{"x-message-ttl": int64(600_000)}))
			start := time.Now()
			tlPub(t, ch, "queue-ttl-smaller", "a", "600000")
			tlPub(t, ch, "msg-ttl-smaller", "b", "100")
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
	b := tlStart(t)
	_, ch := tlChannel(t, b)
	tlSetPolicy(t, b, broker.Policy{Name: "short", Pattern: "^lo-", Definition: map[string]any{"message-ttl": 100}})
	tlSetPolicy(t, b, broker.Policy{Name: "long", Pattern: "^hi-", Definition: map[string]any{"message-ttl": 600_000}})
	tlDeclare(t, ch, "dlq", "classic", nil)
	tlDeclare(t, ch, "lo-arg-long", "classic", tlDLX("dlq", amqp091.Table{"x-message-ttl": int32(600_000)}))
	tlDeclare(t, ch, "lo-no-arg", "classic", tlDLX("dlq", nil))
	tlDeclare(t, ch, "hi-arg-short", "classic", tlDLX("dlq", amqp091.Table{"x-message-ttl": int32(100)}))
	tlDeclare(t, ch, "hi-no-arg", "classic", tlDLX("dlq", nil))
	start := time.Now()
	for _, q := range []string{"lo-arg-long", "lo-no-arg", "hi-arg-short", "hi-no-arg"} {
		tlPub(t, ch, q, q, "")
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
	b := tlStart(t)
	_, ch := tlChannel(t, b)
	tlDeclare(t, ch, "dlq", "classic", nil)
	tlDeclare(t, ch, "fixed", "classic", tlDLX("dlq", nil))
	dlq := dvConsume(t, ch, "dlq", "", false, nil)

	tlPub(t, ch, "fixed", "old", "") // no TTL at all
	set := func(ms int) {
		tlSetPolicy(t, b, broker.Policy{Name: "ttl", Pattern: "^fixed$", Definition: map[string]any{"message-ttl": ms}})
	}
	set(150)
	start := time.Now()
	tlPub(t, ch, "fixed", "mid", "")  // deadline +150 ms
	set(600_000)                      // raising it does not extend "mid"
	tlPub(t, ch, "fixed", "late", "") // deadline +600 s
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
	tlWantDrain(t, ch, "fixed", "old", "late")
}

// B33: an expired message is never delivered, even when it is still in the
// queue because its timer has not fired yet: here the scheduler's clock is
// frozen while the broker's clock passes the deadlines, so only the
// delivery paths can notice. The queue has no DLX, so expiry shows as a
// discard.
func TestTTLExpiredNeverDelivered(t *testing.T) {
	t.Parallel()
	clk, frozen := tlNewClock(), tlNewClock()
	b := brokertest.Start(t, brokertest.Config{Broker: broker.Options{Now: clk.Now, TimerClock: frozen.Timers()}})
	_, ch := tlChannel(t, b)
	tlDeclare(t, ch, "q", "classic", amqp091.Table{"x-message-ttl": int32(100)})
	tlDeclare(t, ch, "per-msg", "classic", nil)
	expired := func() uint64 { return b.Broker.Stats().Discarded["expired"] }

	// basic.get
	tlPub(t, ch, "q", "g1", "")
	tlPub(t, ch, "q", "g2", "")
	tlPub(t, ch, "per-msg", "pm", "50")
	tlPub(t, ch, "per-msg", "keep", "")
	clk.Advance(150 * time.Millisecond)
	tlWantReady(t, b, "q", 2) // the timers have not fired
	if d, ok := tlGet(t, ch, "q"); ok {
		t.Fatalf("basic.get returned expired %q", d.Body)
	}
	if got := expired(); got != 2 {
		t.Fatalf("expired count %d after get, want 2", got)
	}
	if d := tlMustGet(t, ch, "per-msg"); string(d.Body) != "keep" {
		t.Fatalf("basic.get returned %q, want keep (pm expired)", d.Body)
	}

	// basic.consume: a consumer that attaches after the deadline
	tlPub(t, ch, "q", "c1", "")
	tlPub(t, ch, "q", "c2", "")
	clk.Advance(150 * time.Millisecond)
	msgs := dvConsume(t, ch, "q", "", false, nil)
	tlNoRecv(t, ch, msgs, "consumer attached after the deadline")
	if got := expired(); got != 5 {
		t.Fatalf("expired count %d after consume, want 5", got)
	}
	tlWantReady(t, b, "q", 0)
	tlPub(t, ch, "q", "fresh", "")
	if d := dvRecv(t, msgs); string(d.Body) != "fresh" {
		t.Fatalf("delivered %q, want fresh", d.Body)
	}
}

// A message never expires before its arrival plus its TTL, though
// deadlines are whole milliseconds: arriving 0.6 ms into a millisecond, a
// 100 ms TTL (queue or message) is still alive 99.4 ms later and gone
// 100.4 ms later; a dead-lettered copy arriving 0.4 ms into a millisecond
// under its target's TTL is alive 99.7 ms later, gone 100.7 ms later. The
// timers are frozen: basic.get's own expiry check is what is observed.
func TestTTLNeverExpiresEarly(t *testing.T) {
	t.Parallel()
	clk, frozen := tlNewClock(), tlNewClock()
	clk.Advance(600 * time.Microsecond)
	b := brokertest.Start(t, brokertest.Config{Broker: broker.Options{Now: clk.Now, TimerClock: frozen.Timers()}})
	_, ch := tlChannel(t, b)
	tlDeclare(t, ch, "q", "classic", amqp091.Table{"x-message-ttl": int32(100)})
	tlDeclare(t, ch, "per-msg", "classic", nil)
	tlDeclare(t, ch, "dlq", "classic", amqp091.Table{"x-message-ttl": int32(100)})
	tlDeclare(t, ch, "src", "classic", tlDLX("dlq", nil))
	expired := func() uint64 { return b.Broker.Stats().Discarded["expired"] }

	for _, q := range []string{"q", "per-msg"} {
		tlPub(t, ch, q, q+" 1", "100")
		tlPub(t, ch, q, q+" 2", "100")
	}
	tlPub(t, ch, "src", "rejected", "")
	clk.Advance(99400 * time.Microsecond) // 99.4 ms after they arrived
	for _, q := range []string{"q", "per-msg"} {
		d, ok := tlGet(t, ch, q)
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
		if d, ok := tlGet(t, ch, q); ok {
			t.Fatalf("%s: basic.get 100.4 ms after arrival returned %q, expired", q, d.Body)
		}
	}
	if got := expired(); got != 2 {
		t.Fatalf("%d expired 100.4 ms after arrival, want 2", got)
	}

	// The copy arrives in dlq 0.4 ms into a millisecond.
	clk.Advance(400 * time.Microsecond)
	if err := tlMustGet(t, ch, "src").Reject(false); err != nil {
		t.Fatal(err)
	}
	tlEventually(t, "the copy in dlq", func() bool { return tlReady(t, b, "dlq") == 1 })
	clk.Advance(99700 * time.Microsecond) // 99.7 ms after the copy arrived
	d, ok := tlGet(t, ch, "dlq")
	if !ok || string(d.Body) != "rejected" {
		t.Fatalf("dlq: basic.get 99.7 ms after the copy arrived: %q, %v; want the copy", d.Body, ok)
	}
	if err := d.Nack(false, true); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Millisecond) // 100.7 ms
	if d, ok := tlGet(t, ch, "dlq"); ok {
		t.Fatalf("dlq: basic.get 100.7 ms after the copy arrived returned %q, expired", d.Body)
	}
}

// SPEC §3 beyond: a message expires at its deadline wherever it is in the
// queue; a short-TTL message behind a 10-minute one does not wait.
func TestTTLExpiresAnywhere(t *testing.T) {
	t.Parallel()
	for _, qtype := range []string{"classic", "quorum"} {
		t.Run(qtype, func(t *testing.T) {
			t.Parallel()
			b := tlStart(t)
			_, ch := tlChannel(t, b)
			tlDeclare(t, ch, "dlq", "classic", nil)
			tlDeclare(t, ch, "src", qtype, tlDLX("dlq", nil))
			dlq := dvConsume(t, ch, "dlq", "", false, nil)
			start := time.Now()
			tlPub(t, ch, "src", "long", "600000")
			tlPub(t, ch, "src", "short", "100")
			tlPub(t, ch, "src", "none", "")
			tlPub(t, ch, "src", "short2", "200")
			d1 := dvRecv(t, dlq)
			el1 := tlNotBefore(t, "short dead-lettered", start, 100*time.Millisecond)
			d2 := dvRecv(t, dlq)
			el2 := tlNotBefore(t, "short2 dead-lettered", start, 200*time.Millisecond)
			if string(d1.Body) != "short" || string(d2.Body) != "short2" {
				t.Fatalf("dead-lettered %q then %q, want short then short2", d1.Body, d2.Body)
			}
			// Generous bounds for -race and parallel tests; head-only
			// expiry would take 10 minutes.
			if el1 > time.Second || el2 > time.Second+100*time.Millisecond {
				t.Fatalf("expired after %v and %v, want about 100 ms and 200 ms", el1, el2)
			}
			tlWantDeath(t, d1, "src", "expired")
			if oe := tlDeath(t, d1)["original-expiration"]; oe != "100" {
				t.Fatalf("original-expiration %#v, want \"100\"", oe)
			}
			tlWantReady(t, b, "src", 2)
			tlWantDrain(t, ch, "src", "long", "none")
		})
	}
}

// SPEC §3: unacked messages do not expire while held; returned after their
// deadline (nack or reject with requeue) they expire at once and are
// dead-lettered, never redelivered. An ack after the deadline is an ack.
func TestTTLUnackedDoNotExpireWhileHeld(t *testing.T) {
	t.Parallel()
	clk := tlNewClock()
	b := tlStartClock(t, clk)
	_, ch := tlChannel(t, b)
	tlDeclare(t, ch, "dlq", "classic", nil)
	tlDeclare(t, ch, "held", "classic", tlDLX("dlq", amqp091.Table{"x-message-ttl": int32(1000)}))
	tlPubAll(t, ch, "held", "acked", "nacked", "rejected")
	msgs := dvConsume(t, ch, "held", "", false, nil)
	ds := dvRecvN(t, msgs, 3)

	clk.Advance(5 * time.Second)
	tlSettleTimers(b)
	if st := tlQueueStats(t, b, "held"); st.Unacked != 3 || st.Ready != 0 {
		t.Fatalf("after the deadline: unacked %d ready %d, want 3 0", st.Unacked, st.Ready)
	}
	tlWantReady(t, b, "dlq", 0)

	if err := ds[0].Ack(false); err != nil {
		t.Fatal(err)
	}
	if err := ds[1].Nack(false, true); err != nil {
		t.Fatal(err)
	}
	if err := ds[2].Reject(true); err != nil {
		t.Fatal(err)
	}
	tlSync(t, ch)
	tlNoRecv(t, ch, msgs, "requeued after the deadline")
	tlEventuallyReady(t, b, "dlq", 2)
	for _, want := range []string{"nacked", "rejected"} {
		d := tlMustGet(t, ch, "dlq")
		if string(d.Body) != want {
			t.Fatalf("dead-lettered %q, want %q", d.Body, want)
		}
		tlWantDeath(t, d, "held", "expired")
	}
	if st := tlQueueStats(t, b, "held"); st.Unacked != 0 || st.Ready != 0 {
		t.Fatalf("source: unacked %d ready %d, want 0 0", st.Unacked, st.Ready)
	}
	if n := b.Broker.Stats().DeadLettered["expired"]; n != 2 {
		t.Fatalf("dead-lettered expired %d, want 2 (the acked one is not)", n)
	}
}

// B32: requeue keeps the original deadline; it is not restarted.
func TestTTLRequeueKeepsDeadline(t *testing.T) {
	t.Parallel()
	clk := tlNewClock()
	b := tlStartClock(t, clk)
	_, ch := tlChannel(t, b)
	tlDeclare(t, ch, "dlq", "classic", nil)
	for _, q := range []string{"by-queue", "by-message"} {
		args := tlDLX("dlq", nil)
		exp := "1000"
		if q == "by-queue" {
			args["x-message-ttl"] = int32(1000)
			exp = ""
		}
		tlDeclare(t, ch, q, "classic", args)
		tlPub(t, ch, q, q, exp)
	}
	clk.Advance(600 * time.Millisecond)
	for _, q := range []string{"by-queue", "by-message"} {
		if err := tlMustGet(t, ch, q).Nack(false, true); err != nil {
			t.Fatal(err)
		}
	}
	tlSync(t, ch)
	clk.Advance(300 * time.Millisecond) // 900 ms after publish
	tlSettleTimers(b)
	tlWantReady(t, b, "by-queue", 1)
	tlWantReady(t, b, "by-message", 1)
	clk.Advance(200 * time.Millisecond) // 1100 ms: past the original deadline
	tlEventuallyReady(t, b, "dlq", 2)
	tlWantReady(t, b, "by-queue", 0)
	tlWantReady(t, b, "by-message", 0)
}

// B36, SPEC §3: TTL 0 — delivered only to a consumer that can take it at
// once; otherwise expired at once (dead-lettered or discarded); returned,
// it expires instead of being redelivered.
func TestTTLZero(t *testing.T) {
	t.Parallel()
	b := tlStart(t)
	c, ch := tlChannel(t, b)
	tlDeclare(t, ch, "dlq", "classic", nil)
	tlDeclare(t, ch, "zero", "classic", tlDLX("dlq", amqp091.Table{"x-message-ttl": int32(0)}))

	cch := tlConfirmChannel(t, c)
	if err := cch.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	msgs := dvConsume(t, cch, "zero", "", false, nil)
	tlPub(t, ch, "zero", "taken", "")
	d := dvRecv(t, msgs)
	if string(d.Body) != "taken" {
		t.Fatalf("delivered %q, want taken", d.Body)
	}
	tlWantReady(t, b, "dlq", 0)

	// The consumer is at its prefetch limit: it cannot take the next one.
	tlPub(t, ch, "zero", "no-room", "")
	tlEventuallyReady(t, b, "dlq", 1)
	tlWantReady(t, b, "zero", 0)

	// Returned: expires rather than being redelivered.
	if err := d.Nack(false, true); err != nil {
		t.Fatal(err)
	}
	tlSync(t, cch)
	tlNoRecv(t, cch, msgs, "TTL-0 message requeued")
	tlEventuallyReady(t, b, "dlq", 2)
	for _, want := range []string{"no-room", "taken"} {
		d := tlMustGet(t, ch, "dlq")
		if string(d.Body) != want {
			t.Fatalf("dead-lettered %q, want %q", d.Body, want)
		}
		tlWantDeath(t, d, "zero", "expired")
	}

	// No consumer, no DLX: discarded at once, never enqueued.
	tlDeclare(t, ch, "zero-nodlx", "classic", amqp091.Table{"x-message-ttl": int32(0)})
	before := b.Broker.Stats().Discarded["expired"]
	tlPub(t, ch, "zero-nodlx", "gone", "")
	tlWantReady(t, b, "zero-nodlx", 0)
	if got := b.Broker.Stats().Discarded["expired"] - before; got != 1 {
		t.Fatalf("discarded expired +%d, want +1", got)
	}

	// expiration "0" on a queue without TTL, with and without a consumer.
	tlDeclare(t, ch, "msg-zero", "classic", tlDLX("dlq", nil))
	tlPub(t, ch, "msg-zero", "nobody", "0")
	tlEventuallyReady(t, b, "dlq", 1)
	tlWantReady(t, b, "msg-zero", 0)
	m2 := dvConsume(t, ch, "msg-zero", "", false, nil)
	tlPub(t, ch, "msg-zero", "somebody", "0")
	if d := dvRecv(t, m2); string(d.Body) != "somebody" {
		t.Fatalf("delivered %q, want somebody", d.Body)
	}

	// Quorum queue: without a consumer it expires at once as well.
	tlDeclare(t, ch, "zero-qq", "quorum", tlDLX("dlq", amqp091.Table{"x-message-ttl": int32(0)}))
	tlPub(t, ch, "zero-qq", "qq", "")
	tlEventuallyReady(t, b, "dlq", 2)
	tlWantReady(t, b, "zero-qq", 0)
}

// B39: an invalid expiration property closes the channel with 406 and
// RabbitMQ's parse_expiration reason.
func TestTTLInvalidExpiration(t *testing.T) {
	t.Parallel()
	b := tlStart(t)
	c := b.Dial(t)
	ch0 := tlConfirmChannel(t, c)
	tlDeclare(t, ch0, "q", "classic", nil)
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
		case <-time.After(tlWait):
			t.Fatalf("expiration %q: channel not closed", tc.exp)
		}
	}
	for _, exp := range []string{"0", "007", "315360000000"} {
		if !tlPublish(t, ch0, "", "q", amqp091.Publishing{Expiration: exp, Body: []byte(exp)}) {
			t.Fatalf("expiration %q: nacked", exp)
		}
	}
	tlWantReady(t, b, "q", 2) // "0" expired at once
}

// Reference §2: x-message-ttl validation, classic and quorum.
func TestTTLMessageTTLArgumentValidation(t *testing.T) {
	t.Parallel()
	b := tlStart(t)
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

// B40, SPEC §3: pending expiries survive a restart and fire on time; one
// whose deadline passed while the broker was down fires at once.
func TestTTLSurvivesRestart(t *testing.T) {
	t.Parallel()
	clk := tlNewClock()
	b := tlStartClock(t, clk)
	_, ch := tlChannel(t, b)
	tlDeclareDurable(t, ch, "dlq", "classic", true, nil)
	tlDeclareDurable(t, ch, "per-msg", "classic", true, tlDLX("dlq", nil))
	tlDeclareDurable(t, ch, "per-queue", "classic", true, tlDLX("dlq", amqp091.Table{"x-message-ttl": int32(1000)}))
	tlPubPersistent(t, ch, "per-msg", "soon", "1000")
	tlPubPersistent(t, ch, "per-msg", "later", "600000")
	tlPubPersistent(t, ch, "per-queue", "queue-ttl", "")

	clk.Advance(500 * time.Millisecond)
	b.Restart()
	tlWantReady(t, b, "per-msg", 2)
	tlWantReady(t, b, "per-queue", 1)
	clk.Advance(400 * time.Millisecond) // 900 ms after publish
	tlSettleTimers(b)
	tlWantReady(t, b, "per-msg", 2)
	tlWantReady(t, b, "per-queue", 1)
	tlWantReady(t, b, "dlq", 0)
	clk.Advance(200 * time.Millisecond) // 1100 ms
	tlEventuallyReady(t, b, "dlq", 2)
	tlWantReady(t, b, "per-msg", 1)
	tlWantReady(t, b, "per-queue", 0)
	_, ch = tlChannel(t, b)
	got := tlDrain(t, ch, "dlq")
	sort.Strings(got)
	if !slices.Equal(got, []string{"queue-ttl", "soon"}) {
		t.Fatalf("dead-lettered %q, want queue-ttl and soon", got)
	}

	// Deadline passed while the broker was down.
	tlPubPersistent(t, ch, "per-msg", "while-down", "1000")
	b.Stop()
	clk.Advance(5 * time.Second)
	b.Restart()
	tlEventuallyReady(t, b, "dlq", 1)
	_, ch = tlChannel(t, b)
	d := tlMustGet(t, ch, "dlq")
	if string(d.Body) != "while-down" {
		t.Fatalf("dead-lettered %q, want while-down", d.Body)
	}
	tlWantDeath(t, d, "per-msg", "expired")
	tlWantDrain(t, ch, "per-msg", "later")
}

// SPEC §3: dead letters produced by expiries at recovery time land once
// each, even when the target queue is recovered after the source (queues
// are recovered in name order: "a-…" before "z-dlq") and when the DLX
// comes from a policy (applied at recovery).
func TestTTLRestartExpiryIntoLaterRecoveredQueue(t *testing.T) {
	t.Parallel()
	clk := tlNewClock()
	b := tlStartClock(t, clk)
	_, ch := tlChannel(t, b)
	tlSetPolicy(t, b, broker.Policy{Name: "dlx", Pattern: "^a-pol$", Definition: map[string]any{"dead-letter-exchange": "", "dead-letter-routing-key": "z-dlq"}})
	tlDeclareDurable(t, ch, "z-dlq", "classic", true, nil)
	tlDeclareDurable(t, ch, "a-src", "classic", true, tlDLX("z-dlq", nil))
	tlDeclareDurable(t, ch, "a-pol", "classic", true, nil)
	const old, n = 200, 200
	for i := range old {
		tlPubPersistent(t, ch, "z-dlq", fmt.Sprintf("old-%d", i), "")
	}
	for i := range n / 2 {
		tlPubPersistent(t, ch, "a-src", fmt.Sprintf("exp-%d", i), "1000")
		tlPubPersistent(t, ch, "a-pol", fmt.Sprintf("pol-%d", i), "1000")
	}
	b.Stop()
	clk.Advance(5 * time.Second)
	b.Restart()
	tlEventually(t, "a-src and a-pol to be empty", func() bool { return tlReady(t, b, "a-src")+tlReady(t, b, "a-pol") == 0 })
	tlEventuallyReady(t, b, "z-dlq", old+n)
	tlSettleTimers(b)
	_, ch = tlChannel(t, b)
	got := tlDrain(t, ch, "z-dlq")
	seen := map[string]int{}
	for _, s := range got {
		seen[s]++
	}
	var dups []string
	for s, k := range seen {
		if k > 1 {
			dups = append(dups, s)
		}
	}
	if len(got) != old+n || len(dups) > 0 {
		sort.Strings(dups)
		t.Fatalf("z-dlq holds %d messages (want %d), duplicates %q", len(got), old+n, dups)
	}
	// The store took every change: persistent publishes are still
	// confirmed.
	if !tlPublish(t, ch, "", "z-dlq", amqp091.Publishing{Body: []byte("after"), DeliveryMode: amqp091.Persistent}) {
		t.Fatal("persistent publish nacked after recovery: the store failed")
	}
}

// ============================ queue TTL ============================

// B41, SPEC §3: x-expires deletes a queue unused for that long; publishing
// does not renew it; declare (active or passive, not nowait) and basic.get
// do; a consumer keeps it alive and the lease starts when the last goes;
// its messages are not dead-lettered; afterwards a passive declare is 404.
func TestQueueTTL(t *testing.T) {
	t.Parallel()
	// Each case starts at 0 with a queue "lease" (x-expires 1000, a DLX),
	// runs step at 600 ms, then checks that the queue is still there at
	// 1200 ms (renewed) or gone by 1100 ms (not renewed).
	for _, tc := range []struct {
		name    string
		step    func(t *testing.T, ch *amqp091.Channel)
		renewed bool
	}{
		{"publish", func(t *testing.T, ch *amqp091.Channel) { tlPub(t, ch, "lease", "m", "") }, false},
		{"active declare", func(t *testing.T, ch *amqp091.Channel) {
			tlDeclare(t, ch, "lease", "classic", tlDLX("dlq", amqp091.Table{"x-expires": int32(1000)}))
		}, true},
		{"passive declare", func(t *testing.T, ch *amqp091.Channel) {
			if _, err := ch.QueueDeclarePassive("lease", false, false, false, false, nil); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"passive declare nowait", func(t *testing.T, ch *amqp091.Channel) {
			if _, err := ch.QueueDeclarePassive("lease", false, false, false, true, nil); err != nil {
				t.Fatal(err)
			}
			tlSync(t, ch)
		}, false},
		{"basic.get on empty queue", func(t *testing.T, ch *amqp091.Channel) { tlGet(t, ch, "lease") }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := tlNewClock()
			b := tlStartClock(t, clk)
			_, ch := tlChannel(t, b)
			tlDeclare(t, ch, "dlq", "classic", nil)
			tlDeclare(t, ch, "lease", "classic", tlDLX("dlq", amqp091.Table{"x-expires": int32(1000)}))
			tlPub(t, ch, "lease", "kept-until-deleted", "")
			clk.Advance(600 * time.Millisecond)
			tc.step(t, ch)
			clk.Advance(500 * time.Millisecond) // 1100 ms
			if !tc.renewed {
				tlEventually(t, "the queue to expire", func() bool { return !tlExists(b, "lease") })
			} else {
				tlSettleTimers(b)
				if !tlExists(b, "lease") {
					t.Fatal("queue deleted although its lease was renewed at 600 ms")
				}
				clk.Advance(400 * time.Millisecond) // 1500 ms: renewed lease runs to 1600
				tlSettleTimers(b)
				if !tlExists(b, "lease") {
					t.Fatal("renewed lease ran out early")
				}
				clk.Advance(200 * time.Millisecond)
				tlEventually(t, "the queue to expire", func() bool { return !tlExists(b, "lease") })
			}
			tlSettleTimers(b)
			tlWantReady(t, b, "dlq", 0)
			st := b.Broker.Stats()
			for r, n := range st.DeadLettered {
				if n != 0 {
					t.Fatalf("dead-lettered %s: %d, want none when a queue expires", r, n)
				}
			}
			_, err := ch.QueueDeclarePassive("lease", false, false, false, false, nil)
			tlWantChannelError(t, err, 404, "NOT_FOUND - no queue 'lease' in vhost '/'")
		})
	}
}

// B41: a consumer keeps the queue alive however long; the lease starts
// when the last consumer goes.
func TestQueueTTLConsumerKeepsAlive(t *testing.T) {
	t.Parallel()
	clk := tlNewClock()
	b := tlStartClock(t, clk)
	_, ch := tlChannel(t, b)
	tlDeclare(t, ch, "lease", "classic", amqp091.Table{"x-expires": int32(1000)})
	if _, err := ch.Consume("lease", "c1", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.Consume("lease", "c2", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	clk.Advance(5 * time.Second)
	if err := ch.Cancel("c1", false); err != nil {
		t.Fatal(err)
	}
	clk.Advance(5 * time.Second)
	tlSettleTimers(b)
	if !tlExists(b, "lease") {
		t.Fatal("queue with a consumer expired")
	}
	if err := ch.Cancel("c2", false); err != nil { // lease starts: 1000 ms
		t.Fatal(err)
	}
	clk.Advance(900 * time.Millisecond)
	tlSettleTimers(b)
	if !tlExists(b, "lease") {
		t.Fatal("queue expired 900 ms after its last consumer went")
	}
	clk.Advance(200 * time.Millisecond)
	tlEventually(t, "the queue to expire", func() bool { return !tlExists(b, "lease") })
}

// B41: the lease starts when the queue is created, even by a declare with
// nowait (RabbitMQ arms the expiry timer in the queue's init).
func TestQueueTTLNowaitCreate(t *testing.T) {
	t.Parallel()
	clk := tlNewClock()
	b := tlStartClock(t, clk)
	_, ch := tlChannel(t, b)
	if _, err := ch.QueueDeclare("lease", false, false, false, true, amqp091.Table{"x-expires": int32(1000)}); err != nil {
		t.Fatal(err)
	}
	tlSync(t, ch)
	if !tlExists(b, "lease") {
		t.Fatal("queue not declared")
	}
	clk.Advance(1100 * time.Millisecond)
	tlEventually(t, "the queue to expire", func() bool { return !tlExists(b, "lease") })
}

// B42, SPEC §3: policy expires combines with x-expires by minimum, on
// classic and quorum queues.
func TestQueueTTLPolicyMin(t *testing.T) {
	t.Parallel()
	clk := tlNewClock()
	b := tlStartClock(t, clk)
	_, ch := tlChannel(t, b)
	tlSetPolicy(t, b, broker.Policy{Name: "exp", Pattern: "^pexp-", Definition: map[string]any{"expires": 1000}})
	tlDeclare(t, ch, "pexp-arg-long", "classic", amqp091.Table{"x-expires": int32(10_000)})
	tlDeclare(t, ch, "pexp-qq-arg-long", "quorum", amqp091.Table{"x-expires": int32(10_000)})
	tlDeclare(t, ch, "pexp-arg-short", "classic", amqp091.Table{"x-expires": int32(500)})
	tlDeclare(t, ch, "pexp-no-arg", "classic", nil)
	tlDeclare(t, ch, "other", "classic", amqp091.Table{"x-expires": int32(10_000)})

	clk.Advance(600 * time.Millisecond)
	tlEventually(t, "pexp-arg-short to expire", func() bool { return !tlExists(b, "pexp-arg-short") })
	for _, q := range []string{"pexp-arg-long", "pexp-qq-arg-long", "pexp-no-arg"} {
		if !tlExists(b, q) {
			t.Fatalf("%s expired at 600 ms", q)
		}
	}
	clk.Advance(500 * time.Millisecond)
	for _, q := range []string{"pexp-arg-long", "pexp-qq-arg-long", "pexp-no-arg"} {
		tlEventually(t, q+" to expire", func() bool { return !tlExists(b, q) })
	}
	if !tlExists(b, "other") {
		t.Fatal("queue without the policy expired at 1100 ms (x-expires 10000)")
	}
	_, err := ch.QueueDeclarePassive("pexp-qq-arg-long", true, false, false, false, nil)
	tlWantChannelError(t, err, 404, "NOT_FOUND - no queue 'pexp-qq-arg-long' in vhost '/'")
}

// P3: setting a policy expires on an existing queue starts its lease.
func TestQueueTTLPolicyOnExistingQueue(t *testing.T) {
	t.Parallel()
	clk := tlNewClock()
	b := tlStartClock(t, clk)
	_, ch := tlChannel(t, b)
	tlDeclare(t, ch, "existing", "classic", nil)
	clk.Advance(10 * time.Second)
	tlSetPolicy(t, b, broker.Policy{Name: "exp", Pattern: "^existing$", Definition: map[string]any{"expires": 1000}})
	clk.Advance(900 * time.Millisecond)
	tlSettleTimers(b)
	if !tlExists(b, "existing") {
		t.Fatal("expired 900 ms after the policy was set")
	}
	clk.Advance(200 * time.Millisecond)
	tlEventually(t, "the queue to expire", func() bool { return !tlExists(b, "existing") })
}
