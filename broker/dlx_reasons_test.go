// Tests of why a message is dead-lettered: rejected, maxlen, expired, delivery_limit.

package broker_test

// Tests of the reasons a message is dead-lettered (SPEC §2): rejected
// (basic.reject and basic.nack, single and multiple, after requeues),
// maxlen (drop-head and reject-publish-dlx), expired and delivery_limit;
// what is dropped or counted instead, and queue removal, which
// dead-letters nothing.

import (
	"fmt"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
)

// dsDeliveryLimit50 is the suite's policy giving quorum queues a delivery
// limit, so requeued messages return to the head. brokerd requeues to the
// original position whatever the limit, and applies delivery-limit to
// classic queues too, where 50 is never reached here.
func (e *dsEnv) dsDeliveryLimit50() {
	e.policy(broker.Policy{Name: "delivery-limit", Pattern: "^src$", ApplyTo: "queues", Definition: map[string]any{"delivery-limit": 50}})
}

func dsNack(e *dsEnv) {
	e.setup(nil)
	e.PublishBodies("src", "p1", "p2", "p3")
	e.waitFor("src", 3, 3, 0)
	ds := e.Expect("src", "p1", "p2", "p3")
	e.nack(ds[2], false, false)
	e.Expect("dlq", "p3")
	e.WantEmpty("dlq")
	e.nack(ds[0], false, false)
	e.nack(ds[1], false, false)
	e.Expect("dlq", "p1", "p2")
	e.WantEmpty("dlq")
	e.WantEmpty("src")
	e.waitFor("src", 0, 0, 0)
	e.wantCounters(map[string]uint64{"dead_lettered.rejected": 3})
	e.wantQueueDeadLettered("src", map[string]uint64{"rejected": 3})
}

func dsMultipleNack(e *dsEnv) {
	e.setup(nil)
	e.PublishBodies("src", "p1", "p2", "p3")
	e.waitFor("src", 3, 3, 0)
	ds := e.Expect("src", "p1", "p2", "p3")
	e.nack(ds[2], true, false)
	e.Expect("dlq", "p1", "p2", "p3")
	e.WantEmpty("dlq")
	e.WantEmpty("src")
	e.waitFor("src", 0, 0, 0)
	e.wantCounters(map[string]uint64{"dead_lettered.rejected": 3})
}

func dsNackRequeue(e *dsEnv) {
	e.setup(nil)
	e.PublishBodies("src", "p1", "p2", "p3")
	ds := e.Expect("src", "p1", "p2", "p3")
	e.nack(ds[2], false, true)
	e.waitFor("src", 3, 1, 2)
	e.WantEmpty("dlq")
	d := e.Expect("src", "p3")[0]
	if !d.Redelivered {
		e.t.Fatal("requeued message not marked redelivered")
	}
	e.wantCounters(nil)
}

func dsNackRequeueMultiple(e *dsEnv) {
	e.setup(nil)
	e.PublishBodies("src", "p1", "p2", "p3")
	ds := e.Expect("src", "p1", "p2", "p3")
	e.nack(ds[2], true, true)
	e.waitFor("src", 3, 3, 0)
	for _, d := range e.Expect("src", "p1", "p2", "p3") {
		if !d.Redelivered {
			e.t.Fatalf("%q not marked redelivered", d.Body)
		}
	}
	e.WantEmpty("dlq")
	e.wantCounters(nil)
}

func dsReject(e *dsEnv) {
	e.setup(nil)
	e.PublishBodies("src", "p1", "p2", "p3")
	e.waitFor("src", 3, 3, 0)
	d := e.Expect("src", "p1")[0]
	e.reject(d, false)
	e.Expect("dlq", "p1")
	e.WantEmpty("dlq")
	e.Expect("src", "p2", "p3")
	e.WantEmpty("src")
	e.wantCounters(map[string]uint64{"dead_lettered.rejected": 1})
}

func dsRejectMany(e *dsEnv) {
	e.setup(nil)
	bodies := make([]string, 100)
	for i := range bodies {
		bodies[i] = fmt.Sprintf("m%03d", i+1)
	}
	e.PublishBodies("src", bodies...)
	msgs := dvConsume(e.t, e.Session, "src", "src-c", false, nil)
	for _, d := range dsRecv(e.t, msgs, bodies...) {
		e.reject(d, false)
	}
	e.waitFor("dlq", 100, 100, 0)
	e.waitFor("src", 0, 0, 0)
	dsRecv(e.t, dvConsume(e.t, e.Session, "dlq", "dlq-c", true, nil), bodies...)
	e.wantCounters(map[string]uint64{"dead_lettered.rejected": 100})
}

func dsRejectRequeue(e *dsEnv) {
	e.dsDeliveryLimit50()
	e.setup(nil)
	e.PublishBodies("src", "p1", "p2", "p3")
	e.waitFor("src", 3, 3, 0)
	e.reject(e.Expect("src", "p1")[0], true)
	e.waitFor("src", 3, 3, 0)
	e.Expect("src", "p1", "p2", "p3")
	e.WantEmpty("dlq")
	e.wantCounters(nil)
}

func dsMaxLengthDropHead(e *dsEnv) {
	e.setup(amqp091.Table{"x-max-length": int64(1)})
	e.PublishBodies("src", "p1", "p2", "p3")
	e.waitFor("src", 1, 1, 0)
	e.Expect("dlq", "p1", "p2")
	e.WantEmpty("dlq")
	e.Expect("src", "p3")
	e.WantEmpty("src")
	e.wantCounters(map[string]uint64{"dead_lettered.maxlen": 2})
}

func dsRejectRequeueRejectNoRequeue(e *dsEnv) {
	e.setup(nil)
	e.PublishBodies("src", "p")
	e.reject(e.Expect("src", "p")[0], true)
	e.waitFor("src", 1, 1, 0)
	d := e.Expect("src", "p")[0]
	if !d.Redelivered {
		e.t.Fatal("not marked redelivered")
	}
	e.reject(d, false)
	e.Expect("dlq", "p")
	e.WantEmpty("dlq")
	e.WantEmpty("src")
	e.wantCounters(map[string]uint64{"dead_lettered.rejected": 1})
}

// dsNackRequeueNackNoRequeueGet is B3's example: the DLQ order is P3, P1, P2.
func dsNackRequeueNackNoRequeueGet(e *dsEnv) {
	e.dsDeliveryLimit50()
	e.setup(nil)
	e.PublishBodies("src", "p1", "p2", "p3")
	e.waitFor("src", 3, 3, 0)
	ds := e.Expect("src", "p1", "p2", "p3")
	e.nack(ds[1], true, true)
	e.waitFor("src", 3, 2, 1)
	re := e.Expect("src", "p1", "p2")
	if re[0].DeliveryTag != 4 || re[1].DeliveryTag != 5 || !re[0].Redelivered || !re[1].Redelivered {
		e.t.Fatalf("redeliveries tags %d, %d (redelivered %t, %t), want 4, 5 redelivered",
			re[0].DeliveryTag, re[1].DeliveryTag, re[0].Redelivered, re[1].Redelivered)
	}
	e.nack(re[1], true, false)
	e.Expect("dlq", "p3", "p1", "p2")
	e.WantEmpty("dlq")
	e.WantEmpty("src")
	e.wantCounters(map[string]uint64{"dead_lettered.rejected": 3})
}

func dsNackRequeueNackNoRequeueConsume(e *dsEnv) {
	e.dsDeliveryLimit50()
	e.setup(nil)
	e.PublishBodies("src", "m1", "m2", "m3")
	e.waitFor("src", 3, 3, 0)
	src := dvConsume(e.t, e.Session, "src", "src-c", false, nil)
	ds := dsRecv(e.t, src, "m1", "m2", "m3")
	e.nack(ds[1], true, true)
	re := dsRecv(e.t, src, "m1", "m2")
	if !re[0].Redelivered || !re[1].Redelivered {
		e.t.Fatal("redeliveries not marked redelivered")
	}
	dlq := dvConsume(e.t, e.Session, "dlq", "dlq-c", false, nil)
	e.nack(re[1], true, false)
	got := dsRecv(e.t, dlq, "m3", "m1", "m2")
	if err := e.Ack(got[2].DeliveryTag, true); err != nil {
		e.t.Fatal(err)
	}
	e.waitFor("src", 0, 0, 0)
	e.waitFor("dlq", 0, 0, 0)
	e.wantCounters(map[string]uint64{"dead_lettered.rejected": 3})
}

func dsMaxLengthRejectPublishDLX(e *dsEnv) {
	e.setup(amqp091.Table{"x-max-length": int64(1), "x-overflow": "reject-publish-dlx"})
	pc, err := e.Conn.Channel()
	if err != nil {
		e.t.Fatal(err)
	}
	if err := pc.Confirm(false); err != nil {
		e.t.Fatal(err)
	}
	for i, body := range []string{"p1", "p2", "p3"} {
		dc, err := pc.PublishWithDeferredConfirmWithContext(brokertest.Context(e.t), "", "src", false, false, amqp091.Publishing{Body: []byte(body)})
		if err != nil {
			e.t.Fatal(err)
		}
		ack, err := dc.WaitContext(brokertest.Context(e.t))
		if err != nil {
			e.t.Fatal(err)
		}
		if want := i == 0; ack != want {
			e.t.Fatalf("%s: publisher ack %t, want %t", body, ack, want)
		}
	}
	e.waitFor("src", 1, 1, 0)
	ds := e.Expect("dlq", "p2", "p3")
	e.WantEmpty("dlq")
	e.Expect("src", "p1")
	e.WantEmpty("src")
	e.wantDeaths(ds[0].Headers, dsDeath{queue: "src", reason: "maxlen", exchange: "", count: 1, keys: []string{"src"}})
	e.wantCounters(map[string]uint64{"dead_lettered.maxlen": 2})
}

func dsTTL(e *dsEnv) {
	e.setup(amqp091.Table{"x-message-ttl": int64(1)})
	e.PublishBodies("src", "p1")
	e.waitFor("dlq", 1, 1, 0)
	e.waitFor("src", 0, 0, 0)
	e.Expect("dlq", "p1")
	e.WantEmpty("src")
	e.wantCounters(map[string]uint64{"dead_lettered.expired": 1})
}

// TestDLXDropCauses: every way an at-most-once dead letter is dropped is
// counted under its reason and its cause, and nothing else.
func TestDLXDropCauses(t *testing.T) {
	cases := []struct {
		name    string
		prepare func(e *dsEnv) amqp091.Table
		expire  bool // the message expires (TTL 5 ms) instead of being rejected
		want    map[string]uint64
	}{
		{"no_dlx", func(e *dsEnv) amqp091.Table { return nil }, false,
			map[string]uint64{"discarded.rejected": 1, "dropped.no_dlx": 1}},
		{"dlx_missing", func(e *dsEnv) amqp091.Table {
			return amqp091.Table{"x-dead-letter-exchange": "missing"}
		}, false, map[string]uint64{"discarded.rejected": 1, "dropped.dlx_missing": 1}},
		{"unroutable", func(e *dsEnv) amqp091.Table {
			e.DeclareExchange("dlx", "direct", nil, brokertest.Durable)
			return amqp091.Table{"x-dead-letter-exchange": "dlx"}
		}, false, map[string]uint64{"discarded.rejected": 1, "dropped.unroutable": 1}},
		{"cycle", func(e *dsEnv) amqp091.Table {
			return amqp091.Table{"x-dead-letter-exchange": "", "x-message-ttl": int64(5)}
		}, true, map[string]uint64{"discarded.expired": 1, "dropped.cycle": 1, "cycles": 1}},
		{"target_full", func(e *dsEnv) amqp091.Table {
			e.Declare("full", amqp091.Table{"x-max-length": int64(1), "x-overflow": "reject-publish"}, brokertest.Durable)
			e.PublishBodies("full", "already")
			return amqp091.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "full"}
		}, false, map[string]uint64{"discarded.rejected": 1, "dropped.target_full": 1}},
	}
	for _, g := range dsGroups[:2] {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					e := dsStart(t, g, brokertest.Config{})
					e.queue("src", c.prepare(e))
					e.PublishBodies("src", "p")
					if !c.expire {
						e.reject(e.Expect("src", "p")[0], false)
					}
					e.waitFor("src", 0, 0, 0)
					e.wantCounters(c.want)
					e.wantQueueDeadLettered("src", nil)
				})
			}
		})
	}
}

// TestDLXQueueRemovalDoesNotDeadLetter: purge, delete and x-expires drop
// the messages without dead-lettering them (B5).
func TestDLXQueueRemovalDoesNotDeadLetter(t *testing.T) {
	for _, g := range dsGroups {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			t.Run("purge", func(t *testing.T) {
				t.Parallel()
				e := dsStart(t, g, brokertest.Config{})
				e.setup(nil)
				e.PublishBodies("src", "p1", "p2", "p3")
				e.waitFor("src", 3, 3, 0)
				if n, err := e.QueuePurge("src", false); err != nil || n != 3 {
					t.Fatalf("purge: %d, %v; want 3", n, err)
				}
				e.waitFor("src", 0, 0, 0)
				e.WantEmpty("dlq")
				e.wantCounters(nil)
			})
			t.Run("delete", func(t *testing.T) {
				t.Parallel()
				e := dsStart(t, g, brokertest.Config{})
				e.setup(nil)
				e.PublishBodies("src", "p1", "p2", "p3")
				d := e.Expect("src", "p1")[0]
				if _, err := e.QueueDelete("src", false, false, false); err != nil {
					t.Fatal(err)
				}
				// Rejecting a message of the deleted queue does not
				// dead-letter it either.
				e.reject(d, false)
				e.WantEmpty("dlq")
				e.wantCounters(nil)
			})
			t.Run("x-expires", func(t *testing.T) {
				t.Parallel()
				e := dsStart(t, g, brokertest.Config{})
				e.setup(amqp091.Table{"x-expires": int64(50)})
				e.PublishBodies("src", "p1", "p2", "p3")
				brokertest.Eventually(t, "queue src to expire", func() bool {
					_, ok := e.b.Broker.QueueStats("/", "src")
					return !ok
				})
				e.WantEmpty("dlq")
				e.wantCounters(nil)
			})
		})
	}
}

// TestDLXDeliveryLimit: every return counts toward x-delivery-limit (nack
// and reject with requeue, basic.recover, channel close), on every queue
// type; past the limit the message is dead-lettered delivery_limit.
func TestDLXDeliveryLimit(t *testing.T) {
	for _, g := range dsGroups {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			e := dsStart(t, g, brokertest.Config{})
			e.setup(amqp091.Table{"x-delivery-limit": int64(3)})
			e.PublishBodies("src", "p")
			wantCount := func(d amqp091.Delivery, n int64) {
				t.Helper()
				if n == 0 {
					dsWantAbsent(t, d.Headers, "x-delivery-count")
					return
				}
				if c, ok := d.Headers["x-delivery-count"].(int64); !ok || c != n {
					t.Fatalf("x-delivery-count = %#v, want long %d", d.Headers["x-delivery-count"], n)
				}
			}
			d := e.Expect("src", "p")[0]
			wantCount(d, 0)
			e.nack(d, false, true)
			d = e.Expect("src", "p")[0]
			wantCount(d, 1)
			e.reject(d, true)
			d = e.Expect("src", "p")[0]
			wantCount(d, 2)
			if err := e.Recover(true); err != nil {
				t.Fatal(err)
			}
			ch2, err := e.Conn.Channel()
			if err != nil {
				t.Fatal(err)
			}
			d, ok, err := ch2.Get("src", false)
			if err != nil || !ok {
				t.Fatalf("get: %v %v", ok, err)
			}
			wantCount(d, 3)
			if err := ch2.Close(); err != nil {
				t.Fatal(err)
			}
			e.waitFor("src", 0, 0, 0)
			d = e.Expect("dlq", "p")[0]
			e.wantDeaths(d.Headers, dsDeath{queue: "src", reason: "delivery_limit", exchange: "", count: 1, keys: []string{"src"}})
			dsWantFirstLast(t, d.Headers, [3]string{"delivery_limit", "src", ""}, [3]string{"delivery_limit", "src", ""})
			e.wantCounters(map[string]uint64{"dead_lettered.delivery_limit": 1})
		})
	}
}
