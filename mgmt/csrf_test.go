package mgmt_test

import (
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/brokerd/brokerd/mgmt"
)

// Requests a browser sends for someone else's page: to another site's
// name rebound to 127.0.0.1 (DNS rebinding), or cross-origin with the
// credentials the browser keeps for this one (CSRF).

// withHost sends a request as guest with the Host header host.
func (a *api) withHost(method, path, host string, header ...string) resp {
	a.t.Helper()
	req, err := http.NewRequestWithContext(a.t.Context(), method, a.base+path, nil)
	if err != nil {
		a.t.Fatal(err)
	}
	req.Host = host
	req.SetBasicAuth("guest", "guest")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s (Host %s): %v", method, path, host, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return resp{status: res.StatusCode, header: res.Header, body: b}
}

// Only loopback names, IP addresses, the machine's name and the names
// configured may be a request's Host: a page whose name resolves to
// 127.0.0.1 cannot reach the API (nor the UI, nor /metrics) as its own
// origin.
func TestHostNamesAllowed(t *testing.T) {
	a := startAPIWith(t, mgmt.Options{AllowedHosts: []string{"Broker.Example."}})
	_, port, _ := net.SplitHostPort(a.hostPort())
	hostname, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"localhost", "LOCALHOST.", "ui.localhost", "127.0.0.1", "[::1]", "10.1.2.3", "broker.example", hostname} {
		for _, host := range []string{h, net.JoinHostPort(strings.Trim(h, "[]"), port)} {
			if r := a.withHost("GET", "/whoami", host); r.status != 200 {
				t.Errorf("Host %s: %d %s", host, r.status, r.body)
			}
		}
	}
	for _, host := range []string{"evil.example", "evil.example:" + port, "localhost.evil.example", "127.0.0.1.nip.io:" + port} {
		for _, path := range []string{"/whoami", "/../", "/queues/%2F/q"} {
			r := a.withHost("GET", path, host)
			if path == "/queues/%2F/q" {
				r = a.withHost("PUT", path, host, "Content-Type", "application/json")
			}
			wantError(t, r, 403, "forbidden", "is not allowed: add it to mgmt.allowed_hosts")
		}
	}
	a.must(404, "GET", "/queues/%2F/q", nil)
}

// A state-changing request a browser makes for a page of another origin
// is refused, whatever its credentials; the same from the API's own
// origin, or from a client that is not a browser, goes through. Reads are
// not refused (their answers do not reach the other page).
func TestCrossOriginRefused(t *testing.T) {
	a := startAPI(t)
	own := "http://" + a.hostPort()
	for _, h := range [][]string{
		{"Sec-Fetch-Site", "cross-site"},
		{"Sec-Fetch-Site", "same-site"},
		{"Origin", "http://evil.example"},
		{"Origin", "http://localhost:1"},
	} {
		r := a.do("PUT", "/users/evil", map[string]any{"password": "x", "tags": "administrator"}, h...)
		wantError(t, r, 403, "forbidden", "cross-origin request refused")
	}
	if _, ok := a.Broker.User("evil"); ok {
		t.Fatal("a cross-origin request created a user")
	}
	a.must(200, "GET", "/whoami", nil)
	if r := a.do("GET", "/whoami", nil, "Sec-Fetch-Site", "cross-site"); r.status != 200 {
		t.Errorf("cross-site GET: %d %s", r.status, r.body)
	}
	for _, h := range [][]string{{"Sec-Fetch-Site", "same-origin"}, {"Origin", own}, {"Sec-Fetch-Site", "none"}, nil} {
		if r := a.do("PUT", "/vhosts/v", nil, h...); r.status != 201 && r.status != 204 {
			t.Errorf("PUT with %v: %d %s", h, r.status, r.body)
		}
	}
}

// The attack, in a real browser: the user has given Chromium
// guest's credentials for the API (which it then sends with every request
// to it), and opens a page of another site whose form posts a definitions
// file creating an administrator, as text/plain (which a form may send
// without asking anyone). The post is refused and no user is created.
func TestUICrossSiteFormCannotCreateAdmin(t *testing.T) {
	ctx := browser(t)
	a := startAPI(t)
	api := "http://" + a.hostPort()
	// The form's one field, name=value, is the JSON body.
	name := `{"users":[{"name":"evil","password_hash":"","tags":"administrator"}],"x":"`
	page := fmt.Sprintf(`<!doctype html><form id="f" method="POST" enctype="text/plain" action="%s/api/definitions">
<input type="hidden" name="%s" value='"}'></form><script>document.getElementById("f").submit()</script>`, api, html.EscapeString(name))
	attacker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, page)
	}))
	defer attacker.Close()
	// Another site: localhost, where the API is 127.0.0.1.
	evil := strings.Replace(attacker.URL, "127.0.0.1", "localhost", 1)

	posted := make(chan int64, 1)
	chromedp.ListenTarget(ctx, func(ev any) {
		if e, ok := ev.(*network.EventResponseReceived); ok && strings.HasSuffix(e.Response.URL, "/api/definitions") {
			select {
			case posted <- e.Response.Status:
			default:
			}
		}
	})
	var who string
	until(t, ctx, "log in to the API",
		network.Enable(),
		chromedp.Navigate("http://guest:guest@"+a.hostPort()+"/api/whoami"),
		chromedp.Text("body", &who, chromedp.ByQuery))
	if !strings.Contains(who, `"guest"`) {
		t.Fatalf("the browser did not log in: %q", who)
	}
	until(t, ctx, "open the other site's page", chromedp.Navigate(evil+"/"))
	select {
	case status := <-posted:
		t.Logf("the form's post was answered %d", status)
		if status/100 == 2 {
			t.Errorf("the form's post succeeded: %d", status)
		}
	case <-ctx.Done():
		t.Fatal("the form was not posted")
	}
	if _, ok := a.Broker.User("evil"); ok {
		t.Fatal("a page of another site created an administrator")
	}
}
