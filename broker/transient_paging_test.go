// Tests of transient paging: non-durable messages page out to volatile ranges.

package broker_test

// Transient paging: transient messages, and every message of a queue that
// does not survive a restart, page out too (into the store's volatile
// ranges), so their memory is bounded as well; none of them comes back
// after a restart, and a dead letter that leaves a volatile range for a
// durable queue is as durable as any other.

import (
	"fmt"
	"slices"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker/brokertest"
	"github.com/brokerd/brokerd/store"
)

// tpVolatileQueues returns how many volatile queues the store lists.
func tpVolatileQueues(t *testing.T, b *brokertest.Instance) int {
	t.Helper()
	n := 0
	if err := b.Store.Queues(func(q store.QueueID, st store.QueueState) bool {
		if q.Volatile() && len(st.Levels) > 0 {
			n++
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// A non-durable queue and a durable one fed transient and persistent
// messages, interleaved, hold only their windows in memory, deliver every
// message in order with its body, and after a restart the durable queue
// holds exactly its persistent messages, in order; nothing of the
// volatile ranges is left in the store.
func TestTransientPagingBoundedOrderedAndGoneAfterRestart(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t)
	if _, err := ch.QueueDeclare("plain", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	ch.Declare("mixed", amqp091.Table{"x-max-priority": int32(1)}, brokertest.Durable)
	const n = 300
	var all, persistent []string
	for i := range n {
		body := fmt.Sprintf("m%d", i)
		mode := uint8(amqp091.Transient)
		if i%3 == 0 {
			mode = amqp091.Persistent
			persistent = append(persistent, body)
		}
		all = append(all, body)
		ch.Publish("", "plain", amqp091.Publishing{Body: []byte(body), DeliveryMode: mode})
		ch.Publish("", "mixed", amqp091.Publishing{Body: []byte(body), DeliveryMode: mode})
	}
	pgWantResident(t, b, "plain", 1, 0, n)
	pgWantResident(t, b, "mixed", 2, 0, n)
	if tpVolatileQueues(t, b) != 2 {
		t.Fatalf("%d volatile queues in the store, want 2 (the transient messages paged out)", tpVolatileQueues(t, b))
	}
	// The non-durable queue delivers all, in order (its middle is read
	// back from the volatile range).
	dvWantBodies(t, "plain", ch.GetN("plain", n), all...)
	ch.WantEmpty("plain")

	// The durable queue: the first half is taken (and acked) now, in
	// order, across both ranges.
	ds := ch.GetN("mixed", n/2)
	dvWantBodies(t, "mixed", ds, all[:n/2]...)
	for _, d := range ds {
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
	}
	ch.WantReady("mixed", n/2)
	b.Restart()
	ch = b.Session(t)
	var want []string
	for _, body := range persistent {
		var i int
		fmt.Sscanf(body, "m%d", &i)
		if i >= n/2 {
			want = append(want, body)
		}
	}
	ch.WantReady("mixed", len(want))
	dvWantBodies(t, "mixed after restart", ch.GetN("mixed", len(want)), want...)
	ch.WantEmpty("mixed")
	if v := tpVolatileQueues(t, b); v != 0 {
		t.Fatalf("%d volatile queues left in the store after recovery", v)
	}
}

// Paged-out transient messages expire at their deadline wherever they lie
// and are dead-lettered; persistent messages of a non-durable queue
// dead-lettered into a durable queue after they paged out are stored with
// their bodies and survive a restart. Purge and delete clear what a
// queue paged out.
func TestTransientPagingExpiryDeadLettersAndPurge(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t)
	ch.Declare("dlq", nil, brokertest.Durable)
	if _, err := ch.QueueDeclare("src", false, false, false, false, tlDLX("dlq", nil)); err != nil {
		t.Fatal(err)
	}
	const n = 200
	for i := range n {
		// Alternate persistent and transient; all expire soon.
		mode := uint8(amqp091.Transient)
		if i%2 == 0 {
			mode = amqp091.Persistent
		}
		ch.Publish("", "src", amqp091.Publishing{Body: []byte(fmt.Sprintf("e%d", i)), DeliveryMode: mode, Expiration: "200"})
	}
	pgWantResident(t, b, "src", 1, 0, -1)
	tlEventuallyReady(t, b, "dlq", n)
	ch.WantReady("src", 0)
	b.Restart()
	ch = b.Session(t)
	var want []string
	for i := 0; i < n; i += 2 {
		want = append(want, fmt.Sprintf("e%d", i))
	}
	got := ch.GetN("dlq", n/2)
	dvWantBodies(t, "persistent dead letters after restart", got, want...)
	for _, d := range got {
		if r, _ := d.Headers["x-first-death-reason"].(string); r != "expired" {
			t.Fatalf("%q: x-first-death-reason %q, want expired", d.Body, r)
		}
	}
	ch.WantEmpty("dlq")

	// Purge and delete.
	if _, err := ch.QueueDeclare("tmp", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		ch.Publish("", "tmp", amqp091.Publishing{Body: []byte(fmt.Sprintf("t%d", i)), DeliveryMode: amqp091.Transient})
	}
	if tpVolatileQueues(t, b) == 0 {
		t.Fatal("no volatile queue: nothing paged out")
	}
	if k, err := ch.QueuePurge("tmp", false); err != nil || k != 100 {
		t.Fatalf("purge: %d %v, want 100", k, err)
	}
	ch.WantEmpty("tmp")
	for i := range 100 {
		ch.Publish("", "tmp", amqp091.Publishing{Body: []byte(fmt.Sprintf("u%d", i)), DeliveryMode: amqp091.Transient})
	}
	dvWantBodies(t, "after purge", ch.GetN("tmp", 3), "u0", "u1", "u2")
	if _, err := ch.QueueDelete("tmp", false, false, false); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, "the volatile ranges to be dropped", func() bool { return tpVolatileQueues(t, b) == 0 })
}

// Transient dead letters that wait for a route (at-least-once) wait in the
// store's volatile backlog range, not in memory: counted, forwarded in the
// order they died, with persistent ones interleaved; after a restart only
// the persistent ones still wait.
func TestTransientBacklogStoredAndForwardedInOrder(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t)
	args := amqp091.Table{"x-dead-letter-exchange": "later", "x-dead-letter-strategy": "at-least-once"}
	ch.Declare("src", args, brokertest.Durable)
	const n = 40
	var all, persistent []string
	for i := range n {
		body := fmt.Sprintf("d%d", i)
		mode := uint8(amqp091.Transient)
		if i%4 == 0 {
			mode = amqp091.Persistent
			persistent = append(persistent, body)
		}
		all = append(all, body)
		ch.Publish("", "src", amqp091.Publishing{Body: []byte(body), DeliveryMode: mode})
	}
	for _, d := range ch.GetN("src", n) {
		if err := d.Reject(false); err != nil {
			t.Fatal(err)
		}
	}
	waitBacklog := func(want int) {
		t.Helper()
		brokertest.Eventually(t, fmt.Sprintf("%d dead letters waiting", want), func() bool {
			st, ok := b.Broker.QueueStats("/", "src")
			return ok && st.DeadLetterBacklog == want
		})
		if r := b.Broker.BacklogResidentForTest("/", "src"); r != 0 {
			t.Fatalf("%d waiting dead letters in memory", r)
		}
	}
	waitBacklog(n)
	ch.DeclareExchange("later", "fanout", nil)
	ch.Declare("dlq", nil, brokertest.Durable)
	ch.Bind("dlq", "", "later", nil)
	tlEventuallyReady(t, b, "dlq", n)
	waitBacklog(0)
	got := ch.GetN("dlq", n)
	dvWantBodies(t, "forwarded", got, all...)
	for _, d := range got {
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
	}

	// Again, with a restart before the route exists.
	if err := ch.QueueUnbind("dlq", "", "later", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueuePurge("dlq", false); err != nil {
		t.Fatal(err)
	}
	for _, body := range all {
		mode := uint8(amqp091.Transient)
		if slices.Contains(persistent, body) {
			mode = amqp091.Persistent
		}
		ch.Publish("", "src", amqp091.Publishing{Body: []byte(body), DeliveryMode: mode})
	}
	for _, d := range ch.GetN("src", n) {
		if err := d.Reject(false); err != nil {
			t.Fatal(err)
		}
	}
	waitBacklog(n)
	b.Restart()
	ch = b.Session(t)
	waitBacklog(len(persistent))
	ch.DeclareExchange("later", "fanout", nil) // not durable: gone with the restart
	ch.Bind("dlq", "", "later", nil)
	tlEventuallyReady(t, b, "dlq", len(persistent))
	dvWantBodies(t, "forwarded after restart", ch.GetN("dlq", len(persistent)), persistent...)
}
