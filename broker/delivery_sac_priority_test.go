// Tests of consumer priorities, priority queues and single active consumer.

package broker_test

// Tests of which consumer gets a message and which message goes first:
// consumer priorities, priority queues and single active consumer.

import (
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker/brokertest"
)

func TestDeliveryConsumerPriorities(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t, brokertest.NoConfirm)
	c := ch.Conn
	q := ch.Declare("prio", nil)
	chLo := brokertest.NewSession(t, c, brokertest.NoConfirm)
	lo := dvConsume(t, chLo, q, "lo", false, amqp091.Table{"x-priority": int32(1)})
	chHi := brokertest.NewSession(t, c, brokertest.NoConfirm)
	if err := chHi.Qos(2, 0, false); err != nil {
		t.Fatal(err)
	}
	hi := dvConsume(t, chHi, q, "hi", false, amqp091.Table{"x-priority": int32(10)})

	// The high-priority consumer takes what its prefetch allows; the rest
	// goes to the low one although it has unlimited credit.
	ch.PublishBodies(q, "m0", "m1", "m2", "m3", "m4")
	dvWantBodies(t, "low", dvRecvN(t, lo, 3), "m2", "m3", "m4")
	his := dvRecvN(t, hi, 2)
	dvWantBodies(t, "high", his, "m0", "m1")

	// Credit back on the high one: the next message is its again.
	dvAck(t, his[0], false)
	ch.PublishBodies(q, "m5")
	dvWantBodies(t, "high after ack", dvRecvN(t, hi, 1), "m5")
	ch.WantReady(q, 0)
	select {
	case d := <-lo:
		t.Fatalf("low-priority consumer got %q", d.Body)
	default:
	}
}

func TestDeliveryPriorityQueue(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t, brokertest.NoConfirm)
	q := ch.Declare("pq", amqp091.Table{"x-max-priority": int32(10)})
	for _, m := range []struct {
		body string
		prio uint8
	}{{"p1", 1}, {"p5", 5}, {"p3", 3}, {"none", 0}, {"p200", 200}, {"p10", 10}, {"p5b", 5}} {
		ch.Publish("", q, amqp091.Publishing{Priority: m.prio, Body: []byte(m.body)})
	}
	// Above the maximum counts as the maximum (arrival order between the
	// two at 10); no priority is 0.
	want := []string{"p200", "p10", "p5", "p5b", "p3", "p1", "none"}
	ds := ch.GetN(q, len(want))
	dvWantBodies(t, "priority order", ds, want...)
	if ds[0].Priority != 200 {
		t.Fatalf("priority property %d, want 200 as published", ds[0].Priority)
	}
	// Requeued, they come back in the same order.
	if err := ds[len(ds)-1].Nack(true, true); err != nil {
		t.Fatal(err)
	}
	dvWantBodies(t, "after requeue", ch.GetN(q, len(want)), want...)

	// And the simplest case of the spec: 1, 5, 3 → 5, 3, 1.
	q2 := ch.Declare("pq2", amqp091.Table{"x-max-priority": int32(10)})
	for _, p := range []uint8{1, 5, 3} {
		ch.Publish("", q2, amqp091.Publishing{Priority: p, Body: []byte{'0' + p}})
	}
	msgs := dvConsume(t, ch, q2, "c", true, nil)
	dvWantBodies(t, "consumed by priority", dvRecvN(t, msgs, 3), "5", "3", "1")
}

func TestDeliverySingleActiveConsumer(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t, brokertest.NoConfirm)
	c := ch.Conn
	q := ch.Declare("sac", amqp091.Table{"x-single-active-consumer": true})
	chA := brokertest.NewSession(t, c, brokertest.NoConfirm)
	if err := chA.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	a := dvConsume(t, chA, q, "a", false, nil)
	chB := brokertest.NewSession(t, c, brokertest.NoConfirm)
	bb := dvConsume(t, chB, q, "b", false, nil)
	ch.PublishBodies(q, "m0", "m1", "m2")
	// Only the active consumer receives, even when it has no credit left.
	dvWantBodies(t, "active consumer", dvRecvN(t, a, 1), "m0")
	ch.WantReady(q, 2)

	// When it cancels, the next consumer takes over with what is ready.
	if err := chA.Cancel("a", false); err != nil {
		t.Fatal(err)
	}
	dvWantBodies(t, "next consumer", dvRecvN(t, bb, 2), "m1", "m2")
	ch.WantReady(q, 0)
}

// TestDeliverySingleActiveConsumerChannelClose: when the active consumer's
// channel closes, its unacked message goes back at the head and the next
// consumer receives everything in the original order.
func TestDeliverySingleActiveConsumerChannelClose(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t, brokertest.NoConfirm)
	c := ch.Conn
	q := ch.Declare("sac", amqp091.Table{"x-single-active-consumer": true})
	chA := brokertest.NewSession(t, c, brokertest.NoConfirm)
	if err := chA.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	a := dvConsume(t, chA, q, "a", false, nil)
	bb := dvConsume(t, brokertest.NewSession(t, c, brokertest.NoConfirm), q, "b", false, nil)
	ch.PublishBodies(q, "m0", "m1", "m2")
	dvWantBodies(t, "active consumer", dvRecvN(t, a, 1), "m0")
	if err := chA.Close(); err != nil {
		t.Fatal(err)
	}
	got := dvRecvN(t, bb, 3)
	dvWantBodies(t, "next consumer", got, "m0", "m1", "m2")
	if !got[0].Redelivered || got[1].Redelivered {
		t.Fatalf("redelivered flags %v %v, want true false", got[0].Redelivered, got[1].Redelivered)
	}
}

// TestDeliverySingleActiveConsumerPausedClose: ready messages held back
// by a paused active consumer go to the next one when its channel closes,
// even though it had nothing unacked to give back.
func TestDeliverySingleActiveConsumerPausedClose(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t, brokertest.NoConfirm)
	c := ch.Conn
	q := ch.Declare("sac", amqp091.Table{"x-single-active-consumer": true})
	chA := brokertest.NewSession(t, c, brokertest.NoConfirm)
	dvConsume(t, chA, q, "a", true, nil)
	if err := chA.Flow(false); err != nil {
		t.Fatal(err)
	}
	bb := dvConsume(t, brokertest.NewSession(t, c, brokertest.NoConfirm), q, "b", true, nil)
	ch.PublishBodies(q, "m0", "m1")
	ch.WantReady(q, 2)
	if err := chA.Close(); err != nil {
		t.Fatal(err)
	}
	dvWantBodies(t, "next consumer", dvRecvN(t, bb, 2), "m0", "m1")
}
