package broker_test

// Helpers, prefixed tl, for the TTL tests and for the tests of length
// limits, delivery limits and policies (limits_test.go, policy_test.go)
// and others that declare, publish and get through amqp091-go against a
// real broker.
//
// Where time is the point, tests either use real time with small TTLs and
// bounded waits, or inject tlClock as both the broker's clock and the
// expiry scheduler's, and move it by hand.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
	"github.com/brokerd/brokerd/ttl"
)

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

// tlPubAcks publishes each body to q and returns the confirms as a
// string of '+' (ack) and '-' (nack).
func tlPubAcks(t testing.TB, ch *amqp091.Channel, exchange, key string, bodies ...string) string {
	t.Helper()
	var sb strings.Builder
	for _, body := range bodies {
		if tlPublish(t, ch, exchange, key, amqp091.Publishing{Body: []byte(body)}) {
			sb.WriteByte('+')
		} else {
			sb.WriteByte('-')
		}
	}
	return sb.String()
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

// tlWantDeadLetters drains dlq (after waiting for n messages) and checks
// the bodies, in order, and that each died in queue for reason.
func tlWantDeadLetters(t testing.TB, b *brokertest.Instance, ch *amqp091.Channel, dlq, queue, reason string, want ...string) {
	t.Helper()
	tlEventuallyReady(t, b, dlq, len(want))
	var got []string
	for range want {
		d := tlMustGet(t, ch, dlq)
		tlWantDeath(t, d, queue, reason)
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
		got = append(got, string(d.Body))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s holds %q, want %q", dlq, got, want)
	}
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

// tlEventually polls cond until it holds, failing after tlWait. For
// conditions with no event to wait on (a broker counter, a store write
// landing); the 2 ms between polls is the only sleep the helpers need.
func tlEventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(tlWait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond) // polling interval: the conditions polled have no event to wait on
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

var tlQueueTypes = []string{"classic", "quorum"}

// --- a clock tests move by hand ---

// tlClock is a clock whose time moves only by Advance. Its Now is the
// broker's clock (Options.Now) and Timers() the expiry scheduler's
// (Options.TimerClock), so both see the same time; timers fire as Advance
// passes them.
type tlClock struct {
	mu  sync.Mutex
	now time.Time
	// read is, for each goroutine, the time it last read through
	// Timers().Now. Code computes a timer's duration from its own reading,
	// so a timer is armed relative to that: a test's Advance between the
	// reading and the arming must not push the deadline later. It is per
	// goroutine because another's reading after the Advance (the expiry
	// scheduler's while a redrive task arms its pace) says nothing about
	// when this one computed its duration.
	read   map[uint64]time.Time
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
	return &tlClock{now: now, read: map[uint64]time.Time{}}
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
	c.read[goid()] = c.now
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
	read, ok := tm.c.read[goid()]
	if !ok {
		read = tm.c.now
	}
	tm.at, tm.active = read.Add(d), true
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

// goid is the calling goroutine's id, from the first line of its stack
// ("goroutine 42 [running]:").
func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	id, _ := strconv.ParseUint(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	return id
}
