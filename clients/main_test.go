package clients

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
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
)

var build struct {
	once sync.Once
	dir  string // removed by TestMain
	bin  string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if build.dir != "" {
		os.RemoveAll(build.dir)
	}
	os.Exit(code)
}

// brokerdBinary builds cmd/brokerd on first use, so that a run in which
// every client is missing builds nothing. It is built with -race when the
// tests are: a data race that a foreign client provokes fails the test.
func brokerdBinary(t *testing.T) string {
	t.Helper()
	build.once.Do(func() {
		if build.dir, build.err = os.MkdirTemp("", "brokerd-clients-"); build.err != nil {
			return
		}
		build.bin = filepath.Join(build.dir, "brokerd")
		args := []string{"build", "-o", build.bin}
		if raceEnabled() {
			args = append(args, "-race")
		}
		args = append(args, "github.com/brokerd/brokerd/cmd/brokerd")
		if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
			build.err = fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
		}
	})
	if build.err != nil {
		t.Fatalf("build brokerd: %v", build.err)
	}
	return build.bin
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

// broker is a brokerd process serving AMQP on a loopback port, with a data
// directory of its own. It is stopped with SIGTERM when the test ends, and
// the test fails if it reported a data race or did not exit 0.
type broker struct {
	host, port string

	mu     sync.Mutex
	stderr []string
}

var acceptRE = regexp.MustCompile(`accepting AMQP connections.* addr=(\S+)`)

func startBroker(t *testing.T) *broker {
	t.Helper()
	bin := brokerdBinary(t)
	cmd := exec.Command(bin, "-listen", "127.0.0.1:0", "-mgmt-listen", "off", "-data", filepath.Join(t.TempDir(), "data"))
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET=")
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	b := &broker{}
	addr := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			line := sc.Text()
			b.mu.Lock()
			b.stderr = append(b.stderr, line)
			b.mu.Unlock()
			if m := acceptRE.FindStringSubmatch(line); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
		cmd.Wait() // only after the last read from the pipe
		close(done)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Errorf("brokerd did not exit within 20s of SIGTERM")
		}
		if log := b.log(); strings.Contains(log, "WARNING: DATA RACE") {
			t.Errorf("brokerd reported a data race:\n%s", log)
		} else if code := cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("brokerd exited %d after SIGTERM, want 0:\n%s", code, log)
		} else if t.Failed() {
			t.Logf("brokerd stderr:\n%s", log)
		}
	})
	select {
	case a := <-addr:
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			t.Fatalf("brokerd listen address %q: %v", a, err)
		}
		b.host, b.port = host, port
	case <-done:
		t.Fatalf("brokerd exited before accepting connections:\n%s", b.log())
	case <-time.After(20 * time.Second):
		t.Fatalf("brokerd did not log \"accepting AMQP connections\" within 20s:\n%s", b.log())
	}
	return b
}

func (b *broker) log() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Join(b.stderr, "\n")
}

// runClient runs a client program to completion, at most timeout, and
// returns its standard output. The test fails, showing both outputs, if
// the program fails or overruns.
func runClient(t *testing.T, timeout time.Duration, env []string, name string, args ...string) []byte {
	t.Helper()
	stdout, stderr, err := execClient(t, timeout, env, name, args...)
	if err != nil {
		t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	if len(stderr) > 0 {
		t.Logf("%s stderr:\n%s", name, stderr)
	}
	return stdout
}

// execClient runs a client program to completion, at most timeout.
func execClient(t *testing.T, timeout time.Duration, env []string, name string, args ...string) (stdout, stderr []byte, err error) {
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = 5 * time.Second // a grandchild holding the pipes open
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("%s did not finish within %v", name, timeout)
	} else if err != nil {
		err = fmt.Errorf("%s failed: %w", name, err)
	}
	return out.Bytes(), errOut.Bytes(), err
}

// result is what a client program prints, as one line of JSON, after the
// dead-lettering round trip described in doc.go.
type result struct {
	Client    string `json:"client"` // library and version, for the log
	Confirmed bool   `json:"confirmed"`
	// The delivery that was rejected.
	Rejected struct {
		Body        string `json:"body"`
		Redelivered bool   `json:"redelivered"`
	} `json:"rejected"`
	// The dead letter, as consumed from P.dlq.
	DeadLetter struct {
		Exchange     string `json:"exchange"`
		RoutingKey   string `json:"routing_key"`
		Body         string `json:"body"`
		DeliveryMode int    `json:"delivery_mode"`
		MessageID    string `json:"message_id"`
	} `json:"dead_letter"`
	XDeath     []death `json:"x_death"`
	FirstDeath struct {
		Queue    string `json:"queue"`
		Reason   string `json:"reason"`
		Exchange string `json:"exchange"`
	} `json:"first_death"`
}

type death struct {
	Queue       string   `json:"queue"`
	Reason      string   `json:"reason"`
	Count       int64    `json:"count"`
	Exchange    string   `json:"exchange"`
	RoutingKeys []string `json:"routing_keys"`
	Time        int64    `json:"time"` // Unix seconds
}

// The names and message of the round trip for prefix p.
func body(p string) string      { return "dead letter from " + p }
func messageID(p string) string { return p + "-1" }

// parseResult reads the last line of a client's output as a result.
func parseResult(t *testing.T, out []byte) result {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var r result
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
		t.Fatalf("client output's last line is not a result: %v\n%s", err, out)
	}
	t.Logf("%s: %s", r.Client, lines[len(lines)-1])
	return r
}

// checkDeadLetter checks a client's result against the scenario in doc.go
// for prefix p, run after start.
func checkDeadLetter(t *testing.T, r result, p string, start time.Time) {
	t.Helper()
	if !r.Confirmed {
		t.Errorf("publish not confirmed")
	}
	if r.Rejected.Body != body(p) || r.Rejected.Redelivered {
		t.Errorf("rejected delivery: body %q redelivered %v, want %q, false", r.Rejected.Body, r.Rejected.Redelivered, body(p))
	}
	if r.DeadLetter.MessageID != messageID(p) {
		t.Errorf("dead letter's message-id %q, want %q", r.DeadLetter.MessageID, messageID(p))
	}
	checkDeath(t, r, p, start)
}

// checkDeath checks the dead letter and its headers in r.
func checkDeath(t *testing.T, r result, p string, start time.Time) {
	t.Helper()
	dl := r.DeadLetter
	if dl.Exchange != p+".dlx" || dl.RoutingKey != p+".dead" {
		t.Errorf("dead letter delivered from exchange %q with key %q, want %q, %q", dl.Exchange, dl.RoutingKey, p+".dlx", p+".dead")
	}
	if dl.Body != body(p) || dl.DeliveryMode != 2 {
		t.Errorf("dead letter: body %q delivery-mode %d, want %q, 2", dl.Body, dl.DeliveryMode, body(p))
	}
	if len(r.XDeath) != 1 {
		t.Fatalf("x-death has %d entries, want 1: %+v", len(r.XDeath), r.XDeath)
	}
	d := r.XDeath[0]
	want := death{Queue: p + ".work", Reason: "rejected", Count: 1, Exchange: p + ".in", RoutingKeys: []string{p + ".key"}, Time: d.Time}
	if fmt.Sprint(d) != fmt.Sprint(want) {
		t.Errorf("x-death[0] = %+v, want %+v", d, want)
	}
	// AMQP timestamps have whole seconds.
	if lo, hi := start.Unix(), time.Now().Unix(); d.Time < lo || d.Time > hi {
		t.Errorf("x-death[0] time %d, want within [%d, %d]", d.Time, lo, hi)
	}
	if f := r.FirstDeath; f.Queue != p+".work" || f.Reason != "rejected" || f.Exchange != p+".in" {
		t.Errorf("x-first-death-queue, -reason, -exchange = %q, %q, %q, want %q, \"rejected\", %q", f.Queue, f.Reason, f.Exchange, p+".work", p+".in")
	}
}

// testdata returns the absolute path of a file in testdata/.
func testdata(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return p
}
