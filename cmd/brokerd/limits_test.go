package main

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/config"
)

// memoryDaemon starts brokerd on the memory store (it opens no files while
// running) with the configuration text extra and the environment env.
func memoryDaemon(t *testing.T, extra string, env ...string) *daemon {
	t.Helper()
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "brokerd.toml")
	text := "[storage]\nengine = \"memory\"\n" + extra
	if err := os.WriteFile(cfgFile, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return startDaemonEnv(t, dir, env, "-config", cfgFile, "-listen", "127.0.0.1:0", "-mgmt-listen", "off", "-data", filepath.Join(dir, "data"))
}

// procStatus returns a field of /proc/PID/status, such as "VmRSS".
func procStatus(pid int, field string) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return err.Error()
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

// openFDs counts the open file descriptors of process pid.
func openFDs(pid int) int {
	ents, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	return len(ents)
}

// consumer is a queue with a consumer on a connection opened before the
// broker is put under stress; check proves the connection still publishes
// and consumes.
type consumer struct {
	ch    *amqp091.Channel
	queue string
	msgs  <-chan amqp091.Delivery
	n     int
}

func newConsumer(t *testing.T, c *amqp091.Connection) *consumer {
	t.Helper()
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := ch.Consume(q.Name, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &consumer{ch: ch, queue: q.Name, msgs: msgs}
}

func (c *consumer) check(t *testing.T) {
	t.Helper()
	c.n++
	body := "ping " + strconv.Itoa(c.n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.ch.PublishWithContext(ctx, "", c.queue, false, false, amqp091.Publishing{Body: []byte(body)}); err != nil {
		t.Fatalf("publish: %v", err)
	}
	select {
	case d, ok := <-c.msgs:
		if !ok || string(d.Body) != body {
			t.Fatalf("consumer got %q (open %v), want %q", d.Body, ok, body)
		}
	case <-ctx.Done():
		t.Fatal("consumer got nothing")
	}
}

// A pile of idle TCP connections exhausts brokerd's file descriptors:
// accept fails with EMFILE. The broker keeps running, the connections it
// has keep working, the failures are logged about once a second, and once
// descriptors are free again new clients get in.
func TestAcceptFailuresDoNotStopTheBroker(t *testing.T) {
	t.Parallel()
	// max_connections above what the limit allows: by default it is kept
	// below it (TestDescriptorFloodDiskStore), and accept never runs out.
	d := memoryDaemon(t, "[limits]\nmax_connections = 1000\n", nofileEnv+"=64")
	url := d.url()
	pid := d.cmd.Process.Pid
	c, err := amqp091.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cons := newConsumer(t, c)
	cons.check(t)

	start := time.Now()
	addr := strings.TrimSuffix(strings.TrimPrefix(url, "amqp://guest:guest@"), "/")
	var idle []net.Conn
	defer func() {
		for _, nc := range idle {
			nc.Close()
		}
	}()
	// Twice the limit: the kernel completes the handshakes (the listen
	// backlog holds what brokerd cannot accept), brokerd runs out of
	// descriptors accepting the rest.
	for range 128 {
		nc, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			t.Fatalf("dial idle connection %d: %v", len(idle), err)
		}
		idle = append(idle, nc)
	}
	d.awaitLine("too many open files")
	t.Logf("%d idle connections; brokerd holds %d descriptors (limit 64), RSS %s", len(idle), openFDs(pid), procStatus(pid, "VmRSS"))
	select {
	case <-d.done:
		t.Fatalf("brokerd exited with %d when out of file descriptors:\n%s", d.code, d.log())
	default:
	}
	cons.check(t)
	roundTrip(t, c)

	for _, nc := range idle {
		nc.Close()
	}
	idle = nil
	c2, err := amqp091.Dial(url)
	if err != nil {
		t.Fatalf("new client after the idle connections closed: %v\n%s", err, d.log())
	}
	defer c2.Close()
	roundTrip(t, c2)
	cons.check(t)
	elapsed := time.Since(start)
	lines := d.count("accept failed")
	t.Logf("new client connected %v after the flood; %d \"accept failed\" lines; RSS %s", elapsed, lines, procStatus(pid, "VmRSS"))
	if max := 2 + int(elapsed/time.Second); lines > max {
		t.Errorf("%d \"accept failed\" lines in %v, want at most %d", lines, elapsed, max)
	}

	d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0", code)
	}
}

// With limits.max_connections = 2 a third connection is closed at once,
// before any handshake; once one of the two closes, a new one gets in.
func TestMaxConnections(t *testing.T) {
	t.Parallel()
	d := memoryDaemon(t, "[limits]\nmax_connections = 2\n[log]\nlevel = \"debug\"\n")
	url := d.url()
	addr := strings.TrimSuffix(strings.TrimPrefix(url, "amqp://guest:guest@"), "/")
	c1, err := amqp091.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	c2, err := amqp091.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()

	nc, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	nc.Write([]byte("AMQP\x00\x00\x09\x01")) // may fail: the server may have hung up
	got, err := io.ReadAll(nc)
	if len(got) != 0 || (err != nil && !errors.Is(err, syscall.ECONNRESET)) {
		t.Fatalf("third connection: read %q, err %v; want a hang-up without a byte", got, err)
	}
	d.awaitLine("max_connections reached")
	if _, err := amqp091.Dial(url); err == nil {
		t.Fatal("amqp091 dial over the limit succeeded")
	}
	roundTrip(t, c2)

	// The slot is free once the server has logged the end of c1.
	gone := `msg="connection closed" remote=` + c1.LocalAddr().String()
	if err := c1.Close(); err != nil {
		t.Fatal(err)
	}
	d.awaitLine(gone)
	c3, err := amqp091.Dial(url)
	if err != nil {
		t.Fatalf("dial after a connection closed: %v", err)
	}
	defer c3.Close()
	roundTrip(t, c3)
	d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0", code)
	}
}

// The budget of bodies being received is amqp.unfinished_content_limit, at
// most a quarter of the memory watermark: a memory alarm holds what
// publishers sent of their bodies, which must not be what keeps it raised
// (with a 512 MiB watermark and the budget at 256 MiB, eight publishers of
// 128 MiB bodies stalled for good once the alarm went off).
func TestUnfinishedContentLimitFollowsTheWatermark(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		limit, mem, want uint64
	}{
		{256 * mib, 0, 256 * mib},
		{256 * mib, 4096 * mib, 256 * mib},
		{256 * mib, 512 * mib, 128 * mib},
		{64 * mib, 512 * mib, 64 * mib},
	} {
		a := config.Default().AMQP
		a.UnfinishedContentLimit = config.ByteSize(c.limit)
		if got := unfinishedContentLimit(a, c.mem); got != c.want {
			t.Errorf("limit %d, watermark %d: %d, want %d", c.limit, c.mem, got, c.want)
		}
	}
}
