// Tests that a transaction commits as one store batch and commit-ok waits for it.

package broker_test

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
	"github.com/brokerd/brokerd/store"
)

// tx.commit-ok promises the transaction is durable: it is sent from the
// completion of one store operation holding the whole transaction.

var persistentProps = amqp.Properties{Flags: amqp.FlagDeliveryMode, DeliveryMode: 2}

func txDeclareDurable(w *dvWire, ch uint16, name string, args amqp.Table) {
	w.t.Helper()
	w.send(ch, &amqp.QueueDeclare{Queue: name, Durable: true, Arguments: args})
	dvExpectMethod[*amqp.QueueDeclareOk](w, ch)
}

// TestTxCommitOkOnlyOnceDurable is the regression test for the review
// finding "tx.commit-ok is sent before durability" (2026-11-23 store
// readiness, §4 finding 3). A transaction that publishes three persistent
// messages to two durable queues, acks one delivery and rejects another
// into a dead-letter queue is handed to the store as one batch; commit-ok
// waits for that batch's completion while the connection's other channels
// carry on.
func TestTxCommitOkOnlyOnceDurable(t *testing.T) {
	h := newHeldStore()
	b := brokertest.Start(t, brokertest.Config{WrapStore: h.wrap})
	w := dvDialWire(t, b.Addr, 0)
	w.send(2, &amqp.ChannelOpen{})
	dvExpectMethod[*amqp.ChannelOpenOk](w, 2)
	for _, q := range []string{"txa", "txb", "dlq"} {
		txDeclareDurable(w, 2, q, nil)
	}
	txDeclareDurable(w, 2, "src", amqp.Table{{Key: "x-dead-letter-exchange", Value: ""}, {Key: "x-dead-letter-routing-key", Value: "dlq"}})
	props := dvEncodeProps(t, persistentProps)
	w.publish(2, &amqp.BasicPublish{RoutingKey: "src"}, props, []byte("s1"))
	w.publish(2, &amqp.BasicPublish{RoutingKey: "src"}, props, []byte("s2"))

	w.send(1, &amqp.TxSelect{})
	dvExpectMethod[*amqp.TxSelectOk](w, 1)
	for i, want := range []string{"s1", "s2"} {
		w.send(1, &amqp.BasicGet{Queue: "src"})
		m, _, body := w.content(1)
		if ok, isOk := m.(*amqp.BasicGetOk); !isOk || ok.DeliveryTag != uint64(i+1) || string(body) != want {
			t.Fatalf("get: %s %+v %q, want get-ok %d %q", m.Name(), m, body, i+1, want)
		}
	}
	w.send(1, &amqp.BasicAck{DeliveryTag: 1})
	w.send(1, &amqp.BasicReject{DeliveryTag: 2})
	w.publish(1, &amqp.BasicPublish{RoutingKey: "txa"}, props, []byte("p1"))
	w.publish(1, &amqp.BasicPublish{RoutingKey: "txb"}, props, []byte("p2"))
	w.publish(1, &amqp.BasicPublish{RoutingKey: "txa"}, props, []byte("p3"))

	h.start(t)
	w.send(1, &amqp.TxCommit{})
	// A round trip on channel 2: the broker has handled the commit (the
	// reader handles frames in order), and commit-ok, on channel 1, is
	// not out: method(2) fails on any frame of channel 1.
	w.send(2, &amqp.QueueDeclare{Queue: "txa", Passive: true})
	if ok := dvExpectMethod[*amqp.QueueDeclareOk](w, 2); ok.MessageCount != 2 {
		t.Fatalf("txa holds %d messages after the commit, want 2", ok.MessageCount)
	}
	h.waitHeld(t, 1)
	batches := h.applied()
	if len(batches) != 1 {
		t.Fatalf("the commit made %d store operations, want 1: %+v", len(batches), batches)
	}
	bt := batches[0]
	putQueue := map[string]store.QueueID{}
	for _, p := range bt.Puts {
		putQueue[string(p.Msg.Body)] = p.Queue
	}
	if len(bt.Puts) != 4 || putQueue["p1"] != putQueue["p3"] || putQueue["p1"] == putQueue["p2"] ||
		putQueue["s2"] == 0 || putQueue["s2"] == putQueue["p1"] || putQueue["s2"] == putQueue["p2"] {
		t.Fatalf("puts %v, want p1 and p3 to one queue, p2 to another, the dead-lettered s2 to a third", putQueue)
	}
	if len(bt.Deletes) != 2 || bt.Deletes[0].Queue != bt.Deletes[1].Queue || slices.Contains(slices.Collect(maps.Values(putQueue)), bt.Deletes[0].Queue) {
		t.Fatalf("deletes %+v, want the acked s1 and the rejected s2 from src", bt.Deletes)
	}

	h.release()
	dvExpectMethod[*amqp.TxCommitOk](w, 1)
	w.send(2, &amqp.QueueDeclare{Queue: "dlq", Passive: true})
	if ok := dvExpectMethod[*amqp.QueueDeclareOk](w, 2); ok.MessageCount != 1 {
		t.Fatalf("dlq holds %d messages, want the rejected s2", ok.MessageCount)
	}
}

// TestTxCommitOkBeforeLaterReplies: a method pipelined on the channel
// behind tx.commit is answered after commit-ok, though commit-ok waits for
// the store and the method does not.
func TestTxCommitOkBeforeLaterReplies(t *testing.T) {
	h := newHeldStore()
	b := brokertest.Start(t, brokertest.Config{WrapStore: h.wrap})
	w := dvDialWire(t, b.Addr, 0)
	txDeclareDurable(w, 1, "txq", nil)
	w.send(1, &amqp.TxSelect{})
	dvExpectMethod[*amqp.TxSelectOk](w, 1)
	w.publish(1, &amqp.BasicPublish{RoutingKey: "txq"}, dvEncodeProps(t, persistentProps), []byte("m"))
	h.start(t)
	w.send(1, &amqp.TxCommit{})
	w.send(1, &amqp.QueueDeclare{Queue: "txq", Passive: true})
	h.waitHeld(t, 1)
	h.release()
	dvExpectMethod[*amqp.TxCommitOk](w, 1)
	dvExpectMethod[*amqp.QueueDeclareOk](w, 1)
}

// TestTxCommitStoreFailureClosesConnection: when the store fails the
// transaction's batch, the client gets no commit-ok but a connection error
// 541, as for a declaration the store could not keep.
func TestTxCommitStoreFailureClosesConnection(t *testing.T) {
	h := newHeldStore()
	b := brokertest.Start(t, brokertest.Config{WrapStore: h.wrap})
	ch := b.Session(t, brokertest.NoConfirm)
	conn := ch.Conn
	closed := conn.NotifyClose(make(chan *amqp091.Error, 1))
	if _, err := ch.QueueDeclare("txq", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Tx(); err != nil {
		t.Fatal(err)
	}
	ch.Publish("", "txq", amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: []byte("doomed")})
	h.mu.Lock()
	h.failErr = errors.New("disk on fire")
	h.mu.Unlock()
	h.start(t)
	committed := make(chan error, 1)
	go func() { committed <- ch.TxCommit() }()
	h.waitHeld(t, 1)
	h.release()
	select {
	case err := <-committed:
		dvWantErr(t, err, 541, "INTERNAL_ERROR - message store failed; transaction not committed: disk on fire")
	case <-time.After(brokertest.Wait):
		t.Fatal("tx.commit neither completed nor failed")
	}
	select {
	case e := <-closed:
		if e == nil || e.Code != 541 || !e.Server {
			t.Fatalf("connection closed with %+v, want 541 from the server", e)
		}
	case <-time.After(brokertest.Wait):
		t.Fatal("connection not closed")
	}
}

// TestStoreFailureBlocksPublishers: once the store fails, the publish it
// failed is nacked and publishers get connection.blocked, as with a disk
// alarm: the broker never goes on accepting what it cannot keep.
func TestStoreFailureBlocksPublishers(t *testing.T) {
	h := newHeldStore()
	b := brokertest.Start(t, brokertest.Config{WrapStore: h.wrap})
	ch := b.Session(t, brokertest.NoConfirm)
	conn := ch.Conn
	blocked := conn.NotifyBlocked(make(chan amqp091.Blocking, 1))
	if _, err := ch.QueueDeclare("sf", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, 1))
	h.mu.Lock()
	h.failErr = errors.New("disk on fire")
	h.mu.Unlock()
	h.start(t)
	ch.Publish("", "sf", amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: []byte("lost?")})
	h.waitHeld(t, 1)
	h.release()
	select {
	case c := <-confirms:
		if c.Ack {
			t.Fatal("publish acked although the store failed")
		}
	case <-time.After(brokertest.Wait):
		t.Fatal("no confirm for the failed publish")
	}
	// As with RabbitMQ's alarms, a connection is blocked when it next
	// publishes.
	ch.Publish("", "sf", amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: []byte("held")})
	select {
	case bl := <-blocked:
		if !bl.Active {
			t.Fatalf("got %+v, want connection.blocked", bl)
		}
	case <-time.After(brokertest.Wait):
		t.Fatal("publishers not blocked after the store failed")
	}
	// A blocked connection is not read from, so the client's close
	// handshake would wait forever: stop the broker, which closes it.
	b.Stop()
}

// TestStoreFailureStopsDeliveriesPastTheMark: once the store has failed, no
// delivered mark can be written, so nothing past the durable mark is
// delivered (a restart, or the next leader of a cluster, would hand it out
// again marked as never delivered); basic.get answers get-empty there
// rather than wait for a write that never comes.
func TestStoreFailureStopsDeliveriesPastTheMark(t *testing.T) {
	const chunk, n = 4, 10
	h := newHeldStore()
	b := brokertest.Start(t, brokertest.Config{WrapStore: h.wrap, Broker: broker.Options{DeliveredMarkChunk: chunk}})
	ch := b.Session(t, brokertest.Persistent)
	if _, err := ch.QueueDeclare("sm", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		ch.Publish("", "sm", amqp091.Publishing{Body: fmt.Appendf(nil, "m%d", i)})
	}
	if _, ok, err := ch.Channel.Get("sm", false); err != nil || !ok {
		t.Fatalf("get before the failure: %v %v", ok, err)
	}
	h.mu.Lock()
	h.failErr = errors.New("disk on fire")
	h.mu.Unlock()
	h.start(t)
	acked := make(chan bool, 1)
	go func() { acked <- ch.PublishAck("", "sm", amqp091.Publishing{Body: []byte("fails")}) }()
	h.waitHeld(t, 1)
	h.release()
	if <-acked {
		t.Fatal("publish acked although the store failed")
	}
	got := 0
	for {
		_, ok, err := ch.Channel.Get("sm", false)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if got++; got >= n {
			t.Fatal("every message delivered after the store failed")
		}
	}
	if got > chunk {
		t.Fatalf("%d delivered after the store failed, more than the mark chunk (%d) covers", got, chunk)
	}
}
