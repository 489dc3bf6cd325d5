// Tests of unfinished content against the memory alarm and the server-wide content budget.

package broker_test

// Bodies in assembly against the memory alarm and the server-wide budget of
// unfinished content (issue 22, item 12): while an alarm is raised a
// publisher is stopped at its next content frame, not once its body is
// whole; and however many connections send bodies at once, what they hold
// unfinished is bounded, without deadlock.

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
)

// patternBody is message msg of publisher pub: size bytes that tell
// publishers and messages apart, so a body that arrives mixed up or cut
// short is noticed.
func patternBody(pub, msg, size int) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(pub*31 + msg*7 + i + i>>12)
	}
	return b
}

// dialFrameSize connects with a frame size of frame bytes, so a body is
// many frames.
func dialFrameSize(t *testing.T, b *brokertest.Instance, frame int) (*amqp091.Connection, *amqp091.Channel) {
	t.Helper()
	c, err := amqp091.DialConfig(b.URL, amqp091.Config{FrameSize: frame, Heartbeat: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return c, ch
}

// awaitBlocking waits for one connection.blocked (active) or unblocked on
// every channel of bs.
func awaitBlocking(t *testing.T, bs []chan amqp091.Blocking, active bool) {
	t.Helper()
	for i, c := range bs {
		select {
		case bl := <-c:
			if bl.Active != active {
				t.Fatalf("publisher %d: blocking %+v, want active=%v", i, bl, active)
			}
		case <-time.After(brokertest.Wait):
			t.Fatalf("publisher %d: no connection.blocked(active=%v)", i, active)
		}
	}
}

// Publishers sending 4 MiB bodies in 16 KiB frames: with the alarm raised
// before they start, the broker takes in none of their body bytes; with it
// raised while later bodies are under way, it stops taking them in at each
// one's next frame (defect: a connection was held only at a
// complete publish, so every body under way was read whole first — 8
// connections pushed 1.9 GiB past a 1 GiB watermark). After the alarm
// clears every message arrives intact.
func TestAlarmStopsBodiesAtTheNextFrame(t *testing.T) {
	// No publisher can be done before the alarm comes back: each sends
	// more than all the bytes the alarm waits for (pubs+1/4 bodies), so
	// even one the scheduler favoured over the others has bodies left
	// (with 4 bodies each, one publisher could send all 16 MiB before the
	// others' first frames and never see the second connection.blocked).
	const pubs, msgs, size = 3, 8, 4 << 20
	const frame = 16 << 10
	b := brokertest.Start(t, brokertest.Config{})
	srv := b.Server()
	_, cons := b.Channel(t)
	if _, err := cons.QueueDeclare("bodies", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}

	b.Broker.SetAlarm(broker.AlarmMemory, true)
	before := srv.ContentStats().Received
	var blocked []chan amqp091.Blocking
	var chans []*amqp091.Channel
	for range pubs {
		c, ch := dialFrameSize(t, b, frame)
		blocked = append(blocked, c.NotifyBlocked(make(chan amqp091.Blocking, 4)))
		chans = append(chans, ch)
	}
	var want [][]byte
	for p := range pubs {
		for m := range msgs {
			want = append(want, patternBody(p, m, size))
		}
	}
	// Cleanups run last first: the alarm clears before the connections
	// close, or a test that failed while it was raised would hang there
	// (a held connection does not read the client's connection.close).
	t.Cleanup(func() { b.Broker.SetAlarm(broker.AlarmMemory, false) })
	errs := make(chan error, pubs)
	var sent sync.WaitGroup
	sent.Add(msgs * pubs)
	for p, ch := range chans {
		go func() {
			for m := range msgs {
				err := ch.PublishWithContext(context.Background(), "", "bodies", false, false, amqp091.Publishing{Body: want[p*msgs+m]})
				if err != nil {
					errs <- fmt.Errorf("publisher %d message %d: %w", p, m, err)
				}
				sent.Done()
			}
		}()
	}
	// Phase 1: blocked at the content header, no body byte taken in.
	awaitBlocking(t, blocked, true)
	if got := srv.ContentStats().Received - before; got != 0 {
		t.Fatalf("the broker took in %d body bytes while the alarm was raised before the publishes, want 0", got)
	}
	if _, err := cons.QueueDeclarePassive("bodies", false, false, false, false, nil); err != nil { // a round trip
		t.Fatal(err)
	}
	if got := srv.ContentStats().Received - before; got != 0 {
		t.Fatalf("the broker took in %d body bytes while the alarm was raised before the publishes, want 0", got)
	}

	// Phase 2: the first bodies go through; the alarm comes back while
	// later ones are under way.
	b.Broker.SetAlarm(broker.AlarmMemory, false)
	awaitBlocking(t, blocked, false)
	brokertest.Eventually(t, "the first bodies received and part of the second", func() bool {
		return srv.ContentStats().Received-before >= pubs*size+pubs*size/4
	})
	b.Broker.SetAlarm(broker.AlarmMemory, true)
	awaitBlocking(t, blocked, true)
	held := srv.ContentStats().Received - before
	if _, err := cons.QueueDeclarePassive("bodies", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	// Each connection may have read the frame that found the alarm.
	if got := srv.ContentStats().Received - before; got > held+pubs*frame || got >= msgs*pubs*size {
		t.Fatalf("the broker took in %d body bytes after the alarm was raised (%d when every publisher was blocked; %d in all bodies)", got, held, msgs*pubs*size)
	}

	b.Broker.SetAlarm(broker.AlarmMemory, false)
	awaitBlocking(t, blocked, false)
	sent.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	tlEventuallyReady(t, b, "bodies", msgs*pubs)
	getEach(t, cons, "bodies", want)
}

// getEach gets len(want) messages from q and checks that they are the
// bodies of want, each once, in any order.
func getEach(t *testing.T, ch *amqp091.Channel, q string, want [][]byte) {
	t.Helper()
	want = slices.Clone(want)
	for range want {
		d, ok, err := ch.Get(q, true)
		if err != nil || !ok {
			t.Fatalf("get: ok %v err %v", ok, err)
		}
		i := slices.IndexFunc(want, func(b []byte) bool { return bytes.Equal(b, d.Body) })
		if i < 0 {
			t.Fatalf("a message of %d bytes matches none of the bodies sent (or came twice)", len(d.Body))
		}
		want[i] = nil
	}
}

// Four connections publishing 600 KiB bodies at once, with a budget of
// 1 MiB of unfinished content: the bodies being received never reserve
// more than the budget (one at a time here), a body larger than the
// budget goes through alone, and everything arrives intact (defect: no
// bound over connections at all, only each connection's own).
func TestUnfinishedContentBudgetBoundsConnectionsTogether(t *testing.T) {
	const budget = 1 << 20
	const pubs, msgs, size = 4, 5, 600 << 10
	b := brokertest.Start(t, brokertest.Config{Server: amqp.ServerConfig{MaxUnfinishedContentTotal: budget}})
	srv := b.Server()
	_, cons := b.Channel(t)
	if _, err := cons.QueueDeclare("budget", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	// Publisher p sends bodies[p]; the last one a body larger than the
	// budget.
	bodies := make([][][]byte, pubs+1)
	var want [][]byte
	for p := range pubs {
		for m := range msgs {
			bodies[p] = append(bodies[p], patternBody(p, m, size))
		}
		want = append(want, bodies[p]...)
	}
	bodies[pubs] = [][]byte{patternBody(pubs, 0, 3*budget/2)}
	want = append(want, bodies[pubs]...)
	errs := make(chan error, pubs+1)
	var wg sync.WaitGroup
	for p := range pubs + 1 {
		_, ch := b.Channel(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m, body := range bodies[p] {
				if err := ch.PublishWithContext(context.Background(), "", "budget", false, false, amqp091.Publishing{Body: body}); err != nil {
					errs <- fmt.Errorf("publisher %d message %d: %w", p, m, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	tlEventuallyReady(t, b, "budget", len(want))
	st := srv.ContentStats()
	if st.Peak > budget || st.Limit != budget {
		t.Fatalf("content stats %+v: the bodies being received reserved more than the budget", st)
	}
	if st.Reserved != 0 {
		t.Fatalf("content stats %+v: reservations left after every body completed", st)
	}
	getEach(t, cons, "budget", want)
}

// A connection interleaving two bodies on two channels, each taking most of
// the budget, is not deadlocked by it: it reserves past the budget for the
// second (its own frames would otherwise wait behind each other), while
// another connection's body waits for room and goes through once they are
// done; a connection that hangs up while it waits leaves nothing reserved.
func TestUnfinishedContentBudgetInterleavedBodiesDoNotDeadlock(t *testing.T) {
	const budget = 1 << 20
	const size = 800 << 10
	b := brokertest.Start(t, brokertest.Config{Server: amqp.ServerConfig{MaxUnfinishedContentTotal: budget}})
	srv := b.Server()
	_, ch := b.Channel(t)
	if _, err := ch.QueueDeclare("interleaved", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	r := dialRawOpen(t, b.Addr)
	r.openChannel(1)
	r.openChannel(2)
	r.startPublish(1, "interleaved", size)
	r.startPublish(2, "interleaved", size)
	r.openChannel(3) // a round trip: both headers were taken in
	if st := srv.ContentStats(); st.Reserved != 2*size {
		t.Fatalf("reserved %d after two headers of %d, want %d (the second past the budget)", st.Reserved, size, 2*size)
	}

	// Another connection's body waits for room: its header is taken in,
	// then nothing until the first connection's bodies complete.
	w := dialRawOpen(t, b.Addr)
	w.openChannel(1)
	w.publish(1, "", "interleaved", patternBody(9, 0, size), amqp.FrameMinSize*8)
	// And a third that hangs up while waiting behind it.
	gone := dialRawOpen(t, b.Addr)
	gone.openChannel(1)
	gone.startPublish(1, "interleaved", size)

	one, two := patternBody(1, 0, size), patternBody(2, 0, size)
	const part = 32 << 10
	for off := 0; off < size; off += part {
		r.bodyFrame(1, one[off:off+part])
		r.bodyFrame(2, two[off:off+part])
	}
	gone.nc.Close()
	r.openChannel(4)
	tlEventuallyReady(t, b, "interleaved", 3)
	brokertest.Eventually(t, "every reservation given back", func() bool { return srv.ContentStats().Reserved == 0 })
	getEach(t, ch, "interleaved", [][]byte{one, two, patternBody(9, 0, size)})
}

// A connection waiting for the budget is not read, so its heartbeats go
// unheard: its heartbeat monitor starts again when the wait ends, and a
// wait longer than two heartbeat intervals does not cost it its
// connection.
func TestUnfinishedContentBudgetWaitKeepsTheConnection(t *testing.T) {
	t.Parallel()
	const hb = time.Second
	const budget = 64 << 10
	b := brokertest.Start(t, brokertest.Config{Server: amqp.ServerConfig{Heartbeat: hb, MaxUnfinishedContentTotal: budget}})
	srv := b.Server()
	_, ch := b.Channel(t)
	if _, err := ch.QueueDeclare("hb-budget", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	// A connection takes the whole budget and sends nothing more.
	r := dialRawOpen(t, b.Addr)
	r.openChannel(1)
	r.startPublish(1, "hb-budget", budget)
	r.openChannel(2) // a round trip: the reservation is made
	if st := srv.ContentStats(); st.Reserved != budget {
		t.Fatalf("reserved %d, want the budget, %d", st.Reserved, budget)
	}

	// Another, heartbeating every half interval, waits for it.
	w := dialRaw(t, b.Addr)
	w.handshake(rawOpts{TuneOk: func(tu amqp.ConnectionTune) amqp.ConnectionTuneOk {
		return amqp.ConnectionTuneOk{ChannelMax: tu.ChannelMax, FrameMax: tu.FrameMax, Heartbeat: uint16(hb / time.Second)}
	}})
	w.openChannel(1)
	body := patternBody(1, 0, 1000)
	w.startPublish(1, "hb-budget", uint64(len(body)))
	beat := amqp.AppendFrame(nil, amqp.Frame{Type: amqp.FrameHeartbeat})
	// Time is the point: the wait lasts more than the 2.25 intervals
	// after which a silent client is dropped.
	for range 6 {
		time.Sleep(hb / 2)
		w.mustWrite(beat)
	}
	if n := tlReady(t, b, "hb-budget"); n != 0 {
		t.Fatalf("%d messages enqueued while the budget was taken", n)
	}
	r.bodyFrame(1, patternBody(2, 0, budget))
	w.bodyFrame(1, body)
	w.openChannel(2) // still open: a round trip
	tlEventuallyReady(t, b, "hb-budget", 2)
	getEach(t, ch, "hb-budget", [][]byte{body, patternBody(2, 0, budget)})
}
