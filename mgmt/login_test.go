package mgmt_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
	"github.com/brokerd/brokerd/internal/loginlimit"
	"github.com/brokerd/brokerd/mgmt"
)

// testClock is a clock the test moves.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *testClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// clientFrom is an HTTP client whose connections come from local (a
// loopback address).
func clientFrom(local string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
}

// The API and AMQP share one budget of failed logins per source: 32
// clients at once trying 8 passwords each over HTTP, the right one last,
// have only the budget's guesses checked (the clock does not move): every
// answer is the same 401, the right password's too. The same password
// over AMQP from the same source is refused as well; from another address
// it is checked; once the budget refills, it gets in.
func TestHTTPLoginGuessesBounded(t *testing.T) {
	clk := &testClock{t: time.Unix(1e9, 0)}
	const burst = 5
	a := startBrokerAPI(t, brokertest.Config{
		Server: amqp.ServerConfig{LoginFailureDelay: -1},
		Broker: broker.Options{LoginLimit: loginlimit.New(loginlimit.Options{Burst: burst, Interval: time.Second, Now: clk.now})},
	}, mgmt.Options{LoginFailureDelay: -1})
	a.must(201, "PUT", "/users/victim", map[string]any{"password": "right", "tags": "management"})
	a.must(201, "PUT", "/permissions/%2F/victim", map[string]any{"configure": ".*", "write": ".*", "read": ".*"})

	const clients, guesses = 32, 8
	var ok atomic.Int64
	bodies := sync.Map{}
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for g := range guesses {
				pw := fmt.Sprintf("guess-%d-%d", i, g)
				if i == clients-1 && g == guesses-1 {
					pw = "right"
				}
				req, _ := http.NewRequest("GET", a.base+"/whoami", nil)
				req.SetBasicAuth("victim", pw)
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				b, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode == 200 {
					ok.Add(1)
				}
				bodies.Store(fmt.Sprintf("%d %s %s", res.StatusCode, res.Header.Get("WWW-Authenticate"), b), true)
			}
		}()
	}
	wg.Wait()
	if n := ok.Load(); n != 0 {
		t.Fatalf("the right password got in among %d guesses from one source with a budget of %d", clients*guesses, burst)
	}
	n := 0
	bodies.Range(func(k, _ any) bool { n++; t.Logf("answer: %s", k); return true })
	if n != 1 {
		t.Errorf("%d different answers to refused logins: a client can tell them apart", n)
	}
	// Over AMQP, the same source's budget.
	if c, err := amqp091.Dial("amqp://victim:right@" + a.Addr + "/"); err == nil {
		c.Close()
		t.Fatal("AMQP login got in over the source's budget spent over HTTP")
	} else if e := (*amqp091.Error)(nil); !errors.As(err, &e) || e.Code != amqp091.AccessRefused {
		t.Fatalf("AMQP login: %v, want 403 ACCESS_REFUSED", err)
	}
	// Another source has its own.
	req, _ := http.NewRequest("GET", a.base+"/whoami", nil)
	req.SetBasicAuth("victim", "right")
	other := clientFrom("127.0.0.2")
	res, err := other.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	other.CloseIdleConnections()
	if res.StatusCode != 200 {
		t.Fatalf("from 127.0.0.2: %s", res.Status)
	}
	clk.add(time.Second)
	if r := a.as("victim", "right", "GET", "/whoami", nil); r.status != 200 {
		t.Fatalf("one interval later: %d %s", r.status, r.body)
	}
}

// recordLog keeps the records with a message.
type recordLog struct {
	msg  string
	mu   sync.Mutex
	recs []slog.Record
}

func (h *recordLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.mu.Lock()
		h.recs = append(h.recs, r.Clone())
		h.mu.Unlock()
	}
	return nil
}
func (h *recordLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordLog) WithGroup(string) slog.Handler      { return h }

// events returns how many lines were logged and how many events they
// stand for (an aggregated line carries its count), and their level.
func (h *recordLog) events() (lines, events int, levels map[slog.Level]bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	levels = map[slog.Level]bool{}
	for _, r := range h.recs {
		lines++
		levels[r.Level] = true
		n := 1
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "count" {
				n = int(a.Value.Int64())
			}
			return true
		})
		events += n
	}
	return lines, events, levels
}

// A refused login waits out LoginFailureDelay, counted from the request's
// arrival, before its 401 (a good one does not wait), and refusals are
// logged as warnings, aggregated: at most about a line a second, every
// refusal counted.
func TestHTTPLoginFailureDelayedAndLogged(t *testing.T) {
	logs := &recordLog{msg: "management login refused"}
	const delay = 300 * time.Millisecond
	start := time.Now()
	a := startAPIWith(t, mgmt.Options{LoginFailureDelay: delay, Logger: slog.New(logs)})
	var waits sync.Map
	var waited atomic.Int64
	mgmt.SetLoginDelay(a.srv, func(r *http.Request, d time.Duration) {
		waits.Store(d, true)
		waited.Add(1)
	})
	a.must(200, "GET", "/whoami", nil)
	if n := waited.Load(); n != 0 {
		t.Fatalf("a good login waited")
	}
	const refusals = 40
	var wg sync.WaitGroup
	for i := range refusals {
		wg.Add(1)
		go func() {
			defer wg.Done()
			user, pass := "guest", "wrong"
			if i%2 == 0 {
				user = fmt.Sprintf("nobody%d", i)
			}
			if r := a.as(user, pass, "GET", "/whoami", nil); r.status != 401 {
				t.Errorf("%s: %d", user, r.status)
			}
		}()
	}
	wg.Wait()
	if n := waited.Load(); n != refusals {
		t.Fatalf("%d refusals waited, want %d", n, refusals)
	}
	waits.Range(func(k, _ any) bool {
		if d := k.(time.Duration); d <= 0 || d > delay {
			t.Errorf("a refusal waited %v, want the rest of %v", d, delay)
		}
		return true
	})
	a.stopAPI() // logs the count still pending
	lines, events, levels := logs.events()
	t.Logf("%d refusals logged in %d lines", events, lines)
	if events != refusals {
		t.Errorf("%d refusals logged, want %d", events, refusals)
	}
	if bound := 2 + int(time.Since(start)/time.Second); lines > bound {
		t.Errorf("%d lines for %d refusals, want at most %d", lines, refusals, bound)
	}
	if len(levels) != 1 || !levels[slog.LevelWarn] {
		t.Errorf("logged at %v, want warnings", levels)
	}
}
