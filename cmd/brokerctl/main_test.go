package main

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/brokerd/brokerd/internal/version"
)

// The tests run brokerctl as a real process — this test binary,
// re-executed with runMainEnv set, runs main() — so that the arguments,
// environment, standard streams and exit code are the real ones. The
// verbs themselves are tested in internal/ctl against a real server.
const runMainEnv = "BROKERCTL_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

func brokerctl(t *testing.T, env []string, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), append([]string{runMainEnv + "=1"}, env...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("run brokerctl: %v", err)
	}
	return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
}

// closedPort is a loopback port nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	return port
}

func TestWiring(t *testing.T) {
	// The URL comes from the environment; stdout carries the
	// informational line, stderr the error; the exit code is 69.
	url := "http://127.0.0.1:" + closedPort(t)
	stdout, stderr, code := brokerctl(t, []string{"BROKERCTL_URL=" + url}, "", "list_vhosts")
	if code != 69 || stdout != "Listing vhosts ...\n" || !strings.Contains(stderr, "unable to reach the management API at "+url) {
		t.Errorf("exit %d\nstdout: %q\nstderr: %q", code, stdout, stderr)
	}
	// A flag wins over the environment.
	url2 := "http://127.0.0.1:" + closedPort(t)
	_, stderr, code = brokerctl(t, []string{"BROKERCTL_URL=" + url}, "", "--url", url2, "-q", "list_vhosts")
	if code != 69 || !strings.Contains(stderr, url2) {
		t.Errorf("--url: exit %d, stderr %q", code, stderr)
	}
	// Standard input is read (and found not to be JSON before any
	// request is made).
	_, stderr, code = brokerctl(t, []string{"BROKERCTL_URL=" + url}, "{not json", "import_definitions")
	if code != 65 || !strings.Contains(stderr, "Failed to deserialise input") {
		t.Errorf("import_definitions from stdin: exit %d, stderr %q", code, stderr)
	}
	stdout, _, code = brokerctl(t, nil, "", "help", "set_policy")
	if code != 0 || !strings.Contains(stdout, "set_policy [--vhost <vhost>]") {
		t.Errorf("help: exit %d, stdout %q", code, stdout)
	}
	stdout, stderr, code = brokerctl(t, nil, "", "frobnicate")
	if code != 64 || stdout != "" || !strings.Contains(stderr, "Command 'frobnicate' not found.") {
		t.Errorf("unknown verb: exit %d\nstdout: %q\nstderr: %q", code, stdout, stderr)
	}
}

// -version (brokerd's spelling) and --version (rabbitmqctl's) print
// "brokerctl <version>" on stdout and exit 0 without contacting a broker,
// whatever else the command line says.
func TestVersion(t *testing.T) {
	// The child is this test binary, so its version is ours.
	want := "brokerctl " + version.String() + "\n"
	url := "http://127.0.0.1:" + closedPort(t)
	for _, args := range [][]string{{"-version"}, {"--version"}, {"--url", url, "list_queues", "--version"}} {
		stdout, stderr, code := brokerctl(t, nil, "", args...)
		if code != 0 || stdout != want || stderr != "" {
			t.Errorf("%q: exit %d\nstdout: %q (want %q)\nstderr: %q", args, code, stdout, want, stderr)
		}
	}
}
