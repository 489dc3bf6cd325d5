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

func tpPublish(t *testing.T, ch *amqp091.Channel, q string, body string, mode uint8, expiration string) {
	t.Helper()
	if !tlPublish(t, ch, "", q, amqp091.Publishing{Body: []byte(body), DeliveryMode: mode, Expiration: expiration}) {
		t.Fatalf("publish %q to %q nacked", body, q)
	}
}

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
	_, ch := tlChannel(t, b)
	if _, err := ch.QueueDeclare("plain", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	tlDeclareDurable(t, ch, "mixed", "classic", true, amqp091.Table{"x-max-priority": int32(1)})
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
		tpPublish(t, ch, "plain", body, mode, "")
		tpPublish(t, ch, "mixed", body, mode, "")
	}
	pgWantResident(t, b, "plain", 1, 0, n)
	pgWantResident(t, b, "mixed", 2, 0, n)
	if tpVolatileQueues(t, b) != 2 {
		t.Fatalf("%d volatile queues in the store, want 2 (the transient messages paged out)", tpVolatileQueues(t, b))
	}
	// The non-durable queue delivers all, in order (its middle is read
	// back from the volatile range).
	dvWantBodies(t, "plain", dvGetN(t, ch, "plain", n), all...)
	dvWantEmpty(t, ch, "plain")

	// The durable queue: the first half is taken (and acked) now, in
	// order, across both ranges.
	ds := dvGetN(t, ch, "mixed", n/2)
	dvWantBodies(t, "mixed", ds, all[:n/2]...)
	for _, d := range ds {
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
	}
	dvWantReady(t, ch, "mixed", n/2)
	b.Restart()
	_, ch = tlChannel(t, b)
	var want []string
	for _, body := range persistent {
		var i int
		fmt.Sscanf(body, "m%d", &i)
		if i >= n/2 {
			want = append(want, body)
		}
	}
	dvWantReady(t, ch, "mixed", len(want))
	dvWantBodies(t, "mixed after restart", dvGetN(t, ch, "mixed", len(want)), want...)
	dvWantEmpty(t, ch, "mixed")
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
	_, ch := tlChannel(t, b)
	tlDeclareDurable(t, ch, "dlq", "classic", true, nil)
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
		tpPublish(t, ch, "src", fmt.Sprintf("e%d", i), mode, "200")
	}
	pgWantResident(t, b, "src", 1, 0, -1)
	tlEventuallyReady(t, b, "dlq", n)
	dvWantReady(t, ch, "src", 0)
	b.Restart()
	_, ch = tlChannel(t, b)
	var want []string
	for i := 0; i < n; i += 2 {
		want = append(want, fmt.Sprintf("e%d", i))
	}
	got := dvGetN(t, ch, "dlq", n/2)
	dvWantBodies(t, "persistent dead letters after restart", got, want...)
	for _, d := range got {
		if r, _ := d.Headers["x-first-death-reason"].(string); r != "expired" {
			t.Fatalf("%q: x-first-death-reason %q, want expired", d.Body, r)
		}
	}
	dvWantEmpty(t, ch, "dlq")

	// Purge and delete.
	if _, err := ch.QueueDeclare("tmp", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		tpPublish(t, ch, "tmp", fmt.Sprintf("t%d", i), amqp091.Transient, "")
	}
	if tpVolatileQueues(t, b) == 0 {
		t.Fatal("no volatile queue: nothing paged out")
	}
	if k, err := ch.QueuePurge("tmp", false); err != nil || k != 100 {
		t.Fatalf("purge: %d %v, want 100", k, err)
	}
	dvWantEmpty(t, ch, "tmp")
	for i := range 100 {
		tpPublish(t, ch, "tmp", fmt.Sprintf("u%d", i), amqp091.Transient, "")
	}
	dvWantBodies(t, "after purge", dvGetN(t, ch, "tmp", 3), "u0", "u1", "u2")
	if _, err := ch.QueueDelete("tmp", false, false, false); err != nil {
		t.Fatal(err)
	}
	tlEventually(t, "the volatile ranges to be dropped", func() bool { return tpVolatileQueues(t, b) == 0 })
}

// Transient dead letters that wait for a route (at-least-once) wait in the
// store's volatile backlog range, not in memory: counted, forwarded in the
// order they died, with persistent ones interleaved; after a restart only
// the persistent ones still wait.
func TestTransientBacklogStoredAndForwardedInOrder(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	_, ch := tlChannel(t, b)
	args := amqp091.Table{"x-dead-letter-exchange": "later", "x-dead-letter-strategy": "at-least-once"}
	tlDeclareDurable(t, ch, "src", "classic", true, args)
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
		tpPublish(t, ch, "src", body, mode, "")
	}
	for _, d := range dvGetN(t, ch, "src", n) {
		if err := d.Reject(false); err != nil {
			t.Fatal(err)
		}
	}
	waitBacklog := func(want int) {
		t.Helper()
		tlEventually(t, fmt.Sprintf("%d dead letters waiting", want), func() bool {
			st, ok := b.Broker.QueueStats("/", "src")
			return ok && st.DeadLetterBacklog == want
		})
		if r := b.Broker.BacklogResidentForTest("/", "src"); r != 0 {
			t.Fatalf("%d waiting dead letters in memory", r)
		}
	}
	waitBacklog(n)
	tlExchange(t, ch, "later", "fanout", nil)
	tlDeclareDurable(t, ch, "dlq", "classic", true, nil)
	tlBind(t, ch, "dlq", "", "later")
	tlEventuallyReady(t, b, "dlq", n)
	waitBacklog(0)
	got := dvGetN(t, ch, "dlq", n)
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
		tpPublish(t, ch, "src", body, mode, "")
	}
	for _, d := range dvGetN(t, ch, "src", n) {
		if err := d.Reject(false); err != nil {
			t.Fatal(err)
		}
	}
	waitBacklog(n)
	b.Restart()
	_, ch = tlChannel(t, b)
	waitBacklog(len(persistent))
	tlExchange(t, ch, "later", "fanout", nil) // not durable: gone with the restart
	tlBind(t, ch, "dlq", "", "later")
	tlEventuallyReady(t, b, "dlq", len(persistent))
	dvWantBodies(t, "forwarded after restart", dvGetN(t, ch, "dlq", len(persistent)), persistent...)
}
