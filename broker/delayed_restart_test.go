// Tests of delayed exchanges across restarts, and of their deletion.

package broker_test

// Tests of what a delayed exchange's held messages become across a
// restart or a crash (kept when durable, released at their due time and
// not before, once each), when the exchange is transient, deleted (its
// held messages go with it), auto-deleted or its vhost deleted, and when
// recovery finds a holding queue whose exchange is gone.

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
	"github.com/brokerd/brokerd/store"
)

// Held persistent messages of a durable delayed exchange survive a crash
// (the store as after kill -9) and are released at their due time after
// it, not before, each once; a transient one is gone, as from a durable
// queue. One whose due time passed while the broker was down is released
// at the start.
func TestDelayedSurvivesCrash(t *testing.T) {
	t.Parallel()
	clk := brokertest.NewClock()
	b := brokertest.Start(t, brokertest.Config{Clock: clk})
	ch := b.Session(t, brokertest.Persistent)
	sdDeclare(t, ch, "dx", "direct", nil, brokertest.Durable)
	ch.Declare("q", nil, brokertest.Durable)
	ch.Bind("q", "k", "dx", nil)
	start := clk.Now()
	// More than the page windows hold: most wait in the store only.
	const n = 20
	for i := range n {
		ch.Publish("dx", "k", sdPub(fmt.Sprintf("s%02d", i), sdDelay(1000)))
		ch.Publish("dx", "k", sdPub(fmt.Sprintf("l%02d", i), sdDelay(5000)))
	}
	ch.Publish("dx", "k", amqp091.Publishing{Body: []byte("transient"), Headers: sdDelay(1000), DeliveryMode: amqp091.Transient})
	sdWantHeld(t, b, "dx", 2*n+1)

	b.Crash()
	sdWantHeld(t, b, "dx", 2*n)
	ch = b.Session(t)
	sdAdvanceTo(b, clk, start, time.Second-time.Millisecond)
	ch.WantReady("q", 0)
	sdAdvanceTo(b, clk, start, time.Second)
	tlEventuallyReady(t, b, "q", n)
	sdWantHeld(t, b, "dx", n)

	b.Crash()
	sdAdvanceTo(b, clk, start, 5*time.Second-time.Millisecond)
	sdWantHeld(t, b, "dx", n)
	ch = b.Session(t, brokertest.Persistent)
	ch.WantReady("q", n)
	sdAdvanceTo(b, clk, start, 5*time.Second)
	tlEventuallyReady(t, b, "q", 2*n)
	ds := ch.DrainDeliveries("q")
	var got []string
	for _, d := range ds {
		got = append(got, string(d.Body))
		if want := map[byte]int64{'s': -1000, 'l': -5000}[d.Body[0]]; sdXDelay(t, d) != want {
			t.Fatalf("%q: x-delay %d, want %d", d.Body, sdXDelay(t, d), want)
		}
	}
	var want []string
	for _, p := range []string{"s", "l"} {
		for i := range n {
			want = append(want, fmt.Sprintf("%s%02d", p, i))
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("released %q, want %q", got, want)
	}

	// Due while the broker was down: released when it starts.
	ch.Publish("dx", "k", sdPub("while-down", sdDelay(1000)))
	b.Stop()
	clk.Advance(time.Minute)
	b.Restart()
	tlEventuallyReady(t, b, "q", 1)
	sdWantHeld(t, b, "dx", 0)
	b.Session(t).WantDrain("q", "while-down")
	b.Restart()
	sdWantHeld(t, b, "dx", 0)
	b.Session(t).WantReady("q", 0) // released once
}

// A transient delayed exchange and what it holds are gone after a
// restart, as a transient queue.
func TestDelayedTransientExchange(t *testing.T) {
	t.Parallel()
	clk := brokertest.NewClock()
	b := brokertest.Start(t, brokertest.Config{Clock: clk})
	ch := b.Session(t, brokertest.Persistent)
	sdDeclare(t, ch, "dx", "fanout", nil)
	ch.Declare("q", nil, brokertest.Durable)
	ch.Bind("q", "", "dx", nil)
	for i := range 10 {
		ch.Publish("dx", "", sdPub(fmt.Sprint(i), sdDelay(1000)))
	}
	sdWantHeld(t, b, "dx", 10)
	b.Restart()
	if _, err := b.Broker.Exchange("/", "dx"); err == nil {
		t.Fatal("transient delayed exchange recovered")
	}
	clk.Advance(time.Hour)
	tlSettleTimers(b)
	b.Session(t).WantReady("q", 0)

	// Released before a restart into a durable queue: the persistent
	// messages a transient exchange held are stored there.
	ch = b.Session(t, brokertest.Persistent)
	sdDeclare(t, ch, "dx", "fanout", nil)
	ch.Bind("q", "", "dx", nil)
	for i := range 10 {
		ch.Publish("dx", "", sdPub(fmt.Sprint(i), sdDelay(1000)))
	}
	sdRunClock(b, clk, time.Second)
	tlEventuallyReady(t, b, "q", 10)
	b.Crash()
	b.Session(t).WantDrain("q", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9")
}

// exchange.delete drops what the exchange holds, for good (a new exchange
// of the same name starts empty, also after a restart); if-unused refuses
// while it has bindings. An auto-delete delayed exchange goes, with what
// it holds, with its last binding, whether unbound or its queue deleted.
func TestDelayedExchangeDeleteDropsHeld(t *testing.T) {
	t.Parallel()
	clk := brokertest.NewClock()
	b := brokertest.Start(t, brokertest.Config{Clock: clk})
	ch := b.Session(t, brokertest.Persistent)
	sdDeclare(t, ch, "dx", "direct", nil, brokertest.Durable)
	ch.Declare("q", nil, brokertest.Durable)
	ch.Bind("q", "k", "dx", nil)
	for i := range 10 {
		ch.Publish("dx", "k", sdPub(fmt.Sprint(i), sdDelay(1000)))
	}
	err := b.Session(t).ExchangeDelete("dx", true, false)
	tlWantChannelError(t, err, 406, "PRECONDITION_FAILED - exchange 'dx' in vhost '/' in use")
	sdWantHeld(t, b, "dx", 10)
	if err := ch.ExchangeDelete("dx", false, false); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Broker.Exchange("/", "dx"); err == nil {
		t.Fatal("exchange still there after delete-ok")
	}
	sdDeclare(t, ch, "dx", "direct", nil, brokertest.Durable)
	ch.Bind("q", "k", "dx", nil)
	sdWantHeld(t, b, "dx", 0)
	clk.Advance(time.Hour)
	tlSettleTimers(b)
	b.Crash()
	sdWantHeld(t, b, "dx", 0)
	ch = b.Session(t, brokertest.Persistent)
	ch.WantReady("q", 0)

	// Auto-delete: unbound, then through its queue's deletion.
	for _, how := range []string{"unbind", "queue.delete"} {
		if err := ch.ExchangeDeclare("ad", "x-delayed-message", true, true, false, false, amqp091.Table{"x-delayed-type": "direct"}); err != nil {
			t.Fatal(err)
		}
		ch.Declare("adq", nil, brokertest.Durable)
		ch.Bind("adq", "k", "ad", nil)
		ch.Publish("ad", "k", sdPub("held", sdDelay(1000)))
		sdWantHeld(t, b, "ad", 1)
		if how == "unbind" {
			if err := ch.QueueUnbind("adq", "k", "ad", nil); err != nil {
				t.Fatal(err)
			}
		} else if _, err := ch.QueueDelete("adq", false, false, false); err != nil {
			t.Fatal(err)
		}
		ch.Sync()
		if _, err := b.Broker.Exchange("/", "ad"); err == nil {
			t.Fatalf("%s: auto-delete delayed exchange still there without bindings", how)
		}
		ch.QueueDelete("adq", false, false, false)
	}
	b.Restart()
	if _, err := b.Broker.Exchange("/", "ad"); err == nil {
		t.Fatal("auto-deleted delayed exchange back after a restart")
	}
	// No holding queue record is left but dx's.
	var holds []string
	_ = b.Store.ScanMeta("", func(k string, _ []byte) bool {
		if strings.Contains(k, "amq.delayed/") {
			holds = append(holds, k)
		}
		return true
	})
	if len(holds) != 1 || !strings.Contains(holds[0], "amq.delayed/dx") {
		t.Fatalf("holding queue records %q, want dx's alone", holds)
	}
}

// Deleting a vhost deletes its delayed exchanges with what they hold.
func TestDelayedVHostDelete(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, brokertest.Config{})
	if err := b.Broker.PutVHost(broker.VHostInfo{Name: "v2"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Broker.SetPermissions("guest", "v2", ".*", ".*", ".*"); err != nil {
		t.Fatal(err)
	}
	conn, err := amqp091.Dial(strings.TrimSuffix(b.URL, "/") + "/v2")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch := brokertest.NewSession(t, conn, brokertest.Persistent)
	sdDeclare(t, ch, "dx", "direct", nil, brokertest.Durable)
	ch.Publish("dx", "k", sdPub("held", sdDelay(600_000)))
	conn.Close()
	if err := b.Broker.DeleteVHost("v2"); err != nil {
		t.Fatal(err)
	}
	var left []string
	_ = b.Store.ScanMeta("", func(k string, _ []byte) bool {
		if strings.Contains(k, "v2") {
			left = append(left, k)
		}
		return true
	})
	if len(left) != 0 {
		t.Fatalf("records of the deleted vhost left: %q", left)
	}
	var queues []store.QueueID
	_ = b.Store.Queues(func(id store.QueueID, st store.QueueState) bool {
		for _, l := range st.Levels {
			if l.Count > 0 {
				queues = append(queues, id)
			}
		}
		return true
	})
	if len(queues) != 0 {
		t.Fatalf("store queues with entries left: %v", queues)
	}
}

// A holding queue's record whose exchange is gone is dropped at recovery,
// with its messages and a warning, as any dangling definition.
func TestDelayedRecoveryDropsOrphanHold(t *testing.T) {
	logs := brokertest.NewLog(slog.LevelWarn)
	b := brokertest.Start(t, brokertest.Config{Broker: broker.Options{Logger: slog.New(logs)}})
	var d broker.DefsForTest
	const lost = store.QueueID(900)
	d.Queue("/", "amq.delayed/gone", lost)
	d.Exchange("/", "plain", "direct")
	d.Queue("/", "amq.delayed/plain", lost+1)
	msg := &store.Message{ID: b.Store.AllocMsgID(), Persistent: true}
	errc := make(chan error, 1)
	b.Store.Apply(&store.Batch{
		Messages: []*store.Message{msg},
		Puts:     []store.Entry{{Ref: store.Ref{Queue: lost, Seq: 1}, Msg: msg, Deadline: 1}},
		Meta:     d.Ops(),
	}, func(err error) { errc <- err })
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	logs.Take()
	b.Restart()
	want := []string{
		`recovery: dropping the held messages of an unknown delayed exchange vhost="/" exchange="gone"`,
		`recovery: dropping the held messages of an unknown delayed exchange vhost="/" exchange="plain"`,
	}
	got := logs.Take()
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("warnings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var count int64
	_ = b.Store.Queues(func(id store.QueueID, st store.QueueState) bool {
		if id == lost {
			for _, l := range st.Levels {
				count += l.Count
			}
		}
		return true
	})
	if count != 0 {
		t.Fatalf("the orphan's %d entries are still stored", count)
	}
}
