package ctl

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// The behaviour tests run brokerctl against a real management API: a
// brokerd built from ./cmd/brokerd and started by this test binary, once
// per storage engine ("disk" and "memory"), or, when BROKERCTL_TEST_URL is
// set, the server it names (RabbitMQ, for instance), whose AMQP URL is
// then BROKERCTL_TEST_AMQP. Each test works in a virtual host of its own,
// "/h-ctl-<test>", and deletes it (and the users it made) at the end, so
// that a shared RabbitMQ is not disturbed.
const (
	envTestURL  = "BROKERCTL_TEST_URL"
	envTestAMQP = "BROKERCTL_TEST_AMQP"
)

// server is a management API with its AMQP listener.
type server struct {
	name string
	api  string // base URL of the management API
	amqp string // amqp://guest:guest@host:port/
}

var (
	acceptRE = regexp.MustCompile(`accepting AMQP connections.* addr=(\S+)`)
	mgmtRE   = regexp.MustCompile(`serving management HTTP API.* addr=(\S+)`)
)

// daemons are the brokerd processes started for the run, stopped by
// TestMain.
var daemons struct {
	sync.Mutex
	buildOnce sync.Once
	bin       string
	buildErr  error
	dir       string
	byEngine  map[string]*daemon
}

type daemon struct {
	srv  *server
	err  error
	cmd  *exec.Cmd
	done chan struct{}

	mu     sync.Mutex
	stderr []string
}

func (d *daemon) log() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return strings.Join(d.stderr, "\n")
}

func TestMain(m *testing.M) {
	code := m.Run()
	daemons.Lock()
	for engine, d := range daemons.byEngine {
		if d.cmd == nil {
			continue
		}
		d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.done:
		case <-time.After(20 * time.Second):
			d.cmd.Process.Kill()
			<-d.done
			fmt.Fprintf(os.Stderr, "brokerd (%s) did not exit within 20s of SIGTERM\n", engine)
			code = 1
		}
		if log := d.log(); strings.Contains(log, "WARNING: DATA RACE") {
			fmt.Fprintf(os.Stderr, "brokerd (%s) reported a data race:\n%s\n", engine, log)
			code = 1
		} else if c := d.cmd.ProcessState.ExitCode(); c != 0 {
			fmt.Fprintf(os.Stderr, "brokerd (%s) exited %d after SIGTERM:\n%s\n", engine, c, log)
			code = 1
		}
	}
	if daemons.dir != "" {
		os.RemoveAll(daemons.dir)
	}
	daemons.Unlock()
	os.Exit(code)
}

// servers are the management APIs the behaviour tests run against.
func servers(t *testing.T) []*server {
	t.Helper()
	if u := os.Getenv(envTestURL); u != "" {
		a := os.Getenv(envTestAMQP)
		if a == "" {
			t.Fatalf("%s is set but %s is not", envTestURL, envTestAMQP)
		}
		return []*server{{name: "external", api: u, amqp: a}}
	}
	return []*server{brokerd(t, "disk"), brokerd(t, "memory")}
}

// forEachServer runs f as a subtest against each server.
func forEachServer(t *testing.T, f func(t *testing.T, e *env)) {
	for _, s := range servers(t) {
		t.Run(s.name, func(t *testing.T) { f(t, newEnv(t, s)) })
	}
}

// brokerd returns the brokerd of the storage engine, starting it on first
// use.
func brokerd(t *testing.T, engine string) *server {
	t.Helper()
	daemons.Lock()
	defer daemons.Unlock()
	if daemons.byEngine == nil {
		daemons.byEngine = map[string]*daemon{}
	}
	d := daemons.byEngine[engine]
	if d == nil {
		d = startBrokerd(engine)
		daemons.byEngine[engine] = d
	}
	if d.err != nil {
		t.Fatalf("brokerd (%s): %v\n%s", engine, d.err, d.log())
	}
	return d.srv
}

// startBrokerd builds brokerd (once; with -race when the tests are) and
// starts it on loopback ports chosen by the kernel, its data in a fresh
// directory, waiting for the log lines that give its AMQP and HTTP
// addresses.
func startBrokerd(engine string) *daemon { return startBrokerdAt(engine, engine, "127.0.0.1:0") }

// startBrokerdAt is startBrokerd with the management API on mgmtListen, its
// configuration and data named name. The caller registers it in
// daemons.byEngine (under name), for TestMain to stop it.
func startBrokerdAt(name, engine, mgmtListen string) *daemon {
	return startBrokerdConfig(name, engine, mgmtListen, "")
}

// startBrokerdConfig is startBrokerdAt with more configuration (TOML
// sections, after [storage]).
func startBrokerdConfig(name, engine, mgmtListen, extra string) *daemon {
	d := &daemon{done: make(chan struct{})}
	daemons.buildOnce.Do(func() {
		if daemons.dir, daemons.buildErr = os.MkdirTemp("", "brokerctl-test-"); daemons.buildErr != nil {
			return
		}
		daemons.bin = filepath.Join(daemons.dir, "brokerd")
		args := []string{"build", "-o", daemons.bin}
		if raceEnabled() {
			args = append(args, "-race")
		}
		args = append(args, "github.com/brokerd/brokerd/cmd/brokerd")
		if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
			daemons.buildErr = fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
		}
	})
	if daemons.buildErr != nil {
		d.err = daemons.buildErr
		return d
	}
	dir, config := daemonPaths(name)
	if err := os.WriteFile(config, fmt.Appendf(nil, "[storage]\nengine = %q\n%s", engine, extra), 0o600); err != nil {
		d.err = fmt.Errorf("write config: %w", err)
		return d
	}
	d.cmd = exec.Command(daemons.bin, "-config", config, "-listen", "127.0.0.1:0",
		"-mgmt-listen", mgmtListen, "-data", dir)
	d.cmd.Env = append(os.Environ(), "NOTIFY_SOCKET=")
	pipe, err := d.cmd.StderrPipe()
	if err != nil {
		d.err = err
		return d
	}
	if err := d.cmd.Start(); err != nil {
		d.err = fmt.Errorf("start brokerd: %w", err)
		d.cmd = nil
		return d
	}
	amqpAddr, mgmtAddr := make(chan string, 1), make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			line := sc.Text()
			d.mu.Lock()
			d.stderr = append(d.stderr, line)
			d.mu.Unlock()
			for re, ch := range map[*regexp.Regexp]chan string{acceptRE: amqpAddr, mgmtRE: mgmtAddr} {
				if m := re.FindStringSubmatch(line); m != nil {
					select {
					case ch <- m[1]:
					default:
					}
				}
			}
		}
		d.cmd.Wait() // only after the last read from the pipe
		close(d.done)
	}()
	var a, h string
	deadline := time.After(30 * time.Second)
	for a == "" || h == "" {
		select {
		case a = <-amqpAddr:
		case h = <-mgmtAddr:
		case <-d.done:
			d.err = fmt.Errorf("exited with %d before serving AMQP and HTTP", d.cmd.ProcessState.ExitCode())
			return d
		case <-deadline:
			d.err = fmt.Errorf("no log lines %q and %q within 30s (set %s and %s to test against RabbitMQ)",
				"accepting AMQP connections", "serving management HTTP API", envTestURL, envTestAMQP)
			return d
		}
	}
	d.srv = &server{name: name, api: "http://" + h, amqp: "amqp://guest:guest@" + a + "/"}
	return d
}

// daemonPaths are the data directory and configuration file of the
// brokerd named name (startBrokerdAt).
func daemonPaths(name string) (dataDir, configFile string) {
	return filepath.Join(daemons.dir, name), filepath.Join(daemons.dir, name+".toml")
}

// daemonOf returns the brokerd this test binary started for s, or nil
// for an external server (BROKERCTL_TEST_URL).
func daemonOf(s *server) *daemon {
	daemons.Lock()
	defer daemons.Unlock()
	if d := daemons.byEngine[s.name]; d != nil && d.srv == s {
		return d
	}
	return nil
}

func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// env is one test's view of a server: its own vhost, the users it made.
type env struct {
	t     *testing.T
	srv   *server
	vhost string
}

func newEnv(t *testing.T, s *server) *env {
	t.Helper()
	name := strings.NewReplacer("/", "-", " ", "_").Replace(t.Name())
	e := &env{t: t, srv: s, vhost: "/h-ctl-" + name}
	e.api("DELETE", apiPath("vhosts", e.vhost), nil) // a leftover of an interrupted run
	if st, body := e.api("PUT", apiPath("vhosts", e.vhost), map[string]any{}); st/100 != 2 {
		t.Fatalf("create vhost %s: %d %s", e.vhost, st, body)
	}
	// RabbitMQ grants the creator of a vhost all permissions in it;
	// brokerctl's tests do not rely on that.
	if st, body := e.api("PUT", apiPath("permissions", e.vhost, "guest"),
		map[string]string{"configure": ".*", "write": ".*", "read": ".*"}); st/100 != 2 {
		t.Fatalf("grant guest %s: %d %s", e.vhost, st, body)
	}
	t.Cleanup(func() { e.api("DELETE", apiPath("vhosts", e.vhost), nil) })
	return e
}

// user returns a user name unique to the test, deleted when it ends.
func (e *env) user(suffix string) string {
	name := "h-ctl-" + strings.NewReplacer("/", "-", " ", "_").Replace(e.t.Name()) + "-" + suffix
	e.api("DELETE", apiPath("users", name), nil)
	e.t.Cleanup(func() { e.api("DELETE", apiPath("users", name), nil) })
	return name
}

// api calls the management API directly, as guest, to set up and check
// state independently of brokerctl. It returns the status and body.
func (e *env) api(method, path string, body any) (int, []byte) {
	e.t.Helper()
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, strings.TrimSuffix(e.srv.api, "/")+"/"+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	req.SetBasicAuth("guest", "guest")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp.StatusCode, data
}

// getJSON GETs path and decodes it, failing the test on a non-200.
func (e *env) getJSON(path string, out any) {
	e.t.Helper()
	st, body := e.api("GET", path, nil)
	if st != http.StatusOK {
		e.t.Fatalf("GET %s: %d %s", path, st, body)
	}
	if err := json.Unmarshal(body, out); err != nil {
		e.t.Fatalf("GET %s: %v: %s", path, err, body)
	}
}

// result is one run of brokerctl.
type result struct {
	args           []string
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("brokerctl %q: exit %d\nstdout:\n%s\nstderr:\n%s", r.args, r.code, r.stdout, r.stderr)
}

// ctl runs brokerctl in-process with the server's URL in BROKERCTL_URL.
func (e *env) ctl(args ...string) result {
	return e.ctlIn("", args...)
}

// ctlIn is ctl with stdin.
func (e *env) ctlIn(stdin string, args ...string) result {
	return runCtl(map[string]string{EnvURL: e.srv.api}, stdin, args...)
}

func runCtl(environ map[string]string, stdin string, args ...string) result {
	var out, errOut bytes.Buffer
	code := Main(context.Background(), args, Env{
		Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errOut,
		Getenv: func(k string) string { return environ[k] },
	})
	return result{args: args, stdout: out.String(), stderr: errOut.String(), code: code}
}

// ok runs brokerctl and fails the test unless it exits 0 with nothing on
// stderr; it returns stdout.
func (e *env) ok(args ...string) string {
	e.t.Helper()
	r := e.ctl(args...)
	if r.code != 0 || r.stderr != "" {
		e.t.Fatalf("%v", r)
	}
	return r.stdout
}

// fails runs brokerctl and fails the test unless it exits code with
// stderr containing each of want.
func (e *env) fails(code int, want []string, args ...string) result {
	e.t.Helper()
	r := e.ctl(args...)
	if r.code != code {
		e.t.Fatalf("exit %d, want %d\n%v", r.code, code, r)
	}
	for _, w := range want {
		if !strings.Contains(r.stderr, w) {
			e.t.Fatalf("stderr lacks %q\n%v", w, r)
		}
	}
	return r
}

// eventually polls cond until it returns true, for at most 30 s. It polls
// because RabbitMQ's management API shows queue and connection statistics
// (message counts, the policy a queue runs with, new connections) from a
// sample taken every 5 s; brokerd's are current, so with brokerd the first
// call succeeds. what(last) says what was awaited when it fails.
func (e *env) eventually(cond func() (bool, string), what string) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: not within 30s; last:\n%s", what, last)
		}
		<-tick.C
	}
}

// eventuallyOut runs brokerctl until its stdout contains each of want.
func (e *env) eventuallyOut(want []string, args ...string) string {
	e.t.Helper()
	var out string
	e.eventually(func() (bool, string) {
		r := e.ctl(args...)
		out = r.stdout
		if r.code != 0 {
			return false, r.String()
		}
		for _, w := range want {
			if !strings.Contains(r.stdout, w) {
				return false, r.String()
			}
		}
		return true, ""
	}, fmt.Sprintf("brokerctl %q printing %q", args, want))
	return out
}

// amqpURL is the server's AMQP URL with other credentials.
func (e *env) amqpURL(user, pass string) string {
	u, err := url.Parse(e.srv.amqp)
	if err != nil {
		e.t.Fatal(err)
	}
	u.User = url.UserPassword(user, pass)
	return u.String()
}

// dial connects to the test's vhost as user, closing the connection when
// the test ends.
func (e *env) dial(user, pass string) *amqp091.Connection {
	e.t.Helper()
	c, err := e.dialErr(user, pass)
	if err != nil {
		e.t.Fatalf("dial %s as %s: %v", e.vhost, user, err)
	}
	return c
}

func (e *env) dialErr(user, pass string) (*amqp091.Connection, error) {
	c, err := amqp091.DialConfig(e.amqpURL(user, pass), amqp091.Config{Vhost: e.vhost})
	if err != nil {
		return nil, err
	}
	e.t.Cleanup(func() { c.Close() })
	return c, nil
}

// channel opens a channel on a guest connection to the test's vhost.
func (e *env) channel() *amqp091.Channel {
	e.t.Helper()
	ch, err := e.dial("guest", "guest").Channel()
	if err != nil {
		e.t.Fatal(err)
	}
	return ch
}

// publish publishes bodies to queue q through the default exchange and
// waits for the broker's confirms.
func (e *env) publish(ch *amqp091.Channel, q string, bodies ...string) {
	e.t.Helper()
	if err := ch.Confirm(false); err != nil {
		e.t.Fatal(err)
	}
	for _, b := range bodies {
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", q, true, false,
			amqp091.Publishing{Body: []byte(b), DeliveryMode: amqp091.Persistent})
		if err != nil {
			e.t.Fatal(err)
		}
		ok, err := dc.WaitContext(context.Background())
		if err != nil || !ok {
			e.t.Fatalf("publish to %s: confirmed %v, %v", q, ok, err)
		}
	}
}

// row finds the tab-separated line of out whose first cell is first.
func row(out, first string) []string {
	for _, line := range strings.Split(out, "\n") {
		cells := strings.Split(line, "\t")
		if cells[0] == first {
			return cells
		}
	}
	return nil
}

// hasLine reports whether out has the line.
func hasLine(out, line string) bool {
	for _, l := range strings.Split(out, "\n") {
		if l == line {
			return true
		}
	}
	return false
}
