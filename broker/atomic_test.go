// Tests that a dead letter is one store operation, and of the at-least-once backlog.

package broker_test

import (
	"context"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"fmt"
	"slices"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
	"github.com/brokerd/brokerd/store"
)

// batchesWith returns the batches recorded that hold an entry of queue q
// among their deletes (deletes) or their puts.
func batchesWith(rec *brokertest.SpyStore, q store.QueueID, deletes bool) []store.Batch {
	var out []store.Batch
	for _, b := range rec.Batches() {
		if deletes && slices.ContainsFunc(b.Deletes, func(r store.Ref) bool { return r.Queue == q }) ||
			!deletes && slices.ContainsFunc(b.Puts, func(e store.Entry) bool { return e.Queue == q }) {
			out = append(out, b)
		}
	}
	return out
}

// lastPut returns the queue and message of the last entry put: the test
// learns a queue's store id and a message's id by publishing.
func lastPut(rec *brokertest.SpyStore) (store.QueueID, store.MsgID) {
	ps := rec.Puts()
	if len(ps) == 0 {
		return 0, 0
	}
	return ps[len(ps)-1].Queue, ps[len(ps)-1].Msg.ID
}

// TestDeadLetterIsOneStoreOperation checks, for every trigger, that the
// store receives the removal of the source entry and the put of the
// dead-lettered copy in one batch, with the rewritten properties on the
// copy and the body not copied: the same stored message.
func TestDeadLetterIsOneStoreOperation(t *testing.T) {
	rec := &brokertest.SpyStore{}
	b := brokertest.Start(t, brokertest.Config{WrapStore: rec.Wrap})
	ch := b.Session(t)
	publish := func(q, body string, exp string) bool {
		t.Helper()
		return ch.PublishAck("", q, amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: []byte(body), Expiration: exp})
	}
	declare := func(name string, args amqp091.Table) { t.Helper(); ch.Declare(name, args, brokertest.Durable) }
	declare("dlq", nil)
	publish("dlq", "probe", "")
	dlqID, _ := lastPut(rec)
	if _, err := ch.QueuePurge("dlq", false); err != nil {
		t.Fatal(err)
	}

	// check finds the one batch that dead-letters into the DLQ (for a
	// source entry: the one deleting it) and checks it holds the copy,
	// rewritten, referring to the source's stored message (msg).
	check := func(t *testing.T, src store.QueueID, msg store.MsgID, reason string, wantPublishPut bool) {
		t.Helper()
		var got []store.Batch
		brokertest.Eventually(t, "the batch that dead-letters", func() bool {
			if wantPublishPut {
				got = batchesWith(rec, dlqID, false)
			} else {
				got = batchesWith(rec, src, true)
			}
			return len(got) > 0
		})
		if len(got) != 1 {
			t.Fatalf("%d batches, want exactly 1: %+v", len(got), got)
		}
		bt := got[0]
		var dlPut *store.Entry
		for i := range bt.Puts {
			if bt.Puts[i].Queue == dlqID {
				dlPut = &bt.Puts[i]
			}
		}
		if dlPut == nil {
			t.Fatalf("the batch deleting the source entry puts nothing into the DLQ: %+v", bt)
		}
		if dlPut.Header == nil {
			t.Fatal("the dead-lettered copy carries no rewritten header")
		}
		props, err := amqp.DecodeProperties(dlPut.Header.Props)
		if err != nil {
			t.Fatal(err)
		}
		xd, ok := props.Headers.Get("x-death")
		if !ok {
			t.Fatal("no x-death on the stored copy")
		}
		if r := xd.([]any)[0].(amqp.Table); func() string { v, _ := r.Get("reason"); return v.(string) }() != reason {
			t.Fatalf("x-death %v, want reason %s", r, reason)
		}
		// Body not copied: the copy refers to the message already stored
		// with the source entry.
		if msg != 0 && dlPut.Msg.ID != msg {
			t.Fatalf("copy refers to message %d, the source's is %d", dlPut.Msg.ID, msg)
		}
		if !wantPublishPut {
			deleted := false
			for _, d := range bt.Deletes {
				deleted = deleted || d.Queue == src
			}
			if !deleted {
				t.Fatal("the source entry is not deleted in the same batch")
			}
		}
	}

	t.Run("rejected", func(t *testing.T) {
		declare("src-reject", amqp091.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"})
		publish("src-reject", "r", "")
		src, msg := lastPut(rec)
		d, ok, err := ch.Channel.Get("src-reject", false)
		if err != nil || !ok {
			t.Fatalf("get: %v %v", ok, err)
		}
		rec.Reset()
		if err := d.Reject(false); err != nil {
			t.Fatal(err)
		}
		check(t, src, msg, "rejected", false)
	})
	t.Run("expired", func(t *testing.T) {
		rec.Reset()
		declare("src-ttl", amqp091.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"})
		publish("src-ttl", "e", "50")
		src, msg := lastPut(rec)
		check(t, src, msg, "expired", false)
	})
	t.Run("maxlen drop-head: eviction in the publish's batch", func(t *testing.T) {
		declare("src-max", amqp091.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq", "x-max-length": int32(1)})
		publish("src-max", "m1", "")
		src, m1 := lastPut(rec)
		rec.Reset()
		publish("src-max", "m2", "")
		got := batchesWith(rec, src, true)
		if len(got) != 1 {
			t.Fatalf("%d batches delete from the source, want 1", len(got))
		}
		var putSrc, putDLQ bool
		for _, p := range got[0].Puts {
			putSrc = putSrc || (p.Queue == src && string(p.Msg.Body) == "m2")
			putDLQ = putDLQ || (p.Queue == dlqID && p.Msg.ID == m1)
		}
		if !putSrc || !putDLQ {
			t.Fatalf("the batch of the publish does not hold the new entry, the eviction and its dead letter: %+v", got[0])
		}
	})
	t.Run("reject-publish-dlx: refusal and dead letter in one batch", func(t *testing.T) {
		declare("src-rpd", amqp091.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq", "x-max-length": int32(0), "x-overflow": "reject-publish-dlx"})
		rec.Reset()
		if publish("src-rpd", "refused", "") {
			t.Fatal("publish to a full reject-publish-dlx queue was acked")
		}
		check(t, 0, 0, "maxlen", true)
	})
}

// A dead letter that waited in the at-least-once backlog is forwarded with
// the time it died in x-death, not the time a route appeared.
func TestBacklogKeepsDeathTime(t *testing.T) {
	clk := brokertest.NewOffsetClock() // the broker's clock only: its timers keep the wall clock's
	now := clk.Now
	b := brokertest.Start(t, brokertest.Config{Broker: broker.Options{Now: now, BacklogRetry: time.Hour}})
	_, ch := b.Channel(t)
	if _, err := ch.QueueDeclare("bk-src", false, false, false, false, amqp091.Table{
		"x-dead-letter-exchange": "bk-dlx", "x-dead-letter-strategy": "at-least-once",
	}); err != nil {
		t.Fatal(err)
	}
	if err := ch.PublishWithContext(context.Background(), "", "bk-src", false, false, amqp091.Publishing{Body: []byte("m")}); err != nil {
		t.Fatal(err)
	}
	d, ok, err := ch.Get("bk-src", false)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	died := now()
	if err := d.Reject(false); err != nil {
		t.Fatal(err)
	}
	// The exchange does not exist: the dead letter waits.
	brokertest.Eventually(t, "the dead letter in the backlog", func() error {
		if st, _ := b.Broker.QueueStats("/", "bk-src"); st.DeadLetterBacklog != 1 {
			return fmt.Errorf("%+v", st)
		}
		return nil
	})
	clk.Advance(2 * time.Hour)
	if err := ch.ExchangeDeclare("bk-dlx", "fanout", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("bk-dlq", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("bk-dlq", "", "bk-dlx", false, nil); err != nil {
		t.Fatal(err)
	}
	var got amqp091.Delivery
	brokertest.Eventually(t, "the dead letter forwarded once a route existed", func() bool {
		var ok bool
		if got, ok, err = ch.Get("bk-dlq", true); err != nil {
			t.Fatal(err)
		}
		return ok
	})
	xd := got.Headers["x-death"].([]interface{})[0].(amqp091.Table)
	when := xd["time"].(time.Time)
	if d := when.Sub(died.Truncate(time.Second)); d < -time.Second || d > time.Second {
		t.Fatalf("x-death time %v, want the death time %v (the route appeared 2 h later)", when, died)
	}
}

// Purge drops the dead letters waiting for a route too (B5, RabbitMQ 4.3):
// once purged, a route appearing forwards nothing.
func TestPurgeDropsBacklog(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{Broker: broker.Options{BacklogRetry: time.Hour}})
	_, ch := b.Channel(t)
	if _, err := ch.QueueDeclare("pb-src", false, false, false, false, amqp091.Table{
		"x-dead-letter-exchange": "pb-dlx", "x-dead-letter-strategy": "at-least-once",
	}); err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"waits", "ready"} {
		if err := ch.PublishWithContext(context.Background(), "", "pb-src", false, false, amqp091.Publishing{Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}
	d, ok, err := ch.Get("pb-src", false)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	if err := d.Reject(false); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, "a dead letter waiting", func() error {
		if st, _ := b.Broker.QueueStats("/", "pb-src"); st.DeadLetterBacklog != 1 {
			return fmt.Errorf("%+v", st)
		}
		return nil
	})
	n, err := ch.QueuePurge("pb-src", false)
	if err != nil || n != 1 {
		t.Fatalf("purge = %d, %v; want the 1 ready message", n, err)
	}
	if st, _ := b.Broker.QueueStats("/", "pb-src"); st.DeadLetterBacklog != 0 || st.Ready != 0 {
		t.Fatalf("after purge: %+v", st)
	}
	if err := ch.ExchangeDeclare("pb-dlx", "fanout", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("pb-dlq", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("pb-dlq", "", "pb-dlx", false, nil); err != nil {
		t.Fatal(err)
	}
	// The bind retried the backlogs synchronously: nothing came.
	if q, err := ch.QueueDeclarePassive("pb-dlq", false, false, false, false, nil); err != nil || q.Messages != 0 {
		t.Fatalf("dlq after purge and bind: %d messages, %v", q.Messages, err)
	}
}
