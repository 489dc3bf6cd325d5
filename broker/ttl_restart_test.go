// Tests of TTL across a restart.

package broker_test

// Tests of TTL across a restart (SPEC §3, B40): pending expiries are
// recovered and fire on time, and their dead letters land once.

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

// B40, SPEC §3: pending expiries survive a restart and fire on time; one
// whose deadline passed while the broker was down fires at once.
func TestTTLSurvivesRestart(t *testing.T) {
	t.Parallel()
	clk := brokertest.NewClock()
	b := brokertest.Start(t, brokertest.Config{Clock: clk})
	ch := b.Session(t)
	ch.Declare("dlq", nil, brokertest.Durable)
	ch.Declare("per-msg", tlDLX("dlq", nil), brokertest.Durable)
	ch.Declare("per-queue", tlDLX("dlq", amqp091.Table{"x-message-ttl": int32(1000)}), brokertest.Durable)
	ch.Publish("", "per-msg", amqp091.Publishing{Body: []byte("soon"), Expiration: "1000", DeliveryMode: amqp091.Persistent})
	ch.Publish("", "per-msg", amqp091.Publishing{Body: []byte("later"), Expiration: "600000", DeliveryMode: amqp091.Persistent})
	ch.Publish("", "per-queue", amqp091.Publishing{Body: []byte("queue-ttl"), DeliveryMode: amqp091.Persistent})

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
	ch = b.Session(t)
	got := ch.Drain("dlq")
	sort.Strings(got)
	if !slices.Equal(got, []string{"queue-ttl", "soon"}) {
		t.Fatalf("dead-lettered %q, want queue-ttl and soon", got)
	}

	// Deadline passed while the broker was down.
	ch.Publish("", "per-msg", amqp091.Publishing{Body: []byte("while-down"), Expiration: "1000", DeliveryMode: amqp091.Persistent})
	b.Stop()
	clk.Advance(5 * time.Second)
	b.Restart()
	tlEventuallyReady(t, b, "dlq", 1)
	ch = b.Session(t)
	d := ch.Get("dlq")
	if string(d.Body) != "while-down" {
		t.Fatalf("dead-lettered %q, want while-down", d.Body)
	}
	tlWantDeath(t, d, "per-msg", "expired")
	ch.WantDrain("per-msg", "later")
}

// SPEC §3: dead letters produced by expiries at recovery time land once
// each, even when the target queue is recovered after the source (queues
// are recovered in name order: "a-…" before "z-dlq") and when the DLX
// comes from a policy (applied at recovery).
func TestTTLRestartExpiryIntoLaterRecoveredQueue(t *testing.T) {
	t.Parallel()
	clk := brokertest.NewClock()
	b := brokertest.Start(t, brokertest.Config{Clock: clk})
	ch := b.Session(t)
	tlSetPolicy(t, b, broker.Policy{Name: "dlx", Pattern: "^a-pol$", Definition: map[string]any{"dead-letter-exchange": "", "dead-letter-routing-key": "z-dlq"}})
	ch.Declare("z-dlq", nil, brokertest.Durable)
	ch.Declare("a-src", tlDLX("z-dlq", nil), brokertest.Durable)
	ch.Declare("a-pol", nil, brokertest.Durable)
	const old, n = 200, 200
	for i := range old {
		ch.Publish("", "z-dlq", amqp091.Publishing{Body: []byte(fmt.Sprintf("old-%d", i)), DeliveryMode: amqp091.Persistent})
	}
	for i := range n / 2 {
		ch.Publish("", "a-src", amqp091.Publishing{Body: []byte(fmt.Sprintf("exp-%d", i)), Expiration: "1000", DeliveryMode: amqp091.Persistent})
		ch.Publish("", "a-pol", amqp091.Publishing{Body: []byte(fmt.Sprintf("pol-%d", i)), Expiration: "1000", DeliveryMode: amqp091.Persistent})
	}
	b.Stop()
	clk.Advance(5 * time.Second)
	b.Restart()
	brokertest.Eventually(t, "a-src and a-pol to be empty", func() bool { return tlReady(t, b, "a-src")+tlReady(t, b, "a-pol") == 0 })
	tlEventuallyReady(t, b, "z-dlq", old+n)
	tlSettleTimers(b)
	ch = b.Session(t)
	got := ch.Drain("z-dlq")
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
	if !ch.PublishAck("", "z-dlq", amqp091.Publishing{Body: []byte("after"), DeliveryMode: amqp091.Persistent}) {
		t.Fatal("persistent publish nacked after recovery: the store failed")
	}
}
