package mgmt_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
	"github.com/brokerd/brokerd/mgmt"
)

// Clients that are slow or large on purpose: bodies sent a byte at a
// time, more connections than the API takes, bodies of tens of MiB.

// hostPort is the API's address.
func (a *api) hostPort() string {
	return strings.TrimPrefix(strings.TrimSuffix(a.base, "/api"), "http://")
}

func basic(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

// rawReply sends head (the request line and headers, without the blank
// line) and then body on a new connection, and returns the reply's status
// and how the connection ended after it: nil when the server closed it
// (EOF or a reset), an error when it stayed open past the bound or the
// reply did not come. The bound only limits a failing test; nothing
// waits for it.
func rawReply(addr, head, body string) (int, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if _, err := io.WriteString(c, head+"\r\n"+body); err != nil {
		return 0, err
	}
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, fmt.Errorf("no reply: %w", err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if _, err := br.ReadByte(); err == nil {
		return res.StatusCode, errors.New("the server sent more after its reply")
	} else if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
		return res.StatusCode, errors.New("the connection stayed open after the reply")
	}
	return res.StatusCode, nil
}

// 100 connections each announce a body and send one byte of it: those
// without credentials are refused at once, those with a body too slow
// once BodyTimeout passes, and every connection is closed after its reply
// (net/http used to wait for the rest of a small unread body before
// replying, without a deadline: no reply ever came). Nothing is declared.
func TestSlowBodiesAnsweredAndClosed(t *testing.T) {
	a := startAPIWith(t, mgmt.Options{BodyTimeout: 300 * time.Millisecond, MinBodyRate: 1 << 20, MaxConnections: 256})
	const n = 100
	type result struct {
		i, status int
		err       error
	}
	results := make(chan result, n)
	for i := range n {
		go func() {
			head := fmt.Sprintf("PUT /api/queues/%%2F/slow%d HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n", i, a.hostPort())
			if i%2 == 1 {
				head += "Authorization: " + basic("guest", "guest") + "\r\n"
			}
			status, err := rawReply(a.hostPort(), head, "{")
			results <- result{i, status, err}
		}()
	}
	for range n {
		r := <-results
		want := 401
		if r.i%2 == 1 {
			want = 408
		}
		if r.err != nil || r.status != want {
			t.Errorf("connection %d: status %d, %v; want %d and the connection closed", r.i, r.status, r.err, want)
		}
	}
	for _, q := range a.Broker.Queues("/") {
		t.Errorf("queue %s declared from a body that never came", q.Name)
	}
	// A body that keeps up with MinBodyRate is read, however long it
	// takes in all.
	r := a.do("PUT", "/queues/%2F/fine", `{"durable": true}`)
	if r.status != 201 {
		t.Fatalf("a body sent at once: %d %s", r.status, r.body)
	}
}

// countingListener records the most connections open at once.
type countingListener struct {
	net.Listener
	mu        sync.Mutex
	open, max int
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.open++
	l.max = max(l.max, l.open)
	l.mu.Unlock()
	return &countedConn{Conn: c, l: l}, nil
}

func (l *countingListener) most() int { l.mu.Lock(); defer l.mu.Unlock(); return l.max }

type countedConn struct {
	net.Conn
	l    *countingListener
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.l.mu.Lock(); c.l.open--; c.l.mu.Unlock() })
	return c.Conn.Close()
}

// eventLog signals each record with message msg on ch.
type eventLog struct {
	msg string
	ch  chan slog.Record
}

func (h *eventLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *eventLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		select {
		case h.ch <- r.Clone():
		default:
		}
	}
	return nil
}
func (h *eventLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *eventLog) WithGroup(string) slog.Handler      { return h }

// At MaxConnections, the API stops accepting (the kernel holds new
// connections, at no descriptor's cost) until one closes; it says so in
// the log. Never more than MaxConnections are open.
func TestConnectionLimit(t *testing.T) {
	inst := brokertest.Start(t, brokertest.Config{})
	events := &eventLog{msg: "management connections at mgmt.max_connections; new ones wait", ch: make(chan slog.Record, 10)}
	srv := mgmt.New(mgmt.Options{Broker: inst.Broker, Version: "test", MaxConnections: 2, Logger: slog.New(events)})
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &countingListener{Listener: inner}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	defer func() { srv.Shutdown(context.Background()); <-done }()
	addr := inner.Addr().String()

	var idle []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		idle = append(idle, c)
	}
	select {
	case r := <-events.ch:
		t.Logf("logged: %s", r.Message)
	case <-time.After(10 * time.Second):
		t.Fatal("no sign of the limit with 2 idle connections open and MaxConnections 2")
	}
	c3, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	fmt.Fprintf(c3, "GET /api/whoami HTTP/1.1\r\nHost: %s\r\nAuthorization: %s\r\n\r\n", addr, basic("guest", "guest"))
	idle[0].Close() // frees a slot: the third is accepted and served
	c3.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(c3), nil)
	if err != nil {
		t.Fatalf("third connection, once one closed: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("third connection: %s", res.Status)
	}
	if m := ln.most(); m > 2 {
		t.Fatalf("%d connections open at once, MaxConnections 2", m)
	}
}

// A management user with permissions that allow nothing (RabbitMQ's ""
// patterns) sends 60 MiB bodies: they are refused from the headers, before
// the body is read — the server reads at most what the kernel buffers —
// with or without a Content-Length.
func TestLargeBodiesRefusedUnread(t *testing.T) {
	a := startAPI(t)
	a.must(201, "PUT", "/users/nobody", map[string]any{"password": "pw", "tags": "management"})
	a.must(201, "PUT", "/permissions/%2F/nobody", map[string]any{"configure": "", "write": "", "read": ""})
	for _, c := range []struct {
		user    string
		chunked bool
		status  int
	}{
		{"nobody", false, 401},
		{"nobody", true, 401},
		{"guest", false, 400}, // allowed, but the body is over MaxBody
		{"guest", true, 400},
	} {
		sent, status, err := sendZeros(a, c.user, "PUT", "/api/queues/%2F/big", 60<<20, c.chunked)
		if err != nil || status != c.status {
			t.Errorf("%s, chunked %v: status %d, %v; want %d", c.user, c.chunked, status, err, c.status)
		}
		if sent > 16<<20 {
			t.Errorf("%s, chunked %v: the server took %d MiB of the body", c.user, c.chunked, sent>>20)
		}
		t.Logf("%s, chunked %v: %d, %d KiB taken", c.user, c.chunked, status, sent>>10)
	}
	a.must(404, "GET", "/queues/%2F/big", nil)
}

// zeros is a JSON array of size bytes, "[0,0,...,0]", made as it is read.
type zeros struct{ left, size int64 }

func (z *zeros) Read(p []byte) (int, error) {
	if z.left == 0 {
		return 0, io.EOF
	}
	n := 0
	for n < len(p) && z.left > 0 {
		switch i := z.size - z.left; {
		case i == 0:
			p[n] = '['
		case z.left == 1:
			p[n] = ']'
		case i%2 == 1:
			p[n] = '0'
		case z.left == 2:
			p[n] = ' ' // not a comma before the end
		default:
			p[n] = ','
		}
		n++
		z.left--
	}
	return n, nil
}

// argsOfZeros is a queue declaration of size bytes whose one argument is
// an array of zeros: {"arguments":{"x":[0,0,...,0]}}.
func argsOfZeros(size int64) io.Reader {
	const pre, post = `{"arguments":{"x":`, `}}`
	n := size - int64(len(pre)+len(post))
	return io.MultiReader(strings.NewReader(pre), &zeros{left: n, size: n}, strings.NewReader(post))
}

// sendZeros sends a JSON array of size bytes as user (password pw, or
// guest's) on a connection of its own, and returns how much of it the
// server took (what the connection accepted before the reply, an upper
// bound) and the status.
func sendZeros(a *api, user, method, path string, size int64, chunked bool) (int64, int, error) {
	return sendBody(a, user, method, path, &zeros{left: size, size: size}, size, chunked)
}

// sendBody is sendZeros with any body of size bytes.
func sendBody(a *api, user, method, path string, body io.Reader, size int64, chunked bool) (int64, int, error) {
	pass := "pw"
	if user == "guest" {
		pass = "guest"
	}
	c, err := net.Dial("tcp", a.hostPort())
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	head := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: %s\r\nAuthorization: %s\r\nContent-Type: application/json\r\n", method, path, a.hostPort(), basic(user, pass))
	if chunked {
		head += "Transfer-Encoding: chunked\r\n\r\n"
	} else {
		head += fmt.Sprintf("Content-Length: %d\r\n\r\n", size)
	}
	var sent atomic.Int64
	go func() {
		if _, err := io.WriteString(c, head); err != nil {
			return
		}
		buf := make([]byte, 32<<10)
		for {
			n, _ := io.ReadFull(body, buf)
			if n == 0 {
				break
			}
			chunk := buf[:n]
			if chunked {
				chunk = append([]byte(fmt.Sprintf("%x\r\n", n)), append(chunk, "\r\n"...)...)
			}
			if _, err := c.Write(chunk); err != nil {
				return // the server closed: what it took is counted
			}
			sent.Add(int64(n))
		}
		if chunked {
			io.WriteString(c, "0\r\n\r\n")
		}
	}()
	r, err := readReply(c)
	return sent.Load(), r.status, err
}

// readReply reads a reply on c, bounded in time for a failing test.
func readReply(c net.Conn) (resp, error) {
	c.SetReadDeadline(time.Now().Add(60 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return resp{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return resp{status: res.StatusCode, header: res.Header, body: b}, err
}

// doHuge sends body as guest on a connection of its own, writing it while
// it reads the reply: a client that stops reading its answer until its
// large body is written (Go's http.Client may) sees a reset when the
// server refuses the body unread, as it should.
func (a *api) doHuge(method, path, body string) resp {
	a.t.Helper()
	c, err := net.Dial("tcp", a.hostPort())
	if err != nil {
		a.t.Fatal(err)
	}
	defer c.Close()
	go fmt.Fprintf(c, "%s /api%s HTTP/1.1\r\nHost: %s\r\nAuthorization: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		method, path, a.hostPort(), basic("guest", "guest"), len(body), body)
	r, err := readReply(c)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// While the memory alarm is raised, a body over 64 KiB is refused with 503
// before it is read; small ones go through; once the alarm clears, the
// large one does too.
func TestMemoryAlarmRefusesLargeBodies(t *testing.T) {
	a := startAPI(t)
	large := fmt.Sprintf(`{"durable": true, "padding": "%s"}`, strings.Repeat("x", 100<<10))
	a.Broker.SetAlarm(broker.AlarmMemory, true)
	wantError(t, a.do("PUT", "/queues/%2F/q1", large), 503, "service_unavailable", "memory alarm in effect")
	a.must(404, "GET", "/queues/%2F/q1", nil)
	a.must(201, "PUT", "/queues/%2F/q2", map[string]any{"durable": true})
	a.Broker.SetAlarm(broker.AlarmMemory, false)
	if r := a.do("PUT", "/queues/%2F/q1", large); r.status != 201 {
		t.Fatalf("after the alarm: %d %s", r.status, r.body)
	}
}

// A body that fits its limit may not hold more JSON values than one per 64
// bytes of it: an array of 300,000 zeros in a queue's arguments (600 KB of
// text, some 20 MiB decoded) is refused, not declared.
func TestJSONValuesBounded(t *testing.T) {
	a := startAPI(t)
	body := `{"arguments": {"x-list": [` + strings.Repeat("0,", 300000) + `0]}}`
	wantError(t, a.do("PUT", "/queues/%2F/many", body), 400, "bad_request", "JSON values")
	a.must(404, "GET", "/queues/%2F/many", nil)
}

// A body must be JSON: a form (what a page on another site can post
// without asking) or a body without a type is refused with 415, before it
// is read; application/json with parameters is fine.
func TestBodyMustBeJSON(t *testing.T) {
	a := startAPI(t)
	for _, ct := range []string{"application/x-www-form-urlencoded", "text/plain", "multipart/form-data; boundary=x", ""} {
		r := a.do("PUT", "/queues/%2F/q", `{"durable": true}`, "Content-Type", ct) // "": none
		wantError(t, r, 415, "unsupported_media_type", "Content-Type: application/json")
	}
	a.must(404, "GET", "/queues/%2F/q", nil)
	if r := a.do("PUT", "/queues/%2F/q", `{"durable": true}`, "Content-Type", "application/json; charset=utf-8"); r.status != 201 {
		t.Fatalf("application/json; charset=utf-8: %d %s", r.status, r.body)
	}
	// No body, no type needed (rabbitmqadmin sends none then).
	if r := a.do("DELETE", "/queues/%2F/q", nil, "Content-Type", ""); r.status != 204 {
		t.Fatalf("DELETE without a body: %d %s", r.status, r.body)
	}
}
