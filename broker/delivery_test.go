// Tests of consuming, basic.get and acknowledgements.

package broker_test

// Tests of consuming, basic.get and acknowledgements through amqp091-go
// against a real broker: consumer tags, exclusive consumers, round robin,
// cancel, order, and acks of known and unknown delivery tags. Helpers
// (dv*) are in delivery_helpers_test.go.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/brokertest"
)

// --- consuming ---

func TestDeliveryConsumeNoAck(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t, brokertest.NoConfirm)
	c := ch.Conn
	q := ch.Declare("noack", nil)
	want := dvNumbered("m", 5)
	ch.PublishBodies(q, want...)
	msgs := dvConsume(t, ch, q, "my-tag", true, nil)
	ds := dvRecvN(t, msgs, 5)
	dvWantBodies(t, "no-ack consumer", ds, want...)
	for i, d := range ds {
		if d.ConsumerTag != "my-tag" || d.DeliveryTag != uint64(i+1) || d.Redelivered {
			t.Fatalf("delivery %d: tag %q/%d redelivered %v", i, d.ConsumerTag, d.DeliveryTag, d.Redelivered)
		}
	}
	// Nothing is held for acknowledgement: closing the channel gives
	// nothing back.
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	brokertest.NewSession(t, c, brokertest.NoConfirm).WantReady(q, 0)
}

func TestDeliveryConsumerTagReuseClosesConnection(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t, brokertest.NoConfirm)
	c := ch.Conn
	q := ch.Declare("dup", nil)
	connClosed := c.NotifyClose(make(chan *amqp091.Error, 1))
	dvConsume(t, ch, q, "dup", false, nil)
	_, err := ch.Consume(q, "dup", false, false, false, false, nil)
	dvWantErr(t, err, 530, "NOT_ALLOWED - attempt to reuse consumer tag 'dup'")
	select {
	case e := <-connClosed:
		if e == nil || e.Code != 530 {
			t.Fatalf("connection closed with %v, want 530", e)
		}
	case <-time.After(brokertest.Wait):
		t.Fatal("connection not closed")
	}
}

func TestDeliveryServerGeneratedConsumerTag(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	w := dvDialWire(t, b.Addr, 0)
	w.send(1, &amqp.QueueDeclare{Queue: "tags"})
	dvExpectMethod[*amqp.QueueDeclareOk](w, 1)
	tags := map[string]bool{}
	for range 2 {
		w.send(1, &amqp.BasicConsume{Queue: "tags", NoAck: true})
		ok := dvExpectMethod[*amqp.BasicConsumeOk](w, 1)
		rest, found := strings.CutPrefix(ok.ConsumerTag, "amq.ctag-")
		if !found || len(rest) != 22 {
			t.Fatalf("server-generated tag %q, want amq.ctag- and 22 characters", ok.ConsumerTag)
		}
		tags[ok.ConsumerTag] = true
	}
	if len(tags) != 2 {
		t.Fatalf("two consumers got the same tag: %v", tags)
	}
	w.publish(1, &amqp.BasicPublish{RoutingKey: "tags"}, dvEncodeProps(t, amqp.Properties{}), []byte("x"))
	m, _, _ := w.content(1)
	if d, ok := m.(*amqp.BasicDeliver); !ok || !tags[d.ConsumerTag] {
		t.Fatalf("delivery %+v not for a generated tag %v", m, tags)
	}
}

func TestDeliveryExclusiveConsumer(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t, brokertest.NoConfirm)
	c := ch.Conn
	q := ch.Declare("excl", nil)
	if _, err := ch.Consume(q, "owner", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	ch2 := brokertest.NewSession(t, c, brokertest.NoConfirm)
	_, err := ch2.Consume(q, "second", false, false, false, false, nil)
	dvWantErr(t, err, 403, "ACCESS_REFUSED - queue 'excl' in vhost '/' in exclusive use")

	// Exclusive while another consumer exists.
	q2 := ch.Declare("shared", nil)
	dvConsume(t, ch, q2, "plain", false, nil)
	ch3 := brokertest.NewSession(t, c, brokertest.NoConfirm)
	_, err = ch3.Consume(q2, "greedy", false, true, false, false, nil)
	dvWantErr(t, err, 403, "ACCESS_REFUSED - queue 'shared' in vhost '/' in exclusive use")

	// Once the exclusive consumer cancels, others may consume.
	if err := ch.Cancel("owner", false); err != nil {
		t.Fatal(err)
	}
	ch4 := brokertest.NewSession(t, c, brokertest.NoConfirm)
	msgs := dvConsume(t, ch4, q, "after", true, nil)
	ch4.PublishBodies(q, "hello")
	if d := dvRecv(t, msgs); string(d.Body) != "hello" || d.ConsumerTag != "after" {
		t.Fatalf("got %q for %q", d.Body, d.ConsumerTag)
	}
}

func TestDeliveryRoundRobin(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t, brokertest.NoConfirm)
	c := ch.Conn
	q := ch.Declare("rr", nil)
	a := dvConsume(t, brokertest.NewSession(t, c, brokertest.NoConfirm), q, "a", true, nil)
	bb := dvConsume(t, brokertest.NewSession(t, c, brokertest.NoConfirm), q, "b", true, nil)
	ch.PublishBodies(q, dvNumbered("m", 10)...)
	dvWantBodies(t, "first consumer", dvRecvN(t, a, 5), "m0", "m2", "m4", "m6", "m8")
	dvWantBodies(t, "second consumer", dvRecvN(t, bb, 5), "m1", "m3", "m5", "m7", "m9")
}

func TestDeliveryCancelStopsDeliveries(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t, brokertest.NoConfirm)
	q := ch.Declare("cancel", nil)
	msgs := dvConsume(t, ch, q, "c1", true, nil)
	ch.PublishBodies(q, "before")
	dvWantBodies(t, "before cancel", dvRecvN(t, msgs, 1), "before")
	if err := ch.Cancel("c1", false); err != nil {
		t.Fatal(err)
	}
	ch.PublishBodies(q, "after1", "after2")
	ch.WantReady(q, 2)
	select {
	case d, ok := <-msgs:
		if ok {
			t.Fatalf("delivery %q after cancel", d.Body)
		}
	case <-time.After(brokertest.Wait):
		t.Fatal("delivery channel not closed after cancel")
	}
}

func TestDeliveryServerCancelOnQueueDelete(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t, brokertest.NoConfirm)
	c := ch.Conn
	q := ch.Declare("doomed", nil)
	cancels := ch.NotifyCancel(make(chan string, 1))
	msgs := dvConsume(t, ch, q, "watcher", false, nil)
	if _, err := brokertest.NewSession(t, c, brokertest.NoConfirm).QueueDelete(q, false, false, false); err != nil {
		t.Fatal(err)
	}
	select {
	case tag := <-cancels:
		if tag != "watcher" {
			t.Fatalf("cancelled %q, want watcher", tag)
		}
	case <-time.After(brokertest.Wait):
		t.Fatal("no basic.cancel from the server")
	}
	select {
	case _, ok := <-msgs:
		if ok {
			t.Fatal("delivery after server cancel")
		}
	case <-time.After(brokertest.Wait):
		t.Fatal("delivery channel not closed after server cancel")
	}
	// The channel is still usable.
	ch.Declare("other", nil)
}

// TestDeliveryQueueDeleteOkBeforeOwnCancel deletes a queue from a channel
// that consumes from it: that channel gets queue.delete-ok first and then
// basic.cancel, as from RabbitMQ (amqplib's channel_api.test.js
// "cancelled consumer" closes the channel on the cancel and lost the
// delete's reply when the cancel came first). A consumer on another
// channel, and on another connection, is cancelled too, in no order
// against that reply; with nowait the own consumer is still cancelled.
func TestDeliveryQueueDeleteOkBeforeOwnCancel(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	for _, nowait := range []bool{false, true} {
		t.Run(fmt.Sprintf("nowait=%v", nowait), func(t *testing.T) {
			q := fmt.Sprintf("doomed-%v", nowait)
			w := dvDialWire(t, b.Addr, 0)
			w.send(1, &amqp.QueueDeclare{Queue: q})
			dvExpectMethod[*amqp.QueueDeclareOk](w, 1)
			w.send(1, &amqp.BasicConsume{Queue: q, ConsumerTag: "own"})
			dvExpectMethod[*amqp.BasicConsumeOk](w, 1)
			w.send(2, &amqp.ChannelOpen{})
			dvExpectMethod[*amqp.ChannelOpenOk](w, 2)
			w.send(2, &amqp.BasicConsume{Queue: q, ConsumerTag: "sibling"})
			dvExpectMethod[*amqp.BasicConsumeOk](w, 2)
			other := dvDialWire(t, b.Addr, 0)
			other.send(1, &amqp.BasicConsume{Queue: q, ConsumerTag: "elsewhere"})
			dvExpectMethod[*amqp.BasicConsumeOk](other, 1)

			w.send(1, &amqp.QueueDelete{Queue: q, Nowait: nowait})
			// Channel 1 must see delete-ok (unless nowait), then the
			// cancel of "own"; channel 2 sees the cancel of "sibling".
			want1 := []string{"queue.delete-ok own", "basic.cancel own"}
			if nowait {
				want1 = want1[1:]
			}
			var got1, got2 []string
			for len(got1) < len(want1) || len(got2) < 1 {
				f := w.frame()
				if f.Type != amqp.FrameMethod {
					t.Fatalf("frame type %d on channel %d, want a method", f.Type, f.Channel)
				}
				m, err := amqp.DecodeMethod(f.Payload)
				if err != nil {
					t.Fatal(err)
				}
				desc := m.Name()
				switch m := m.(type) {
				case *amqp.BasicCancel:
					desc += " " + m.ConsumerTag
				case *amqp.QueueDeleteOk:
					desc += " own"
				}
				switch f.Channel {
				case 1:
					got1 = append(got1, desc)
				case 2:
					got2 = append(got2, desc)
				default:
					t.Fatalf("%s on channel %d", desc, f.Channel)
				}
			}
			if strings.Join(got1, ", ") != strings.Join(want1, ", ") {
				t.Fatalf("channel 1 got %q, want %q", got1, want1)
			}
			if got2[0] != "basic.cancel sibling" {
				t.Fatalf("channel 2 got %q, want the cancel of sibling", got2)
			}
			if c := dvExpectMethod[*amqp.BasicCancel](other, 1); c.ConsumerTag != "elsewhere" {
				t.Fatalf("other connection: cancel of %q, want elsewhere", c.ConsumerTag)
			}
			// The channel goes on: the cancelled tag is free again and
			// nothing else was sent.
			w.send(1, &amqp.QueueDeclare{Queue: q})
			dvExpectMethod[*amqp.QueueDeclareOk](w, 1)
			w.send(1, &amqp.BasicConsume{Queue: q, ConsumerTag: "own"})
			dvExpectMethod[*amqp.BasicConsumeOk](w, 1)
		})
	}
}

func TestDeliveryOrder(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t, brokertest.NoConfirm)
	q := ch.Declare("order", nil)
	const n = 1000
	msgs := dvConsume(t, ch, q, "c", false, nil)
	want := dvNumbered("m", n)
	ch.PublishBodies(q, want...)
	ds := dvRecvN(t, msgs, n)
	dvWantBodies(t, "order", ds, want...)
	for i, d := range ds {
		if d.DeliveryTag != uint64(i+1) || d.Redelivered {
			t.Fatalf("delivery %d: tag %d redelivered %v", i, d.DeliveryTag, d.Redelivered)
		}
	}
	dvAck(t, ds[n-1], true)
	ch.WantReady(q, 0)
}

// --- basic.get and acknowledgements ---

func TestDeliveryGet(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t, brokertest.NoConfirm)
	c := ch.Conn
	q := ch.Declare("get", nil)
	ch.WantEmpty(q)
	ch.PublishBodies(q, "a", "b", "c")
	for i, want := range []string{"a", "b", "c"} {
		d := ch.Get(q)
		if string(d.Body) != want || d.MessageCount != uint32(2-i) || d.DeliveryTag != uint64(i+1) {
			t.Fatalf("get %d: %q message_count %d tag %d, want %q %d %d", i, d.Body, d.MessageCount, d.DeliveryTag, want, 2-i, i+1)
		}
	}
	ch.WantEmpty(q)

	// no-ack get: nothing to give back when the channel closes, unlike the
	// three unacked ones above.
	ch2 := brokertest.NewSession(t, c, brokertest.NoConfirm)
	ch2.PublishBodies(q, "d")
	if d := ch2.GetNoAck(q); string(d.Body) != "d" {
		t.Fatalf("no-ack get: %q", d.Body)
	}
	ch2.Close()
	ch.Close()
	ch3 := brokertest.NewSession(t, c, brokertest.NoConfirm)
	ch3.WantReady(q, 3)
	dvWantBodies(t, "requeued gets", ch3.GetN(q, 3), "a", "b", "c")
}

func TestDeliveryAckRemoves(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t, brokertest.NoConfirm)
	c := ch.Conn
	q := ch.Declare("ack", nil)
	ch.PublishBodies(q, dvNumbered("m", 5)...)
	ds := ch.GetN(q, 5)
	dvAck(t, ds[1], false) // m1
	dvAck(t, ds[3], true)  // m0, m2, m3
	ch.Close()
	ch2 := brokertest.NewSession(t, c, brokertest.NoConfirm)
	got := ch2.GetN(q, 1)
	dvWantBodies(t, "left after acks", got, "m4")
	if !got[0].Redelivered {
		t.Fatal("requeued m4 not marked redelivered")
	}
	ch2.WantEmpty(q)
}

func TestDeliveryUnknownTag(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	c, _ := b.Channel(t)
	cases := []struct {
		name    string
		settle  func(ch *amqp091.Channel, d amqp091.Delivery) error
		reason  string
		settled int // acked before the failing one
	}{
		{"ack unknown", func(ch *amqp091.Channel, _ amqp091.Delivery) error { return ch.Ack(99, false) }, "PRECONDITION_FAILED - unknown delivery tag 99", 0},
		{"ack multiple unknown", func(ch *amqp091.Channel, _ amqp091.Delivery) error { return ch.Ack(99, true) }, "PRECONDITION_FAILED - unknown delivery tag 99", 0},
		{"nack unknown", func(ch *amqp091.Channel, _ amqp091.Delivery) error { return ch.Nack(7, false, true) }, "PRECONDITION_FAILED - unknown delivery tag 7", 0},
		{"reject unknown", func(ch *amqp091.Channel, _ amqp091.Delivery) error { return ch.Reject(8, false) }, "PRECONDITION_FAILED - unknown delivery tag 8", 0},
		{"double ack", func(ch *amqp091.Channel, d amqp091.Delivery) error {
			if err := d.Ack(false); err != nil {
				return err
			}
			return d.Ack(false)
		}, "PRECONDITION_FAILED - unknown delivery tag 1", 1},
		{"ack after multiple ack", func(ch *amqp091.Channel, d amqp091.Delivery) error {
			if err := ch.Ack(1, true); err != nil {
				return err
			}
			return ch.Nack(1, false, true)
		}, "PRECONDITION_FAILED - unknown delivery tag 1", 1},
		// RabbitMQ wants the tag of a multiple ack itself outstanding, even
		// when tags below it are (rabbit_channel:collect_acks).
		{"multiple ack of a settled tag", func(ch *amqp091.Channel, d amqp091.Delivery) error {
			if err := ch.Ack(2, false); err != nil {
				return err
			}
			return ch.Ack(2, true)
		}, "PRECONDITION_FAILED - unknown delivery tag 2", 1},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ch := brokertest.NewSession(t, c, brokertest.NoConfirm)
			q := ch.Declare(fmt.Sprintf("unknown-%d", i), nil)
			ch.PublishBodies(q, "x", "y")
			d := ch.GetN(q, 2)[0] // tags 1 and 2 outstanding
			closed := dvNotifyClose(ch)
			if err := tc.settle(ch.Channel, d); err != nil {
				t.Fatal(err)
			}
			dvAwaitClose(t, closed, 406, tc.reason)
			// The failed ack settled nothing: closing gave both back.
			brokertest.NewSession(t, c, brokertest.NoConfirm).WantReady(q, 2-tc.settled)
		})
	}
}
