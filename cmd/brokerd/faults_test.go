package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// diskDaemon starts brokerd on the disk store in dir/data with the
// configuration text cfg and the environment env.
func diskDaemon(t *testing.T, dir, cfg string, env ...string) *daemon {
	t.Helper()
	cfgFile := filepath.Join(dir, "brokerd.toml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return startDaemonEnv(t, dir, env, "-config", cfgFile, "-listen", "127.0.0.1:0", "-mgmt-listen", "off", "-data", filepath.Join(dir, "data"))
}

// publisher publishes persistent messages with confirms to a durable
// queue on its own connection.
type publisher struct {
	t       *testing.T
	conn    *amqp091.Connection
	ch      *amqp091.Channel
	queue   string
	blocked chan amqp091.Blocking
	n       int
	rng     *rand.ChaCha8
}

func newPublisher(t *testing.T, url, queue string) *publisher {
	t.Helper()
	c, err := amqp091.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	return &publisher{t: t, conn: c, ch: ch, queue: queue, blocked: c.NotifyBlocked(make(chan amqp091.Blocking, 16)),
		rng: rand.NewChaCha8([32]byte{})}
}

// publish publishes n messages of size bytes and returns a channel that
// yields nil once every one is confirmed (or the first failure).
func (p *publisher) publish(n, size int) <-chan error {
	res := make(chan error, 1)
	go func() {
		var confs []*amqp091.DeferredConfirmation
		for range n {
			p.n++
			body := make([]byte, size)
			p.rng.Read(body) // incompressible: the store's segments take what the body takes
			copy(body, fmt.Sprintf("%08d", p.n))
			dc, err := p.ch.PublishWithDeferredConfirm("", p.queue, false, false, amqp091.Publishing{DeliveryMode: 2, Body: body})
			if err != nil {
				res <- fmt.Errorf("publish %d: %w", p.n, err)
				return
			}
			confs = append(confs, dc)
		}
		for _, dc := range confs {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			ok, err := dc.WaitContext(ctx)
			cancel()
			if err != nil || !ok {
				res <- fmt.Errorf("publish %d not confirmed: ack %v, %v", dc.DeliveryTag, ok, err)
				return
			}
		}
		res <- nil
	}()
	return res
}

// expectBlocked waits for connection.blocked (active) or unblocked.
func (p *publisher) expectBlocked(active bool, reason string) {
	p.t.Helper()
	select {
	case b := <-p.blocked:
		if b.Active != active || active && !strings.Contains(b.Reason, reason) {
			p.t.Fatalf("connection.blocked %+v, want active %v, reason %q", b, active, reason)
		}
	case <-time.After(60 * time.Second):
		p.t.Fatalf("no connection.blocked (active %v)", active)
	}
}

// queueDepth returns the messages in a durable queue of a fresh daemon on
// dir's data.
func queueDepth(t *testing.T, dir, queue string) int {
	t.Helper()
	d := diskDaemon(t, dir, "")
	c, err := amqp091.Dial(d.url())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	return q.Messages
}

// Idle sockets flood brokerd at a descriptor limit of 256 while a client
// publishes persistent messages. By default max_connections keeps the
// store's reserve of descriptors (internal/fdbudget): the surplus sockets
// are closed at once and publishing goes on. With max_connections set
// above it the sockets take every descriptor: checkpoints then wait for
// descriptors (Pebble would panic if it could not create its log), the
// checkpoint alarm blocks the publisher, and once the sockets close the
// alarm clears by itself and every message is confirmed — no restart,
// nothing lost. (The store used to fail for good at the first checkpoint
// that got EMFILE.)
func TestDescriptorFloodDiskStore(t *testing.T) {
	for _, tc := range []struct {
		name    string
		limits  string
		exhaust bool
	}{
		{"derived max_connections", "", false},
		{"max_connections above the budget", "[limits]\nmax_connections = 2000\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			cfg := "[storage]\ncheckpoint_bytes = \"1MiB\"\n[amqp]\nhandshake_timeout = \"5m\"\n" + tc.limits
			d := diskDaemon(t, dir, cfg, nofileEnv+"=256")
			url := d.url()
			p := newPublisher(t, url, "flood")
			if err := <-p.publish(500, 1024); err != nil {
				t.Fatal(err)
			}

			addr := strings.TrimSuffix(strings.TrimPrefix(url, "amqp://guest:guest@"), "/")
			var idle []net.Conn
			defer func() {
				for _, nc := range idle {
					nc.Close()
				}
			}()
			for range 300 {
				nc, err := net.DialTimeout("tcp", addr, 10*time.Second)
				if err != nil {
					t.Fatalf("dial idle connection %d: %v", len(idle), err)
				}
				idle = append(idle, nc)
			}
			if tc.exhaust {
				d.awaitLine("too many open files")
			} else {
				d.awaitLine("max_connections reached")
			}
			t.Logf("300 idle sockets; brokerd holds %d descriptors (limit 256)", openFDs(d.cmd.Process.Pid))

			done := p.publish(3000, 1024) // three checkpoints' worth
			if tc.exhaust {
				p.expectBlocked(true, "checkpoint")
				if n := d.count("store failed"); n > 0 {
					t.Fatalf("the store failed:\n%s", d.log())
				}
				for _, nc := range idle {
					nc.Close()
				}
				idle = nil
				p.expectBlocked(false, "")
			}
			if err := <-done; err != nil {
				t.Fatalf("%v\n%s", err, d.log())
			}
			if n := d.count("store failed"); n > 0 {
				t.Fatalf("the store failed:\n%s", d.log())
			}
			p.conn.Close()
			d.cmd.Process.Signal(syscall.SIGTERM)
			if code := d.wait(); code != 0 {
				t.Fatalf("exit code %d after SIGTERM", code)
			}
			if got := queueDepth(t, dir, "flood"); got != 3500 {
				t.Fatalf("%d messages after a restart, want the 3500 confirmed", got)
			}
		})
	}
}

// tmpfs mounts a tmpfs of size bytes at a new directory and returns it; the
// test skips, saying why, where it cannot (not root, no CAP_SYS_ADMIN).
func tmpfs(t *testing.T, size int64) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "vol")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Skipf("a small filesystem to fill is needed: mount tmpfs: %v (run as root with CAP_SYS_ADMIN)", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

func freeBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize
}

// A publisher fills a 400 MiB volume. brokerd blocks it while the space
// the store is about to write is still there (the disk alarm counts the
// checkpoint and the next WAL file, not only the free space a once-a-second
// sample saw), so nothing it writes meets a full disk; a consumer drains
// the queue, the space comes back and the alarm clears by itself. Then
// the disk is filled to its last MiB from outside while messages come
// in: the checkpoint that moves them into a segment gets ENOSPC and is
// retried, without failing the store; once the ballast is removed it
// succeeds and publishing goes on. A restart finds every confirmed
// message not consumed. (The store used to fail for good at the first
// ENOSPC, and a fast publisher ran a volume down to 0.6 MiB through the
// 50 MB limit.)
func TestDiskFullDiskStore(t *testing.T) {
	t.Parallel()
	vol := tmpfs(t, 400<<20)
	dir := t.TempDir()
	cfg := fmt.Sprintf("[storage]\ndata_dir = %q\ncheckpoint_bytes = \"8MiB\"\n[limits]\ndisk_free_limit = \"50MB\"\n", filepath.Join(vol, "data"))
	cfgFile := filepath.Join(dir, "brokerd.toml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemonEnv(t, dir, nil, "-config", cfgFile, "-listen", "127.0.0.1:0", "-mgmt-listen", "off")
	url := d.url()
	p := newPublisher(t, url, "fill")

	// Publish until blocked, in windows of 200 confirmed messages.
	const size = 16 << 10
	confirmed := 0
	minFree := freeBytes(t, vol)
	var res <-chan error
	for blocked := false; !blocked; {
		res = p.publish(200, size)
		select {
		case err := <-res:
			if err != nil {
				t.Fatal(err)
			}
			confirmed += 200
			minFree = min(minFree, freeBytes(t, vol))
			if confirmed > 400<<20/size {
				t.Fatalf("%d messages of %d bytes confirmed on a 400 MiB volume without a disk alarm", confirmed, size)
			}
		case b := <-p.blocked:
			if !b.Active || b.Reason != "low on disk" {
				t.Fatalf("connection.blocked %+v, want low on disk", b)
			}
			blocked = true
		}
	}
	t.Logf("blocked after %d confirmed; free %d MiB (lowest seen %d MiB)", confirmed, freeBytes(t, vol)>>20, minFree>>20)
	if free := freeBytes(t, vol); free < 20<<20 {
		t.Errorf("only %d MiB free when the publisher was blocked: the alarm came too late", free>>20)
	}

	// A consumer acks everything: the checkpoints that follow give the
	// space back, and the alarm clears by itself.
	c, err := amqp091.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	drainAcked(t, c, "fill", confirmed)
	p.expectBlocked(false, "")
	if err := <-res; err != nil { // the window the alarm held
		t.Fatal(err)
	}
	drainAcked(t, c, "fill", 200)

	// Now the disk fills from outside, to its last MiB, while messages
	// are coming in: the checkpoint that moves them into a segment gets
	// ENOSPC. It is retried; the store does not fail.
	if err := <-p.publish(100, size); err != nil {
		t.Fatal(err)
	}
	ballast := filepath.Join(vol, "ballast")
	f, err := os.Create(ballast)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	for freeBytes(t, vol) > 1<<20 {
		if _, err := f.Write(chunk); err != nil {
			break // ENOSPC: full
		}
	}
	f.Close()
	res = p.publish(200, size)
	d.awaitLine("checkpoint failed; retrying")
	if n := d.count("store failed"); n > 0 {
		t.Fatalf("the store failed:\n%s", d.log())
	}
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	if err := <-res; err != nil {
		t.Fatalf("%v\n%s", err, d.log())
	}
	d.awaitLine("checkpoint succeeded after failures")
	if err := <-p.publish(100, size); err != nil {
		t.Fatal(err)
	}
	held := 100 + 200 + 100 // not consumed
	if d.count("store failed") > 0 {
		t.Fatalf("the store failed:\n%s", d.log())
	}
	c.Close()
	p.conn.Close()
	d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
	d = startDaemonEnv(t, dir, nil, "-config", cfgFile, "-listen", "127.0.0.1:0", "-mgmt-listen", "off")
	c, err = amqp091.Dial(d.url())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclarePassive("fill", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if q.Messages != held {
		t.Fatalf("%d messages after a restart, want the %d confirmed and not consumed", q.Messages, held)
	}
}

// drainAcked consumes n messages from queue, acking them.
func drainAcked(t *testing.T, c *amqp091.Connection, queue string, n int) {
	t.Helper()
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if err := ch.Qos(500, 0, false); err != nil {
		t.Fatal(err)
	}
	msgs, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		select {
		case m := <-msgs:
			if i%100 == 99 || i == n-1 {
				if err := m.Ack(true); err != nil {
					t.Fatal(err)
				}
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("consumed %d of %d", i, n)
		}
	}
}
