package broker_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
	"github.com/brokerd/brokerd/store"
)

// recordingStore records every batch the broker writes.
type recordingStore struct {
	store.Store
	mu      sync.Mutex
	batches []store.Batch
}

func (r *recordingStore) Apply(b *store.Batch, done func(error)) {
	r.mu.Lock()
	r.batches = append(r.batches, b.Clone())
	r.mu.Unlock()
	r.Store.Apply(b, done)
}

// deletesFrom returns the batches that delete an entry of queue src.
func (r *recordingStore) deletesFrom(src store.QueueID) []store.Batch {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []store.Batch
	for _, b := range r.batches {
		for _, d := range b.Deletes {
			if d.Queue == src {
				out = append(out, b)
				break
			}
		}
	}
	return out
}

func (r *recordingStore) reset() {
	r.mu.Lock()
	r.batches = nil
	r.mu.Unlock()
}

// lastPut returns the queue and message of the last entry put: the test
// learns a queue's store id and a message's id by publishing.
func (r *recordingStore) lastPut() (store.QueueID, store.MsgID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.batches) - 1; i >= 0; i-- {
		if ps := r.batches[i].Puts; len(ps) > 0 {
			return ps[len(ps)-1].Queue, ps[len(ps)-1].Msg.ID
		}
	}
	return 0, 0
}

// TestDeadLetterIsOneStoreOperation checks, for every trigger, that the
// store receives the removal of the source entry and the put of the
// dead-lettered copy in one batch, with the rewritten properties on the
// copy and the body not copied: the same stored message.
func TestDeadLetterIsOneStoreOperation(t *testing.T) {
	rec := &recordingStore{}
	b := brokertest.Start(t, brokertest.Config{WrapStore: func(s store.Store) store.Store { rec.Store = s; return rec }})
	_, ch := b.Channel(t)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, 16))
	publish := func(q, body string, exp string) bool {
		t.Helper()
		err := ch.PublishWithContext(context.Background(), "", q, false, false, amqp091.Publishing{
			DeliveryMode: amqp091.Persistent, Body: []byte(body), Expiration: exp,
		})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case c := <-confirms:
			return c.Ack
		case <-time.After(5 * time.Second):
			t.Fatal("no confirm")
		}
		return false
	}
	declare := func(name string, args amqp091.Table) {
		t.Helper()
		if _, err := ch.QueueDeclare(name, true, false, false, false, args); err != nil {
			t.Fatal(err)
		}
	}
	declare("dlq", nil)
	publish("dlq", "probe", "")
	dlqID, _ := rec.lastPut()
	if _, err := ch.QueuePurge("dlq", false); err != nil {
		t.Fatal(err)
	}

	// check finds the one batch that dead-letters into the DLQ (for a
	// source entry: the one deleting it) and checks it holds the copy,
	// rewritten, referring to the source's stored message (msg).
	check := func(t *testing.T, src store.QueueID, msg store.MsgID, reason string, wantPublishPut bool) {
		t.Helper()
		var got []store.Batch
		deadline := time.Now().Add(5 * time.Second)
		for len(got) == 0 && time.Now().Before(deadline) {
			if wantPublishPut {
				got = rec.batchesPuttingInto(dlqID)
			} else {
				got = rec.deletesFrom(src)
			}
			if len(got) == 0 {
				time.Sleep(5 * time.Millisecond)
			}
		}
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
		src, msg := rec.lastPut()
		d, ok, err := ch.Get("src-reject", false)
		if err != nil || !ok {
			t.Fatalf("get: %v %v", ok, err)
		}
		rec.reset()
		if err := d.Reject(false); err != nil {
			t.Fatal(err)
		}
		check(t, src, msg, "rejected", false)
	})
	t.Run("expired", func(t *testing.T) {
		rec.reset()
		declare("src-ttl", amqp091.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"})
		publish("src-ttl", "e", "50")
		src, msg := rec.lastPut()
		check(t, src, msg, "expired", false)
	})
	t.Run("maxlen drop-head: eviction in the publish's batch", func(t *testing.T) {
		declare("src-max", amqp091.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq", "x-max-length": int32(1)})
		publish("src-max", "m1", "")
		src, m1 := rec.lastPut()
		rec.reset()
		publish("src-max", "m2", "")
		got := rec.deletesFrom(src)
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
		rec.reset()
		if publish("src-rpd", "refused", "") {
			t.Fatal("publish to a full reject-publish-dlx queue was acked")
		}
		check(t, 0, 0, "maxlen", true)
	})
}

// batchesPuttingInto returns the batches that put an entry into queue q.
func (r *recordingStore) batchesPuttingInto(q store.QueueID) []store.Batch {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []store.Batch
	for _, b := range r.batches {
		for _, p := range b.Puts {
			if p.Queue == q {
				out = append(out, b)
				break
			}
		}
	}
	return out
}

// A dead letter that waited in the at-least-once backlog is forwarded with
// the time it died in x-death, not the time a route appeared.
func TestBacklogKeepsDeathTime(t *testing.T) {
	var offset atomic.Int64 // nanoseconds the broker's clock is ahead
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
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
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, _ := b.Broker.QueueStats("/", "bk-src")
		if st.DeadLetterBacklog == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dead letter not in the backlog: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	offset.Store(int64(2 * time.Hour))
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
	for got.Body == nil {
		var ok bool
		if got, ok, err = ch.Get("bk-dlq", true); err != nil {
			t.Fatal(err)
		}
		if !ok {
			if time.Now().After(deadline) {
				t.Fatal("dead letter not forwarded once a route existed")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
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
	deadline := time.Now().Add(5 * time.Second)
	for st, _ := b.Broker.QueueStats("/", "pb-src"); st.DeadLetterBacklog != 1; st, _ = b.Broker.QueueStats("/", "pb-src") {
		if time.Now().After(deadline) {
			t.Fatalf("no dead letter waiting: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
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
