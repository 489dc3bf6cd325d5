package main

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/config"
)

// The tests run the daemon as a real process — this test binary,
// re-executed with daemonEnv set, runs main() — so that signals, exit
// codes and stderr are the real ones.
const daemonEnv = "BROKERD_TEST_RUN_MAIN"

// nofileEnv, if set, is the soft RLIMIT_NOFILE the daemon runs with.
const nofileEnv = "BROKERD_TEST_NOFILE"

func TestMain(m *testing.M) {
	if os.Getenv(daemonEnv) == "1" {
		if n := os.Getenv(nofileEnv); n != "" {
			if err := setNofile(n); err != nil {
				fmt.Fprintf(os.Stderr, "brokerd test: %v\n", err)
				os.Exit(3)
			}
		}
		main()
		return
	}
	os.Exit(m.Run())
}

// setNofile lowers the soft limit on open files (the Go runtime raised it
// to the hard limit at start).
func setNofile(s string) error {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return fmt.Errorf("parse %s: %w", nofileEnv, err)
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("get RLIMIT_NOFILE: %w", err)
	}
	lim.Cur = n
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("set RLIMIT_NOFILE to %d: %w", n, err)
	}
	return nil
}

// daemon is a brokerd process.
type daemon struct {
	t    *testing.T
	cmd  *exec.Cmd
	addr chan string   // the AMQP address, from the "accepting" log line
	done chan struct{} // closed when the process has exited
	code int           // exit code, valid after done

	mu     sync.Mutex
	stderr []string
	lines  chan string
}

var acceptRE = regexp.MustCompile(`accepting AMQP connections.* addr=(\S+)`)

// startDaemon runs brokerd with args in dir ("" for the test's directory).
func startDaemon(t *testing.T, dir string, args ...string) *daemon {
	t.Helper()
	return startDaemonEnv(t, dir, nil, args...)
}

// startDaemonEnv is startDaemon with more environment variables.
func startDaemonEnv(t *testing.T, dir string, env []string, args ...string) *daemon {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), daemonEnv+"=1", "NOTIFY_SOCKET="), env...)
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	d := &daemon{t: t, cmd: cmd, addr: make(chan string, 1), done: make(chan struct{}), lines: make(chan string, 1000)}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(pipe)
		sent := false // the first listener's address only: url puts it back
		for sc.Scan() {
			line := sc.Text()
			d.mu.Lock()
			d.stderr = append(d.stderr, line)
			d.mu.Unlock()
			if m := acceptRE.FindStringSubmatch(line); m != nil && !sent {
				// A daemon with a TLS listener logs a second address:
				// sent into the channel url had just emptied, it made
				// url's put-back block for good.
				sent = true
				d.addr <- m[1]
			}
			select {
			case d.lines <- line:
			default:
			}
		}
		// Wait only after the last read from the pipe.
		err := cmd.Wait()
		d.code = cmd.ProcessState.ExitCode()
		if err != nil && d.code < 0 {
			t.Logf("brokerd: %v", err)
		}
		close(d.done)
	}()
	t.Cleanup(func() {
		select {
		case <-d.done:
		default:
			cmd.Process.Kill()
			<-d.done
		}
		if t.Failed() {
			t.Logf("brokerd stderr:\n%s", d.log())
		}
	})
	return d
}

// daemonStartTimeout bounds the wait for a daemon to serve. It is long
// because a start after a kill -9 replays the write-ahead log: 0.5 s for
// TestRedriveKill9's ~150,000 records in a plain build, over 30 s in a
// -race one.
const daemonStartTimeout = 120 * time.Second

// url waits for the daemon to accept connections.
func (d *daemon) url() string {
	d.t.Helper()
	select {
	case a := <-d.addr:
		d.addr <- a
		return "amqp://guest:guest@" + a + "/"
	case <-d.done:
		d.t.Fatalf("brokerd exited with %d before accepting connections:\n%s", d.code, d.log())
	case <-time.After(daemonStartTimeout):
		d.t.Fatalf("brokerd did not log \"accepting AMQP connections\":\n%s", d.log())
	}
	return ""
}

// mgmtURL waits for the daemon to serve its management API and returns
// its base URL (from the "serving management HTTP API" log line).
func (d *daemon) mgmtURL() string {
	d.t.Helper()
	deadline := time.Now().Add(daemonStartTimeout)
	for time.Now().Before(deadline) {
		if m := mgmtRE.FindStringSubmatch(d.log()); m != nil {
			return "http://" + m[1]
		}
		select {
		case <-d.done:
			d.t.Fatalf("brokerd exited with %d:\n%s", d.code, d.log())
		case <-time.After(10 * time.Millisecond): // polls the log
		}
	}
	d.t.Fatalf("brokerd did not log \"serving management HTTP API\":\n%s", d.log())
	return ""
}

var mgmtRE = regexp.MustCompile(`serving management HTTP API.* addr=(\S+)`)

// wait waits for the process to exit and returns its exit code.
func (d *daemon) wait() int {
	d.t.Helper()
	select {
	case <-d.done:
		return d.code
	case <-time.After(20 * time.Second):
		d.t.Fatalf("brokerd did not exit:\n%s", d.log())
	}
	return 0
}

// awaitLine waits for a stderr line containing s.
func (d *daemon) awaitLine(s string) {
	d.t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case line := <-d.lines:
			if strings.Contains(line, s) {
				return
			}
		case <-timeout:
			d.t.Fatalf("no log line containing %q:\n%s", s, d.log())
		}
	}
}

func (d *daemon) log() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return strings.Join(d.stderr, "\n")
}

func (d *daemon) count(s string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, l := range d.stderr {
		if strings.Contains(l, s) {
			n++
		}
	}
	return n
}

// roundTrip publishes and gets a message on a fresh channel.
func roundTrip(t *testing.T, c *amqp091.Connection) {
	t.Helper()
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	ch.Confirm(false)
	conf, err := ch.PublishWithDeferredConfirm("", q.Name, false, false, amqp091.Publishing{Body: []byte("hi")})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := conf.WaitContext(t.Context()); !ok || err != nil {
		t.Fatalf("publish not confirmed: %v %v", ok, err)
	}
	d, ok, err := ch.Get(q.Name, true)
	if err != nil || !ok || string(d.Body) != "hi" {
		t.Fatalf("get: ok=%v err=%v body=%q", ok, err, d.Body)
	}
	ch.Close()
}

func TestSIGTERMClosesConnectionsAndExits0(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d := startDaemon(t, "", "-listen", "127.0.0.1:0", "-mgmt-listen", "off", "-data", filepath.Join(dir, "data"))
	c, err := amqp091.Dial(d.url())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	roundTrip(t, c)
	closed := c.NotifyClose(make(chan *amqp091.Error, 1))

	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-closed:
		if e == nil || e.Code != amqp091.ConnectionForced || !strings.HasPrefix(e.Reason, "CONNECTION_FORCED") {
			t.Fatalf("connection closed with %v, want 320 CONNECTION_FORCED", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no connection.close after SIGTERM")
	}
	if code := d.wait(); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0", code)
	}
	if n := d.count("accepting AMQP connections"); n != 1 {
		t.Errorf("%d lines say \"accepting AMQP connections\", want 1", n)
	}
	if d.count("stopped") != 1 {
		t.Errorf("no \"stopped\" line:\n%s", d.log())
	}
	// The data directory's lock is released: a second broker can take it.
	d2 := startDaemon(t, "", "-listen", "127.0.0.1:0", "-mgmt-listen", "off", "-data", filepath.Join(dir, "data"))
	d2.url()
	d2.cmd.Process.Signal(syscall.SIGTERM)
	if code := d2.wait(); code != 0 {
		t.Fatalf("second broker on the same data directory exited %d", code)
	}
}

func TestBadConfigExits2(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		name, text string
		want       []string // each must appear in stderr
	}{
		{"invalid values", "[amqp]\nlisten = \"127.0.0.1:0\"\nframe_max = 100\nbogus_key = 1\n",
			[]string{"bad.toml:3: amqp.frame_max", "bad.toml:4: amqp.bogus_key: unknown key"}},
		{"syntax", "[amqp]\nframe_max = = 3\n", []string{"bad.toml:2:13: expected value"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "bad.toml")
			if err := os.WriteFile(path, []byte(tc.text), 0o600); err != nil {
				t.Fatal(err)
			}
			d := startDaemon(t, dir, "-config", path, "-data", filepath.Join(dir, "data"))
			if code := d.wait(); code != 2 {
				t.Fatalf("exit code %d, want 2", code)
			}
			for _, w := range tc.want {
				if d.count(w) == 0 {
					t.Errorf("stderr lacks %q:\n%s", w, d.log())
				}
			}
		})
	}
	t.Run("unknown flag", func(t *testing.T) {
		d := startDaemon(t, dir, "-no-such-flag")
		if code := d.wait(); code != 2 {
			t.Fatalf("exit code %d, want 2", code)
		}
	})
}

func TestDefaultsValidate(t *testing.T) {
	cfg, err := loadConfig("", config.Overrides{})
	if err != nil {
		t.Fatalf("the defaults do not validate: %v", err)
	}
	if cfg.AMQP.Listen != "0.0.0.0:5672" || cfg.Storage.DataDir != "./data" || cfg.Mgmt.Listen != "127.0.0.1:15672" {
		t.Fatalf("defaults: amqp %q data %q mgmt %q", cfg.AMQP.Listen, cfg.Storage.DataDir, cfg.Mgmt.Listen)
	}
}

// With nothing but -listen (5672 may be taken), brokerd runs on its
// defaults: data under ./data, guest/guest on vhost "/".
func TestStartWithDefaults(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d := startDaemon(t, dir, "-listen", "127.0.0.1:0", "-mgmt-listen", "127.0.0.1:0")
	c, err := amqp091.Dial(d.url())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	roundTrip(t, c)
	// The management API serves, and sees this connection.
	api := d.mgmtURL()
	req, _ := http.NewRequest("GET", api+"/api/connections", nil)
	req.SetBasicAuth("guest", "guest")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("management API: %v", err)
	}
	var conns []map[string]any
	err = json.NewDecoder(res.Body).Decode(&conns)
	res.Body.Close()
	if err != nil || res.StatusCode != 200 || len(conns) != 1 || conns[0]["user"] != "guest" {
		t.Fatalf("GET /api/connections: %d %v %v", res.StatusCode, conns, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "LOCK")); err != nil {
		t.Errorf("default data directory: %v", err)
	}
	// SIGHUP reloads and keeps serving.
	d.cmd.Process.Signal(syscall.SIGHUP)
	d.awaitLine("configuration reloaded")
	roundTrip(t, c)

	closed := c.NotifyClose(make(chan *amqp091.Error, 1))
	d.cmd.Process.Signal(syscall.SIGINT)
	select {
	case e := <-closed:
		if e == nil || e.Code != amqp091.ConnectionForced {
			t.Fatalf("connection closed with %v, want 320", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no connection.close after SIGINT")
	}
	if code := d.wait(); code != 0 {
		t.Fatalf("exit code %d after SIGINT, want 0", code)
	}
}

// A second brokerd on a locked data directory fails instead of sharing it.
func TestDataDirLocked(t *testing.T) {
	t.Parallel()
	data := filepath.Join(t.TempDir(), "data")
	d := startDaemon(t, "", "-listen", "127.0.0.1:0", "-mgmt-listen", "off", "-data", data)
	d.url()
	d2 := startDaemon(t, "", "-listen", "127.0.0.1:0", "-mgmt-listen", "off", "-data", data)
	if code := d2.wait(); code != 1 {
		t.Fatalf("second brokerd on a locked directory exited %d, want 1", code)
	}
	if d2.count("locked by another process") == 0 {
		t.Errorf("stderr does not say the directory is locked:\n%s", d2.log())
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(); code != 0 {
		t.Fatalf("exit code %d", code)
	}
}

// A memory watermark below the daemon's own RSS raises the memory alarm at
// start: a publisher is blocked with connection.blocked "low on memory".
func TestMemoryWatermarkBlocksPublishers(t *testing.T) {
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "brokerd.toml")
	if err := os.WriteFile(cfgFile, []byte("[limits]\nmemory_high_watermark_bytes = \"1MiB\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, dir, "-config", cfgFile, "-listen", "127.0.0.1:0", "-mgmt-listen", "off", "-data", filepath.Join(dir, "data"))
	c, err := amqp091.Dial(d.url())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	blocked := c.NotifyBlocked(make(chan amqp091.Blocking, 1))
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Publish("", "q", false, false, amqp091.Publishing{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	select {
	case b := <-blocked:
		if !b.Active || b.Reason != "low on memory" {
			t.Fatalf("blocking = %+v", b)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("publisher not blocked under a 1 MiB watermark:\n%s", d.log())
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// -cpuprofile writes a CPU profile (for go tool pprof), complete once the
// broker stops on SIGTERM.
func TestCPUProfile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	prof := filepath.Join(dir, "cpu.prof")
	d := startDaemon(t, "", "-listen", "127.0.0.1:0", "-mgmt-listen", "off", "-data", filepath.Join(dir, "data"), "-cpuprofile", prof)
	c, err := amqp091.Dial(d.url())
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, c)
	c.Close()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := d.wait(); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	f, err := os.Open(prof)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// A profile is a gzipped protocol buffer: whole once the broker
	// stopped it.
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("the profile is not gzipped: %v", err)
	}
	data, err := io.ReadAll(zr)
	if err != nil || len(data) == 0 {
		t.Fatalf("the profile is cut short: %d bytes, %v", len(data), err)
	}
}
