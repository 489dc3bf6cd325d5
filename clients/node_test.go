package clients

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// amqplib from the npm registry, installed globally (npm install -g), so
// that node finds it through NODE_PATH.
func TestNodeAmqplib(t *testing.T) {
	if _, err := exec.LookPath("node"); err != nil {
		t.Skipf("no node: install Debian package nodejs (%v)", err)
	}
	env := []string{"NODE_PATH=" + nodePath()}
	probe := exec.Command("node", "-e", "require('amqplib')")
	probe.Env = append(os.Environ(), env...)
	if out, err := probe.CombinedOutput(); err != nil {
		t.Skipf("node cannot require('amqplib'): install npm package amqplib with npm install -g (%v)\n%s", err, out)
	}
	b := startBroker(t)
	script := testdata(t, "client.js")

	t.Run("dead-letter", func(t *testing.T) {
		start := time.Now()
		out := runClient(t, time.Minute, env, "node", script, "dead-letter", b.host, b.port, "node")
		checkDeadLetter(t, parseResult(t, out), "node", start)
	})

	// amqplib writes connection.close while its ten publishes may still be
	// in flight; brokerd must read and discard them after close-ok rather
	// than reset the connection, or the client never sees close-ok (issue 8,
	// defect 5). The script fails by itself if close does not complete
	// within 10 s, naming the socket error it saw.
	t.Run("publish-then-close", func(t *testing.T) {
		out, stderr, err := execClient(t, time.Minute, env, "node", script, "publish-then-close", b.host, b.port, "node")
		if err != nil {
			t.Fatalf("amqplib's connection.close right after 10 publishes did not complete: brokerd must keep "+
				"reading (and discarding) after close-ok until the client hangs up (issue 8, defect 5): %v\n%s%s", err, out, stderr)
		}
		var r struct {
			Closed  bool  `json:"closed"`
			CloseMS int64 `json:"close_ms"`
		}
		if err := json.Unmarshal(out, &r); err != nil || !r.Closed {
			t.Fatalf("want {\"closed\":true,...}, got %s (%v)", out, err)
		}
		t.Logf("connection.close completed in %d ms", r.CloseMS)
	})
}

// nodePath is where npm installs global packages, for NODE_PATH.
func nodePath() string {
	if out, err := exec.Command("npm", "root", "-g").Output(); err == nil {
		return strings.TrimSpace(string(out))
	}
	return "/usr/lib/node_modules:/usr/local/lib/node_modules"
}
