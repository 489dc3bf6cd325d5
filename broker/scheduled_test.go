// Tests of browsing and cancelling what delayed exchanges hold.

package broker_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
)

// scList lists everything delayed exchange x of "/" holds, count per page.
func scList(t testing.TB, b *brokertest.Instance, x string, count int) []broker.ScheduledMessage {
	t.Helper()
	var all []broker.ScheduledMessage
	pos := broker.ScheduledPos{}
	for {
		page, err := b.Broker.Scheduled("/", x, pos, count)
		if err != nil {
			t.Fatalf("scheduled of %q: %v", x, err)
		}
		if len(page) > count {
			t.Fatalf("a page of %d, asked for %d", len(page), count)
		}
		if len(page) == 0 {
			return all
		}
		all = append(all, page...)
		pos = page[len(page)-1].Pos()
	}
}

// scBodies returns the bodies of ms.
func scBodies(ms []broker.ScheduledMessage) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = string(m.Body)
	}
	return out
}

// scWantList fails unless x holds exactly want (bodies, in due-time order),
// with each due time as dues gives it (body -> due), listed in pages of
// every size from 1 to 7 (most paged: the test page window is 4).
func scWantList(t testing.TB, b *brokertest.Instance, x string, want []string, dues map[string]int64) {
	t.Helper()
	for count := 1; count <= 7; count++ {
		ms := scList(t, b, x, count)
		if got := scBodies(ms); !slices.Equal(got, want) {
			t.Fatalf("pages of %d: listed %q, want %q", count, got, want)
		}
		for _, m := range ms {
			if m.Due != dues[string(m.Body)] {
				t.Fatalf("%q due %d, want %d", m.Body, m.Due, dues[string(m.Body)])
			}
		}
	}
}

// Listing: every held message in due-time order (publish order among
// equal due times), with its due time, key and properties, wherever it
// lies (most are paged out), in pages of any size. Cancelling: by id
// (resident and paged), by routing key, by header, by due time; a
// cancelled message is not listed, not counted, never routed, and stays
// gone after a crash (the disk store: BROKERD_TEST_STORE=disk); the rest
// are released at their due times.
func TestScheduledListCancel(t *testing.T) {
	t.Parallel()
	clk := brokertest.NewClock()
	b := brokertest.Start(t, brokertest.Config{Clock: clk})
	ch := b.Session(t, brokertest.Persistent)
	sdDeclare(t, ch, "dx", "direct", nil, brokertest.Durable)
	ch.Declare("q", nil, brokertest.Durable)
	ch.Bind("q", "k", "dx", nil)
	ch.Bind("q", "j", "dx", nil)
	start := clk.Now().UnixMilli()
	// Due times out of publish order; two share one.
	delays := []int64{9000, 3000, 7000, 1000, 5000, 3000, 8000, 2000, 6000, 4000, 10000, 1500}
	dues := map[string]int64{}
	type held struct {
		body string
		due  int64
		i    int
	}
	var hs []held
	for i, d := range delays {
		body := fmt.Sprintf("m%02d", i)
		key := "k"
		if i%3 == 0 {
			key = "j"
		}
		h := amqp091.Table{"x-delay": d, "tenant": fmt.Sprintf("t%d", i%2)}
		ch.Publish("dx", key, amqp091.Publishing{Body: []byte(body), Headers: h, CorrelationId: "c" + body})
		// arrival rounds up: the fake clock is on a whole millisecond
		dues[body] = start + d
		hs = append(hs, held{body, start + d, i})
	}
	slices.SortFunc(hs, func(a, b held) int {
		if a.due != b.due {
			return int(a.due - b.due)
		}
		return a.i - b.i
	})
	var want []string
	for _, h := range hs {
		want = append(want, h.body)
	}
	if res, held, _ := b.Broker.HeldResidentForTest("/", "dx"); res >= held {
		t.Fatalf("%d of %d held messages resident: the test needs most paged out", res, held)
	}
	scWantList(t, b, "dx", want, dues)
	ms := scList(t, b, "dx", 100)
	byBody := map[string]broker.ScheduledMessage{}
	for _, m := range ms {
		byBody[string(m.Body)] = m
	}
	if m := byBody["m03"]; len(m.RoutingKeys) != 1 || m.RoutingKeys[0] != "j" || m.Exchange != "dx" {
		t.Fatalf("m03: exchange %q keys %q, want dx [j]", m.Exchange, m.RoutingKeys)
	}

	// By id: the first due (resident or not) and one in the middle.
	ids := []uint64{byBody["m03"].Seq, byBody["m06"].Seq, byBody["m06"].Seq, 999999}
	done, err := b.Broker.CancelScheduled("/", "dx", ids)
	if err != nil || !slices.Equal(done, []uint64{byBody["m03"].Seq, byBody["m06"].Seq}) {
		t.Fatalf("cancel %v: %v, %v; want the first two", ids, done, err)
	}
	again, err := b.Broker.CancelScheduled("/", "dx", ids[:1])
	if err != nil || len(again) != 0 {
		t.Fatalf("cancel again: %v, %v; want nothing", again, err)
	}
	want = slices.DeleteFunc(want, func(s string) bool { return s == "m03" || s == "m06" })
	scWantList(t, b, "dx", want, dues)
	sdWantHeld(t, b, "dx", int64(len(want)))

	// By routing key j: m00 m09 (m03 m06 are gone).
	key := "j"
	if n, err := b.Broker.CancelScheduledMatching("/", "dx", broker.ScheduledFilter{RoutingKey: &key}); n != 2 || err != nil {
		t.Fatalf("cancel key j: %d, %v; want 2", n, err)
	}
	want = slices.DeleteFunc(want, func(s string) bool { return s == "m00" || s == "m09" })
	scWantList(t, b, "dx", want, dues)
	// By header and due time: tenant t1 due in (2 s, 8 s): m01 (3 s),
	// m05 (3 s); m07 is due at 2 s, not after it.
	f := broker.ScheduledFilter{Headers: map[string]string{"tenant": "t1"}, DueAfter: start + 2000, DueBefore: start + 8000}
	if n, err := b.Broker.CancelScheduledMatching("/", "dx", f); n != 2 || err != nil {
		t.Fatalf("cancel tenant t1 due in (2 s, 8 s): %d, %v; want 2", n, err)
	}
	want = slices.DeleteFunc(want, func(s string) bool { return s == "m01" || s == "m05" })
	scWantList(t, b, "dx", want, dues)
	// No filter: refused, nothing cancelled.
	var inv *broker.InvalidError
	if n, err := b.Broker.CancelScheduledMatching("/", "dx", broker.ScheduledFilter{}); !errors.As(err, &inv) || n != 0 {
		t.Fatalf("cancel with no filter: %d, %v; want an InvalidError", n, err)
	}
	sdWantHeld(t, b, "dx", int64(len(want)))
	if st := b.Broker.Stats(); st.DelayedCancelled != 6 {
		t.Fatalf("cancelled counter %d, want 6", st.DelayedCancelled)
	}

	b.Crash()
	sdWantHeld(t, b, "dx", int64(len(want)))
	scWantList(t, b, "dx", want, dues)

	ch = b.Session(t)
	sdAdvanceTo(b, clk, time.UnixMilli(start), 11*time.Second)
	tlEventuallyReady(t, b, "q", len(want))
	sdWantHeld(t, b, "dx", 0)
	// Each once (the clock jumps past every due time at once: the order
	// of release is TestDelayedReleaseOrder's).
	got := dvBodies(ch.DrainDeliveries("q"))
	slices.Sort(got)
	want = slices.Sorted(slices.Values(want))
	if !slices.Equal(got, want) {
		t.Fatalf("released %q, want %q", got, want)
	}
	if l := scList(t, b, "dx", 10); len(l) != 0 {
		t.Fatalf("listed %q after every release", scBodies(l))
	}

	// Not a delayed exchange, no such exchange.
	if _, err := b.Broker.Scheduled("/", "amq.direct", broker.ScheduledPos{}, 10); !errors.As(err, &inv) {
		t.Fatalf("scheduled of amq.direct: %v, want an InvalidError", err)
	}
	if _, err := b.Broker.CancelScheduled("/", "nope", []uint64{1}); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("cancel on a missing exchange: %v, want ErrNotFound", err)
	}
}

// A cancel and a release of the same message at its due time: whichever
// takes it first has it; the other finds it gone. Each order is made
// deterministic with a hook: the release held on the scheduler's
// goroutine (timer fired, queue not locked yet) while the cancel runs;
// and a cancel of a paged message held between its read of the store and
// its taking while the release runs to completion. Not parallel: the
// hooks are global.
func TestScheduledCancelReleaseRace(t *testing.T) {
	clk := brokertest.NewClock()
	b := brokertest.Start(t, brokertest.Config{Clock: clk})
	ch := b.Session(t, brokertest.Persistent)
	sdDeclare(t, ch, "dx", "fanout", nil, brokertest.Durable)
	ch.Declare("q", nil, brokertest.Durable)
	ch.Bind("q", "", "dx", nil)
	sub := b.Session(t, brokertest.NoConfirm)
	msgs := dvConsume(t, sub, "q", "", true, nil)
	start := clk.Now()
	seqOf := func(body string) uint64 {
		t.Helper()
		for _, m := range scList(t, b, "dx", 100) {
			if string(m.Body) == body {
				return m.Seq
			}
		}
		t.Fatalf("%q not held", body)
		return 0
	}

	// 1. The release fired and is held before it locks the queue; the
	// cancel takes the message; the release then finds nothing.
	ch.Publish("dx", "", sdPub("a", sdDelay(1000)))
	a := seqOf("a")
	reached, cont := make(chan struct{}), make(chan struct{})
	var once sync.Once
	restore := b.Broker.SetReleaseHookForTest("/", "dx", func() {
		once.Do(func() {
			close(reached)
			<-cont
		})
	})
	clk.Advance(time.Second)
	<-reached // the scheduler fired a's timer: its release waits here
	done, err := b.Broker.CancelScheduled("/", "dx", []uint64{a})
	if err != nil || !slices.Equal(done, []uint64{a}) {
		t.Fatalf("cancel at the due time, before the release: %v, %v; want [%d]", done, err, a)
	}
	close(cont)
	restore()
	tlSettleTimers(b)
	tlNoRecv(t, sub, msgs, "a cancelled message")
	sdWantHeld(t, b, "dx", 0)

	// 2. Released first: the cancel finds nothing.
	ch.Publish("dx", "", sdPub("b", sdDelay(1000)))
	bs := seqOf("b")
	sdAdvanceTo(b, clk, start, 2*time.Second)
	if d := dvRecv(t, msgs); string(d.Body) != "b" {
		t.Fatalf("released %q, want b", d.Body)
	}
	if done, err := b.Broker.CancelScheduled("/", "dx", []uint64{bs}); err != nil || len(done) != 0 {
		t.Fatalf("cancel after the release: %v, %v; want nothing", done, err)
	}

	// 3. Paged: the cancel has read c04 from the store when the release
	// runs (read ahead, then due) and moves it into q; the cancel then
	// leaves it. With a page window of 4, c04..c07 are in the store only
	// (c00..c03 in the head, c08..c11 in the tail); c04 is due first, so
	// the middle stays (its others are due later) and only its record
	// of what was taken out while the cancel read tells.
	for i := range 12 {
		d := int64(5000)
		if i == 4 {
			d = 3000
		}
		ch.Publish("dx", "", sdPub(fmt.Sprintf("c%02d", i), sdDelay(d)))
	}
	c4 := seqOf("c04")
	if res, held, _ := b.Broker.HeldResidentForTest("/", "dx"); held != 12 || res != 8 {
		t.Fatalf("%d of %d held resident, want 8 of 12 (c04..c07 paged out)", res, held)
	}
	cStart := clk.Now()
	restore = b.Broker.SetCancelReadHookForTest("/", "dx", func() {
		// c04 falls due and is released. Its read ahead is armed by
		// the scan of the store's due times, on a goroutine of its own:
		// await the release itself.
		sdRunClock(b, clk, 3*time.Second)
		brokertest.Eventually(t, "c04's release", func() bool { return sdHeld(t, b, "dx") == 11 })
	})
	done, err = b.Broker.CancelScheduled("/", "dx", []uint64{c4})
	restore()
	if err != nil || len(done) != 0 {
		t.Fatalf("cancel of c04 released while the cancel read it: %v, %v; want nothing", done, err)
	}
	if d := dvRecv(t, msgs); string(d.Body) != "c04" {
		t.Fatalf("released %q, want c04", d.Body)
	}
	sdAdvanceTo(b, clk, cStart, 5*time.Second)
	got := dvBodies(dvRecvN(t, msgs, 11))
	slices.Sort(got) // each once; their order is TestDelayedReleaseOrder's
	if want := []string{"c00", "c01", "c02", "c03", "c05", "c06", "c07", "c08", "c09", "c10", "c11"}; !slices.Equal(got, want) {
		t.Fatalf("released %q, want %q", got, want)
	}
	tlNoRecv(t, sub, msgs, "each released once")
	sdWantHeld(t, b, "dx", 0)

	// 4. Paged, cancelled before its due time: its read-ahead timer
	// must not release it.
	for i := range 12 {
		ch.Publish("dx", "", sdPub(fmt.Sprintf("d%02d", i), sdDelay(1000)))
	}
	d7 := seqOf("d07")
	if done, err := b.Broker.CancelScheduled("/", "dx", []uint64{d7}); err != nil || !slices.Equal(done, []uint64{d7}) {
		t.Fatalf("cancel of paged d7: %v, %v", done, err)
	}
	sdRunClock(b, clk, 1500*time.Millisecond)
	got = dvBodies(dvRecvN(t, msgs, 11))
	if want := []string{"d00", "d01", "d02", "d03", "d04", "d05", "d06", "d08", "d09", "d10", "d11"}; !slices.Equal(got, want) {
		t.Fatalf("released %q, want %q", got, want)
	}
	tlNoRecv(t, sub, msgs, "a cancelled paged message")
	if st := b.Broker.Stats(); st.DelayedCancelled != 2 {
		t.Fatalf("cancelled counter %d, want 2", st.DelayedCancelled)
	}
}

// Many messages due at one instant, each cancelled by id in a random
// order while the clock passes their due time: each is then either
// cancelled (the cancel said so) or delivered, exactly once, never both,
// never neither. Which wins each race is not asserted.
func TestScheduledCancelReleaseStress(t *testing.T) {
	t.Parallel()
	clk := brokertest.NewClock()
	b := brokertest.Start(t, brokertest.Config{Clock: clk})
	ch := b.Session(t, brokertest.Persistent)
	sdDeclare(t, ch, "dx", "fanout", nil, brokertest.Durable)
	ch.Declare("q", nil, brokertest.Durable)
	ch.Bind("q", "", "dx", nil)
	const n = 200
	for i := range n {
		ch.Publish("dx", "", sdPub(fmt.Sprint(i), sdDelay(1000)))
	}
	ms := scList(t, b, "dx", 1000)
	if len(ms) != n {
		t.Fatalf("listed %d, want %d", len(ms), n)
	}
	bodyOf := map[uint64]string{}
	var ids []uint64
	for _, m := range ms {
		bodyOf[m.Seq] = string(m.Body)
		ids = append(ids, m.Seq)
	}
	rand.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	// Up to the millisecond before: the paged ones are read ahead of
	// their due time by then, as they would be.
	sdRunClock(b, clk, 999*time.Millisecond)
	sdWantHeld(t, b, "dx", n)
	cancelled := map[string]bool{}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < len(ids); i += 5 {
			done, err := b.Broker.CancelScheduled("/", "dx", ids[i:min(i+5, len(ids))])
			if err != nil {
				t.Errorf("cancel: %v", err)
				return
			}
			for _, s := range done {
				cancelled[bodyOf[s]] = true
			}
		}
	}()
	clk.Advance(time.Millisecond) // due: released while the cancels run
	wg.Wait()
	tlSettleTimers(b)
	sdWantHeld(t, b, "dx", 0)
	tlEventuallyReady(t, b, "q", n-len(cancelled))
	got := dvBodies(b.Session(t).DrainDeliveries("q"))
	seen := map[string]bool{}
	for _, body := range got {
		if seen[body] || cancelled[body] {
			t.Fatalf("%q delivered twice or delivered and cancelled (cancelled %v)", body, cancelled[body])
		}
		seen[body] = true
	}
	if len(seen)+len(cancelled) != n {
		t.Fatalf("%d delivered + %d cancelled, want %d", len(seen), len(cancelled), n)
	}
	t.Logf("%d cancelled, %d released", len(cancelled), len(seen))
}
