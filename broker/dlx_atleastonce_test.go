// Tests of at-least-once dead-lettering and its backlog.

package broker_test

// Tests of at-least-once dead-lettering (x-dead-letter-strategy
// at-least-once, SPEC §2): a dead letter without a route waits in the
// source's backlog until every target can take it.

import (
	"errors"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
)

// TestDLXAtLeastOnce: with x-dead-letter-strategy at-least-once, a dead
// letter without a route waits in the source's backlog — counted as a
// message, never ready, never delivered — and is forwarded as soon as a
// route exists. The periodic retry is disabled (an hour) unless the case
// needs it, so forwarding is shown to follow the event itself.
func TestDLXAtLeastOnce(t *testing.T) {
	noRetry := brokertest.Config{Broker: broker.Options{BacklogRetry: time.Hour}}
	for _, g := range dsALOGroups {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			t.Run("binding_added", func(t *testing.T) {
				t.Parallel()
				e := dsStart(t, g, noRetry)
				e.queue("src", amqp091.Table{"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "dlq"})
				e.PublishBodies("src", "p1", "p2")
				msgs := dvConsume(e.t, e.Session, "src", "c", false, nil)
				for _, d := range dsRecv(t, msgs, "p1", "p2") {
					e.reject(d, false)
				}
				e.waitFor("src", 2, 0, 0)
				e.waitBacklog("src", 2)
				// Counted as messages (declare-ok, and delete if-empty
				// refuses), though basic.get finds none.
				if q, err := e.QueueDeclarePassive("src", true, false, false, false, nil); err != nil || q.Messages != 2 {
					t.Fatalf("passive declare: %d messages, %v; want the 2 waiting", q.Messages, err)
				}
				if _, ok, err := e.Channel.Get("src", false); ok || err != nil {
					t.Fatalf("basic.get: %v, %v; want get-empty", ok, err)
				}
				dch, err := e.Conn.Channel()
				if err != nil {
					t.Fatal(err)
				}
				var ae *amqp091.Error
				if _, err := dch.QueueDelete("src", false, true, false); !errors.As(err, &ae) || ae.Code != amqp091.PreconditionFailed {
					t.Fatalf("delete if-empty with dead letters waiting: %v, want 406", err)
				}
				// Not delivered: the consumer's next message is a new one.
				e.PublishBodies("src", "after")
				if err := dsRecv(t, msgs, "after")[0].Ack(false); err != nil {
					t.Fatal(err)
				}
				e.wantCounters(map[string]uint64{"backlogged": 2})
				// RabbitMQ's metric counts a dead letter when it dies,
				// once, whether it waits or not.
				e.wantDied("at_least_once", "rejected", 2, 0)
				// The exchange alone is no route yet.
				e.DeclareExchange("dlx", "direct", nil, brokertest.Durable)
				e.waitFor("src", 2, 0, 0)
				e.Declare("dlq", nil, brokertest.Durable)
				e.waitFor("src", 2, 0, 0)
				e.Bind("dlq", "dlq", "dlx", nil)
				e.waitFor("src", 0, 0, 0)
				if q, err := e.QueueDeclarePassive("src", true, false, false, false, nil); err != nil || q.Messages != 0 {
					t.Fatalf("passive declare once forwarded: %d messages, %v; want 0", q.Messages, err)
				}
				for _, d := range e.Expect("dlq", "p1", "p2") {
					dsWantRoute(t, d, "dlx", "dlq")
					e.wantDeaths(d.Headers, dsDeath{queue: "src", reason: "rejected", exchange: "", count: 1, keys: []string{"src"}})
				}
				e.wantCounters(map[string]uint64{"backlogged": 2, "dead_lettered.rejected": 2})
				e.wantDied("at_least_once", "rejected", 2, 2)
			})
			t.Run("exchange_declared", func(t *testing.T) {
				t.Parallel()
				e := dsStart(t, g, noRetry)
				e.DeclareExchange("ae", "fanout", nil, brokertest.Durable)
				e.Declare("dlq", nil, brokertest.Durable)
				e.Bind("dlq", "", "ae", nil)
				e.queue("src", amqp091.Table{"x-dead-letter-exchange": "dlx"})
				e.PublishBodies("src", "p")
				e.reject(e.Expect("src", "p")[0], false)
				e.waitFor("src", 1, 0, 0)
				// Declared with an alternate exchange that routes: a route
				// exists without any binding.
				e.DeclareExchange("dlx", "direct", amqp091.Table{"alternate-exchange": "ae"}, brokertest.Durable)
				e.waitFor("src", 0, 0, 0)
				dsWantRoute(t, e.Expect("dlq", "p")[0], "dlx", "src")
			})
			t.Run("queue_declared", func(t *testing.T) {
				t.Parallel()
				e := dsStart(t, g, noRetry)
				e.queue("src", amqp091.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "later"})
				e.PublishBodies("src", "p")
				e.reject(e.Expect("src", "p")[0], false)
				e.waitFor("src", 1, 0, 0)
				// The default exchange routes to a queue once it exists.
				e.Declare("later", nil, brokertest.Durable)
				e.waitFor("src", 0, 0, 0)
				e.Expect("later", "p")
			})
			t.Run("policy_changed", func(t *testing.T) {
				t.Parallel()
				e := dsStart(t, g, noRetry)
				e.setup(nil)
				e.queue("pq", nil)
				pol := broker.Policy{Name: "dl", Pattern: "^pq$", ApplyTo: "queues",
					Definition: map[string]any{"dead-letter-exchange": "dlx", "dead-letter-routing-key": "nowhere"}}
				e.policy(pol)
				e.PublishBodies("pq", "p")
				e.reject(e.Expect("pq", "p")[0], false)
				e.waitFor("pq", 1, 0, 0)
				pol.Definition = map[string]any{"dead-letter-exchange": "dlx", "dead-letter-routing-key": "dlq"}
				e.policy(pol)
				e.waitFor("pq", 0, 0, 0)
				dsWantRoute(t, e.Expect("dlq", "p")[0], "dlx", "dlq")
			})
			t.Run("cycle", func(t *testing.T) {
				t.Parallel()
				// rabbit_fifo_dlx_integration_SUITE:cycle (B30).
				e := dsStart(t, g, noRetry)
				e.queue("src", amqp091.Table{"x-message-ttl": int64(5), "x-dead-letter-exchange": ""})
				e.PublishBodies("src", "p")
				e.waitFor("src", 1, 0, 0)
				e.wantCounters(map[string]uint64{"backlogged": 1, "cycles": 1})
				e.Declare("dlq", nil, brokertest.Durable)
				e.policy(broker.Policy{Name: "dlrk", Pattern: "^src$", Definition: map[string]any{"dead-letter-routing-key": "dlq"}})
				e.waitFor("src", 0, 0, 0)
				e.Expect("dlq", "p")
			})
			t.Run("target_full_retried", func(t *testing.T) {
				t.Parallel()
				e := dsStart(t, g, brokertest.Config{Broker: broker.Options{BacklogRetry: 10 * time.Millisecond}})
				e.Declare("full", amqp091.Table{"x-max-length": int64(1), "x-overflow": "reject-publish"}, brokertest.Durable)
				e.PublishBodies("full", "already")
				e.queue("src", amqp091.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "full"})
				e.PublishBodies("src", "p")
				e.reject(e.Expect("src", "p")[0], false)
				e.waitFor("src", 1, 0, 0)
				e.Expect("full", "already")
				e.waitFor("src", 0, 0, 0)
				e.Expect("full", "p")
				e.wantCounters(map[string]uint64{"backlogged": 1, "dead_lettered.rejected": 1})
			})
			t.Run("deleted_with_queue", func(t *testing.T) {
				t.Parallel()
				e := dsStart(t, g, noRetry)
				e.queue("src", amqp091.Table{"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "dlq"})
				e.PublishBodies("src", "p")
				e.reject(e.Expect("src", "p")[0], false)
				e.waitFor("src", 1, 0, 0)
				if _, err := e.QueueDelete("src", false, false, false); err != nil {
					t.Fatal(err)
				}
				e.DeclareExchange("dlx", "direct", nil, brokertest.Durable)
				e.Declare("dlq", nil, brokertest.Durable)
				e.Bind("dlq", "dlq", "dlx", nil)
				e.WantEmpty("dlq")
			})
			t.Run("reject_publish_dlx_not_kept", func(t *testing.T) {
				t.Parallel()
				// The refused message never entered the queue; its
				// publisher is nacked and still owns it.
				e := dsStart(t, g, noRetry)
				e.queue("src", amqp091.Table{"x-max-length": int64(1), "x-overflow": "reject-publish-dlx", "x-dead-letter-exchange": "missing"})
				e.PublishBodies("src", "p1", "p2")
				e.wantCounters(map[string]uint64{"discarded.maxlen": 1, "dropped.dlx_missing": 1})
				e.waitFor("src", 1, 1, 0)
			})
			t.Run("survives_restart", func(t *testing.T) {
				t.Parallel()
				e := dsStart(t, g, noRetry)
				e.queue("src", amqp091.Table{"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "dlq"})
				e.PublishBodies("src", "p1", "p2", "p3")
				ds := e.Expect("src", "p1", "p2")
				e.nack(ds[1], true, false)
				e.waitFor("src", 3, 1, 0)
				e.b.Restart()
				e.redial()
				e.waitFor("src", 3, 1, 0)
				e.waitBacklog("src", 2)
				// Only p3 is delivered.
				msgs := dvConsume(e.t, e.Session, "src", "c", false, nil)
				dsRecv(t, msgs, "p3")
				e.DeclareExchange("dlx", "direct", nil, brokertest.Durable)
				e.Declare("dlq", nil, brokertest.Durable)
				e.Bind("dlq", "dlq", "dlx", nil)
				e.waitFor("src", 1, 0, 1)
				e.waitFor("dlq", 2, 2, 0) // forwarded by an asynchronous retry
				for _, d := range e.Expect("dlq", "p1", "p2") {
					e.wantDeaths(d.Headers, dsDeath{queue: "src", reason: "rejected", exchange: "", count: 1, keys: []string{"src"}})
					dsWantFirstLast(t, d.Headers, [3]string{"rejected", "src", ""}, [3]string{"rejected", "src", ""})
					if d.DeliveryMode != amqp091.Persistent {
						t.Fatalf("delivery mode %d, want 2", d.DeliveryMode)
					}
				}
				e.WantEmpty("dlq")
			})
		})
	}
}

// At-least-once dead-lettering is all or nothing across targets: while
// one target is full (reject-publish), the message waits in the source's
// backlog and no target gets it; once there is room, every target does.
//
// Review finding R7 of an adversarial review of the broker's
// concurrency and store ordering; it failed before the fix.
func TestDeadLetterAtLeastOnceAllTargetsOrNone(t *testing.T) {
	// Retries run when the test says (RetryBacklogsForTest), not on a timer.
	b := brokertest.Start(t, brokertest.Config{Broker: broker.Options{BacklogRetry: time.Hour}})
	_, ch := b.Channel(t)
	if err := ch.ExchangeDeclare("fan", "fanout", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for name, args := range map[string]amqp091.Table{
		"t-ok":   nil,
		"t-full": {"x-max-length": int32(1), "x-overflow": "reject-publish"},
	} {
		if _, err := ch.QueueDeclare(name, false, false, false, false, args); err != nil {
			t.Fatal(err)
		}
	}
	// Fill t-full before binding it, so only the dead letter meets the limit.
	if err := ch.Publish("", "t-full", false, false, amqp091.Publishing{Body: []byte("filler")}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"t-ok", "t-full"} {
		if err := ch.QueueBind(name, "", "fan", false, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ch.QueueDeclare("alo-src", false, false, false, false, amqp091.Table{
		"x-dead-letter-exchange": "fan", "x-dead-letter-strategy": "at-least-once",
	}); err != nil {
		t.Fatal(err)
	}
	if err := ch.Publish("", "alo-src", false, false, amqp091.Publishing{Body: []byte("m")}); err != nil {
		t.Fatal(err)
	}
	d, ok, err := ch.Get("alo-src", false)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	if err := d.Reject(false); err != nil {
		t.Fatal(err)
	}
	stats := func(q string) broker.QueueStats {
		st, ok := b.Broker.QueueStats("/", q)
		if !ok {
			t.Fatalf("no queue %s", q)
		}
		return st
	}
	brokertest.Eventually(t, "the dead letter waiting in alo-src's backlog", func() bool { return stats("alo-src").DeadLetterBacklog == 1 })
	// Several retries pass while t-full stays full: still no target has it.
	for range 3 {
		b.Broker.RetryBacklogsForTest()
	}
	if n, st := stats("t-ok").Ready, stats("alo-src"); n != 0 || st.DeadLetterBacklog != 1 {
		t.Fatalf("t-ok got the message while t-full was full (%d ready; source %+v)", n, st)
	}
	// Make room in t-full: the next retry delivers to both.
	if f, ok, err := ch.Get("t-full", true); err != nil || !ok || string(f.Body) != "filler" {
		t.Fatalf("draining t-full: %q %v %v", f.Body, ok, err)
	}
	b.Broker.RetryBacklogsForTest()
	// The copies land after their store write.
	brokertest.Eventually(t, "the dead letter forwarded to t-ok and t-full once there was room", func() bool {
		return stats("t-ok").Ready == 1 && stats("t-full").Ready == 1
	})
	if st := stats("alo-src"); st.DeadLetterBacklog != 0 {
		t.Fatalf("still waiting after forwarding: %+v", st)
	}
}
