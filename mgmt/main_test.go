package mgmt_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/brokerd/brokerd/broker/brokertest"
	"github.com/brokerd/brokerd/mgmt"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// api is a broker with its management API, both on loopback ports.
type api struct {
	*brokertest.Instance
	t    *testing.T
	base string // http://127.0.0.1:port/api
	srv  *mgmt.Server
	ln   net.Listener
	done chan struct{}
	opts mgmt.Options // what the API is started with (Broker and Version set by serve)
}

// startAPI starts a broker on the store BROKERD_TEST_STORE selects, with
// its management API.
func startAPI(t *testing.T) *api {
	t.Helper()
	return startAPIWith(t, mgmt.Options{})
}

// startAPIWith is startAPI with the API's options.
func startAPIWith(t *testing.T, opts mgmt.Options) *api {
	t.Helper()
	return startBrokerAPI(t, brokertest.Config{}, opts)
}

// startBrokerAPI is startAPI with the broker's and the API's options.
func startBrokerAPI(t *testing.T, cfg brokertest.Config, opts mgmt.Options) *api {
	t.Helper()
	a := &api{t: t, Instance: brokertest.Start(t, cfg), opts: opts}
	a.serve()
	t.Cleanup(a.stopAPI)
	return a
}

func (a *api) serve() {
	a.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		a.t.Fatal(err)
	}
	a.ln, a.base = ln, "http://"+ln.Addr().String()+"/api"
	opts := a.opts
	opts.Broker, opts.Version = a.Broker, "test"
	if opts.SampleTicks == nil {
		// Tests that look at rates take their samples themselves
		// (mgmt.SampleRates): none comes from the sampler's goroutine.
		opts.SampleTicks = make(chan time.Time)
	}
	a.srv = mgmt.New(opts)
	a.done = make(chan struct{})
	go func() { defer close(a.done); a.srv.Serve(ln) }()
}

func (a *api) stopAPI() {
	if a.srv == nil {
		return
	}
	// Idle client connections first: Shutdown waits 5s for one that
	// never sent a request (the client dialled more than it used).
	http.DefaultClient.CloseIdleConnections()
	a.srv.Shutdown(a.t.Context())
	<-a.done
	a.srv = nil
}

// restart restarts the broker over its store and the API with it.
func (a *api) restart() {
	a.t.Helper()
	a.stopAPI()
	a.Restart()
	a.serve()
}

// resp is a reply of the API.
type resp struct {
	status int
	header http.Header
	body   []byte
}

func (r resp) json(t *testing.T) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("reply %d %q is not JSON: %v", r.status, r.body, err)
	}
	return v
}

func (r resp) object(t *testing.T) map[string]any {
	t.Helper()
	m, ok := r.json(t).(map[string]any)
	if !ok {
		t.Fatalf("reply %q is not an object", r.body)
	}
	return m
}

func (r resp) list(t *testing.T) []map[string]any {
	t.Helper()
	l, ok := r.json(t).([]any)
	if !ok {
		t.Fatalf("reply %q is not a list", r.body)
	}
	out := make([]map[string]any, len(l))
	for i, e := range l {
		out[i] = e.(map[string]any)
	}
	return out
}

// as sends a request with the given credentials; body is JSON-encoded
// unless it is a string (sent as is) or nil, and sent as
// application/json (header may say otherwise).
func (a *api) as(user, pass, method, path string, body any, header ...string) resp {
	a.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			a.t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(a.t.Context(), method, a.base+path, rd)
	if err != nil {
		a.t.Fatal(err)
	}
	req.SetBasicAuth(user, pass)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json") // as every client sends a body
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		a.t.Fatal(err)
	}
	return resp{status: res.StatusCode, header: res.Header, body: b}
}

// do sends a request as guest.
func (a *api) do(method, path string, body any, header ...string) resp {
	a.t.Helper()
	return a.as("guest", "guest", method, path, body, header...)
}

// must sends a request as guest and fails the test unless the status is
// want.
func (a *api) must(want int, method, path string, body any) resp {
	a.t.Helper()
	r := a.do(method, path, body)
	if r.status != want {
		a.t.Fatalf("%s %s: status %d %s, want %d", method, path, r.status, r.body, want)
	}
	return r
}

// wantError checks an error reply: status, RabbitMQ's error word and a
// reason containing reason.
func wantError(t *testing.T, r resp, status int, word, reason string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d %s, want %d", r.status, r.body, status)
	}
	m := r.object(t)
	if m["error"] != word || !strings.Contains(m["reason"].(string), reason) {
		t.Fatalf("error body %s, want error %q and a reason containing %q", r.body, word, reason)
	}
}

// waitFor polls cond, for what the API shows after an asynchronous
// change (a publish landing, a connection going): the API has no event to
// wait on. It fails the test after 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting for the condition")
		}
		time.Sleep(2 * time.Millisecond) // polling interval, not a synchronisation
	}
}

func pathEscape(s string) string { return url.PathEscape(s) }
