// Helpers of the TTL, limit and policy tests (tl*).

package broker_test

// Helpers, prefixed tl, for the TTL tests and for the tests of length
// limits, delivery limits and policies (limits_test.go, policy_test.go)
// and others: x-death and queue-state checks, policies. Declaring,
// publishing and getting are brokertest.Session's verbs.
//
// Where time is the point, tests either use real time with small TTLs and
// bounded waits, or put the broker on a brokertest.Clock (Config.Clock),
// which drives both the broker's clock and the expiry scheduler's, and
// move it by hand.

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
)

// tlSettle is how long a test waits before asserting that something did
// NOT happen where there is no event to await (tlNoRecv: a delivery that
// must not come).
const tlSettle = 60 * time.Millisecond

// tlSettleTimers waits until every timer due by the broker's fake timer
// clock has fired (and the reads expiry started): the barrier after a
// clk.Advance, before asserting what the deadlines did or did not do.
func tlSettleTimers(b *brokertest.Instance) { b.Broker.SettleTimersForTest() }

// --- declarations ---

// tlDLX returns args plus dead-lettering to queue dlq through the default
// exchange.
func tlDLX(dlq string, args amqp091.Table) amqp091.Table {
	a := amqp091.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq}
	for k, v := range args {
		a[k] = v
	}
	return a
}

// --- publishing ---

// tlPubAcks publishes each body to q and returns the confirms as a
// string of '+' (ack) and '-' (nack).
func tlPubAcks(t testing.TB, ch *brokertest.Session, exchange, key string, bodies ...string) string {
	t.Helper()
	var sb strings.Builder
	for _, body := range bodies {
		if ch.PublishAck(exchange, key, amqp091.Publishing{Body: []byte(body)}) {
			sb.WriteByte('+')
		} else {
			sb.WriteByte('-')
		}
	}
	return sb.String()
}

// --- consuming ---

// tlNoRecv asserts that nothing is delivered: after a round trip on ch,
// the consumer's channel, nothing has come within tlSettle.
func tlNoRecv(t testing.TB, ch *brokertest.Session, msgs <-chan amqp091.Delivery, why string) {
	t.Helper()
	// A delivery the broker made would precede the answer to this round
	// trip on the consumer's channel; tlSettle only covers the client's
	// hand-off from its reader to msgs.
	ch.Sync()
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
func tlWantDeadLetters(t testing.TB, b *brokertest.Instance, ch *brokertest.Session, dlq, queue, reason string, want ...string) {
	t.Helper()
	tlEventuallyReady(t, b, dlq, len(want))
	var got []string
	for range want {
		d := ch.Get(dlq)
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

func tlEventuallyReady(t testing.TB, b *brokertest.Instance, q string, want int) {
	t.Helper()
	brokertest.Eventually(t, fmt.Sprintf("queue %q to hold %d ready", q, want), func() bool {
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
