package main

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/brokerd/brokerd/internal/version"
)

// -version prints "brokerd <version>" on stdout and exits 0 before reading
// any configuration or touching a data directory: a package's install
// script may run it as any user, anywhere.
func TestVersionFlag(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-version", "-config", filepath.Join(dir, "missing.toml"))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), daemonEnv+"=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("brokerd -version: %v\nstderr: %s", err, stderr.String())
	}
	// The child is this test binary, so its version is ours.
	if got, want := stdout.String(), "brokerd "+version.String()+"\n"; got != want {
		t.Errorf("stdout %q, want %q", got, want)
	}
	if stderr.Len() != 0 {
		t.Errorf("stderr %q, want nothing", stderr.String())
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Errorf("-version left %v in its working directory (err %v)", entries, err)
	}
}

// At start brokerd logs its version, and with the management API's line
// the web UI's URL, which serves the UI; a listener on every interface
// is given as localhost.
func TestStartupLogsVersionAndUI(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, t.TempDir(), "-listen", "127.0.0.1:0", "-mgmt-listen", "0.0.0.0:0")
	api := d.mgmtURL()
	first := strings.SplitN(d.log(), "\n", 2)[0]
	if !strings.Contains(first, `msg="starting brokerd" version=`+version.String()+" ") {
		t.Errorf("first log line %q does not give the version %s", first, version.String())
	}
	m := regexp.MustCompile(`serving management HTTP API.* ui=(\S+)`).FindStringSubmatch(d.log())
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(api, "http://"))
	if m == nil || m[1] != "http://localhost:"+port+"/" {
		t.Fatalf("web UI URL %q, want http://localhost:%s/:\n%s", m, port, d.log())
	}
	res, err := http.Get(m[1])
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(body), "<title>brokerd management</title>") {
		t.Fatalf("GET %s: %d %.200s", m[1], res.StatusCode, body)
	}
}

func TestUIURL(t *testing.T) {
	for _, c := range []struct {
		addr  string
		https bool
		want  string
	}{
		{"127.0.0.1:15672", false, "http://127.0.0.1:15672/"},
		{"0.0.0.0:15672", false, "http://localhost:15672/"},
		{"[::]:15671", true, "https://localhost:15671/"},
		{"[::1]:15672", false, "http://[::1]:15672/"},
		{"192.0.2.7:8080", true, "https://192.0.2.7:8080/"},
	} {
		a, err := net.ResolveTCPAddr("tcp", c.addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := uiURL(a, c.https); got != c.want {
			t.Errorf("uiURL(%s, %v) = %q, want %q", c.addr, c.https, got, c.want)
		}
	}
}
