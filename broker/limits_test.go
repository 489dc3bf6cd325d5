// Tests of queue length limits (drop-head, reject-publish) and delivery limits.

package broker_test

import (
	"fmt"
	"strings"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
)

// Tests of length limits and overflow (SPEC §4, reference B44–B51) and of
// delivery limits (SPEC §5, B52–B55), through amqp091-go against a real
// broker. Helpers (tl*) are in ttl_helpers_test.go.

// tlOverflowed returns the broker's Overflowed counter.
func tlOverflowed(b *brokertest.Instance) uint64 { return b.Broker.Stats().Overflowed }

func tlWantOverflowed(t testing.TB, b *brokertest.Instance, want uint64) {
	t.Helper()
	if got := tlOverflowed(b); got != want {
		t.Fatalf("Stats().Overflowed = %d, want %d", got, want)
	}
}

// ========================= length limits =========================

// B44: the limits count ready messages only; unacked ones do not count.
func TestLimitCountsReadyOnly(t *testing.T) {
	t.Parallel()
	for _, qtype := range tlQueueTypes {
		t.Run(qtype, func(t *testing.T) {
			t.Parallel()
			b := brokertest.Start(t, brokertest.Config{})
			ch := b.Session(t)
			ch.Declare("dlq", nil)
			ch.Declare("len", tlDLX("dlq", amqp091.Table{"x-max-length": int32(2)}), brokertest.Type(qtype))
			ch.PublishBodies("len", "A", "B")
			ch.Get("len")
			ch.Get("len") // A and B unacked
			ch.PublishBodies("len", "C", "D")
			tlWantOverflowed(t, b, 0)
			ch.PublishBodies("len", "E")
			tlWantOverflowed(t, b, 1)
			tlWantDeadLetters(t, b, ch, "dlq", "len", "maxlen", "C")
			if st := tlQueueStats(t, b, "len"); st.Ready != 2 || st.Unacked != 2 {
				t.Fatalf("ready %d unacked %d, want 2 2", st.Ready, st.Unacked)
			}

			ch.Declare("bytes", tlDLX("dlq", amqp091.Table{"x-max-length-bytes": int32(10)}), brokertest.Type(qtype))
			ch.PublishBodies("bytes", "AAAAAA")
			ch.Get("bytes") // 6 bytes unacked
			ch.PublishBodies("bytes", "BBBBBB")
			tlWantOverflowed(t, b, 1)
			ch.PublishBodies("bytes", "CCCCCC") // 12 ready bytes > 10
			tlWantOverflowed(t, b, 2)
			tlWantDeadLetters(t, b, ch, "dlq", "bytes", "maxlen", "BBBBBB")
			ch.WantDrain("bytes", "CCCCCC")
		})
	}
}

// B45: drop-head removes the oldest and dead-letters them (maxlen) in
// order: max-length 1 with P1..P3 leaves P3; the DLQ gets P1, P2.
func TestLimitDropHead(t *testing.T) {
	t.Parallel()
	for _, qtype := range tlQueueTypes {
		t.Run(qtype, func(t *testing.T) {
			t.Parallel()
			b := brokertest.Start(t, brokertest.Config{})
			ch := b.Session(t)
			ch.Declare("dlq", nil)
			ch.Declare("src", tlDLX("dlq", amqp091.Table{"x-max-length": int32(1)}), brokertest.Type(qtype))
			if acks := tlPubAcks(t, ch, "", "src", "P1", "P2", "P3"); acks != "+++" {
				t.Fatalf("confirms %s, want +++ (drop-head accepts every publish)", acks)
			}
			tlWantOverflowed(t, b, 2)
			tlWantDeadLetters(t, b, ch, "dlq", "src", "maxlen", "P1", "P2")
			ch.WantDrain("src", "P3")
			if n := tlQueueStats(t, b, "src").DeadLettered["maxlen"]; n != 2 {
				t.Fatalf("queue dead-lettered maxlen %d, want 2", n)
			}
			if n := b.Broker.Stats().DeadLettered["maxlen"]; n != 2 {
				t.Fatalf("broker dead-lettered maxlen %d, want 2", n)
			}

			// Without a DLX the head is discarded (and counted).
			ch.Declare("nodlx", amqp091.Table{"x-max-length": int32(1), "x-overflow": "drop-head"}, brokertest.Type(qtype))
			ch.PublishBodies("nodlx", "Q1", "Q2")
			tlWantOverflowed(t, b, 3)
			if n := b.Broker.Stats().Discarded["maxlen"]; n != 1 {
				t.Fatalf("discarded maxlen %d, want 1", n)
			}
			ch.WantDrain("nodlx", "Q2")
		})
	}
}

// B45: with max-length 0 a message is delivered if a consumer takes it at
// once, else dropped (dead-lettered maxlen).
func TestLimitMaxLengthZero(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t)
	c := ch.Conn
	ch.Declare("dlq", nil)
	ch.Declare("zero", tlDLX("dlq", amqp091.Table{"x-max-length": int32(0)}))
	cch := brokertest.NewSession(t, c)
	msgs, err := cch.Consume("zero", "c", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	ch.PublishBodies("zero", "taken")
	if d := dvRecv(t, msgs); string(d.Body) != "taken" {
		t.Fatalf("delivered %q, want taken", d.Body)
	}
	tlWantOverflowed(t, b, 0)
	if err := cch.Cancel("c", false); err != nil {
		t.Fatal(err)
	}
	ch.PublishBodies("zero", "dropped")
	tlWantOverflowed(t, b, 1)
	tlWantDeadLetters(t, b, ch, "dlq", "zero", "maxlen", "dropped")
	tlWantReady(t, b, "zero", 0)
}

// B45, SPEC §4: x-max-length-bytes counts body bytes exactly; with both
// limits, whichever is hit first applies.
func TestLimitBytes(t *testing.T) {
	t.Parallel()
	for _, qtype := range tlQueueTypes {
		t.Run(qtype, func(t *testing.T) {
			t.Parallel()
			b := brokertest.Start(t, brokertest.Config{})
			ch := b.Session(t)
			ch.Declare("dlq", nil)
			body := func(c byte) string { return strings.Repeat(string(c), 80) }

			// queue_length_limits_SUITE: 100 bytes, 80-byte bodies keep one.
			ch.Declare("b100", tlDLX("dlq", amqp091.Table{"x-max-length-bytes": int32(100)}), brokertest.Type(qtype))
			ch.PublishBodies("b100", body('a'), body('b'), body('c'))
			tlWantDeadLetters(t, b, ch, "dlq", "b100", "maxlen", body('a'), body('b'))
			ch.WantDrain("b100", body('c'))

			// Exact: 160 bytes hold exactly two 80-byte bodies.
			ch.Declare("b160", tlDLX("dlq", amqp091.Table{"x-max-length-bytes": int64(160)}), brokertest.Type(qtype))
			ch.PublishBodies("b160", body('a'), body('b'))
			tlWantReady(t, b, "b160", 2)
			ch.PublishBodies("b160", body('c'))
			tlWantDeadLetters(t, b, ch, "dlq", "b160", "maxlen", body('a'))
			ch.WantDrain("b160", body('b'), body('c'))

			// Both limits: the count is hit first here, the bytes there.
			ch.Declare("both", amqp091.Table{"x-max-length": int32(3), "x-max-length-bytes": int32(100)}, brokertest.Type(qtype))
			ch.PublishBodies("both", "1234567890", "1234567890", "1234567890", "1234567890")
			tlWantReady(t, b, "both", 3)
			ch.PublishBodies("both", strings.Repeat("x", 95)) // 125 bytes: two must go
			tlWantReady(t, b, "both", 1)
		})
	}
}

// B47, SPEC §4: reject-publish refuses (nack under confirms) the publish
// that would overflow, exactly at the limit on every queue type; other
// target queues still take it; nothing is dead-lettered; once a message is
// consumed, publishing succeeds again.
func TestLimitRejectPublish(t *testing.T) {
	t.Parallel()
	for _, qtype := range tlQueueTypes {
		t.Run(qtype, func(t *testing.T) {
			t.Parallel()
			b := brokertest.Start(t, brokertest.Config{})
			ch := b.Session(t)
			c := ch.Conn
			ch.Declare("dlq", nil)
			ch.Declare("full", tlDLX("dlq", amqp091.Table{"x-max-length": int32(2), "x-overflow": "reject-publish"}), brokertest.Type(qtype))
			ch.Declare("other", nil, brokertest.Type(qtype))
			ch.DeclareExchange("fan", "fanout", nil)
			ch.Bind("full", "", "fan", nil)
			ch.Bind("other", "", "fan", nil)

			if acks := tlPubAcks(t, ch, "fan", "", "P1", "P2", "P3"); acks != "++-" {
				t.Fatalf("confirms %s, want ++-", acks)
			}
			tlWantOverflowed(t, b, 1)
			tlWantReady(t, b, "other", 3)
			tlWantReady(t, b, "full", 2)
			st := b.Broker.Stats()
			if st.DeadLettered["maxlen"] != 0 || st.Discarded["maxlen"] != 0 {
				t.Fatalf("reject-publish dead-lettered %d, discarded %d as maxlen, want 0 0", st.DeadLettered["maxlen"], st.Discarded["maxlen"])
			}
			if err := ch.Get("full").Ack(false); err != nil {
				t.Fatal(err)
			}
			ch.Sync()
			if acks := tlPubAcks(t, ch, "fan", "", "P4", "P5"); acks != "+-" {
				t.Fatalf("after consuming one: confirms %s, want +-", acks)
			}
			ch.WantDrain("full", "P2", "P4")
			tlWantReady(t, b, "dlq", 0)

			// Exact on every type: no soft limit (RabbitMQ's quorum queues
			// accept again only below 80 % and may overshoot).
			ch.Declare("exact", amqp091.Table{"x-max-length": int32(10), "x-overflow": "reject-publish"}, brokertest.Type(qtype))
			bodies := make([]string, 11)
			for i := range bodies {
				bodies[i] = fmt.Sprint(i)
			}
			if acks := tlPubAcks(t, ch, "", "exact", bodies...); acks != "++++++++++-" {
				t.Fatalf("confirms %s, want ten + then -", acks)
			}
			if err := ch.Get("exact").Ack(false); err != nil {
				t.Fatal(err)
			}
			ch.Sync()
			if acks := tlPubAcks(t, ch, "", "exact", "a", "b"); acks != "+-" {
				t.Fatalf("at 9 of 10: confirms %s, want +-", acks)
			}
			tlWantReady(t, b, "exact", 10)

			// Bytes: len + size > max is refused; exactly max is not.
			ch.Declare("rbytes", amqp091.Table{"x-max-length-bytes": int32(10), "x-overflow": "reject-publish"}, brokertest.Type(qtype))
			if acks := tlPubAcks(t, ch, "", "rbytes", "123456", "123456", "1234", "1"); acks != "+-+-" {
				t.Fatalf("bytes: confirms %s, want +-+-", acks)
			}

			// Without confirms the refusal is silent: the channel stays open.
			plain := brokertest.NewSession(t, c, brokertest.NoConfirm)
			plain.Publish("", "exact", amqp091.Publishing{Body: []byte("silent")})
			plain.Sync()
			tlWantReady(t, b, "exact", 10)
		})
	}
}

// B49, SPEC §4 beyond: reject-publish-dlx refuses and dead-letters the
// refused message (maxlen, x-death queue = the source), on quorum queues
// too.
func TestLimitRejectPublishDLX(t *testing.T) {
	t.Parallel()
	for _, qtype := range tlQueueTypes {
		t.Run(qtype, func(t *testing.T) {
			t.Parallel()
			b := brokertest.Start(t, brokertest.Config{})
			ch := b.Session(t)
			ch.Declare("dlq", nil)
			ch.Declare("src", tlDLX("dlq", amqp091.Table{"x-max-length": int32(1), "x-overflow": "reject-publish-dlx"}), brokertest.Type(qtype))
			if acks := tlPubAcks(t, ch, "", "src", "P1", "P2", "P3"); acks != "+--" {
				t.Fatalf("confirms %s, want +--", acks)
			}
			tlWantOverflowed(t, b, 2)
			tlWantDeadLetters(t, b, ch, "dlq", "src", "maxlen", "P2", "P3")
			ch.WantDrain("src", "P1")
			if n := b.Broker.Stats().DeadLettered["maxlen"]; n != 2 {
				t.Fatalf("dead-lettered maxlen %d, want 2", n)
			}
		})
	}
}

// B46: a requeue that pushes a drop-head queue over its limit drops from
// the head, which is where the requeued message went.
func TestLimitRequeueUnderDropHead(t *testing.T) {
	t.Parallel()
	for _, qtype := range tlQueueTypes {
		t.Run(qtype, func(t *testing.T) {
			t.Parallel()
			b := brokertest.Start(t, brokertest.Config{})
			ch := b.Session(t)
			ch.Declare("dlq", nil)
			ch.Declare("src", tlDLX("dlq", amqp091.Table{"x-max-length": int32(2)}), brokertest.Type(qtype))
			ch.PublishBodies("src", "A", "B")
			a := ch.Get("src")
			ch.PublishBodies("src", "C") // ready B, C; A unacked
			tlWantOverflowed(t, b, 0)
			if err := a.Nack(false, true); err != nil {
				t.Fatal(err)
			}
			ch.Sync()
			tlWantOverflowed(t, b, 1)
			tlWantDeadLetters(t, b, ch, "dlq", "src", "maxlen", "A")
			ch.WantDrain("src", "B", "C")
		})
	}
}

// B48: requeues are never refused under reject-publish, so the queue may
// exceed its limit: P1 consumed, P2 published, P1 returned → P1, P2.
func TestLimitRequeueUnderRejectPublish(t *testing.T) {
	t.Parallel()
	for _, qtype := range tlQueueTypes {
		t.Run(qtype, func(t *testing.T) {
			t.Parallel()
			b := brokertest.Start(t, brokertest.Config{})
			ch := b.Session(t)
			ch.Declare("src", amqp091.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"}, brokertest.Type(qtype))
			ch.PublishBodies("src", "P1")
			p1 := ch.Get("src")
			ch.PublishBodies("src", "P2")
			if err := p1.Nack(false, true); err != nil {
				t.Fatal(err)
			}
			ch.Sync()
			tlWantReady(t, b, "src", 2)
			if acks := tlPubAcks(t, ch, "", "src", "P3"); acks != "-" {
				t.Fatalf("publish over the limit: %s, want -", acks)
			}
			ch.WantDrain("src", "P1", "P2")
		})
	}
}

// SPEC §4, P5: policy max-length / max-length-bytes combine with the
// arguments by minimum.
func TestLimitPolicyCombinesByMin(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t)
	tlSetPolicy(t, b, broker.Policy{Name: "len", Pattern: "^len-", Definition: map[string]any{"max-length": 2}})
	tlSetPolicy(t, b, broker.Policy{Name: "bytes", Pattern: "^bytes-", Definition: map[string]any{"max-length-bytes": 20}})
	for _, tc := range []struct {
		q    string
		args amqp091.Table
		want int
	}{
		{"len-arg-higher", amqp091.Table{"x-max-length": int32(5)}, 2},
		{"len-arg-lower", amqp091.Table{"x-max-length": int32(1)}, 1},
		{"len-no-arg", nil, 2},
		{"bytes-arg-higher", amqp091.Table{"x-max-length-bytes": int32(100)}, 2},
		{"bytes-arg-lower", amqp091.Table{"x-max-length-bytes": int32(10)}, 1},
		{"bytes-no-arg", nil, 2},
	} {
		for _, qtype := range tlQueueTypes {
			name := tc.q + "-" + qtype
			ch.Declare(name, tc.args, brokertest.Type(qtype))
			ch.PublishBodies(name, "0123456789", "0123456789", "0123456789", "0123456789")
			if got := tlReady(t, b, name); got != tc.want {
				t.Errorf("%s: %d ready, want %d", name, got, tc.want)
			}
		}
	}
}

// P3, SPEC §6: a policy that lowers max-length on a full queue evicts at
// once (drop-head, dead-lettered maxlen, oldest first); one that switches
// to reject-publish evicts nothing and refuses publishes; clearing it
// lifts the limit.
func TestLimitPolicyAppliesAtOnce(t *testing.T) {
	t.Parallel()
	for _, qtype := range tlQueueTypes {
		t.Run(qtype, func(t *testing.T) {
			t.Parallel()
			b := brokertest.Start(t, brokertest.Config{})
			ch := b.Session(t)
			ch.Declare("dlq", nil)
			ch.Declare("shrink", tlDLX("dlq", nil), brokertest.Type(qtype))
			ch.PublishBodies("shrink", "P1", "P2", "P3", "P4", "P5")
			tlSetPolicy(t, b, broker.Policy{Name: "lim", Pattern: "^shrink$", Definition: map[string]any{"max-length": 2}})
			tlWantReady(t, b, "shrink", 2) // SetPolicy applies synchronously
			tlWantOverflowed(t, b, 3)
			if p := tlQueueStats(t, b, "shrink").Policy; p != "lim" {
				t.Fatalf("policy %q, want lim", p)
			}
			tlWantDeadLetters(t, b, ch, "dlq", "shrink", "maxlen", "P1", "P2", "P3")

			tlSetPolicy(t, b, broker.Policy{Name: "lim", Pattern: "^shrink$", Definition: map[string]any{"max-length": 1, "overflow": "reject-publish"}})
			tlWantReady(t, b, "shrink", 2)
			if acks := tlPubAcks(t, ch, "", "shrink", "P6"); acks != "-" {
				t.Fatalf("publish to a queue over a reject-publish limit: %s, want -", acks)
			}
			tlClearPolicy(t, b, "lim")
			ch.PublishBodies("shrink", "P7")
			ch.WantDrain("shrink", "P4", "P5", "P7")
			tlWantOverflowed(t, b, 4)
		})
	}
}

// ========================= delivery limit =========================

// B52, SPEC §5: x-delivery-limit 1 — the first delivery has no
// x-delivery-count, the redelivery has x-delivery-count 1 (long), and the
// second failure dead-letters it (delivery_limit) or drops it. Classic
// queues take the argument too (beyond RabbitMQ).
func TestDeliveryLimitOne(t *testing.T) {
	t.Parallel()
	for _, qtype := range tlQueueTypes {
		for _, withDLX := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/dlx=%v", qtype, withDLX), func(t *testing.T) {
				t.Parallel()
				b := brokertest.Start(t, brokertest.Config{})
				ch := b.Session(t)
				ch.Declare("dlq", nil)
				args := amqp091.Table{"x-delivery-limit": int32(1)}
				if withDLX {
					args = tlDLX("dlq", args)
				}
				ch.Declare("poison", args, brokertest.Type(qtype))
				ch.PublishBodies("poison", "m")
				msgs := dvConsume(t, ch, "poison", "", false, nil)
				d := dvRecv(t, msgs)
				if n := tlDeliveryCount(t, d); n != -1 || d.Redelivered {
					t.Fatalf("first delivery: x-delivery-count %d redelivered %v, want none false", n, d.Redelivered)
				}
				if err := d.Reject(true); err != nil {
					t.Fatal(err)
				}
				d = dvRecv(t, msgs)
				if n := tlDeliveryCount(t, d); n != 1 || !d.Redelivered {
					t.Fatalf("redelivery: x-delivery-count %d redelivered %v, want 1 true", n, d.Redelivered)
				}
				if err := d.Reject(true); err != nil {
					t.Fatal(err)
				}
				ch.Sync()
				tlNoRecv(t, ch, msgs, "after the second failure")
				if st := tlQueueStats(t, b, "poison"); st.Ready != 0 || st.Unacked != 0 {
					t.Fatalf("ready %d unacked %d, want 0 0", st.Ready, st.Unacked)
				}
				if withDLX {
					tlWantDeadLetters(t, b, ch, "dlq", "poison", "delivery_limit", "m")
					if n := tlQueueStats(t, b, "poison").DeadLettered["delivery_limit"]; n != 1 {
						t.Fatalf("queue dead-lettered delivery_limit %d, want 1", n)
					}
				} else {
					if n := b.Broker.Stats().Discarded["delivery_limit"]; n != 1 {
						t.Fatalf("discarded delivery_limit %d, want 1", n)
					}
					tlWantReady(t, b, "dlq", 0)
				}
			})
		}
	}
}

// SPEC §5: every return counts — reject and nack with requeue, basic.recover,
// channel close and connection close with the message unacked.
func TestDeliveryLimitEveryReturnCounts(t *testing.T) {
	t.Parallel()
	for _, qtype := range tlQueueTypes {
		t.Run(qtype, func(t *testing.T) {
			t.Parallel()
			b := brokertest.Start(t, brokertest.Config{})
			ch := b.Session(t)
			ch.Declare("dlq", nil)
			ch.Declare("poison", tlDLX("dlq", amqp091.Table{"x-delivery-limit": int32(4)}), brokertest.Type(qtype))
			ch.PublishBodies("poison", "m")

			c1 := b.Dial(t)
			ch1 := brokertest.NewSession(t, c1)
			msgs := dvConsume(t, ch1, "poison", "", false, nil)
			want := func(d amqp091.Delivery, n int64) {
				t.Helper()
				if got := tlDeliveryCount(t, d); got != n {
					t.Fatalf("x-delivery-count %d, want %d", got, n)
				}
			}
			d := dvRecv(t, msgs)
			want(d, -1)
			if err := d.Reject(true); err != nil { // 1
				t.Fatal(err)
			}
			d = dvRecv(t, msgs)
			want(d, 1)
			if err := d.Nack(false, true); err != nil { // 2
				t.Fatal(err)
			}
			d = dvRecv(t, msgs)
			want(d, 2)
			if err := ch1.Recover(true); err != nil { // 3
				t.Fatal(err)
			}
			d = dvRecv(t, msgs)
			want(d, 3)
			if err := ch1.Close(); err != nil { // 4: channel closed with it unacked
				t.Fatal(err)
			}
			ch2 := brokertest.NewSession(t, c1)
			d = dvRecv(t, dvConsume(t, ch2, "poison", "", false, nil))
			want(d, 4)
			if err := c1.Close(); err != nil { // 5 > 4: connection closed with it unacked
				t.Fatal(err)
			}
			tlWantDeadLetters(t, b, ch, "dlq", "poison", "delivery_limit", "m")
			tlWantReady(t, b, "poison", 0)
		})
	}
}

// tlDeliveriesUntilGone publishes one message to q and delivers it with
// basic.get and nack-requeue until it is gone, up to max deliveries. It
// returns the number of deliveries (max+1 means it was still there).
func tlDeliveriesUntilGone(t testing.TB, ch *brokertest.Session, q string, max int) int {
	t.Helper()
	ch.PublishBodies(q, "m-"+q)
	for n := 0; n <= max; n++ {
		d, ok := ch.TryGet(q)
		if !ok {
			return n
		}
		want := int64(n)
		if n == 0 {
			want = -1
		}
		if got := tlDeliveryCount(t, d); got != want && got != -1 {
			t.Fatalf("%s delivery %d: x-delivery-count %d, want %d", q, n+1, got, want)
		}
		if err := d.Nack(false, true); err != nil {
			t.Fatal(err)
		}
	}
	return max + 1
}

// B52: quorum queues default to 20 (21 deliveries, then dead-lettered);
// classic queues have no default; a negative limit is none.
func TestDeliveryLimitDefaults(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t)
	ch.Declare("dlq", nil)
	ch.Declare("qq-default", tlDLX("dlq", nil), brokertest.Type("quorum"))
	if n := tlDeliveriesUntilGone(t, ch, "qq-default", 30); n != 21 {
		t.Fatalf("quorum default: %d deliveries, want 21", n)
	}
	tlWantDeadLetters(t, b, ch, "dlq", "qq-default", "delivery_limit", "m-qq-default")

	for _, tc := range []struct{ q, qtype string }{
		{"classic-default", "classic"},
		{"classic-negative", "classic"},
		{"qq-negative", "quorum"},
	} {
		var args amqp091.Table
		if strings.HasSuffix(tc.q, "negative") {
			args = amqp091.Table{"x-delivery-limit": int32(-1)}
		}
		ch.Declare(tc.q, tlDLX("dlq", args), brokertest.Type(tc.qtype))
		if n := tlDeliveriesUntilGone(t, ch, tc.q, 25); n != 26 {
			t.Fatalf("%s: gone after %d deliveries, want no limit", tc.q, n)
		}
	}
	// A quorum queue counts even without a limit: 26 returns so far.
	if d := ch.Get("qq-negative"); tlDeliveryCount(t, d) != 26 {
		t.Fatalf("qq-negative: x-delivery-count %d, want 26", tlDeliveryCount(t, d))
	}
	tlWantReady(t, b, "dlq", 0)
}

// P5, B55: policy delivery-limit — either value negative → the larger,
// else the smaller; a policy replaces the quorum default; a change applies
// at once to messages already counted, and clearing it restores the
// default.
func TestDeliveryLimitPolicy(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t)
	none := any(nil)
	for _, tc := range []struct {
		q          string
		qtype      string
		arg, pol   any
		deliveries int // 26: unlimited (checked up to 25)
	}{
		{"c-pol-only", "classic", none, 2, 3},
		{"c-arg-higher", "classic", int32(5), 1, 2},
		{"c-arg-lower", "classic", int32(1), 5, 2},
		{"c-arg-negative", "classic", int32(-1), 3, 4},
		{"q-pol-only", "quorum", none, 3, 4},
		{"q-arg-negative", "quorum", int32(-1), 2, 3},
		{"q-pol-negative", "quorum", int32(2), -1, 3},
		{"q-pol-negative-only", "quorum", none, -1, 26},
		{"q-both-negative", "quorum", int32(-5), -1, 26},
		{"q-arg-lower", "quorum", int32(1), 30, 2},
	} {
		tlSetPolicy(t, b, broker.Policy{Name: tc.q, Pattern: "^" + tc.q + "$", Definition: map[string]any{"delivery-limit": tc.pol}})
		var args amqp091.Table
		if tc.arg != nil {
			args = amqp091.Table{"x-delivery-limit": tc.arg}
		}
		ch.Declare(tc.q, args, brokertest.Type(tc.qtype))
		if n := tlDeliveriesUntilGone(t, ch, tc.q, 25); n != tc.deliveries {
			t.Errorf("%s (arg %v, policy %v): %d deliveries, want %d", tc.q, tc.arg, tc.pol, n, tc.deliveries)
		}
	}

	// Runtime change (B55): counted 3 with no limit, then limit 2.
	ch.Declare("dlq", nil)
	ch.Declare("live", tlDLX("dlq", nil), brokertest.Type("quorum"))
	ch.PublishBodies("live", "m")
	for range 3 {
		if err := ch.Get("live").Nack(false, true); err != nil {
			t.Fatal(err)
		}
	}
	ch.Sync()
	tlSetPolicy(t, b, broker.Policy{Name: "live", Pattern: "^live$", Definition: map[string]any{"delivery-limit": 2}})
	d := ch.Get("live")
	if n := tlDeliveryCount(t, d); n != 3 {
		t.Fatalf("x-delivery-count %d, want 3", n)
	}
	if err := d.Nack(false, true); err != nil {
		t.Fatal(err)
	}
	tlWantDeadLetters(t, b, ch, "dlq", "live", "delivery_limit", "m")

	// Cleared: the quorum default (20) again, not 2.
	tlClearPolicy(t, b, "live")
	if n := tlDeliveriesUntilGone(t, ch, "live", 30); n != 21 {
		t.Fatalf("after clearing the policy: %d deliveries, want 21", n)
	}
}

// SPEC §5 beyond: delivery counts survive a restart (durable queue,
// persistent message).
func TestDeliveryLimitSurvivesRestart(t *testing.T) {
	t.Parallel()
	for _, qtype := range tlQueueTypes {
		t.Run(qtype, func(t *testing.T) {
			t.Parallel()
			b := brokertest.Start(t, brokertest.Config{})
			ch := b.Session(t)
			ch.Declare("dlq", nil, brokertest.Durable)
			ch.Declare("poison", tlDLX("dlq", amqp091.Table{"x-delivery-limit": int32(2)}), brokertest.Type(qtype), brokertest.Durable)
			ch.Publish("", "poison", amqp091.Publishing{Body: []byte("m"), DeliveryMode: amqp091.Persistent})
			for range 2 {
				if err := ch.Get("poison").Nack(false, true); err != nil {
					t.Fatal(err)
				}
			}
			ch.Sync()
			b.Restart()
			ch = b.Session(t)
			d := ch.Get("poison")
			if n := tlDeliveryCount(t, d); n != 2 || !d.Redelivered {
				t.Fatalf("after restart: x-delivery-count %d redelivered %v, want 2 true", n, d.Redelivered)
			}
			if err := d.Nack(false, true); err != nil {
				t.Fatal(err)
			}
			tlWantDeadLetters(t, b, ch, "dlq", "poison", "delivery_limit", "m")
			tlWantReady(t, b, "poison", 0)
		})
	}
}
