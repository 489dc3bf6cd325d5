package main

import (
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// The [mgmt] and [auth] keys reach the API and the logins: an allowed host
// name, the body limit, and the failed-login budget shared by HTTP and
// AMQP.
func TestMgmtAndAuthConfigWired(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "brokerd.toml")
	text := "[storage]\nengine = \"memory\"\n" +
		"[mgmt]\nallowed_hosts = [\"broker.example\"]\nmax_body_size = \"64KiB\"\n" +
		"[auth]\nlogin_failure_delay = \"0s\"\nfailed_login_burst = 2\nfailed_login_interval = \"1h\"\n"
	if err := os.WriteFile(cfgFile, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, dir, "-config", cfgFile, "-listen", "127.0.0.1:0", "-mgmt-listen", "127.0.0.1:0", "-data", filepath.Join(dir, "data"))
	api := d.mgmtURL()
	do := func(method, path, host, user, pass, body string) int {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, _ := http.NewRequest(method, api+path, rd)
		if host != "" {
			req.Host = host
		}
		req.Header.Set("Content-Type", "application/json")
		req.SetBasicAuth(user, pass)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	if s := do("GET", "/api/whoami", "broker.example:15672", "guest", "guest", ""); s != 200 {
		t.Errorf("allowed host: %d", s)
	}
	if s := do("GET", "/api/whoami", "evil.example", "guest", "guest", ""); s != 403 {
		t.Errorf("other host: %d, want 403", s)
	}
	if s := do("PUT", "/api/queues/%2F/q", "", "guest", "guest", `{"x":"`+strings.Repeat("x", 70<<10)+`"}`); s != 400 {
		t.Errorf("a 70 KiB body with max_body_size 64KiB: %d, want 400", s)
	}
	for range 2 {
		if s := do("GET", "/api/whoami", "", "guest", "wrong", ""); s != 401 {
			t.Errorf("wrong password: %d", s)
		}
	}
	if s := do("GET", "/api/whoami", "", "guest", "guest", ""); s != 401 {
		t.Errorf("the right password past failed_login_burst: %d, want 401", s)
	}
	c, err := amqp091.Dial(d.url())
	if err == nil {
		c.Close()
		t.Fatal("AMQP login past the budget spent over HTTP")
	}
	if e := (*amqp091.Error)(nil); !errors.As(err, &e) || e.Code != amqp091.AccessRefused {
		t.Fatalf("AMQP login: %v, want 403", err)
	}
}
