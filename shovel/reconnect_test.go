package shovel_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"go.uber.org/goleak"

	"github.com/brokerd/brokerd/broker/brokertest"
	"github.com/brokerd/brokerd/shovel"
)

// TestShovelDestinationRestart stops the destination brokerd in the middle
// of an on-confirm shovel and starts it again on the same store: the
// shovel waits in "starting" with the reason, reconnects, and every
// message arrives; a message is there twice at most when it was in
// flight (at most src-prefetch-count of them), none is lost.
func TestShovelDestinationRestart(t *testing.T) {
	t.Run("stop", func(t *testing.T) { testDestinationRestart(t, false) })
	// crash: the destination's store as after a kill -9.
	t.Run("crash", func(t *testing.T) { testDestinationRestart(t, true) })
}

func testDestinationRestart(t *testing.T, crash bool) {
	const n, prefetch = 3000, 50
	a, b := brokertest.Start(t, brokertest.Config{}), brokertest.Start(t, brokertest.Config{})
	sa, sb := a.Session(t), b.Session(t)
	sa.Declare("src", nil, brokertest.Durable)
	sb.Declare("dst", nil, brokertest.Durable)
	publishN(sa, "src", 0, n)
	m := manager(t, shovel.Options{})
	m.Start("/", "r", def(t, map[string]any{
		"src-uri": a.URL, "src-queue": "src", "dest-uri": b.URL, "dest-queue": "dst",
		"src-prefetch-count": prefetch, "reconnect-delay": 0.05,
	}))
	brokertest.Eventually(t, "some forwarded", func() bool { return status(m, "/", "r").Forwarded >= 300 })
	if crash {
		b.Crash()
	} else {
		b.Stop()
		st := waitState(t, m, "/", "r", shovel.StateStarting)
		if !strings.Contains(st.Reason, "destination") {
			t.Fatalf("reason %q, want the destination's failure", st.Reason)
		}
		b.Restart()
	}
	sb = b.Session(t)
	waitState(t, m, "/", "r", shovel.StateRunning)
	brokertest.Eventually(t, "source settled", func() error {
		q, err := a.Broker.Queue("/", "src")
		if err != nil {
			return err
		}
		if q.Messages() != 0 {
			return fmt.Errorf("source holds %d ready, %d unacked", q.Ready, q.Unacked)
		}
		return nil
	})
	m.Stop("/", "r")
	seen := make([]int, n)
	dups := 0
	for _, d := range sb.DrainDeliveries("dst") {
		i, err := strconv.Atoi(string(d.Body))
		if err != nil || i < 0 || i >= n {
			t.Fatalf("unexpected message %q", d.Body)
		}
		if seen[i]++; seen[i] > 1 {
			dups++
		}
	}
	for i, c := range seen {
		if c == 0 {
			t.Fatalf("message %d lost", i)
		}
	}
	if dups > prefetch {
		t.Fatalf("%d duplicates, more than the %d that can be in flight", dups, prefetch)
	}
	if got := sa.Ready("src"); got != 0 {
		t.Fatalf("source holds %d after the stop", got)
	}
	t.Logf("%d messages, %d duplicates", n, dups)
}

// TestShovelSourceDiesRequeues closes the source's connection under the
// shovel while the destination withholds its confirms (a resource alarm
// blocks its publishes): the unconfirmed deliveries go back to the source,
// flagged redelivered, and are forwarded once the shovel reconnects.
func TestShovelSourceDiesRequeues(t *testing.T) {
	a, b := brokertest.Start(t, brokertest.Config{}), brokertest.Start(t, brokertest.Config{})
	sa, sb := a.Session(t), b.Session(t)
	sa.Declare("src", nil)
	sb.Declare("dst", nil)
	m := manager(t, shovel.Options{})
	m.Start("/", "blk", def(t, map[string]any{
		"src-uri": a.URL, "src-queue": "src", "dest-uri": b.URL, "dest-queue": "dst", "reconnect-delay": 0.05,
	}))
	waitState(t, m, "/", "blk", shovel.StateRunning)
	b.Broker.SetAlarm("memory", true)
	publishN(sa, "src", 0, 10)
	brokertest.Eventually(t, "blocked_status blocked", func() bool { return status(m, "/", "blk").BlockedStatus == "blocked" })
	// Every message is delivered to the shovel and none confirmed.
	brokertest.Eventually(t, "all delivered", func() bool { return sa.Ready("src") == 0 })
	if f := status(m, "/", "blk").Forwarded; f != 0 {
		t.Fatalf("%d forwarded while the destination is blocked", f)
	}
	// Stopped while blocked: the unconfirmed deliveries are back in the
	// source, flagged redelivered.
	m.Stop("/", "blk")
	for i, d := range sa.GetN("src", 10) {
		if string(d.Body) != fmt.Sprint(i) || !d.Redelivered {
			t.Fatalf("source message %d: %q redelivered %v", i, d.Body, d.Redelivered)
		}
		if err := d.Nack(false, true); err != nil {
			t.Fatal(err)
		}
	}
	sa.Sync()
	// Again, the source's connection dying this time: the shovel
	// reconnects, and once the destination is unblocked every message
	// arrives (a message the destination took before the first stop may
	// arrive twice).
	m.Start("/", "blk", def(t, map[string]any{
		"src-uri": a.URL, "src-queue": "src", "dest-uri": b.URL, "dest-queue": "dst", "reconnect-delay": 0.05,
	}))
	brokertest.Eventually(t, "blocked_status blocked", func() bool { return status(m, "/", "blk").BlockedStatus == "blocked" })
	brokertest.Eventually(t, "all delivered", func() bool { return sa.Ready("src") == 0 })
	var shovelConn string
	for _, c := range a.Broker.Connections("") {
		if n, _ := c.ClientProperties.Get("connection_name"); n == "Shovel blk" {
			shovelConn = c.Name
		}
	}
	if err := a.Broker.CloseConnection(shovelConn, "test"); err != nil {
		t.Fatal(err)
	}
	b.Broker.SetAlarm("memory", false)
	seen := map[string]bool{}
	brokertest.Eventually(t, "every message at the destination", func() error {
		for _, d := range sb.DrainDeliveries("dst") {
			seen[string(d.Body)] = true
		}
		if len(seen) < 10 {
			return fmt.Errorf("%d of 10 (%v); source holds %d; status %+v", len(seen), seen, sa.Ready("src"), status(m, "/", "blk"))
		}
		return nil
	})
	brokertest.Eventually(t, "blocked_status running", func() bool { return status(m, "/", "blk").BlockedStatus == "running" })
}

// TestShovelRestart reconnects a running shovel, and a terminated one.
func TestShovelRestart(t *testing.T) {
	a, b := brokertest.Start(t, brokertest.Config{}), brokertest.Start(t, brokertest.Config{})
	sa, sb := a.Session(t), b.Session(t)
	sa.Declare("src", nil)
	m := manager(t, shovel.Options{})
	if m.Restart("/", "none") {
		t.Fatal("Restart of no shovel returned true")
	}
	m.Start("/", "rs", def(t, map[string]any{
		"src-uri": a.URL, "src-queue": "src", "dest-uri": b.URL, "dest-queue": "dst", "reconnect-delay": 0,
	}))
	waitState(t, m, "/", "rs", shovel.StateRunning)
	conns := func() []string {
		var out []string
		for _, c := range a.Broker.Connections("") {
			if n, _ := c.ClientProperties.Get("connection_name"); n == "Shovel rs" {
				out = append(out, c.Name)
			}
		}
		return out
	}
	before := conns()
	if !m.Restart("/", "rs") {
		t.Fatal("Restart returned false")
	}
	waitState(t, m, "/", "rs", shovel.StateRunning)
	after := conns()
	if len(before) != 1 || len(after) != 1 || before[0] == after[0] {
		t.Fatalf("source connections %q before Restart, %q after: want a new one", before, after)
	}
	publishN(sa, "src", 0, 3)
	wantBodies(t, consume(t, sb, "dst", 3), 0)

	// reconnect-delay 0: a failure terminates the shovel; Restart starts
	// it again. (Once the source settled: a delivery still unacked would
	// come back, and be forwarded twice.)
	brokertest.Eventually(t, "source settled", func() bool {
		q, err := a.Broker.Queue("/", "src")
		return err == nil && q.Messages() == 0
	})
	if err := a.Broker.CloseConnection(after[0], "test"); err != nil {
		t.Fatal(err)
	}
	st := waitState(t, m, "/", "rs", shovel.StateTerminated)
	if !strings.Contains(st.Reason, "source") {
		t.Fatalf("reason %q", st.Reason)
	}
	m.Restart("/", "rs")
	waitState(t, m, "/", "rs", shovel.StateRunning)
	publishN(sa, "src", 3, 2)
	wantBodies(t, consume(t, sb, "dst", 2), 3)
}

// TestShovelStopLeavesNoGoroutine stops shovels (remote and local, one
// of them reconnecting to a port nobody listens on) and checks that
// nothing the engine or its client started is left.
func TestShovelStopLeavesNoGoroutine(t *testing.T) {
	a, b := brokertest.Start(t, brokertest.Config{}), brokertest.Start(t, brokertest.Config{})
	sa, sb := a.Session(t), b.Session(t)
	sa.Declare("src", nil)
	publishN(sa, "src", 0, 100)
	lc := local(t, a)
	ignore := goleak.IgnoreCurrent()
	m := shovel.NewManager(shovel.Options{Local: lc})
	m.Start("/", "remote", def(t, map[string]any{"src-uri": a.URL, "src-queue": "src", "dest-uri": b.URL, "dest-queue": "dst"}))
	m.Start("/", "local", def(t, map[string]any{"src-uri": "amqp://", "src-queue": "src2", "dest-uri": b.URL, "dest-queue": "dst"}))
	m.Start("/", "down", def(t, map[string]any{"src-uri": "amqp://127.0.0.1:1", "src-queue": "q", "dest-uri": b.URL}))
	waitState(t, m, "/", "remote", shovel.StateRunning)
	waitState(t, m, "/", "local", shovel.StateRunning)
	waitState(t, m, "/", "down", shovel.StateStarting)
	consume(t, sb, "dst", 100)
	m.Stop("/", "remote")
	m.Close()
	m.Start("/", "late", def(t, map[string]any{"src-uri": a.URL, "src-queue": "src", "dest-uri": b.URL}))
	if s := m.Status(); len(s) != 0 {
		t.Fatalf("status after Close: %+v", s)
	}
	// The brokers' ends of the closed connections end as the client hangs
	// up; VerifyNone retries until then.
	goleak.VerifyNone(t, ignore)
	_ = amqp091.Table{}
}
