package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// rabbitBin is where Debian's rabbitmq-server package puts RabbitMQ's own
// scripts (/usr/sbin/rabbitmq-server is a wrapper that runs them as the
// rabbitmq user, with the system node's settings).
const rabbitBin = "/usr/lib/rabbitmq/bin"

// rabbitStartTimeout bounds the wait for a RabbitMQ node to accept AMQP
// connections (about 5 s on an idle machine).
const rabbitStartTimeout = 60 * time.Second

// rabbitNode is a private RabbitMQ node (Debian's 3.10) the test started:
// its own node name, Erlang cookie (in a HOME of its own), epmd, ports and
// directories, all under a temporary directory, so that it shares nothing
// with a RabbitMQ the machine runs or another test's node. It is stopped
// when the test ends.
type rabbitNode struct {
	t    *testing.T
	name string // the Erlang node name, rabbit-brokerd-test-PID-N@localhost
	url  string // amqp://guest:guest@127.0.0.1:PORT/
	dir  string
	env  []string
	cmd  *exec.Cmd     // rabbitmq-server, in the foreground
	done chan struct{} // closed when rabbitmq-server has exited
}

// startRabbitNode starts a RabbitMQ node as bench/rabbit-node.sh does,
// but in the foreground as a child of the test and with an epmd of its
// own. The test skips, saying why, when RabbitMQ or Erlang is not
// installed or the node does not accept connections within
// rabbitStartTimeout.
func startRabbitNode(t *testing.T) *rabbitNode {
	t.Helper()
	for _, f := range []string{rabbitBin + "/rabbitmq-server", rabbitBin + "/rabbitmqctl"} {
		if _, err := os.Stat(f); err != nil {
			t.Skipf("RabbitMQ is not installed (Debian's rabbitmq-server package, which .ci/run installs): %v", err)
		}
	}
	epmd, err := exec.LookPath("epmd")
	if err == nil {
		_, err = exec.LookPath("erl")
	}
	if err != nil {
		t.Skipf("Erlang is not installed (Debian's rabbitmq-server package depends on it): %v", err)
	}

	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	if err := os.MkdirAll(filepath.Join(dir, "log"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	// The cookie, which rabbitmqctl needs too: Erlang refuses one that
	// others may read.
	if err := os.WriteFile(filepath.Join(home, ".erlang.cookie"), []byte(rand.Text()), 0o400); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{
		"enabled_plugins": "[].\n",
		"rabbitmq.conf":   "loopback_users.guest = false\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	port := func() string {
		_, p, _ := net.SplitHostPort(rebindableAddr(t))
		return p
	}
	amqpPort, distPort, epmdPort := port(), port(), port()
	n := &rabbitNode{
		t:    t,
		name: fmt.Sprintf("rabbit-brokerd-test-%d-%s@localhost", os.Getpid(), distPort),
		url:  "amqp://guest:guest@127.0.0.1:" + amqpPort + "/",
		dir:  dir,
	}
	// The environment without the machine's RabbitMQ and Erlang settings.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RABBITMQ_") && !strings.HasPrefix(kv, "ERL_") && !strings.HasPrefix(kv, "HOME=") {
			n.env = append(n.env, kv)
		}
	}
	n.env = append(n.env,
		"HOME="+home,
		"ERL_EPMD_PORT="+epmdPort,
		"RABBITMQ_NODENAME="+n.name,
		"RABBITMQ_USE_LONGNAME=false",
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+amqpPort,
		"RABBITMQ_DIST_PORT="+distPort,
		"RABBITMQ_MNESIA_BASE="+filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(dir, "log"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(dir, "enabled_plugins"),
		"RABBITMQ_PID_FILE="+filepath.Join(dir, "pid"),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(dir, "rabbitmq"),
		"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(dir, "advanced.config"),
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(dir, "rabbitmq-env.conf"),
	)

	// An epmd of the node's own, on its own port, started here rather
	// than by erl (which would leave a daemon behind): the test stops it.
	ep := exec.Command(epmd, "-port", epmdPort, "-address", "127.0.0.1")
	ep.Env = n.env
	ep.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := ep.Start(); err != nil {
		t.Skipf("epmd does not start: %v", err)
	}
	epDone := make(chan struct{})
	go func() { ep.Wait(); close(epDone) }()
	t.Cleanup(func() {
		ep.Process.Kill()
		<-epDone
	})

	t.Cleanup(n.stop)
	n.launch()
	t.Logf("RabbitMQ node %s at %s in %s", n.name, n.url, dir)
	return n
}

// launch starts rabbitmq-server and waits until it accepts AMQP
// connections. The test skips if it does not within rabbitStartTimeout.
func (n *rabbitNode) launch() {
	t := n.t
	t.Helper()
	out, err := os.OpenFile(filepath.Join(n.dir, "server.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	n.done = make(chan struct{})
	n.cmd = exec.Command(rabbitBin + "/rabbitmq-server")
	n.cmd.Env = n.env
	n.cmd.Stdout, n.cmd.Stderr = out, out
	// Its own process group: rabbitmq-server is a shell script that runs
	// beam.smp as its child; kill and the last resort of stop kill the
	// group.
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := n.cmd.Start(); err != nil {
		out.Close()
		close(n.done)
		t.Skipf("rabbitmq-server does not start: %v", err)
	}
	cmd, done := n.cmd, n.done
	go func() {
		cmd.Wait()
		out.Close()
		close(done)
	}()

	deadline := time.Now().Add(rabbitStartTimeout)
	for {
		conn, err := amqp091.Dial(n.url)
		if err == nil {
			conn.Close()
			return
		}
		select {
		case <-done:
			t.Skipf("the RabbitMQ node exited before accepting connections (%v):\n%s", cmd.ProcessState, n.logTail())
		case <-time.After(50 * time.Millisecond): // polls the node's AMQP port
		}
		if time.Now().After(deadline) {
			t.Skipf("the RabbitMQ node did not accept AMQP connections within %v (%v):\n%s", rabbitStartTimeout, err, n.logTail())
		}
	}
}

// kill kills the node with SIGKILL (its whole process group) and waits
// for it to exit.
func (n *rabbitNode) kill() {
	if err := syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		n.t.Fatalf("kill the RabbitMQ node: %v", err)
	}
	<-n.done
}

// stop stops the node with rabbitmqctl stop and waits for it to exit,
// killing its process group if it does not within 30 s.
func (n *rabbitNode) stop() {
	if n.cmd == nil {
		return
	}
	select {
	case <-n.done:
		return
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := n.ctl(ctx, "stop"); err != nil {
		n.t.Logf("rabbitmqctl stop: %v\n%s", err, out)
	}
	select {
	case <-n.done:
		return
	case <-ctx.Done():
	}
	n.t.Logf("the RabbitMQ node did not stop: killing its process group %d", n.cmd.Process.Pid)
	syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
	<-n.done
}

// ctl runs rabbitmqctl against the node.
func (n *rabbitNode) ctl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, rabbitBin+"/rabbitmqctl", append([]string{"-n", n.name}, args...)...)
	cmd.Env = n.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("rabbitmqctl %s: %w", strings.Join(args, " "), err)
	}
	return string(out), nil
}

// queueTotal is the number of messages in queue q, unacknowledged ones
// included (a passive declaration counts only those ready).
func (n *rabbitNode) queueTotal(q string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := n.ctl(ctx, "list_queues", "--quiet", "--no-table-headers", "name", "messages")
	if err != nil {
		return 0, fmt.Errorf("%w\n%s", err, out)
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == q {
			return strconv.Atoi(f[1])
		}
	}
	return 0, fmt.Errorf("rabbitmqctl list_queues: no queue %s in %q", q, out)
}

// logTail is the end of the node's output and log, for a failure.
func (n *rabbitNode) logTail() string {
	var b strings.Builder
	files, _ := filepath.Glob(filepath.Join(n.dir, "log", "*.log"))
	for _, f := range append([]string{filepath.Join(n.dir, "server.out")}, files...) {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if len(data) > 3000 {
			data = data[len(data)-3000:]
		}
		fmt.Fprintf(&b, "== %s\n%s\n", f, data)
	}
	return b.String()
}
