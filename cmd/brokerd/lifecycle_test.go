package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// notifySocket is a test NOTIFY_SOCKET: the datagrams brokerd sends, in
// order.
type notifySocket struct {
	t    *testing.T
	path string
	msgs chan string
}

func newNotifySocket(t *testing.T) *notifySocket {
	t.Helper()
	// A unix socket path must fit in 108 bytes: t.TempDir's may not.
	dir, err := os.MkdirTemp("", "sdn")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "notify")
	l, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	n := &notifySocket{t: t, path: path, msgs: make(chan string, 10000)}
	go func() {
		buf := make([]byte, 4096)
		for {
			k, err := l.Read(buf)
			if err != nil {
				return
			}
			n.msgs <- string(buf[:k])
		}
	}()
	return n
}

// next returns the next message that is not WATCHDOG=1.
func (n *notifySocket) next() string {
	n.t.Helper()
	for {
		select {
		case m := <-n.msgs:
			if m != "WATCHDOG=1" {
				return m
			}
		case <-time.After(20 * time.Second):
			n.t.Fatal("no sd_notify message")
		}
	}
}

// awaitWatchdog waits for a WATCHDOG=1 and returns the other messages
// received before it.
func (n *notifySocket) awaitWatchdog() []string {
	n.t.Helper()
	var other []string
	for {
		select {
		case m := <-n.msgs:
			if m == "WATCHDOG=1" {
				return other
			}
			other = append(other, m)
		case <-time.After(20 * time.Second):
			n.t.Fatal("no WATCHDOG=1")
		}
	}
}

// fillQueues declares durable queues q0..q(n-1) in a fresh broker on data
// and publishes each count persistent messages, confirmed; then kills the
// broker (SIGKILL), so that the next start replays its log.
func fillQueues(t *testing.T, data string, queues, count int) {
	t.Helper()
	d := startDaemon(t, "", "-listen", "127.0.0.1:0", "-mgmt-listen", "off", "-data", data)
	c, err := amqp091.Dial(d.url())
	if err != nil {
		t.Fatal(err)
	}
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for i := range queues {
		q := fmt.Sprintf("q%d", i)
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		var confs []*amqp091.DeferredConfirmation
		for j := range count {
			dc, err := ch.PublishWithDeferredConfirm("", q, false, false, amqp091.Publishing{DeliveryMode: 2, Body: []byte(fmt.Sprint(j))})
			if err != nil {
				t.Fatal(err)
			}
			confs = append(confs, dc)
		}
		for _, dc := range confs {
			if ok, err := dc.WaitContext(t.Context()); !ok || err != nil {
				t.Fatalf("publish not confirmed: %v %v", ok, err)
			}
		}
	}
	d.cmd.Process.Kill()
	d.wait()
	c.Close()
}

// The sd_notify protocol, in order: STATUS lines while a store with data
// recovers, READY=1 once the listener accepts, WATCHDOG=1 with
// WATCHDOG_USEC set, RELOADING=1 (with MONOTONIC_USEC) … READY=1 around a
// SIGHUP, STOPPING=1 at SIGTERM.
func TestSdNotify(t *testing.T) {
	t.Parallel()
	data := filepath.Join(t.TempDir(), "data")
	fillQueues(t, data, 3, 50)

	sock := newNotifySocket(t)
	d := startDaemonEnv(t, "", []string{"NOTIFY_SOCKET=" + sock.path, "WATCHDOG_USEC=400000"},
		"-listen", "127.0.0.1:0", "-mgmt-listen", "off", "-data", data)
	var before []string
	for {
		m := sock.next()
		if strings.HasPrefix(m, "READY=1") {
			break
		}
		before = append(before, m)
	}
	// READY: the listener accepts.
	c, err := amqp091.Dial(d.url())
	if err != nil {
		t.Fatalf("dial after READY=1: %v", err)
	}
	defer c.Close()
	want := []string{"STATUS=recovering: WAL 0 %", "STATUS=recovering: WAL 100 %", "STATUS=recovering: 0/3 queues", "STATUS=recovering: 3/3 queues"}
	i := 0
	for _, m := range before {
		if i < len(want) && m == want[i] {
			i++
		} else if !strings.HasPrefix(m, "STATUS=recovering: ") {
			t.Errorf("before READY=1: %q", m)
		}
	}
	if i < len(want) {
		t.Fatalf("before READY=1: %q; want %q in this order among them", before, want)
	}
	if other := sock.awaitWatchdog(); len(other) > 0 {
		t.Fatalf("between READY=1 and WATCHDOG=1: %q", other)
	}

	d.cmd.Process.Signal(syscall.SIGHUP)
	if m := sock.next(); !strings.HasPrefix(m, "RELOADING=1\nMONOTONIC_USEC=") {
		t.Fatalf("after SIGHUP: %q, want RELOADING=1 with MONOTONIC_USEC", m)
	}
	if m := sock.next(); !strings.HasPrefix(m, "READY=1") {
		t.Fatalf("after RELOADING=1: %q, want READY=1", m)
	}
	roundTrip(t, c)

	d.cmd.Process.Signal(syscall.SIGTERM)
	if m := sock.next(); !strings.HasPrefix(m, "STOPPING=1") {
		t.Fatalf("after SIGTERM: %q, want STOPPING=1", m)
	}
	if code := d.wait(); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// busyClients runs two publishers (persistent messages to queue q, with
// confirms) and a consumer (manual acks) against url until the broker
// closes their connections. enough is closed after 300 confirms; wait
// waits for the clients to end and returns the bodies confirmed and
// those delivered.
func busyClients(t *testing.T, url string) (enough <-chan struct{}, wait func() (confirmed, delivered map[string]bool)) {
	t.Helper()
	setup, err := amqp091.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	sch, _ := setup.Channel()
	if _, err := sch.QueueDeclare("q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	setup.Close()

	var mu sync.Mutex
	confirmed := map[string]bool{}
	delivered := map[string]bool{}
	enoughc := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	var conns []*amqp091.Connection
	for p := range 2 {
		c, err := amqp091.Dial(url)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		ch, err := c.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if err := ch.Confirm(false); err != nil {
			t.Fatal(err)
		}
		acks := ch.NotifyPublish(make(chan amqp091.Confirmation, 100000))
		wg.Add(1)
		go func() {
			defer wg.Done()
			var sent []string // by delivery tag - 1
			got := 0          // confirms received, acks and nacks
			record := func(cf amqp091.Confirmation) {
				got++
				if cf.Ack {
					mu.Lock()
					confirmed[sent[cf.DeliveryTag-1]] = true
					if len(confirmed) >= 300 {
						once.Do(func() { close(enoughc) })
					}
					mu.Unlock()
				}
			}
			for n := 0; ; n++ {
				id := fmt.Sprintf("p%d-%d", p, n)
				if err := ch.Publish("", "q", false, false, amqp091.Publishing{DeliveryMode: 2, Body: []byte(id)}); err != nil {
					break // closed by the shutdown
				}
				sent = append(sent, id)
				// At most 50 unconfirmed.
				for len(acks) > 0 || len(sent)-got > 50 {
					cf, ok := <-acks
					if !ok {
						return
					}
					record(cf)
				}
			}
			for cf := range acks {
				record(cf)
			}
		}()
	}
	cc, err := amqp091.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	conns = append(conns, cc)
	cch, _ := cc.Channel()
	cch.Qos(20, 0, false)
	dels, err := cch.Consume("q", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for m := range dels {
			mu.Lock()
			delivered[string(m.Body)] = true
			mu.Unlock()
			m.Ack(false)
		}
	}()
	return enoughc, func() (map[string]bool, map[string]bool) {
		wg.Wait()
		for _, c := range conns {
			c.Close()
		}
		return confirmed, delivered
	}
}

// checkNoLoss restarts brokerd on data and checks that every confirmed
// message was delivered before or is in queue q now.
func checkNoLoss(t *testing.T, data string, confirmed, delivered map[string]bool) {
	t.Helper()
	d := startDaemon(t, "", "-listen", "127.0.0.1:0", "-mgmt-listen", "off", "-data", data)
	c, err := amqp091.Dial(d.url())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ch, _ := c.Channel()
	remaining := map[string]bool{}
	for {
		m, ok, err := ch.Get("q", true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		remaining[string(m.Body)] = true
	}
	lost := 0
	for id := range confirmed {
		if !delivered[id] && !remaining[id] {
			lost++
			if lost < 10 {
				t.Errorf("confirmed message %s lost", id)
			}
		}
	}
	t.Logf("%d confirmed, %d delivered before the shutdown, %d in the queue after the restart", len(confirmed), len(delivered), len(remaining))
	if lost > 0 {
		t.Fatalf("%d confirmed messages lost", lost)
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(); code != 0 {
		t.Fatalf("restarted brokerd exited %d", code)
	}
}

// SIGTERM while publishers (with confirms) and a consumer are busy exits
// 0, and every confirmed message is either delivered before the shutdown
// or in the queue after a restart.
func TestSIGTERMKeepsConfirmedMessages(t *testing.T) {
	t.Parallel()
	data := filepath.Join(t.TempDir(), "data")
	d := startDaemon(t, "", "-listen", "127.0.0.1:0", "-mgmt-listen", "off", "-data", data)
	enough, wait := busyClients(t, d.url())
	select {
	case <-enough:
	case <-time.After(30 * time.Second):
		t.Fatal("300 publishes not confirmed")
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(); code != 0 {
		t.Fatalf("exit %d after SIGTERM:\n%s", code, d.log())
	}
	if d.count("did not") > 0 || d.count("not all delivered") > 0 {
		t.Errorf("the shutdown was not clean:\n%s", d.log())
	}
	confirmed, delivered := wait()
	checkNoLoss(t, data, confirmed, delivered)
}

// A second SIGTERM during a shutdown held up by a client that never
// answers connection.close exits at once, with status 1, and loses no
// confirmed message either.
func TestSecondSIGTERMForcesExit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	cfgFile := filepath.Join(dir, "brokerd.toml")
	if err := os.WriteFile(cfgFile, []byte("[amqp]\nhandshake_timeout = \"1m\"\n[daemon]\nshutdown_timeout = \"1m\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, "", "-config", cfgFile, "-listen", "127.0.0.1:0", "-mgmt-listen", "off", "-data", data)
	url := d.url()
	// A peer that sends the protocol header and then nothing: the
	// shutdown waits for its close-ok.
	nc, err := net.Dial("tcp", strings.TrimSuffix(strings.Split(url, "@")[1], "/"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.Write([]byte("AMQP\x00\x00\x09\x01")); err != nil {
		t.Fatal(err)
	}
	enough, wait := busyClients(t, url)
	select {
	case <-enough:
	case <-time.After(30 * time.Second):
		t.Fatal("300 publishes not confirmed")
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	d.awaitLine("shutting down")
	d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(); code != 1 {
		t.Fatalf("exit %d after a second SIGTERM, want 1:\n%s", code, d.log())
	}
	if d.count("second signal: exiting without closing the store") != 1 {
		t.Errorf("no line for the forced exit:\n%s", d.log())
	}
	confirmed, delivered := wait()
	checkNoLoss(t, data, confirmed, delivered)
}
