// Tests of queue TTL (x-expires).

package broker_test

// Tests of queue TTL, x-expires (SPEC §3, B41, B42): the lease that deletes
// an unused queue, what renews it, and how policy expires combines with it.

import (
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
)

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
		step    func(t *testing.T, ch *brokertest.Session)
		renewed bool
	}{
		{"publish", func(t *testing.T, ch *brokertest.Session) { ch.PublishBodies("lease", "m") }, false},
		{"active declare", func(t *testing.T, ch *brokertest.Session) {
			ch.Declare("lease", tlDLX("dlq", amqp091.Table{"x-expires": int32(1000)}))
		}, true},
		{"passive declare", func(t *testing.T, ch *brokertest.Session) {
			if _, err := ch.QueueDeclarePassive("lease", false, false, false, false, nil); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"passive declare nowait", func(t *testing.T, ch *brokertest.Session) {
			if _, err := ch.QueueDeclarePassive("lease", false, false, false, true, nil); err != nil {
				t.Fatal(err)
			}
			ch.Sync()
		}, false},
		{"basic.get on empty queue", func(t *testing.T, ch *brokertest.Session) { ch.TryGet("lease") }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := brokertest.NewClock()
			b := brokertest.Start(t, brokertest.Config{Clock: clk})
			ch := b.Session(t)
			ch.Declare("dlq", nil)
			ch.Declare("lease", tlDLX("dlq", amqp091.Table{"x-expires": int32(1000)}))
			ch.PublishBodies("lease", "kept-until-deleted")
			clk.Advance(600 * time.Millisecond)
			tc.step(t, ch)
			clk.Advance(500 * time.Millisecond) // 1100 ms
			if !tc.renewed {
				brokertest.Eventually(t, "the queue to expire", func() bool { return !tlExists(b, "lease") })
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
				brokertest.Eventually(t, "the queue to expire", func() bool { return !tlExists(b, "lease") })
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
	clk := brokertest.NewClock()
	b := brokertest.Start(t, brokertest.Config{Clock: clk})
	ch := b.Session(t)
	ch.Declare("lease", amqp091.Table{"x-expires": int32(1000)})
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
	brokertest.Eventually(t, "the queue to expire", func() bool { return !tlExists(b, "lease") })
}

// B41: the lease starts when the queue is created, even by a declare with
// nowait (RabbitMQ arms the expiry timer in the queue's init).
func TestQueueTTLNowaitCreate(t *testing.T) {
	t.Parallel()
	clk := brokertest.NewClock()
	b := brokertest.Start(t, brokertest.Config{Clock: clk})
	ch := b.Session(t)
	if _, err := ch.QueueDeclare("lease", false, false, false, true, amqp091.Table{"x-expires": int32(1000)}); err != nil {
		t.Fatal(err)
	}
	ch.Sync()
	if !tlExists(b, "lease") {
		t.Fatal("queue not declared")
	}
	clk.Advance(1100 * time.Millisecond)
	brokertest.Eventually(t, "the queue to expire", func() bool { return !tlExists(b, "lease") })
}

// B42, SPEC §3: policy expires combines with x-expires by minimum, on
// classic and quorum queues.
func TestQueueTTLPolicyMin(t *testing.T) {
	t.Parallel()
	clk := brokertest.NewClock()
	b := brokertest.Start(t, brokertest.Config{Clock: clk})
	ch := b.Session(t)
	tlSetPolicy(t, b, broker.Policy{Name: "exp", Pattern: "^pexp-", Definition: map[string]any{"expires": 1000}})
	ch.Declare("pexp-arg-long", amqp091.Table{"x-expires": int32(10_000)})
	ch.Declare("pexp-qq-arg-long", amqp091.Table{"x-expires": int32(10_000)}, brokertest.Type("quorum"))
	ch.Declare("pexp-arg-short", amqp091.Table{"x-expires": int32(500)})
	ch.Declare("pexp-no-arg", nil)
	ch.Declare("other", amqp091.Table{"x-expires": int32(10_000)})

	clk.Advance(600 * time.Millisecond)
	brokertest.Eventually(t, "pexp-arg-short to expire", func() bool { return !tlExists(b, "pexp-arg-short") })
	for _, q := range []string{"pexp-arg-long", "pexp-qq-arg-long", "pexp-no-arg"} {
		if !tlExists(b, q) {
			t.Fatalf("%s expired at 600 ms", q)
		}
	}
	clk.Advance(500 * time.Millisecond)
	for _, q := range []string{"pexp-arg-long", "pexp-qq-arg-long", "pexp-no-arg"} {
		brokertest.Eventually(t, q+" to expire", func() bool { return !tlExists(b, q) })
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
	clk := brokertest.NewClock()
	b := brokertest.Start(t, brokertest.Config{Clock: clk})
	ch := b.Session(t)
	ch.Declare("existing", nil)
	clk.Advance(10 * time.Second)
	tlSetPolicy(t, b, broker.Policy{Name: "exp", Pattern: "^existing$", Definition: map[string]any{"expires": 1000}})
	clk.Advance(900 * time.Millisecond)
	tlSettleTimers(b)
	if !tlExists(b, "existing") {
		t.Fatal("expired 900 ms after the policy was set")
	}
	clk.Advance(200 * time.Millisecond)
	brokertest.Eventually(t, "the queue to expire", func() bool { return !tlExists(b, "existing") })
}
