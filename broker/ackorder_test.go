// Tests of the order in which the broker hands settlements and publishes to the store.

package broker_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/brokertest"
	"github.com/brokerd/brokerd/store"
)

// An ack and a publish sent after it, in one write, are applied in that
// order, whether the publish is on the ack's channel or another: the
// publish may be confirmed as soon as its record is durable, and a crash
// must then not bring the acked message back (SPEC §6: an ack followed by
// a confirmed publish is never undone). Acks are settled in bursts; the
// publish used to overtake the burst's acks.
func TestAckSettledBeforeLaterPublish(t *testing.T) {
	for _, pubCh := range []uint16{1, 2} {
		t.Run(fmt.Sprintf("publish on channel %d", pubCh), func(t *testing.T) {
			log := &brokertest.SpyStore{}
			b := brokertest.Start(t, brokertest.Config{WrapStore: func(s store.Store) store.Store { log.Wrap(s); return log.Grouped() }})
			r := dialRawOpen(t, b.Addr)
			r.openChannel(1)
			r.openChannel(2)
			for _, q := range []string{"acked", "published"} {
				r.send(1, &amqp.QueueDeclare{Queue: q, Durable: true})
				rawExpect[*amqp.QueueDeclareOk](r, 1)
			}
			persistent := amqp.Properties{Flags: amqp.FlagDeliveryMode, DeliveryMode: 2}
			props, err := persistent.Append(nil)
			if err != nil {
				t.Fatal(err)
			}
			publish := func(ch uint16, key, body string) []byte {
				f := amqp.AppendMethodFrame(nil, ch, &amqp.BasicPublish{RoutingKey: key})
				f = amqp.AppendHeaderFrame(f, ch, 60, uint64(len(body)), props)
				return amqp.AppendBodyFrames(f, ch, []byte(body), 4096)
			}
			r.mustWrite(publish(1, "acked", "to be acked"))
			r.send(1, &amqp.BasicConsume{Queue: "acked", ConsumerTag: "c"})
			rawExpect[*amqp.BasicConsumeOk](r, 1)
			d := rawExpect[*amqp.BasicDeliver](r, 1)
			r.frame() // header
			r.frame() // body

			// The ack and the publish in one write: one burst.
			w := amqp.AppendMethodFrame(nil, 1, &amqp.BasicAck{DeliveryTag: d.DeliveryTag})
			w = append(w, publish(pubCh, "published", "after the ack")...)
			r.mustWrite(w)

			ack := log.Await(t, "the ack's delete", func(b *store.Batch) bool { return len(b.Deletes) > 0 })
			pub := log.Await(t, "the later publish", func(b *store.Batch) bool {
				return slices.ContainsFunc(b.Messages, func(m *store.Message) bool { return string(m.Body) == "after the ack" })
			})
			if ack > pub {
				t.Fatalf("the publish sent after the ack was applied first (batch %d, the ack's %d)", pub, ack)
			}
		})
	}
}

// A consumer cancelled while the first delivery of a priority level waits
// for that level's delivered-mark write still gets what was due before its
// cancel, before cancel-ok, as RabbitMQ delivers it: the cancel waits for
// the write. (The cancel used to be answered first and the messages stayed
// in the queue; kombu's test_PyAMQPPriority failed 3–7 runs in 10.)
func TestCancelDeliversWhatWasDue(t *testing.T) {
	h := newHeldStore()
	b := brokertest.Start(t, brokertest.Config{WrapStore: h.wrap})
	r := dialRawOpen(t, b.Addr)
	r.openChannel(1)
	r.send(1, &amqp.QueueDeclare{Queue: "prio", Durable: true, Arguments: amqp.Table{{Key: "x-max-priority", Value: int32(1)}}})
	rawExpect[*amqp.QueueDeclareOk](r, 1)
	r.send(1, &amqp.ConfirmSelect{})
	rawExpect[*amqp.ConfirmSelectOk](r, 1)
	r.send(1, &amqp.BasicQos{PrefetchCount: 10})
	rawExpect[*amqp.BasicQosOk](r, 1)
	var bodies []string
	for i := range 4 {
		p := amqp.Properties{Flags: amqp.FlagDeliveryMode | amqp.FlagPriority, DeliveryMode: 2, Priority: uint8(i % 2)}
		props, err := p.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		body := fmt.Sprintf("m%d", i)
		bodies = append(bodies, body)
		f := amqp.AppendMethodFrame(nil, 1, &amqp.BasicPublish{RoutingKey: "prio"})
		f = amqp.AppendHeaderFrame(f, 1, 60, uint64(len(body)), props)
		r.mustWrite(amqp.AppendBodyFrames(f, 1, []byte(body), 4096))
	}
	for confirmed := uint64(0); confirmed < 4; {
		confirmed = rawExpect[*amqp.BasicAck](r, 1).DeliveryTag
	}
	// The mark writes are held: the first delivery of each level waits.
	h.start(t)
	w := amqp.AppendMethodFrame(nil, 1, &amqp.BasicConsume{Queue: "prio", ConsumerTag: "c"})
	r.mustWrite(amqp.AppendMethodFrame(w, 1, &amqp.BasicCancel{ConsumerTag: "c"}))
	rawExpect[*amqp.BasicConsumeOk](r, 1)
	h.waitHeld(t, 1)
	// Time is the point: cancel-ok must not come while the mark write,
	// and the deliveries it lets through, are pending.
	if f, err := r.next(300 * time.Millisecond); err == nil {
		t.Fatalf("frame type %d before the mark write completed", f.Type)
	}
	h.stop()
	var got []string
	for {
		m := r.method(1)
		if _, ok := m.(*amqp.BasicCancelOk); ok {
			break
		}
		if _, ok := m.(*amqp.BasicDeliver); !ok {
			t.Fatalf("got %s, want deliveries then cancel-ok", m.Name())
		}
		r.frame() // header
		got = append(got, string(r.frame().Payload))
	}
	slices.Sort(got)
	if !slices.Equal(got, bodies) {
		t.Fatalf("delivered before cancel-ok: %q, want all of %q", got, bodies)
	}
}
