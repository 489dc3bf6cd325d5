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
)

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
