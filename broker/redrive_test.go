// Tests of redrive: moving dead letters back to their origin or to an exchange.

package broker_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"sync/atomic"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
	"github.com/brokerd/brokerd/store"
)

// rdReject dead-letters each body from q (publish, get, reject) into dlq,
// one at a time, and waits until dlq holds total messages.
func (e *dsEnv) rdReject(q string, total int, bodies ...string) {
	e.t.Helper()
	for _, b := range bodies {
		e.PublishBodies(q, b)
		e.reject(e.Expect(q, b)[0], false)
	}
	e.waitFor("dlq", total, total, 0)
}

func rdBodies(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

func rdRedrive(t *testing.T, e *dsEnv, q string, o broker.RedriveOptions) broker.RedriveResult {
	t.Helper()
	r, err := e.b.Broker.Redrive("/", q, o)
	if err != nil {
		t.Fatalf("redrive %q: %v", q, err)
	}
	return r
}

// rdWantRedriven checks a redriven delivery kept its x-death (latest
// from queue, reason) and counts its redrives.
func rdWantRedriven(t *testing.T, d amqp091.Delivery, queue, reason string, count int64) {
	t.Helper()
	if got := d.Headers[broker.RedrivenCountHeader]; got != count {
		t.Fatalf("%q: x-redriven-count %v (%T), want %d", d.Body, got, got, count)
	}
	xd, ok := d.Headers["x-death"].([]any)
	if !ok || len(xd) == 0 {
		t.Fatalf("%q: x-death gone: %v", d.Body, d.Headers)
	}
	first := xd[0].(amqp091.Table)
	if first["queue"] != queue || first["reason"] != reason {
		t.Fatalf("%q: latest x-death %v, want queue %q reason %q", d.Body, first, queue, reason)
	}
}

// Redriven to origin, in order, up to max; the rest follow on a second
// redrive; x-death stays and x-redriven-count counts each redrive.
func TestRedriveToOrigin(t *testing.T) {
	e := dsStart(t, dsGroups[0], brokertest.Config{})
	e.setup(nil)
	bodies := rdBodies("m", 5)
	e.rdReject("src", 5, bodies...)
	r := rdRedrive(t, e, "dlq", broker.RedriveOptions{Max: 3})
	if r.Moved != 3 || r.Failed != 0 || r.Remaining != 2 {
		t.Fatalf("redrive: %+v, want 3 moved, 2 remaining", r)
	}
	e.waitFor("src", 3, 3, 0)
	for _, d := range e.Expect("src", bodies[:3]...) {
		rdWantRedriven(t, d, "src", "rejected", 1)
		e.reject(d, false) // dead again: back to dlq, behind m3, m4
	}
	e.waitFor("dlq", 5, 5, 0)
	r = rdRedrive(t, e, "dlq", broker.RedriveOptions{})
	if r.Moved != 5 || r.Remaining != 0 {
		t.Fatalf("second redrive: %+v, want 5 moved", r)
	}
	e.waitFor("src", 5, 5, 0)
	ds := e.Expect("src", "m3", "m4", "m0", "m1", "m2")
	rdWantRedriven(t, ds[0], "src", "rejected", 1)
	rdWantRedriven(t, ds[2], "src", "rejected", 2)
	e.WantEmpty("dlq")
}

// Redriven through a named exchange with a routing key.
func TestRedriveToExchange(t *testing.T) {
	e := dsStart(t, dsGroups[0], brokertest.Config{})
	e.setup(nil)
	e.DeclareExchange("retry", "direct", nil, brokertest.Durable)
	e.Declare("other", nil, brokertest.Durable)
	e.Bind("other", "k", "retry", nil)
	e.rdReject("src", 3, "a", "b", "c")
	r := rdRedrive(t, e, "dlq", broker.RedriveOptions{Exchange: "retry", RoutingKey: "k"})
	if r.Moved != 3 || r.Remaining != 0 {
		t.Fatalf("redrive: %+v", r)
	}
	e.waitFor("other", 3, 3, 0)
	for _, d := range e.Expect("other", "a", "b", "c") {
		rdWantRedriven(t, d, "src", "rejected", 1)
		if d.Exchange != "retry" || d.RoutingKey != "k" {
			t.Fatalf("%q delivered from %q/%q, want retry/k", d.Body, d.Exchange, d.RoutingKey)
		}
	}
	e.waitFor("src", 0, 0, 0)
	// Unroutable: each is a failure and stays.
	e.rdReject("src", 1, "z")
	r = rdRedrive(t, e, "dlq", broker.RedriveOptions{Exchange: "retry", RoutingKey: "nowhere"})
	if r.Moved != 0 || r.Failed != 1 || r.Remaining != 1 || r.Failures[0].Reason != "unroutable" {
		t.Fatalf("unroutable redrive: %+v", r)
	}
	if _, err := e.b.Broker.Redrive("/", "dlq", broker.RedriveOptions{Exchange: "missing"}); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("redrive to a missing exchange: %v, want ErrNotFound", err)
	}
	if _, err := e.b.Broker.Redrive("/", "nope", broker.RedriveOptions{}); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("redrive of a missing queue: %v, want ErrNotFound", err)
	}
}

// The reason, source queue and age filters move only what they match;
// the others keep their order in the source.
func TestRedriveFilters(t *testing.T) {
	e := dsStart(t, dsGroups[0], brokertest.Config{})
	e.setup(nil)
	e.queue("src2", amqp091.Table{"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "dlq"})
	e.rdReject("src", 1, "r0")
	e.Publish("", "src", amqp091.Publishing{Body: []byte("x1"), Expiration: "0"})
	e.waitFor("dlq", 2, 2, 0)
	e.rdReject("src2", 3, "s2")
	e.rdReject("src", 4, "r3")

	r := rdRedrive(t, e, "dlq", broker.RedriveOptions{MinAge: time.Hour})
	if r.Moved != 0 || r.Remaining != 4 {
		t.Fatalf("min age 1h: %+v, want nothing moved", r)
	}
	r = rdRedrive(t, e, "dlq", broker.RedriveOptions{Reason: "expired"})
	if r.Moved != 1 || r.Remaining != 3 {
		t.Fatalf("reason expired: %+v", r)
	}
	e.waitFor("src", 1, 1, 0)
	rdWantRedriven(t, e.Expect("src", "x1")[0], "src", "expired", 1)
	r = rdRedrive(t, e, "dlq", broker.RedriveOptions{SourceQueue: "src2"})
	if r.Moved != 1 || r.Remaining != 2 {
		t.Fatalf("source src2: %+v", r)
	}
	e.waitFor("src2", 1, 1, 0)
	e.Expect("src2", "s2")
	r = rdRedrive(t, e, "dlq", broker.RedriveOptions{Reason: "rejected", SourceQueue: "src", Max: 1})
	if r.Moved != 1 || r.Remaining != 1 {
		t.Fatalf("rejected from src, max 1: %+v", r)
	}
	e.waitFor("src", 2, 1, 1) // x1 unacked
	e.Expect("src", "r0")
	e.Expect("dlq", "r3")
}

// A target that refuses (full with reject-publish, deleted) leaves the
// message in the source and counts a failure with the reason.
func TestRedriveRefusingTarget(t *testing.T) {
	e := dsStart(t, dsGroups[0], brokertest.Config{})
	e.setup(amqp091.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"})
	e.rdReject("src", 2, "a", "b")
	e.PublishBodies("src", "full")
	e.waitFor("src", 1, 1, 0)
	r := rdRedrive(t, e, "dlq", broker.RedriveOptions{})
	if r.Moved != 0 || r.Failed != 2 || r.Remaining != 2 || len(r.Failures) != 2 ||
		!strings.Contains(r.Failures[0].Reason, "full") {
		t.Fatalf("redrive to a full origin: %+v", r)
	}
	e.Expect("src", "full")
	if _, err := e.QueueDelete("src", false, false, false); err != nil {
		t.Fatal(err)
	}
	r = rdRedrive(t, e, "dlq", broker.RedriveOptions{})
	if r.Moved != 0 || r.Failed != 2 || r.Failures[0].Reason != "no queue 'src'" {
		t.Fatalf("redrive to a deleted origin: %+v", r)
	}
	e.Expect("dlq", "a", "b")
}

// A crash while a redrive runs: after the restart every message is in
// exactly one of the two queues.
func TestRedriveCrash(t *testing.T) {
	e := dsStart(t, dsGroups[0], brokertest.Config{})
	e.setup(nil)
	const n = 60
	bodies := rdBodies("c", n)
	e.rdReject("src", n, bodies...)
	r := rdRedrive(t, e, "dlq", broker.RedriveOptions{Max: 20})
	if r.Moved != 20 {
		t.Fatalf("first redrive: %+v", r)
	}
	old := e.b.Broker
	done := make(chan struct{})
	go func() {
		defer close(done)
		old.Redrive("/", "dlq", broker.RedriveOptions{}) // its later writes fail with the crash
	}()
	e.b.Crash()
	<-done
	_, ch := e.b.Channel(t)
	seen := drainOnce(t, ch, "src", "dlq")
	for _, b := range bodies {
		if _, ok := seen[b]; !ok {
			t.Fatalf("%q lost (have %d of %d)", b, len(seen), n)
		}
	}
	if len(seen) != n {
		t.Fatalf("%d messages after the crash, want %d", len(seen), n)
	}
}

// rdRecorded is the dead-letter setup over a SpyStore, with n messages
// (c0, c1, ...) dead-lettered from src into dlq. The spy records the first
// store only: after a crash the old broker, still running a redrive, must
// keep writing to the store that crashed (its writes fail), never through
// the spy into the new one. arm returns a channel closed after the 15th
// batch that deletes an entry from then on.
func rdRecorded(t *testing.T, n int) (e *dsEnv, rec *brokertest.SpyStore, arm func() <-chan struct{}, bodies []string) {
	var armed atomic.Bool
	var left atomic.Int32
	left.Store(15)
	hit := make(chan struct{})
	rec = &brokertest.SpyStore{BeforeApply: func(b *store.Batch) {
		if armed.Load() && len(b.Deletes) > 0 && left.Add(-1) == 0 {
			close(hit)
		}
	}}
	first := true
	e = dsStart(t, dsGroups[0], brokertest.Config{WrapStore: func(s store.Store) store.Store {
		if !first {
			return s
		}
		first = false
		return rec.Wrap(s)
	}})
	e.setup(nil)
	bodies = rdBodies("c", n)
	e.rdReject("src", n, bodies...)
	return e, rec, func() <-chan struct{} { armed.Store(true); return hit }, bodies
}

// Each move is one batch deleting the dead letter's entry in dlq and
// putting it, the same stored message, into src; a crash after some of
// them leaves every message in exactly one of the two queues.
func TestRedriveOneBatchEachAndCrashMidway(t *testing.T) {
	const n = 40
	e, rec, arm, _ := rdRecorded(t, n)

	batches := rec.Batches()
	msgOf := map[store.Ref]store.MsgID{} // dlq entries and their messages
	var srcID, dlqID store.QueueID
	for _, b := range batches {
		for _, p := range b.Puts {
			if string(p.Msg.Body) == "c0" {
				if srcID == 0 {
					srcID = p.Queue
				} else {
					dlqID = p.Queue
				}
			}
		}
	}
	for _, b := range batches {
		for _, p := range b.Puts {
			if p.Queue == dlqID {
				msgOf[p.Ref] = p.Msg.ID
			}
		}
	}
	start := len(batches)
	hit := arm()
	if srcID == 0 || dlqID == 0 || srcID == dlqID {
		t.Fatalf("queue ids: src %d dlq %d", srcID, dlqID)
	}

	old := e.b.Broker
	done := make(chan struct{})
	go func() {
		defer close(done)
		old.Redrive("/", "dlq", broker.RedriveOptions{}) // its writes fail after the crash
	}()
	<-hit
	e.b.Crash()
	<-done

	moves := 0
	for _, b := range rec.Batches()[start:] {
		var fromDLQ []store.Ref
		for _, d := range b.Deletes {
			if d.Queue == dlqID {
				fromDLQ = append(fromDLQ, d)
			}
		}
		if len(fromDLQ) == 0 {
			continue
		}
		moves++
		if len(fromDLQ) != 1 || len(b.Puts) != 1 || b.Puts[0].Queue != srcID || b.Puts[0].Msg.ID != msgOf[fromDLQ[0]] {
			t.Fatalf("a move's batch: deletes %v, puts %+v; want one delete from dlq and its message put into src", b.Deletes, b.Puts)
		}
	}
	if moves < 15 {
		t.Fatalf("%d moves written, want at least 15", moves)
	}

	_, ch := e.b.Channel(t)
	seen := drainOnce(t, ch, "src", "dlq")
	if len(seen) != n {
		t.Fatalf("%d messages after the crash, want %d: %v", len(seen), n, seen)
	}
}

// A filter reaches dead letters behind paged-out ones it leaves in place
// (a window of 4: most of dlq is paged out), on every level in order.
func TestRedriveFiltersPastPagedMessages(t *testing.T) {
	e := dsStart(t, dsGroups[0], brokertest.Config{})
	e.setup(nil)
	e.queue("src2", amqp091.Table{"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "dlq"})
	e.rdReject("src", 10, rdBodies("a", 10)...)
	e.rdReject("src2", 12, "b0", "b1")
	e.rdReject("src", 15, "a10", "a11", "a12")
	e.rdReject("src2", 16, "b2")
	r := rdRedrive(t, e, "dlq", broker.RedriveOptions{SourceQueue: "src2"})
	if r.Moved != 3 || r.Remaining != 13 {
		t.Fatalf("redrive from src2: %+v, want 3 moved, 13 remaining", r)
	}
	e.waitFor("src2", 3, 3, 0)
	e.Expect("src2", "b0", "b1", "b2")
	r = rdRedrive(t, e, "dlq", broker.RedriveOptions{Reason: "rejected", Max: 11})
	if r.Moved != 11 || r.Remaining != 2 {
		t.Fatalf("redrive of 11: %+v", r)
	}
	e.waitFor("src", 11, 11, 0)
	e.Expect("src", rdBodies("a", 11)...)
	e.Expect("dlq", "a11", "a12")
	e.WantEmpty("dlq")
}

// drainOnce gets every message of queues and fails the test if a body is
// in two places; it returns where each body was.
func drainOnce(t *testing.T, ch *amqp091.Channel, queues ...string) map[string]string {
	t.Helper()
	seen := map[string]string{}
	for _, q := range queues {
		for {
			d, ok, err := ch.Get(q, true)
			if err != nil {
				t.Fatalf("get %q: %v", q, err)
			}
			if !ok {
				break
			}
			if prev, dup := seen[string(d.Body)]; dup {
				t.Fatalf("%q in %q and %q", d.Body, prev, q)
			}
			seen[string(d.Body)] = q
		}
	}
	return seen
}

// A filtered redrive of a deep queue reads the paged messages it passes
// from the store window by window and leaves them there: after it, no
// more of the queue is in memory than its windows, and what matched (at
// the far end) moved.
func TestRedriveFilterLeavesPagedMessagesInStore(t *testing.T) {
	e := dsStart(t, dsGroups[0], brokertest.Config{})
	e.setup(amqp091.Table{"x-message-ttl": int32(0)})
	e.queue("src2", amqp091.Table{"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "dlq"})
	const n = 40 * brokertest.TestPageWindow
	e.PublishBodies("src", rdBodies("x", n)...) // each expires at once into dlq
	e.waitFor("dlq", n, n, 0)
	e.rdReject("src2", n+3, "r0", "r1", "r2")
	r := rdRedrive(t, e, "dlq", broker.RedriveOptions{Reason: "rejected"})
	if r.Moved != 3 || r.Remaining != n {
		t.Fatalf("filtered redrive: %+v", r)
	}
	if resident, ready := e.b.Broker.ResidentForTest("/", "dlq"); resident > pgBound || ready != n {
		t.Fatalf("after the redrive: %d of dlq's %d ready messages resident, want at most %d", resident, ready, pgBound)
	}
	e.waitFor("src2", 3, 3, 0)
	e.Expect("src2", "r0", "r1", "r2")
	e.Expect("dlq", rdBodies("x", 5)...) // the rest still there, in order
}
