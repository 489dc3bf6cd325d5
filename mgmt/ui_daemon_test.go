// The UI tests' brokerd process: cmd/brokerd built and run with every backend it wires (shovels, limits, topic permissions).

package mgmt_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/brokerd/brokerd/broker/brokertest"
)

var (
	daemonAMQPRE = regexp.MustCompile(`accepting AMQP connections.* addr=(\S+)`)
	daemonHTTPRE = regexp.MustCompile(`serving management HTTP API.* addr=(\S+)`)
)

// startDaemonAPI builds cmd/brokerd (with -race when the tests are; the
// build cache makes every build after the first a link), runs it on
// loopback ports the kernel picks with its data in a fresh directory on
// the store BROKERD_TEST_STORE names (disk or memory), and returns its
// API; the API's amqp field is the daemon's AMQP address. The pages of
// shovels, limits and topic permissions are tested against it because
// the daemon is what wires their backends (the shovel engine, its
// runtime parameter) into the broker and the API. The daemon is stopped
// with SIGTERM when the test ends.
func startDaemonAPI(t *testing.T) (a *api, amqpAddr string) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "brokerd")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "github.com/brokerd/brokerd/cmd/brokerd")
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	engine := os.Getenv(brokertest.EnvStore)
	if engine != "disk" {
		engine = "memory"
	}
	config := filepath.Join(dir, "brokerd.toml")
	if err := os.WriteFile(config, fmt.Appendf(nil, "[storage]\nengine = %q\n", engine), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-config", config, "-listen", "127.0.0.1:0", "-mgmt-listen", "127.0.0.1:0", "-data", filepath.Join(dir, "data"))
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET=")
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start brokerd: %v", err)
	}
	var (
		mu    sync.Mutex
		lines []string
	)
	logText := func() string { mu.Lock(); defer mu.Unlock(); return strings.Join(lines, "\n") }
	amqpCh, httpCh, done := make(chan string, 1), make(chan string, 1), make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			line := sc.Text()
			mu.Lock()
			lines = append(lines, line)
			mu.Unlock()
			for re, ch := range map[*regexp.Regexp]chan string{daemonAMQPRE: amqpCh, daemonHTTPRE: httpCh} {
				if m := re.FindStringSubmatch(line); m != nil {
					select {
					case ch <- m[1]:
					default: // a later listener's: the first is the one
					}
				}
			}
		}
		cmd.Wait() // only after the last read from the pipe
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Errorf("brokerd did not exit within 20 s of SIGTERM")
		}
		if log := logText(); t.Failed() || strings.Contains(log, "DATA RACE") {
			if strings.Contains(log, "DATA RACE") {
				t.Error("brokerd reported a data race")
			}
			t.Logf("brokerd's log:\n%s", log)
		}
	})
	var httpAddr string
	deadline := time.After(60 * time.Second)
	for amqpAddr == "" || httpAddr == "" {
		select {
		case amqpAddr = <-amqpCh:
		case httpAddr = <-httpCh:
		case <-done:
			t.Fatalf("brokerd exited with %d before serving AMQP and HTTP:\n%s", cmd.ProcessState.ExitCode(), logText())
		case <-deadline:
			t.Fatalf("brokerd did not log that it serves AMQP and HTTP within 60 s:\n%s", logText())
		}
	}
	return &api{t: t, base: "http://" + httpAddr + "/api"}, amqpAddr
}
