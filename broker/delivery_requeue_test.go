// Tests of requeues: nack, reject, recover and channel close, order and redelivered flag.

package broker_test

// Tests of messages returned to their queue: nack and reject with
// requeue (and without), basic.recover and channel close; the order they
// come back in and the redelivered flag.

import (
	"testing"

	"github.com/brokerd/brokerd/broker/brokertest"
)

func TestDeliveryRequeueKeepsOrder(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t, brokertest.NoConfirm)
	q := ch.Declare("requeue", nil)
	ch.PublishBodies(q, "m1", "m2", "m3", "m4")
	ds := ch.GetN(q, 3) // tags 1..3
	if err := ds[1].Reject(true); err != nil {
		t.Fatal(err)
	}
	if err := ds[2].Nack(true, true); err != nil { // settles 1 and 3
		t.Fatal(err)
	}
	got := ch.GetN(q, 4)
	dvWantBodies(t, "after requeue", got, "m1", "m2", "m3", "m4")
	for i, d := range got {
		if want := i < 3; d.Redelivered != want {
			t.Fatalf("%s: redelivered %v, want %v", d.Body, d.Redelivered, want)
		}
	}
}

func TestDeliveryRequeueFalseDiscards(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t, brokertest.NoConfirm)
	c := ch.Conn
	q := ch.Declare("discard", nil)
	ch.PublishBodies(q, "m1", "m2", "m3", "m4")
	ds := ch.GetN(q, 4)
	if err := ds[0].Reject(false); err != nil {
		t.Fatal(err)
	}
	if err := ds[2].Nack(true, false); err != nil { // m2, m3
		t.Fatal(err)
	}
	ch.WantReady(q, 0)
	ch.Close() // m4 is the only one still unacked
	ch2 := brokertest.NewSession(t, c, brokertest.NoConfirm)
	got := ch2.GetN(q, 1)
	dvWantBodies(t, "left", got, "m4")
	ch2.WantEmpty(q)
}

func TestDeliveryRecoverRedelivers(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t, brokertest.NoConfirm)
	q := ch.Declare("recover", nil)
	msgs := dvConsume(t, ch, q, "c", false, nil)
	ch.PublishBodies(q, "a", "b", "c")
	first := dvRecvN(t, msgs, 3)
	dvAck(t, first[1], false) // b is settled and stays gone
	if err := ch.Recover(true); err != nil {
		t.Fatal(err)
	}
	again := dvRecvN(t, msgs, 2)
	dvWantBodies(t, "after recover", again, "a", "c")
	for _, d := range again {
		if !d.Redelivered || d.DeliveryTag <= 3 {
			t.Fatalf("%s: redelivered %v tag %d, want redelivered with a new tag", d.Body, d.Redelivered, d.DeliveryTag)
		}
	}
	dvAck(t, again[1], true)
	ch.WantReady(q, 0)
}

func TestDeliveryChannelCloseRequeuesInOrder(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t, brokertest.NoConfirm)
	c := ch.Conn
	q := ch.Declare("close", nil)
	msgs := dvConsume(t, ch, q, "first", false, nil)
	want := dvNumbered("m", 5)
	ch.PublishBodies(q, want...)
	dvRecvN(t, msgs, 5)
	other := dvConsume(t, brokertest.NewSession(t, c, brokertest.NoConfirm), q, "second", false, nil)
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	got := dvRecvN(t, other, 5)
	dvWantBodies(t, "requeued to the other consumer", got, want...)
	for _, d := range got {
		if !d.Redelivered {
			t.Fatalf("%s not marked redelivered", d.Body)
		}
	}
}
