// Tests of prefetch (basic.qos), channel.flow and consumers that stop reading.

package broker_test

// Tests of how far deliveries run ahead of the client: basic.qos prefetch
// (per consumer and global), channel.flow, and a consumer that stops
// reading its socket.

import (
	"encoding/binary"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/brokertest"
)

func TestDeliveryQosPerConsumer(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t, brokertest.NoConfirm)
	q := ch.Declare("qos", nil)
	if err := ch.Qos(3, 0, false); err != nil {
		t.Fatal(err)
	}
	msgs := dvConsume(t, ch, q, "c", false, nil)
	ch.PublishBodies(q, dvNumbered("m", 10)...)
	ds := dvRecvN(t, msgs, 3)
	dvWantBodies(t, "within prefetch", ds, "m0", "m1", "m2")
	ch.WantReady(q, 7)
	dvAck(t, ds[0], false)
	dvWantBodies(t, "after one ack", dvRecvN(t, msgs, 1), "m3")
	ch.WantReady(q, 6)
	dvAck(t, ds[2], true) // m1, m2: two more
	dvWantBodies(t, "after two acks", dvRecvN(t, msgs, 2), "m4", "m5")
	ch.WantReady(q, 4)
}

func TestDeliveryQosGlobal(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t, brokertest.NoConfirm)
	qa := ch.Declare("qa", nil)
	qb := ch.Declare("qb", nil)
	if err := ch.Qos(3, 0, true); err != nil {
		t.Fatal(err)
	}
	a := dvConsume(t, ch, qa, "a", false, nil)
	dvConsume(t, ch, qb, "b", false, nil)
	ch.PublishBodies(qa, dvNumbered("a", 5)...)
	ch.PublishBodies(qb, dvNumbered("b", 5)...)
	// The five to qa came first: they take the channel's three.
	dvWantBodies(t, "qa within the channel limit", dvRecvN(t, a, 3), "a0", "a1", "a2")
	if ra, rb := ch.Ready(qa), ch.Ready(qb); ra+rb != 7 {
		t.Fatalf("ready %d + %d, want 7 (3 in flight across the channel)", ra, rb)
	}
	// Raising the limit lets more flow at once.
	if err := ch.Qos(5, 0, true); err != nil {
		t.Fatal(err)
	}
	if ra, rb := ch.Ready(qa), ch.Ready(qb); ra+rb != 5 {
		t.Fatalf("after raising prefetch: ready %d + %d, want 5", ra, rb)
	}
}

func TestDeliveryQosAppliesToLaterConsumers(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t, brokertest.NoConfirm)
	qa := ch.Declare("qa", nil)
	qb := ch.Declare("qb", nil)
	if err := ch.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	dvConsume(t, ch, qa, "a", false, nil)
	if err := ch.Qos(3, 0, false); err != nil {
		t.Fatal(err)
	}
	dvConsume(t, ch, qb, "b", false, nil)
	ch.PublishBodies(qa, dvNumbered("a", 5)...)
	ch.PublishBodies(qb, dvNumbered("b", 5)...)
	ch.WantReady(qa, 4) // prefetch 1, unchanged by the later qos
	ch.WantReady(qb, 2) // prefetch 3
}

func TestDeliveryQosPrefetchSizeNotImplemented(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	_, ch := b.Channel(t)
	err := ch.Qos(1, 1024, false)
	dvWantErr(t, err, 540, "NOT_IMPLEMENTED - prefetch_size!=0 (1024)")
}

func TestDeliveryChannelFlow(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t, brokertest.NoConfirm)
	c := ch.Conn
	q := ch.Declare("flow", nil)
	consumerCh := brokertest.NewSession(t, c, brokertest.NoConfirm)
	msgs := dvConsume(t, consumerCh, q, "c", true, nil)
	if err := consumerCh.Flow(false); err != nil {
		t.Fatal(err)
	}
	ch.PublishBodies(q, "a", "b", "c")
	ch.WantReady(q, 3) // paused: nothing delivered
	if err := consumerCh.Flow(true); err != nil {
		t.Fatal(err)
	}
	dvWantBodies(t, "after flow resumed", dvRecvN(t, msgs, 3), "a", "b", "c")
}

// TestDeliverySlowConsumerLosesNothing: a no-ack consumer that stops
// reading its socket must not make the broker drop messages. The broker
// stops writing at its outbound high-water mark and keeps the rest queued.
func TestDeliverySlowConsumerLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 30 MiB")
	}
	b := brokertest.Start(t, brokertest.Config{})
	w := dvDialWire(t, b.Addr, 64<<10)
	w.send(1, &amqp.QueueDeclare{Queue: "slow"})
	dvExpectMethod[*amqp.QueueDeclareOk](w, 1)
	w.send(1, &amqp.BasicConsume{Queue: "slow", ConsumerTag: "slow", NoAck: true})
	dvExpectMethod[*amqp.BasicConsumeOk](w, 1)
	// From here the consumer reads nothing until everything is published.

	pub := b.Session(t, brokertest.NoConfirm)
	if err := pub.Confirm(false); err != nil {
		t.Fatal(err)
	}
	// About 8 MiB fits in the broker's outbound queue and the socket
	// buffers here; the rest must wait in the queue.
	const n = 30_000
	confirms := pub.NotifyPublish(make(chan amqp091.Confirmation, n))
	body := make([]byte, 1024)
	for i := range n {
		binary.BigEndian.PutUint32(body, uint32(i))
		pub.Publish("", "slow", amqp091.Publishing{Body: body})
	}
	for i := range n {
		select {
		case c := <-confirms:
			if !c.Ack || c.DeliveryTag != uint64(i+1) {
				t.Fatalf("confirm %+v, want ack %d", c, i+1)
			}
		case <-time.After(brokertest.Wait):
			t.Fatalf("confirm %d missing", i+1)
		}
	}
	// Back-pressure held the rest in the queue rather than in memory
	// bound for the socket.
	if ready := pub.Ready("slow"); ready == 0 {
		t.Fatalf("all %d messages left the queue for a consumer that reads nothing", n)
	}

	for i := range n {
		m, _, got := w.content(1)
		d, ok := m.(*amqp.BasicDeliver)
		if !ok {
			t.Fatalf("got %s", m.Name())
		}
		if len(got) != len(body) || binary.BigEndian.Uint32(got) != uint32(i) || d.DeliveryTag != uint64(i+1) {
			t.Fatalf("delivery %d: message %d (%d bytes), tag %d", i, binary.BigEndian.Uint32(got), len(got), d.DeliveryTag)
		}
	}
	pub.WantReady("slow", 0)
}

// With a channel-wide prefetch, an ack of one queue's delivery frees the
// credit another queue's consumer on the channel waits for: it delivers.
func TestDeliveryQosGlobalAckFreesOtherQueue(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t, brokertest.NoConfirm)
	qa := ch.Declare("qa", nil)
	qb := ch.Declare("qb", nil)
	if err := ch.Qos(1, 0, true); err != nil {
		t.Fatal(err)
	}
	ch.PublishBodies(qa, "a0")
	a := dvConsume(t, ch, qa, "a", false, nil)
	got := dvRecvN(t, a, 1)
	dvWantBodies(t, "qa takes the channel's one", got, "a0")
	bc := dvConsume(t, ch, qb, "b", false, nil)
	ch.PublishBodies(qb, "b0", "b1")
	if rb := ch.Ready(qb); rb != 2 {
		t.Fatalf("qb ready %d, want 2 (the channel's credit is taken)", rb)
	}
	dvAck(t, got[0], false)
	dvWantBodies(t, "qb after the ack", dvRecvN(t, bc, 1), "b0")
}

// Acks put off to the end of a burst of frames are settled before
// anything the client does next on the channel, and before the channel
// closes: acked messages never come back, and a passive declare right
// after the acks counts them gone.
func TestDeliveryAcksInABurst(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t, brokertest.NoConfirm)
	conn := ch.Conn
	q := ch.Declare("burst", nil)
	ch.PublishBodies(q, dvNumbered("m", 200)...)
	msgs := dvConsume(t, ch, q, "c", false, nil)
	ds := dvRecvN(t, msgs, 200)
	if err := ch.Cancel("c", false); err != nil { // the requeued stay ready
		t.Fatal(err)
	}
	for i, d := range ds {
		switch {
		case i%10 == 9:
			if err := d.Nack(false, true); err != nil { // back to the queue
				t.Fatal(err)
			}
		default:
			dvAck(t, d, false)
		}
	}
	st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Messages != 20 {
		t.Fatalf("after 180 acks and 20 requeues: %d messages, want 20", st.Messages)
	}
	// Acks then a close at once: none of them comes back.
	ch2 := brokertest.NewSession(t, conn, brokertest.NoConfirm)
	ds = dvRecvN(t, dvConsume(t, ch2, q, "c2", false, nil), 20)
	for _, d := range ds {
		dvAck(t, d, false)
	}
	if err := ch2.Close(); err != nil {
		t.Fatal(err)
	}
	_, ch3 := b.Channel(t)
	if st, err := ch3.QueueDeclarePassive(q, true, false, false, false, nil); err != nil || st.Messages != 0 {
		t.Fatalf("after acking all and closing: %+v, %v", st, err)
	}
}
