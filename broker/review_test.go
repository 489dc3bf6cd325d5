package broker_test

// Review tests: each guards a finding of an adversarial review of the
// broker's concurrency and store ordering (they failed before the fixes).

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/internal/brokertest"
	"github.com/brokerd/brokerd/store"
)

// R1. Dead-lettering several entries in one operation (nack multiple,
// several expiries in one timer batch, drop-head evicting many, a backlog
// retry) checks the target's reject-publish limit against the target's
// readyN, which does not count the copies already planned in the same
// call (they enter the target only in txn.finish). A target with
// x-max-length 1 / reject-publish receives every copy.
func TestReviewBatchDeadLetterOverflowsRejectPublishTarget(t *testing.T) {
	b := tlStart(t)
	_, ch := tlChannel(t, b)
	tlDeclare(t, ch, "dlq", "classic", amqp091.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"})
	tlDeclare(t, ch, "src", "classic", tlDLX("dlq", nil))
	tlPubAll(t, ch, "src", "a", "b", "c")
	var last amqp091.Delivery
	for range 3 {
		last = tlMustGet(t, ch, "src")
	}
	if err := ch.Nack(last.DeliveryTag, true, false); err != nil {
		t.Fatal(err)
	}
	tlSync(t, ch)
	if got := tlReady(t, b, "dlq"); got != 1 {
		t.Fatalf("reject-publish target with x-max-length 1 holds %d messages after a nack-multiple of 3 (SPEC §4: limits are exact)", got)
	}
}

// R2. Queue ids are reused after a restart: b.queueID is recovered as the
// largest id among the *stored queue definitions*. An exclusive durable
// queue's definition is never stored, but its persistent entries are
// (isStoredFor = Durable && Persistent). After a crash (no graceful
// connection close, so no DropQueues), its entries stay in the store under
// an id the restarted broker hands to the next queue declared:
//   - the first persistent publish to the new queue puts (id, 1), which
//     already exists: memstore fails the batch with ErrInvalidBatch, which
//     is sticky, so every later persistent operation fails too;
//   - if nothing is published before the next restart, the stale entry is
//     recovered into the unrelated new queue.
//
// The same happens with dead-letter copies orphaned in a target deleted
// between planning and txn.finish (insertDeadLetters cleans them only if
// the process lives that long).
func TestReviewQueueIDReuseAfterCrash(t *testing.T) {
	// A broker that crashed (kill -9: the store as it is, without the
	// connection's teardown, which would delete the exclusive queue) and
	// came back.
	crashWithExclusiveEntry := func(t *testing.T) *brokertest.Instance {
		b := brokertest.Start(t, brokertest.Config{})
		_, ch := tlChannel(t, b)
		if _, err := ch.QueueDeclare("x", true, false, true, false, nil); err != nil {
			t.Fatal(err)
		}
		tlPubPersistent(t, ch, "x", "stale", "")
		b.Crash()
		return b
	}

	t.Run("publish-fails", func(t *testing.T) {
		b := crashWithExclusiveEntry(t)
		_, ch := tlChannel(t, b)
		tlDeclareDurable(t, ch, "b", "classic", true, nil)
		p := amqp091.Publishing{Body: []byte("fresh"), DeliveryMode: amqp091.Persistent}
		if !tlPublish(t, ch, "", "b", p) {
			t.Fatalf("persistent publish to a fresh durable queue nacked: the reused queue id collides with the dead exclusive queue's stored entry (store now failed for good)")
		}
	})

	t.Run("leaks-into-new-queue", func(t *testing.T) {
		b := crashWithExclusiveEntry(t)
		_, ch := tlChannel(t, b)
		tlDeclareDurable(t, ch, "b", "classic", true, nil)
		b.Restart()
		if n := tlReady(t, b, "b"); n != 0 {
			_, ch3 := tlChannel(t, b)
			t.Fatalf("freshly declared empty queue b holds %v after a restart: the dead exclusive queue's message leaked into it", tlDrain(t, ch3, "b"))
		}
	})
}

// R3. expireEntries (and expireLease) skip an entry whose timer fired but
// which is not expired by the broker clock, and never re-arm it. The
// scheduler fires by its clock's reading; the broker then reads its own
// clock again. If the broker's reading is behind (wall clock stepped back
// between the two readings, or the wheel firing up to maxClockStep early
// after a small step back), the timer is lost: the message then expires
// only if it reaches a consumer or basic.get, never where it sits.
// Simulated here with the timer clock ahead of the broker clock.
func TestReviewEarlyFiredTimerNotReArmed(t *testing.T) {
	clk, timers := tlNewClock(), tlNewClock()
	b := brokertest.Start(t, brokertest.Config{Broker: broker.Options{Now: clk.Now, TimerClock: timers.Timers()}})
	_, ch := tlChannel(t, b)
	tlDeclare(t, ch, "dlq", "classic", nil)
	tlDeclare(t, ch, "src", "classic", tlDLX("dlq", amqp091.Table{"x-message-ttl": int32(1000)}))
	tlPub(t, ch, "src", "m", "")

	timers.Advance(1500 * time.Millisecond) // the scheduler sees the deadline pass...
	time.Sleep(200 * time.Millisecond)      // ...and fires; the broker clock is 0 ms on
	tlWantReady(t, b, "src", 1)

	clk.Advance(5 * time.Second) // now the broker clock is 4 s past the deadline
	timers.Advance(5 * time.Second)
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if tlReady(t, b, "dlq") == 1 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("message 4 s past its deadline still ready in src (%d ready) and never dead-lettered: its timer fired early and was not re-armed", tlReady(t, b, "src"))
}

// R4 (revised). A dead-letter target deleted while a dead letter is on its
// way: the delete must not slip between routing the copy to the target and
// writing it, or the copy would land in a dropped queue and the message be
// in neither place. The vhost lock held from routing to the store write
// fences it: the delete waits for the dead letter's batch, then takes the
// copy with the queue like any message it held, leaving nothing orphaned in
// the store and nothing in the source.
func TestReviewTargetDeletedDuringDeadLetter(t *testing.T) {
	var armed atomic.Bool
	var hook func(dlq store.QueueID)
	hs := &hookStore{}
	var dlqID atomic.Uint64
	hs.hook = func(bt *store.Batch) {
		if len(bt.Puts) == 0 || len(bt.Deletes) == 0 || bt.Puts[0].Queue == bt.Deletes[0].Queue {
			return
		}
		if armed.CompareAndSwap(true, false) {
			dlqID.Store(uint64(bt.Puts[0].Queue))
			hook(bt.Puts[0].Queue)
		}
	}
	b := brokertest.Start(t, brokertest.Config{WrapStore: func(s store.Store) store.Store { hs.Store = s; return hs }})
	_, ch := tlChannel(t, b)
	_, other := b.Channel(t)
	deleted := make(chan struct{}) // closed when the delete has returned
	var deleteErr error
	hook = func(store.QueueID) {
		// Inside the dead letter's store write: start deleting the
		// target; it must not finish before this write does.
		go func() {
			_, deleteErr = other.QueueDelete("dlq", false, false, false)
			close(deleted)
		}()
		select {
		case <-deleted:
			t.Errorf("target deleted in the middle of the dead letter's store write (err %v)", deleteErr)
		case <-time.After(100 * time.Millisecond):
		}
	}
	tlDeclareDurable(t, ch, "dlq", "classic", true, nil)
	tlDeclareDurable(t, ch, "src", "classic", true, tlDLX("dlq", amqp091.Table{"x-dead-letter-strategy": "at-least-once"}))
	tlPubPersistent(t, ch, "src", "m", "")
	d := tlMustGet(t, ch, "src")
	armed.Store(true)
	if err := d.Reject(false); err != nil {
		t.Fatal(err)
	}
	select {
	case <-deleted:
		if deleteErr != nil {
			t.Fatalf("delete dlq: %v", deleteErr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("target delete never completed")
	}
	tlSync(t, ch)
	if armed.Load() {
		t.Fatal("hook did not run")
	}
	// The copy reached the target, then went with it: nothing of the
	// deleted queue is left in the store, and the source is empty.
	var orphans int
	if err := b.Store.ScanQueue(store.QueueID(dlqID.Load()), 0, func(*store.Entry) bool { orphans++; return true }); err != nil {
		t.Fatal(err)
	}
	if orphans != 0 {
		t.Fatalf("%d entries of the deleted target left in the store", orphans)
	}
	if st := tlQueueStats(t, b, "src"); st.Ready+st.Unacked+st.DeadLetterBacklog != 0 {
		t.Fatalf("source still holds the message: %+v", st)
	}
}

type hookStore struct {
	store.Store
	hook func(*store.Batch)
}

func (h *hookStore) Apply(b *store.Batch, done func(error)) {
	h.hook(b)
	h.Store.Apply(b, done)
}

// R5. applyPolicies computes every queue's new config under v.mu, releases
// it, then installs them one queue at a time. Two policy changes racing
// install in either order per queue: a queue can keep the config computed
// from the older policy set (here: policy "b", priority 2, is in force but
// a queue still runs policy "a").
func TestReviewConcurrentPolicyChangesLoseUpdate(t *testing.T) {
	b := tlStart(t)
	_, ch := tlChannel(t, b)
	const n = 300
	for i := range n {
		tlDeclare(t, ch, fmt.Sprintf("q%d", i), "classic", nil)
	}
	pol := func(name string, prio int) broker.Policy {
		return broker.Policy{Name: name, Pattern: "^q", ApplyTo: "queues", Priority: prio,
			Definition: map[string]any{"max-length": 1000 + prio}}
	}
	for round := range 30 {
		_ = b.Broker.ClearPolicy("/", "a")
		_ = b.Broker.ClearPolicy("/", "b")
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); _ = b.Broker.SetPolicy("/", pol("a", 1)) }()
		go func() { defer wg.Done(); _ = b.Broker.SetPolicy("/", pol("b", 2)) }()
		wg.Wait()
		for i := range n {
			q := fmt.Sprintf("q%d", i)
			if st := tlQueueStats(t, b, q); st.Policy != "b" {
				t.Fatalf("round %d: queue %s runs policy %q while %q (higher priority) is in force", round, q, st.Policy, "b")
			}
		}
	}
}

// R6. An ack inside a transaction frees the consumer's prefetch credit only
// at commit: with prefetch 1, the next message waits for tx.commit.
func TestReviewTxAckHoldsCreditUntilCommit(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	_, ch := b.Channel(t)
	if _, err := ch.QueueDeclare("txq", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"m1", "m2"} {
		if err := ch.Publish("", "txq", false, false, amqp091.Publishing{Body: []byte(m)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := ch.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	if err := ch.Tx(); err != nil {
		t.Fatal(err)
	}
	msgs, err := ch.Consume("txq", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	first := <-msgs
	if err := first.Ack(false); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-msgs:
		t.Fatalf("%q delivered before the commit freed the credit", d.Body)
	case <-time.After(200 * time.Millisecond): // time is the point: nothing may come
	}
	if err := ch.TxCommit(); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-msgs:
		if string(d.Body) != "m2" {
			t.Fatalf("after commit got %q", d.Body)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("commit did not free the credit")
	}
}

// R7. At-least-once dead-lettering is all or nothing across targets: while
// one target is full (reject-publish), the message waits in the source's
// backlog and no target gets it; once there is room, every target does.
func TestReviewAtLeastOnceAllTargetsOrNone(t *testing.T) {
	// Retries run when the test says (RetryBacklogsForTest), not on a timer.
	b := brokertest.Start(t, brokertest.Config{Broker: broker.Options{BacklogRetry: time.Hour}})
	_, ch := b.Channel(t)
	if err := ch.ExchangeDeclare("fan", "fanout", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for name, args := range map[string]amqp091.Table{
		"t-ok":   nil,
		"t-full": {"x-max-length": int32(1), "x-overflow": "reject-publish"},
	} {
		if _, err := ch.QueueDeclare(name, false, false, false, false, args); err != nil {
			t.Fatal(err)
		}
	}
	// Fill t-full before binding it, so only the dead letter meets the limit.
	if err := ch.Publish("", "t-full", false, false, amqp091.Publishing{Body: []byte("filler")}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"t-ok", "t-full"} {
		if err := ch.QueueBind(name, "", "fan", false, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ch.QueueDeclare("alo-src", false, false, false, false, amqp091.Table{
		"x-dead-letter-exchange": "fan", "x-dead-letter-strategy": "at-least-once",
	}); err != nil {
		t.Fatal(err)
	}
	if err := ch.Publish("", "alo-src", false, false, amqp091.Publishing{Body: []byte("m")}); err != nil {
		t.Fatal(err)
	}
	d, ok, err := ch.Get("alo-src", false)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	if err := d.Reject(false); err != nil {
		t.Fatal(err)
	}
	stats := func(q string) broker.QueueStats {
		st, ok := b.Broker.QueueStats("/", q)
		if !ok {
			t.Fatalf("no queue %s", q)
		}
		return st
	}
	deadline := time.Now().Add(5 * time.Second)
	for stats("alo-src").DeadLetterBacklog != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("not waiting in the backlog: %+v", stats("alo-src"))
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Several retries pass while t-full stays full: still no target has it.
	for range 3 {
		b.Broker.RetryBacklogsForTest()
	}
	if n, st := stats("t-ok").Ready, stats("alo-src"); n != 0 || st.DeadLetterBacklog != 1 {
		t.Fatalf("t-ok got the message while t-full was full (%d ready; source %+v)", n, st)
	}
	// Make room in t-full: the next retry delivers to both.
	if f, ok, err := ch.Get("t-full", true); err != nil || !ok || string(f.Body) != "filler" {
		t.Fatalf("draining t-full: %q %v %v", f.Body, ok, err)
	}
	b.Broker.RetryBacklogsForTest()
	for stats("t-ok").Ready != 1 || stats("t-full").Ready != 1 { // the copies land after their store write
		if time.Now().After(deadline) {
			t.Fatalf("not forwarded to every target once there was room: t-ok %+v, t-full %+v, src %+v", stats("t-ok"), stats("t-full"), stats("alo-src"))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if st := stats("alo-src"); st.DeadLetterBacklog != 0 {
		t.Fatalf("still waiting after forwarding: %+v", st)
	}
}
