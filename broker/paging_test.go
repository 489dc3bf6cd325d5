// Tests of paging: deep durable queues keep only their windows in memory.

package broker_test

// Paging: a durable queue deeper than its window (brokertest sets a tiny
// one) keeps most of its entries in the store only. These tests drive
// deep queues through every operation that meets the middle of a level —
// delivery, get, requeue, purge, limits, dead-lettered copies, restart —
// and check order, counts, flags and bodies, and that memory holds only
// the windows.

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
)

// pgBound is the most ready entries a level may hold in memory: the head
// and tail windows, and a batch arriving while the tail pages out.
const pgBound = 2*brokertest.TestPageWindow + 2

func pgPublish(t *testing.T, ch *brokertest.Session, q string, bodies []string, prio func(i int) uint8) {
	t.Helper()
	for i, b := range bodies {
		p := amqp091.Publishing{Body: []byte(b), DeliveryMode: amqp091.Persistent}
		if prio != nil {
			p.Priority = prio(i)
		}
		if !ch.PublishAck("", q, p) {
			t.Fatalf("publish %q nacked", b)
		}
	}
}

// pgWantResident checks q's ready count (unless ready < 0) and that at
// most levels windows, and extra requeued entries, are in memory.
func pgWantResident(t *testing.T, b *brokertest.Instance, q string, levels, extra, ready int) {
	t.Helper()
	res, n := b.Broker.ResidentForTest("/", q)
	if ready >= 0 && n != ready {
		t.Fatalf("queue %q: ready %d, want %d", q, n, ready)
	}
	if res > levels*pgBound+extra {
		t.Fatalf("queue %q: %d of %d ready entries in memory, want at most %d", q, res, n, levels*pgBound+extra)
	}
}

// A deep queue with priorities delivers in priority then arrival order,
// counts every entry, and holds only its windows in memory — before and
// after a restart (where none comes back marked redelivered: none was
// delivered before). With
// a message that has a deadline in the queue, the restart loads every
// entry (its timer needs it resident) and the rest page out as they load.
func TestPagingDeepQueueOrderAcrossRestart(t *testing.T) {
	for _, mode := range []string{"live", "restart", "restart with a deadline"} {
		t.Run(mode, func(t *testing.T) {
			restart := mode != "live"
			b := brokertest.Start(t, brokertest.Config{})
			ch := b.Session(t)
			ch.Declare("deep", amqp091.Table{"x-max-priority": int32(2)}, brokertest.Durable)
			bodies := dvNumbered("m", 300)
			prio := func(i int) uint8 { return uint8(i % 3) }
			if mode == "restart with a deadline" {
				bodies[0] = "expires in an hour"
				p := amqp091.Publishing{Body: []byte(bodies[0]), DeliveryMode: amqp091.Persistent, Expiration: "3600000"}
				if !ch.PublishAck("", "deep", p) {
					t.Fatal("nacked")
				}
				pgPublish(t, ch, "deep", bodies[1:], func(i int) uint8 { return prio(i + 1) })
			} else {
				pgPublish(t, ch, "deep", bodies, prio)
			}
			ch.WantReady("deep", 300)
			pgWantResident(t, b, "deep", 3, 0, 300)
			if restart {
				b.Restart()
				ch = b.Session(t)
				ch.WantReady("deep", 300)
				pgWantResident(t, b, "deep", 3, 0, 300)
			}
			var want []string
			for p := 2; p >= 0; p-- {
				for i, body := range bodies {
					if int(prio(i)) == p {
						want = append(want, body)
					}
				}
			}
			if err := ch.Qos(7, 0, false); err != nil {
				t.Fatal(err)
			}
			msgs := dvConsume(t, ch, "deep", "c", false, nil)
			var got []string
			for range want {
				d := dvRecv(t, msgs)
				if d.Redelivered {
					t.Fatalf("%q redelivered, never delivered before (restart=%v)", d.Body, restart)
				}
				got = append(got, string(d.Body))
				dvAck(t, d, false)
				if len(got)%50 == 0 {
					pgWantResident(t, b, "deep", 3, 0, -1)
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("delivery order\n%q\nwant\n%q", got, want)
			}
			ch.WantReady("deep", 0)
		})
	}
}

// A window is bounded in bytes as well as entries: a queue of large
// messages keeps a few of them in memory, not a window's count of them,
// and delivers every one in order with its body, live and after a
// restart; transient ones page (spill) by bytes too.
func TestPagingLargeMessagesBoundedByBytes(t *testing.T) {
	const (
		size        = 16 << 10
		n           = 60
		windowBytes = 64 << 10
		// head and tail windows, each up to one message over, and a
		// batch of two arriving while the tail pages out
		bound = 2*(windowBytes+size) + 2*size
	)
	for _, mode := range []string{"live", "restart", "transient"} {
		t.Run(mode, func(t *testing.T) {
			restart := mode == "restart"
			dm := amqp091.Persistent
			if mode == "transient" {
				dm = amqp091.Transient
			}
			b := brokertest.Start(t, brokertest.Config{Broker: broker.Options{PageWindow: 1000, PageWindowBytes: windowBytes}})
			ch := b.Session(t)
			ch.Declare("big", nil, brokertest.Durable)
			body := func(i int) []byte {
				p := make([]byte, size)
				for j := range p {
					p[j] = byte(i + j/251)
				}
				return fmt.Appendf(p[:0], "m%03d", i)[:size]
			}
			wantBound := func(when string) {
				t.Helper()
				if got := b.Broker.ResidentBytesForTest("/", "big"); got > bound {
					res, ready := b.Broker.ResidentForTest("/", "big")
					t.Fatalf("%s: %d bytes (%d of %d messages) in memory, want at most %d", when, got, res, ready, bound)
				}
			}
			for i := range n {
				if !ch.PublishAck("", "big", amqp091.Publishing{Body: body(i), DeliveryMode: dm}) {
					t.Fatalf("publish %d nacked", i)
				}
			}
			ch.WantReady("big", n)
			wantBound("after publishing")
			if restart {
				b.Restart()
				ch = b.Session(t)
				ch.WantReady("big", n)
				wantBound("after the restart")
			}
			if err := ch.Qos(2, 0, false); err != nil {
				t.Fatal(err)
			}
			msgs := dvConsume(t, ch, "big", "c", false, nil)
			for i := range n {
				d := dvRecv(t, msgs)
				if !slices.Equal(d.Body, body(i)) {
					t.Fatalf("delivery %d: body starts %q (%d bytes), want %q", i, d.Body[:min(len(d.Body), 4)], len(d.Body), body(i)[:4])
				}
				dvAck(t, d, false)
				wantBound(fmt.Sprintf("after %d deliveries", i+1))
			}
			ch.WantReady("big", 0)
		})
	}
}

// basic.get reads through the middle, and requeued messages go back to the
// head in their place, ahead of the paged ones.
func TestPagingGetAndRequeue(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t)
	ch.Declare("gq", nil, brokertest.Durable)
	bodies := dvNumbered("g", 60)
	pgPublish(t, ch, "gq", bodies, nil)
	ds := ch.GetN("gq", 10)
	dvWantBodies(t, "first gets", ds, bodies[:10]...)
	// Requeue 2..5 (in reverse), ack the rest.
	for i := 5; i >= 2; i-- {
		if err := ds[i].Nack(false, true); err != nil {
			t.Fatal(err)
		}
	}
	for _, i := range []int{0, 1, 6, 7, 8, 9} {
		dvAck(t, ds[i], false)
	}
	ch.WantReady("gq", 54)
	pgWantResident(t, b, "gq", 1, 4, 54)
	rest := ch.GetN("gq", 54)
	want := append(slices.Clone(bodies[2:6]), bodies[10:]...)
	dvWantBodies(t, "after requeue", rest, want...)
	for i, d := range rest {
		if d.Redelivered != (i < 4) {
			t.Fatalf("%q redelivered=%v", d.Body, d.Redelivered)
		}
	}
	ch.WantEmpty("gq")
}

// Purge removes the paged entries from the store too: nothing comes back
// after a restart.
func TestPagingPurge(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t)
	ch.Declare("pq", amqp091.Table{"x-max-priority": int32(1)}, brokertest.Durable)
	pgPublish(t, ch, "pq", dvNumbered("p", 100), func(i int) uint8 { return uint8(i % 2) })
	n, err := ch.QueuePurge("pq", false)
	if err != nil || n != 100 {
		t.Fatalf("purge = %d, %v; want 100", n, err)
	}
	pgPublish(t, ch, "pq", dvNumbered("after", 20), nil)
	b.Restart()
	ch = b.Session(t)
	ch.WantReady("pq", 20)
	dvWantBodies(t, "after purge and restart", ch.GetN("pq", 20), dvNumbered("after", 20)...)
}

// A drop-head limit evicts through the middle: the oldest go, the newest
// stay, counts exact.
func TestPagingDropHead(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t)
	ch.Declare("dlq", nil, brokertest.Durable)
	ch.Declare("lim", tlDLX("dlq", amqp091.Table{"x-max-length": int32(30)}), brokertest.Durable)
	bodies := dvNumbered("l", 100)
	pgPublish(t, ch, "lim", bodies, nil)
	ch.WantReady("lim", 30)
	ch.WantReady("dlq", 70)
	pgWantResident(t, b, "lim", 1, 0, 30)
	pgWantResident(t, b, "dlq", 1, 0, 70)
	dvWantBodies(t, "kept", ch.GetN("lim", 30), bodies[70:]...)
	dvWantBodies(t, "dead-lettered", ch.GetN("dlq", 70), bodies[:70]...)
}

// Dead-lettered copies reach a deep target in order behind its backlog,
// while the target pages.
func TestPagingDeadLettersIntoDeepQueue(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t)
	ch.Declare("target", nil, brokertest.Durable)
	ch.Declare("src", tlDLX("target", nil), brokertest.Durable)
	first := dvNumbered("t", 50)
	pgPublish(t, ch, "target", first, nil)
	moved := dvNumbered("s", 80)
	pgPublish(t, ch, "src", moved, nil)
	if err := ch.Qos(9, 0, false); err != nil {
		t.Fatal(err)
	}
	msgs := dvConsume(t, ch, "src", "c", false, nil)
	for range moved {
		if err := dvRecv(t, msgs).Reject(false); err != nil {
			t.Fatal(err)
		}
	}
	ch.WantReady("src", 0)
	ch.WantReady("target", 130)
	pgWantResident(t, b, "target", 1, 0, 130)
	b.Restart()
	ch = b.Session(t)
	dvWantBodies(t, "target", ch.GetN("target", 130), append(first, moved...)...)
}

// Transient messages in a durable queue stay in memory (only stored
// entries can page); mixed with persistent ones, order and counts hold,
// and only the persistent ones survive a restart.
func TestPagingMixedTransient(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t)
	ch.Declare("mix", nil, brokertest.Durable)
	var all, kept []string
	for i := range 120 {
		body := fmt.Sprintf("x%d", i)
		p := amqp091.Publishing{Body: []byte(body), DeliveryMode: amqp091.Persistent}
		if i%10 == 3 {
			p.DeliveryMode = amqp091.Transient
		} else {
			kept = append(kept, body)
		}
		if !ch.PublishAck("", "mix", p) {
			t.Fatalf("publish %q nacked", body)
		}
		all = append(all, body)
	}
	ch.WantReady("mix", 120)
	dvWantBodies(t, "first 40", ch.GetN("mix", 40), all[:40]...)
	b.Restart()
	ch = b.Session(t)
	var want []string
	for _, s := range kept {
		if slices.Index(all, s) >= 40 {
			want = append(want, s)
		}
	}
	// The 40 got were never acked: they come back too, first.
	want = append(slices.DeleteFunc(slices.Clone(all[:40]), func(s string) bool { return !slices.Contains(kept, s) }), want...)
	ch.WantReady("mix", len(want))
	dvWantBodies(t, "after restart", ch.GetN("mix", len(want)), want...)
}

// Deadlines in the middle of a deep queue fire on time — from the store's
// expiry keys, as the horizon reaches them — before and after a restart;
// the entries behind a longer deadline stay, paged.
func TestPagingDeadlinesExpireInTheMiddle(t *testing.T) {
	for _, restart := range []bool{false, true} {
		t.Run(fmt.Sprintf("restart=%v", restart), func(t *testing.T) {
			clk := brokertest.NewClock()
			b := brokertest.Start(t, brokertest.Config{Clock: clk})
			ch := b.Session(t)
			ch.Declare("dlq", nil, brokertest.Durable)
			ch.Declare("delay", tlDLX("dlq", nil), brokertest.Durable)
			var short, long []string
			for i := range 300 {
				body := fmt.Sprintf("d%d", i)
				exp := "600000"
				if i%3 == 1 {
					exp = "1000"
					short = append(short, body)
				} else {
					long = append(long, body)
				}
				ch.Publish("", "delay", amqp091.Publishing{Body: []byte(body), Expiration: exp, DeliveryMode: amqp091.Persistent})
			}
			pgWantResident(t, b, "delay", 1, 0, 300)
			if restart {
				b.Restart()
				ch = b.Session(t)
				pgWantResident(t, b, "delay", 1, 0, 300)
			}
			clk.Advance(999 * time.Millisecond)
			// The paged ones are read ahead of their deadline; this clock
			// jumps, so wait for the reads (with a real clock they have
			// readAheadMS), else the resident ones would expire first.
			brokertest.Eventually(t, "the paged deadlines to be read ahead", func() bool {
				return b.Broker.ReadAheadPendingForTest("/", "delay") == 0
			})
			ch.Sync()
			if n := ch.Ready("dlq"); n != 0 {
				t.Fatalf("%d dead-lettered before their deadline", n)
			}
			clk.Advance(2 * time.Millisecond)
			tlEventuallyReady(t, b, "dlq", len(short))
			tlEventuallyReady(t, b, "delay", len(long))
			pgWantResident(t, b, "delay", 1, 0, len(long))
			pgWantResident(t, b, "dlq", 1, 0, len(short))
			ds := ch.GetN("dlq", len(short))
			dvWantBodies(t, "expired", ds, short...)
			for _, d := range ds {
				tlWantDeath(t, d, "delay", "expired")
			}
			dvWantBodies(t, "kept", ch.GetN("delay", len(long)), long...)
		})
	}
}

var errReadsFail = errors.New("injected read failure")

// When the store cannot read a paged queue back (out of descriptors, an
// I/O error), delivery from it stops, but nothing is lost and the broker
// is not marked failed (no store alarm: publishers go on): the read is
// made again every second, and once the store reads again the consumer
// gets every message not acked, in order, without a restart. (A read
// error used to fail the broker for good.)
func TestPagingReadFailureRetried(t *testing.T) {
	// Once armed, the store's reads of entries and bodies fail (a disk
	// that stopped answering reads).
	var armed atomic.Bool
	failing := func() error {
		if armed.Load() {
			return errReadsFail
		}
		return nil
	}
	spy := &brokertest.SpyStore{BeforeReadEntries: failing, BeforeLoadMessages: failing}
	b := brokertest.Start(t, brokertest.Config{WrapStore: spy.Wrap})
	ch := b.Session(t)
	ch.Declare("rf", nil, brokertest.Durable)
	bodies := dvNumbered("r", 80)
	pgPublish(t, ch, "rf", bodies, nil)
	got := ch.GetN("rf", 5)
	dvWantBodies(t, "before the failure", got, bodies[:5]...)
	for _, d := range got {
		dvAck(t, d, false)
	}
	armed.Store(true)
	before := b.Broker.Stats().StoreReadErrors
	// The head holds a few more; then the queue cannot be read.
	var more []string
	for {
		d, ok, err := ch.Channel.Get("rf", true)
		if err != nil {
			t.Fatalf("get after the failure: %v", err)
		}
		if !ok {
			break
		}
		more = append(more, string(d.Body))
		if len(more) > 10 {
			t.Fatalf("delivered %d messages the store could not read", len(more))
		}
	}
	if !slices.Equal(more, bodies[5:5+len(more)]) {
		t.Fatalf("after the failure: %q, want a prefix of %q", more, bodies[5:])
	}
	brokertest.Eventually(t, "a read failure counted", func() bool { return b.Broker.Stats().StoreReadErrors > before })
	if a := b.Broker.Alarms(); len(a) > 0 {
		t.Fatalf("alarms %v after a read failure, want none", a)
	}
	// A consumer waits; the retries deliver once the store reads again.
	msgs, err := ch.Consume("rf", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	armed.Store(false)
	rest := bodies[5+len(more):]
	for i, want := range rest {
		select {
		case d := <-msgs:
			if string(d.Body) != want {
				t.Fatalf("message %d after the failure: %q, want %q", i, d.Body, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("got %d of the %d messages after the store read again", i, len(rest))
		}
	}
}

// After a crash a message comes back redelivered=true if it may have been
// delivered before, false if it never was — up to the delivered-mark
// chunk written ahead (8 here) per priority level.
func TestRedeliveredAfterCrashOnlyIfDelivered(t *testing.T) {
	const chunk = 8
	b := brokertest.Start(t, brokertest.Config{Broker: broker.Options{DeliveredMarkChunk: chunk}})
	ch := b.Session(t)
	ch.Declare("rd", amqp091.Table{"x-max-priority": int32(1)}, brokertest.Durable)
	bodies := dvNumbered("b", 100) // body i has seq i+1
	pgPublish(t, ch, "rd", bodies, func(i int) uint8 { return uint8(i % 2) })
	got := ch.GetN("rd", 10) // the odd ones, priority 1: seqs 2..20
	for i, d := range got[:4] {
		if string(d.Body) != bodies[2*i+1] {
			t.Fatalf("get %d = %q", i, d.Body)
		}
		dvAck(t, d, false)
	}
	ch.Sync()
	b.Crash()
	ch = b.Session(t)
	// The acks need not have been durable: up to 4 acked come back.
	n := ch.Ready("rd")
	if n < 96 || n > 100 {
		t.Fatalf("%d messages after the crash, want 96..100", n)
	}
	for _, d := range ch.GetN("rd", n) {
		var i int
		if _, err := fmt.Sscanf(string(d.Body), "b%d", &i); err != nil {
			t.Fatal(err)
		}
		seq := i + 1
		delivered := i%2 == 1 && seq <= 20
		switch {
		case delivered && !d.Redelivered:
			t.Errorf("%q was delivered before the crash but comes back redelivered=false", d.Body)
		case !delivered && d.Redelivered && (i%2 == 0 || seq > 20+chunk):
			t.Errorf("%q was never delivered but comes back redelivered=true", d.Body)
		}
	}
}

// After a clean stop (unlike a crash) only what was delivered comes back
// redelivered=true: the shutdown stores each level's exact delivered mark
// instead of the one written a chunk ahead, on classic and quorum queues,
// with priorities. RabbitMQ says false for a message never delivered.
func TestRedeliveredAfterCleanStopOnlyIfDelivered(t *testing.T) {
	for _, qtype := range []string{"classic", "quorum"} {
		t.Run(qtype, func(t *testing.T) {
			b := brokertest.Start(t, brokertest.Config{})
			ch := b.Session(t)
			args := amqp091.Table{}
			if qtype == "classic" {
				args["x-max-priority"] = int32(1)
			}
			ch.Declare("cs", args, brokertest.Type(qtype), brokertest.Durable)
			bodies := dvNumbered("b", 100)
			pgPublish(t, ch, "cs", bodies, func(i int) uint8 { return uint8(i % 2) })
			// Take 10: acked, one requeued, one left unacked at the stop.
			got := ch.GetN("cs", 10)
			for _, d := range got[:8] {
				dvAck(t, d, false)
			}
			if err := got[8].Nack(false, true); err != nil {
				t.Fatal(err)
			}
			taken := map[string]bool{}
			for _, d := range got[8:] {
				taken[string(d.Body)] = true
			}
			ch.Sync()
			b.Restart()
			ch = b.Session(t)
			n := ch.Ready("cs")
			if n != 92 {
				t.Fatalf("%d messages after the restart, want 92", n)
			}
			for _, d := range ch.GetN("cs", n) {
				switch {
				case taken[string(d.Body)] && !d.Redelivered:
					t.Errorf("%q was delivered before the stop but comes back redelivered=false", d.Body)
				case !taken[string(d.Body)] && d.Redelivered:
					t.Errorf("%q was never delivered but comes back redelivered=true", d.Body)
				}
			}
		})
	}
}

// At-least-once dead letters that find no route wait in the store, not in
// memory: counted, kept across a restart, forwarded in the order they died
// once a route exists (in chunks: more than one retry read), and purged
// with the queue's messages.
func TestStoredBacklogBoundedAndForwardedInOrder(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{Broker: broker.Options{BacklogRetry: time.Hour}})
	ch := b.Session(t)
	args := amqp091.Table{"x-dead-letter-exchange": "later", "x-dead-letter-strategy": "at-least-once", "x-queue-type": "quorum", "x-overflow": "reject-publish"}
	ch.Declare("src", args, brokertest.Type("quorum"), brokertest.Durable)
	ch.Declare("other", args, brokertest.Type("quorum"), brokertest.Durable)
	bodies := dvNumbered("w", 300)
	pgPublish(t, ch, "src", bodies, nil)
	pgPublish(t, ch, "other", dvNumbered("o", 10), nil)
	for _, q := range []string{"src", "other"} {
		msgs := dvConsume(t, ch, q, "c-"+q, false, nil)
		n := 300
		if q == "other" {
			n = 10
		}
		for range n {
			if err := dvRecv(t, msgs).Reject(false); err != nil {
				t.Fatal(err)
			}
		}
		if err := ch.Cancel("c-"+q, false); err != nil {
			t.Fatal(err)
		}
	}
	wantBacklog := func(q string, n int) {
		t.Helper()
		brokertest.Eventually(t, fmt.Sprintf("%d dead letters waiting in %s", n, q), func() bool {
			st, ok := b.Broker.QueueStats("/", q)
			return ok && st.DeadLetterBacklog == n
		})
		if r := b.Broker.BacklogResidentForTest("/", q); r != 0 {
			t.Fatalf("%s: %d waiting dead letters in memory", q, r)
		}
	}
	wantBacklog("src", 300)
	wantBacklog("other", 10)
	if _, err := ch.QueuePurge("other", false); err != nil {
		t.Fatal(err)
	}
	wantBacklog("other", 0)
	b.Restart()
	ch = b.Session(t)
	wantBacklog("src", 300)
	wantBacklog("other", 0)
	// A route appears: everything is forwarded, in the order it died.
	ch.DeclareExchange("later", "fanout", nil)
	ch.Declare("dlq", nil, brokertest.Durable)
	ch.Bind("dlq", "", "later", nil)
	tlEventuallyReady(t, b, "dlq", 300)
	wantBacklog("src", 0)
	ds := ch.GetN("dlq", 300)
	dvWantBodies(t, "forwarded", ds, bodies...)
	tlWantDeath(t, ds[0], "src", "rejected")
	b.Restart()
	ch = b.Session(t)
	wantBacklog("src", 0)
	ch.WantReady("dlq", 300) // got without acks: they come back
}

// An entry whose resident timer the scheduler has taken when it pages out
// is left to that timer no more: it expires once, from the store, by its
// paged timer. (The timer used to find it still ready, so it expired
// twice: a dead letter duplicated, the ready count one too low — and a
// later read of the middle lost a confirmed message to the correction.)
func TestPagedOutEntryIgnoresItsStaleTimer(t *testing.T) {
	capture, restore := broker.CapturePagedOutForTest()
	defer restore()
	clk := brokertest.NewClock()
	b := brokertest.Start(t, brokertest.Config{Clock: clk})
	ch := b.Session(t)
	ch.Declare("dlq", nil, brokertest.Durable)
	ch.Declare("src", tlDLX("dlq", nil), brokertest.Durable)
	const n = 40
	bodies := dvNumbered("s", n)
	for _, body := range bodies {
		ch.Publish("", "src", amqp091.Publishing{Body: []byte(body), Expiration: "1000", DeliveryMode: amqp091.Persistent})
	}
	pgWantResident(t, b, "src", 1, 0, n)
	// Before the deadlines: a stale timer must not re-arm the entry.
	if fired := b.Broker.FireStaleForTest(capture); fired == 0 {
		t.Fatal("no entry paged out")
	}
	clk.Advance(999 * time.Millisecond)
	brokertest.Eventually(t, "the paged deadlines to be read ahead", func() bool {
		return b.Broker.ReadAheadPendingForTest("/", "src") == 0
	})
	clk.Advance(2 * time.Millisecond)
	// At the deadlines: the stale timers fire again, beside the paged ones.
	b.Broker.FireStaleForTest(capture)
	tlEventuallyReady(t, b, "dlq", n)
	ch.Sync()
	ch.WantReady("src", 0)
	ch.WantReady("dlq", n)
	dvWantBodies(t, "dead-lettered once each, in order", ch.GetN("dlq", n), bodies...)
	ch.WantEmpty("dlq")
}

// Expired entries are dead-lettered in queue order even when the read of
// the paged ones ahead of them ends after their deadline (under load):
// the resident tail, due as well, waits for the read instead of
// overtaking it. (TestTransientPagingExpiryDeadLettersAndPurge saw two
// dead letters swapped on a loaded machine.)
func TestPagedExpiryInQueueOrderBehindSlowRead(t *testing.T) {
	entered, release, restore := broker.GateDueReadsForTest()
	t.Cleanup(restore) // last: the broker has stopped by then
	clk := brokertest.NewClock()
	b := brokertest.Start(t, brokertest.Config{Clock: clk})
	t.Cleanup(release) // before the broker stops: it waits for the read
	ch := b.Session(t)
	ch.Declare("dlq", nil, brokertest.Durable)
	ch.Declare("src", tlDLX("dlq", nil), brokertest.Durable)
	const n = 60
	bodies := dvNumbered("s", n)
	for _, body := range bodies {
		ch.Publish("", "src", amqp091.Publishing{Body: []byte(body), Expiration: "1000", DeliveryMode: amqp091.Persistent})
	}
	pgWantResident(t, b, "src", 1, 0, n)
	// The read ahead of the deadlines starts, and is held: a slow disk.
	clk.Advance(950 * time.Millisecond)
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no read ahead of the paged deadlines")
	}
	// The deadlines pass while the read is held: the resident entries
	// (the head, the tail) are due now.
	clk.Advance(51 * time.Millisecond)
	brokertest.Eventually(t, "the resident entries behind the read to have expired", func() bool {
		st, _ := b.Broker.QueueStats("/", "dlq")
		return b.Broker.ExpiryWaitingForTest("/", "src") > 0 || st.Ready > 1
	})
	release()
	tlEventuallyReady(t, b, "dlq", n)
	ch.WantReady("src", 0)
	dvWantBodies(t, "dead-lettered in queue order", ch.GetN("dlq", n), bodies...)
	ch.WantEmpty("dlq")
}

// pgReadGate holds the store's reads of queue entries, once armed, until
// opened: a disk slow to answer. Start the broker with WrapStore:
// g.spy.Wrap.
type pgReadGate struct {
	armed   atomic.Bool
	release chan struct{}
	spy     brokertest.SpyStore
}

func newPGReadGate() *pgReadGate {
	g := &pgReadGate{release: make(chan struct{})}
	g.spy.BeforeReadEntries = func() error {
		if g.armed.Load() {
			<-g.release
		}
		return nil
	}
	return g
}

// open lets every read through from now on.
func (g *pgReadGate) open() {
	if g.armed.CompareAndSwap(true, false) {
		close(g.release)
	}
}

// While a deep queue's head is being read back from the store, the queue's
// lock is free: a publish to it is confirmed, and a basic.get waits for
// the read and answers with the right message (not get-empty).
func TestPageInReadDoesNotHoldTheQueue(t *testing.T) {
	g := newPGReadGate()
	b := brokertest.Start(t, brokertest.Config{WrapStore: g.spy.Wrap})
	defer g.open() // before the cleanups: they close connections blocked behind a read
	ch := b.Session(t)
	ch.Declare("deep", nil, brokertest.Durable)
	bodies := dvNumbered("d", 40)
	pgPublish(t, ch, "deep", bodies, nil)
	g.armed.Store(true)
	type got struct {
		body string
		err  error
	}
	gets := make(chan got, len(bodies)+1)
	go func() {
		c := b.Dial(t)
		gch, err := c.Channel()
		for err == nil {
			var d amqp091.Delivery
			var ok bool
			d, ok, err = gch.Get("deep", true)
			switch {
			case err != nil:
			case !ok:
				err = errors.New("get-empty")
			default:
				gets <- got{body: string(d.Body)}
			}
		}
		gets <- got{err: err}
	}()
	brokertest.Eventually(t, "a get to wait for the head to be read back", func() bool {
		return b.Broker.GetWaitingForTest("/", "deep")
	})
	pch := b.Session(t)
	if !pch.PublishAck("", "deep", amqp091.Publishing{Body: []byte("late"), DeliveryMode: amqp091.Persistent}) {
		t.Fatal("publish during the read: nacked")
	}
	g.open()
	want := append(slices.Clone(bodies), "late")
	for i, w := range want {
		r := <-gets
		if r.err != nil {
			t.Fatalf("get %d: %v", i, r.err)
		}
		if r.body != w {
			t.Fatalf("get %d = %q, want %q", i, r.body, w)
		}
	}
	if r := <-gets; r.err == nil || r.err.Error() != "get-empty" {
		t.Fatalf("after the last: %v, want get-empty", r.err)
	}
}

// A publish that takes a drop-head queue over its limit while the queue's
// head is being read back is confirmed only once the eviction it causes
// is made, and so is a tx.commit: then the queue is exactly at its limit,
// and the oldest are in the dead-letter queue, in order.
func TestDropHeadEvictionWaitsForPageIn(t *testing.T) {
	g := newPGReadGate()
	b := brokertest.Start(t, brokertest.Config{WrapStore: g.spy.Wrap})
	defer g.open() // before the cleanups: they close connections blocked behind a read
	ch := b.Session(t)
	const limit = 20
	ch.Declare("dlq", nil, brokertest.Durable)
	ch.Declare("lim", tlDLX("dlq", amqp091.Table{"x-max-length": int32(limit)}), brokertest.Durable)
	bodies := dvNumbered("m", 60)
	pgPublish(t, ch, "lim", bodies[:limit], nil)
	g.armed.Store(true)
	// Each publish now evicts from the head; the read that refills it
	// waits at the gate, so a publish soon finds the head empty.
	ctx := brokertest.Context(t)
	owed := false
	sent := 0
	for _, body := range bodies[limit:] {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", "lim", false, false, amqp091.Publishing{Body: []byte(body), DeliveryMode: amqp091.Persistent})
		if err != nil {
			t.Fatal(err)
		}
		sent++
		brokertest.Eventually(t, "a confirm, or a publish waiting for its eviction", func() bool {
			select {
			case <-dc.Done():
				return true
			default:
				return b.Broker.EvictionOwedForTest("/", "lim") > 0
			}
		})
		if b.Broker.EvictionOwedForTest("/", "lim") == 0 {
			continue // confirmed: its eviction was made at once
		}
		owed = true
		// A transaction's publish meanwhile owes an eviction too: its
		// commit-ok waits as the confirm does.
		txc := b.Dial(t)
		txch, err := txc.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if err := txch.Tx(); err != nil {
			t.Fatal(err)
		}
		txBody := bodies[limit+sent]
		if err := txch.PublishWithContext(ctx, "", "lim", false, false, amqp091.Publishing{Body: []byte(txBody), DeliveryMode: amqp091.Persistent}); err != nil {
			t.Fatal(err)
		}
		sent++
		committed := make(chan error, 1)
		go func() { committed <- txch.TxCommit() }()
		brokertest.Eventually(t, "the commit to wait for its eviction too", func() bool {
			return b.Broker.EvictionOwedForTest("/", "lim") == 2
		})
		select {
		case <-dc.Done():
			t.Fatalf("publish %q confirmed before the eviction it owes", body)
		case err := <-committed:
			t.Fatalf("tx.commit of %q answered (%v) before the eviction it owes", txBody, err)
		default:
		}
		g.open()
		if ack, err := dc.WaitContext(ctx); err != nil || !ack {
			t.Fatalf("confirm after the eviction: ack=%v err=%v", ack, err)
		}
		if err := <-committed; err != nil {
			t.Fatalf("tx.commit after the eviction: %v", err)
		}
		// Confirmed and committed: the queue is back at its limit already.
		ch.WantReady("lim", limit)
		break
	}
	if !owed {
		t.Fatal("no publish found the head being read back")
	}
	total := limit + sent
	tlEventuallyReady(t, b, "dlq", total-limit)
	dvWantBodies(t, "evicted", ch.GetN("dlq", total-limit), bodies[:total-limit]...)
	dvWantBodies(t, "kept", ch.GetN("lim", limit), bodies[total-limit:total]...)
}

// A drop-head limit over by more than a window evicts with reads sized to
// the excess, not one window per read: a publisher that does not wait for
// confirms could otherwise take a queue far over its limit until the reads
// caught up (a max-length 50 queue held 99,000 messages with a window of
// 4). Here a policy lowers the limit of a 1,000-message queue to 10: the
// eviction takes a few reads, where one window (4) per read took 250.
func TestDropHeadEvictsPagedHeadInFewReads(t *testing.T) {
	var loads atomic.Int64 // the store's message loads: one per read of a queue's middle
	spy := &brokertest.SpyStore{BeforeLoadMessages: func() error { loads.Add(1); return nil }}
	b := brokertest.Start(t, brokertest.Config{WrapStore: spy.Wrap})
	_, ch := b.Channel(t)
	if _, err := ch.QueueDeclare("q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		c, err := ch.PublishWithDeferredConfirm("", "q", false, false, amqp091.Publishing{DeliveryMode: 2, Body: []byte(fmt.Sprint(i))})
		if err != nil {
			t.Fatal(err)
		}
		if i == 999 && !c.Wait() {
			t.Fatal("nacked")
		}
	}
	tlEventuallyReady(t, b, "q", 1000)
	before := loads.Load()
	tlSetPolicy(t, b, broker.Policy{Name: "short", Pattern: "^q$", Definition: map[string]any{"max-length": 10}})
	tlEventuallyReady(t, b, "q", 10)
	if n := loads.Load() - before; n > 10 {
		t.Errorf("evicting 990 paged messages took %d reads of the middle, want a few", n)
	}
	msg, ok, err := ch.Get("q", true)
	if err != nil || !ok || string(msg.Body) != "990" {
		t.Fatalf("head after eviction: %q %v %v, want message 990", msg.Body, ok, err)
	}
}
