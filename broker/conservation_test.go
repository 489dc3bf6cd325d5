// A randomized test that no message is lost or duplicated through dead-lettering.

package broker_test

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"errors"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
)

// TestConservationUnderRandomInterleavings is a randomized (seeded) test of
// SPEC §2–§5: no message is lost or duplicated on its way to a dead letter
// queue. A few source queues, each dead-lettering through one DLX into one
// or two dead letter queues that always exist and have no limits, are
// driven by several workers at once with a random mix of confirmed
// publishes, basic.get, short-lived consumers, ack / nack / reject (single
// and multiple, requeue or not), channel closes with unacked messages and
// basic.recover, while TTLs, length limits and a delivery limit
// dead-letter messages behind their backs. After quiescing and draining
// every queue, each confirmed message must have been settled (acked or
// taken with no-ack) exactly once — in its source queue or, for a dead
// letter, once in each DLQ its source routes to — and the broker must
// have discarded and dropped nothing. Redeliveries are not duplicates;
// only a second terminal receipt is.
//
// The seed is logged; BROKERD_SEED=N replays it (as far as goroutine
// scheduling allows).
func TestConservationUnderRandomInterleavings(t *testing.T) {
	seed := time.Now().UnixNano()
	if s := os.Getenv("BROKERD_SEED"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("BROKERD_SEED: %v", err)
		}
		seed = n
	}
	t.Logf("seed %d (BROKERD_SEED=%d to replay)", seed, seed)
	rng := rand.New(rand.NewSource(seed))

	// The broker's clock runs with the wall clock (TTLs expire behind the
	// workers' backs), and jumps once they are done.
	clk := brokertest.NewOffsetClock()
	inst := brokertest.Start(t, brokertest.Config{Broker: broker.Options{Now: clk.Now, TimerClock: clk}})
	st := cvSetup(t, inst, rng)

	workers := 2 + rng.Intn(2)
	const opsPerWorker = 1500
	deadline := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		wseed := seed + int64(w+1)*7919
		go func() {
			defer wg.Done()
			cvWorker(t, inst, st, w, rand.New(rand.NewSource(wseed)), opsPerWorker, deadline)
		}()
	}
	// A store failure blocks publishers for good (the store alarm never
	// clears): report it at once rather than wait for the test timeout.
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	for done := false; !done; {
		select {
		case <-finished:
			done = true
		case <-time.After(50 * time.Millisecond):
			if err := inst.Broker.StoreFailureForTest(); err != nil {
				t.Fatalf("seed %d: the broker's store failed: %v", seed, err)
			}
		}
	}
	if t.Failed() {
		t.Fatalf("seed %d: a worker failed", seed)
	}

	// Quiesce: the workers' connections are closed, so everything they
	// held is back in its queue (or dead-lettered by the delivery limit).
	cvWaitUnacked(t, inst, st)
	// Every TTL (≤ 50 ms) and per-message expiration (≤ 40 ms) passes at
	// once, and what expires is dead-lettered before the drain.
	clk.Advance(time.Second)
	inst.Broker.SettleTimersForTest()
	brokertest.Eventually(t, "the expired messages dead-lettered", func() error {
		if err := inst.Broker.Sync(); err != nil { // the dead letters' store writes
			return err
		}
		for _, name := range st.order {
			qs, _ := inst.Broker.QueueStats("/", name)
			if qs.DeadLetterBacklog != 0 || st.sources[name].ttl && qs.Ready != 0 {
				return fmt.Errorf("%s: %+v", name, qs)
			}
		}
		return nil
	})
	cvDrain(t, inst, st)
	cvCheck(t, inst, st, seed)
}

// cvSource is a source queue and what may dead-letter from it.
type cvSource struct {
	name    string
	args    amqp091.Table
	ttl     bool // x-message-ttl set
	maxLen  bool // x-max-length set (drop-head)
	limit   int  // x-delivery-limit, 0 if none
	targets []string
}

const (
	cvDLX  = "cv.dlx"
	cvDLQA = "cv.dlq.a"
	cvDLQB = "cv.dlq.b"
)

var cvDLQs = []string{cvDLQA, cvDLQB}

type cvTerm struct{ queue, how string }

type cvHeld struct {
	d     amqp091.Delivery
	id    string
	queue string
}

// cvState is what the workers and the final check share.
type cvState struct {
	sources map[string]*cvSource
	order   []string // source names, sorted

	mu         sync.Mutex
	src        map[string]string // id → source queue (set before publishing)
	exp        map[string]bool   // id published with an expiration
	confirmed  map[string]bool
	terminal   map[string][]cvTerm
	rejected   map[string]bool   // rejected / nacked with requeue=false from its source
	reason     map[string]string // first x-death reason seen on a DLQ copy
	deliveries int
	redeliv    int
}

func cvSetup(t *testing.T, inst *brokertest.Instance, rng *rand.Rand) *cvState {
	t.Helper()
	_, ch := inst.Channel(t)
	if err := ch.ExchangeDeclare(cvDLX, "direct", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for _, q := range cvDLQs {
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	ttl := func() int32 { return int32(10 + rng.Intn(41)) }
	srcs := []*cvSource{
		{name: "cv.s.ttl", ttl: true, targets: []string{cvDLQA},
			args: amqp091.Table{"x-message-ttl": ttl()}},
		{name: "cv.s.maxlen", maxLen: true, targets: []string{cvDLQA},
			args: amqp091.Table{"x-max-length": int32(2 + rng.Intn(3)), "x-overflow": "drop-head"}},
		{name: "cv.s.limit", limit: 2, targets: []string{cvDLQB},
			args: amqp091.Table{"x-delivery-limit": int32(2), "x-queue-type": "quorum"}},
		// at-least-once, with a dead-letter routing key, a TTL and a length limit.
		{name: "cv.s.alo", ttl: true, maxLen: true, targets: []string{cvDLQB},
			args: amqp091.Table{"x-dead-letter-strategy": "at-least-once", "x-dead-letter-routing-key": "cv.to-b",
				"x-message-ttl": ttl(), "x-max-length": int32(3 + rng.Intn(4))}},
		// routes to both DLQs: a dead letter is one copy in each.
		{name: "cv.s.fan", targets: []string{cvDLQA, cvDLQB}, args: amqp091.Table{}},
	}
	st := &cvState{sources: map[string]*cvSource{}, src: map[string]string{}, exp: map[string]bool{},
		confirmed: map[string]bool{}, terminal: map[string][]cvTerm{}, rejected: map[string]bool{}, reason: map[string]string{}}
	for _, s := range srcs {
		s.args["x-dead-letter-exchange"] = cvDLX
		if _, err := ch.QueueDeclare(s.name, true, false, false, false, s.args); err != nil {
			t.Fatalf("declare %s %v: %v", s.name, s.args, err)
		}
		key := s.name
		if k, ok := s.args["x-dead-letter-routing-key"].(string); ok {
			key = k
		}
		for _, q := range s.targets {
			if err := ch.QueueBind(q, key, cvDLX, false, nil); err != nil {
				t.Fatal(err)
			}
		}
		st.sources[s.name] = s
		st.order = append(st.order, s.name)
	}
	sort.Strings(st.order)
	t.Logf("topology: %v", func() []string {
		var out []string
		for _, n := range st.order {
			out = append(out, fmt.Sprintf("%s%v→%v", n, st.sources[n].args, st.sources[n].targets))
		}
		return out
	}())
	ch.Close()
	return st
}

func (st *cvState) isDLQ(q string) bool { return slices.Contains(cvDLQs, q) }

// observe checks a delivery from queue q and returns its id; a non-empty
// problem fails the test.
func (st *cvState) observe(q string, d amqp091.Delivery) (id, problem string) {
	id = string(d.Body)
	st.mu.Lock()
	defer st.mu.Unlock()
	st.deliveries++
	if d.Redelivered {
		st.redeliv++
	}
	srcName, ok := st.src[id]
	if !ok {
		return id, fmt.Sprintf("%s: unknown message %q", q, id)
	}
	src := st.sources[srcName]
	xd, hasXD := d.Headers["x-death"]
	if !st.isDLQ(q) {
		if q != srcName {
			return id, fmt.Sprintf("%s: message %s published to %s", q, id, srcName)
		}
		if hasXD {
			return id, fmt.Sprintf("%s: message %s from its source carries x-death %v", q, id, xd)
		}
		if src.limit > 0 {
			if n, ok := d.Headers["x-delivery-count"].(int64); ok && n > int64(src.limit) {
				return id, fmt.Sprintf("%s: message %s delivered with x-delivery-count %d > limit %d", q, id, n, src.limit)
			}
		}
		return id, ""
	}
	if !slices.Contains(src.targets, q) {
		return id, fmt.Sprintf("%s: message %s from %s, which routes to %v", q, id, srcName, src.targets)
	}
	deaths, _ := xd.([]any)
	if len(deaths) != 1 {
		return id, fmt.Sprintf("%s: message %s: x-death %#v, want exactly one entry", q, id, xd)
	}
	death, _ := deaths[0].(amqp091.Table)
	reason, _ := death["reason"].(string)
	if dq, _ := death["queue"].(string); dq != srcName {
		return id, fmt.Sprintf("%s: message %s: x-death queue %q, want %q", q, id, dq, srcName)
	}
	if c, _ := death["count"].(int64); c != 1 {
		return id, fmt.Sprintf("%s: message %s: x-death count %v, want 1", q, id, death["count"])
	}
	if fr, _ := d.Headers["x-first-death-reason"].(string); fr != reason {
		return id, fmt.Sprintf("%s: message %s: x-first-death-reason %q, x-death reason %q", q, id, fr, reason)
	}
	if d.Expiration != "" {
		return id, fmt.Sprintf("%s: message %s: expiration %q survived dead-lettering", q, id, d.Expiration)
	}
	plausible := false
	switch reason {
	case "rejected":
		plausible = st.rejected[id]
	case "expired":
		plausible = src.ttl || st.exp[id]
	case "maxlen":
		plausible = src.maxLen
	case "delivery_limit":
		plausible = src.limit > 0
	}
	if !plausible {
		return id, fmt.Sprintf("%s: message %s from %s (expiration %v, rejected %v): implausible x-death reason %q",
			q, id, srcName, st.exp[id], st.rejected[id], reason)
	}
	if prev, ok := st.reason[id]; ok && prev != reason {
		return id, fmt.Sprintf("%s: message %s: x-death reason %q, another copy said %q", q, id, reason, prev)
	}
	st.reason[id] = reason
	return id, ""
}

func (st *cvState) settled(id, q, how string) {
	st.mu.Lock()
	st.terminal[id] = append(st.terminal[id], cvTerm{q, how})
	st.mu.Unlock()
}

func cvWorker(t *testing.T, inst *brokertest.Instance, st *cvState, w int, rng *rand.Rand, ops int, deadline time.Time) {
	conn, err := amqp091.Dial(inst.URL)
	if err != nil {
		t.Errorf("worker %d: dial: %v", w, err)
		return
	}
	defer conn.Close()
	fail := func(op int, format string, args ...any) {
		t.Errorf("worker %d op %d: %s", w, op, fmt.Sprintf(format, args...))
	}
	pub, err := conn.Channel()
	if err == nil {
		err = pub.Confirm(false)
	}
	if err != nil {
		t.Errorf("worker %d: publish channel: %v", w, err)
		return
	}
	confirms := pub.NotifyPublish(make(chan amqp091.Confirmation, 16))
	work, err := conn.Channel()
	if err != nil {
		t.Errorf("worker %d: channel: %v", w, err)
		return
	}
	var held []cvHeld
	allQueues := append(slices.Clone(st.order), cvDLQs...)
	seq := 0

	// take records a delivery: settled at once under no-ack, else held.
	take := func(op int, q string, d amqp091.Delivery, noAck bool) bool {
		id, problem := st.observe(q, d)
		if problem != "" {
			fail(op, "%s", problem)
			return false
		}
		if noAck {
			st.settled(id, q, "no-ack")
		} else {
			held = append(held, cvHeld{d: d, id: id, queue: q})
		}
		return true
	}

	for op := 0; op < ops && time.Now().Before(deadline); op++ {
		r := rng.Intn(100)
		if len(held) > 24 {
			r = 70 // settle
		}
		switch {
		case r < 40: // publish a burst, wait for its confirms
			n := 1
			if rng.Intn(8) == 0 {
				n = 2 + rng.Intn(6)
			}
			q := st.order[rng.Intn(len(st.order))]
			var ids []string
			for range n {
				seq++
				id := fmt.Sprintf("w%d-%d", w, seq)
				p := amqp091.Publishing{Body: []byte(id)}
				if rng.Intn(2) == 0 {
					p.DeliveryMode = amqp091.Persistent
				}
				if rng.Intn(5) == 0 {
					p.Expiration = strconv.Itoa(5 + rng.Intn(36))
				}
				st.mu.Lock()
				st.src[id] = q
				st.exp[id] = p.Expiration != ""
				st.mu.Unlock()
				if err := pub.PublishWithContext(context.Background(), "", q, false, false, p); err != nil {
					fail(op, "publish %s to %s: %v", id, q, err)
					return
				}
				ids = append(ids, id)
			}
			for _, id := range ids {
				select {
				case c, ok := <-confirms:
					if !ok {
						fail(op, "publish channel closed awaiting confirm of %s", id)
						return
					}
					if !c.Ack {
						fail(op, "publish of %s to %s nacked (drop-head never refuses)", id, q)
						return
					}
					st.mu.Lock()
					st.confirmed[id] = true
					st.mu.Unlock()
				case <-time.After(5 * time.Second):
					fail(op, "no confirm for %s", id)
					return
				}
			}

		case r < 55: // basic.get
			q := allQueues[rng.Intn(len(allQueues))]
			noAck := rng.Intn(4) == 0
			d, ok, err := work.Get(q, noAck)
			if err != nil {
				fail(op, "get %s: %v", q, err)
				return
			}
			if ok && !take(op, q, d, noAck) {
				return
			}

		case r < 67: // a short-lived consumer takes a few
			q := allQueues[rng.Intn(len(allQueues))]
			n := 1 + rng.Intn(4)
			noAck := rng.Intn(6) == 0
			if err := work.Qos(n, 0, false); err != nil {
				fail(op, "qos: %v", err)
				return
			}
			tag := fmt.Sprintf("cv-w%d-%d", w, op)
			msgs, err := work.Consume(q, tag, noAck, false, false, false, nil)
			if err != nil {
				fail(op, "consume %s: %v", q, err)
				return
			}
			timer := time.NewTimer(time.Duration(5+rng.Intn(20)) * time.Millisecond)
			got := 0
		recv:
			for got < n {
				select {
				case d, ok := <-msgs:
					if !ok {
						break recv
					}
					got++
					if !take(op, q, d, noAck) {
						return
					}
				case <-timer.C:
					break recv
				}
			}
			timer.Stop()
			if err := work.Cancel(tag, false); err != nil {
				fail(op, "cancel %s: %v", tag, err)
				return
			}
			for d := range msgs { // sent before cancel-ok
				if !take(op, q, d, noAck) {
					return
				}
			}

		case r < 94: // settle held deliveries
			if len(held) == 0 {
				continue
			}
			pick := held[rng.Intn(len(held))]
			kind := rng.Intn(5) // 0 ack, 1 ack multiple, 2 nack, 3 nack multiple, 4 reject
			multiple := kind == 1 || kind == 3
			var affected, rest []cvHeld
			for _, h := range held {
				if h.d.DeliveryTag == pick.d.DeliveryTag || (multiple && h.d.DeliveryTag < pick.d.DeliveryTag) {
					affected = append(affected, h)
				} else {
					rest = append(rest, h)
				}
			}
			requeue := rng.Intn(2) == 0
			for _, h := range affected {
				if st.isDLQ(h.queue) {
					requeue = true // a DLQ has no DLX: requeue=false would discard
				}
			}
			if kind >= 2 && !requeue {
				// Recorded before sending: another worker may see
				// the dead letter before this call returns.
				st.mu.Lock()
				for _, h := range affected {
					st.rejected[h.id] = true
				}
				st.mu.Unlock()
			}
			var err error
			switch kind {
			case 0, 1:
				err = work.Ack(pick.d.DeliveryTag, multiple)
			case 2, 3:
				err = work.Nack(pick.d.DeliveryTag, multiple, requeue)
			case 4:
				err = work.Reject(pick.d.DeliveryTag, requeue)
			}
			if err != nil {
				fail(op, "settle kind %d tag %d: %v", kind, pick.d.DeliveryTag, err)
				return
			}
			if kind <= 1 {
				for _, h := range affected {
					st.settled(h.id, h.queue, "ack")
				}
			}
			held = rest

		case r < 97: // close the channel with its unacked messages
			if err := work.Close(); err != nil {
				fail(op, "close channel: %v", err)
				return
			}
			held = nil
			if work, err = conn.Channel(); err != nil {
				fail(op, "reopen channel: %v", err)
				return
			}

		default: // basic.recover
			if err := work.Recover(true); err != nil {
				fail(op, "recover: %v", err)
				return
			}
			held = nil
		}
	}
	// The deferred connection close returns what is still held.
}

// cvWaitUnacked waits until no queue has unacked messages: the workers'
// closes have been processed.
func cvWaitUnacked(t *testing.T, inst *brokertest.Instance, st *cvState) {
	t.Helper()
	all := append(slices.Clone(st.order), cvDLQs...)
	brokertest.Eventually(t, "no unacked message after the workers closed", func() error {
		busy := ""
		for _, q := range all {
			qs, ok := inst.Broker.QueueStats("/", q)
			if !ok {
				t.Fatalf("queue %s is gone", q)
			}
			if qs.Unacked != 0 || qs.Consumers != 0 {
				busy = fmt.Sprintf("%s: %+v", q, qs)
			}
		}
		if busy != "" {
			return errors.New(busy)
		}
		return nil
	})
}

// cvDrain empties every queue with no-ack basic.get, sources first, until
// one whole pass finds nothing, and checks the broker agrees they are empty.
func cvDrain(t *testing.T, inst *brokertest.Instance, st *cvState) {
	t.Helper()
	ch := inst.Session(t, brokertest.NoConfirm)
	all := append(slices.Clone(st.order), cvDLQs...)
	for pass := 0; ; pass++ {
		if pass > 20 {
			t.Fatal("queues do not drain")
		}
		got := 0
		for _, q := range all {
			for _, d := range ch.DrainDeliveries(q) {
				got++
				id, problem := st.observe(q, d)
				if problem != "" {
					t.Errorf("drain: %s", problem)
				}
				st.settled(id, q, "remained")
			}
		}
		if got == 0 {
			break
		}
	}
	for _, q := range all {
		qs, _ := inst.Broker.QueueStats("/", q)
		if qs.Ready != 0 || qs.Unacked != 0 || qs.DeadLetterBacklog != 0 {
			t.Errorf("%s after draining: %+v", q, qs)
		}
	}
}

func cvCheck(t *testing.T, inst *brokertest.Instance, st *cvState, seed int64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	var lost, dup []string
	deadLettered := map[string]uint64{}
	settledIn := map[string]int{}
	ids := make([]string, 0, len(st.src))
	for id := range st.src {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		terms := st.terminal[id]
		if !st.confirmed[id] {
			if len(terms) > 0 {
				dup = append(dup, fmt.Sprintf("%s (never confirmed) settled %v", id, terms))
			}
			continue
		}
		src := st.sources[st.src[id]]
		var qs []string
		for _, tm := range terms {
			qs = append(qs, tm.queue)
			settledIn[tm.queue]++
		}
		sort.Strings(qs)
		switch {
		case len(terms) == 0:
			lost = append(lost, fmt.Sprintf("%s (from %s, expiration %v, rejected %v)", id, src.name, st.exp[id], st.rejected[id]))
		case slices.Equal(qs, []string{src.name}):
			if st.rejected[id] {
				dup = append(dup, fmt.Sprintf("%s rejected without requeue, yet settled in its source: %v", id, terms))
			}
		case slices.Equal(qs, src.targets): // targets are sorted
			deadLettered[st.reason[id]]++
			if st.rejected[id] && st.reason[id] != "rejected" {
				dup = append(dup, fmt.Sprintf("%s rejected without requeue, dead-lettered as %q", id, st.reason[id]))
			}
		default:
			dup = append(dup, fmt.Sprintf("%s (from %s → %v) settled %v", id, src.name, src.targets, terms))
		}
	}
	t.Logf("%d published, %d confirmed, %d deliveries (%d redelivered), settled per queue %v, dead-lettered %v",
		len(st.src), len(st.confirmed), st.deliveries, st.redeliv, settledIn, deadLettered)
	if len(lost) > 0 {
		t.Errorf("seed %d: %d confirmed messages lost, e.g. %s", seed, len(lost), strings.Join(lost[:min(10, len(lost))], "; "))
	}
	if len(dup) > 0 {
		t.Errorf("seed %d: %d messages duplicated or misplaced, e.g. %s", seed, len(dup), strings.Join(dup[:min(10, len(dup))], "; "))
	}

	stats := inst.Broker.Stats()
	for r, n := range stats.Discarded {
		if n != 0 {
			t.Errorf("seed %d: Discarded[%s] = %d, want 0: every source has a DLX that routes", seed, r, n)
		}
	}
	for c, n := range stats.Dropped {
		if n != 0 {
			t.Errorf("seed %d: Dropped[%s] = %d, want 0: every dead letter has a route", seed, c, n)
		}
	}
	if stats.Cycles != 0 {
		t.Errorf("seed %d: Cycles = %d, want 0", seed, stats.Cycles)
	}
	for _, r := range []string{"rejected", "expired", "maxlen", "delivery_limit"} {
		if stats.DeadLettered[r] != deadLettered[r] {
			t.Errorf("seed %d: Stats.DeadLettered[%s] = %d, but %d messages arrived in DLQs with that reason",
				seed, r, stats.DeadLettered[r], deadLettered[r])
		}
	}
	if stats.Overflowed != deadLettered["maxlen"] {
		t.Errorf("seed %d: Overflowed = %d, want %d (every drop-head eviction is dead-lettered)", seed, stats.Overflowed, deadLettered["maxlen"])
	}
}
