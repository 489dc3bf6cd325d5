package gate

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain fails the package if any goroutine outlives the tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitFor bounds every wait for an event: long, because the machine is
// shared; a test waits for the event, not for this.
const waitFor = 20 * time.Second

// testGate is a gate on a loopback listener whose forward sends each
// connection on fwd (the test owns them then).
type testGate struct {
	*Gate
	fwd  chan net.Conn
	addr string
}

func newGate(t *testing.T) *testGate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fwd := make(chan net.Conn, 16)
	g := &testGate{Gate: New(ln, func(c net.Conn) { fwd <- c }), fwd: fwd, addr: ln.Addr().String()}
	t.Cleanup(func() {
		g.Close()
		for {
			select {
			case c := <-fwd:
				c.Close()
			default:
				return
			}
		}
	})
	return g
}

var tokens atomic.Int64

// dial connects to addr and sends a token naming the connection.
func dial(t *testing.T, addr string) (net.Conn, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	tok := fmt.Sprintf("conn-%06d\n", tokens.Add(1))
	if _, err := c.Write([]byte(tok)); err != nil {
		t.Fatal(err)
	}
	return c, tok
}

// readToken checks that c is the connection that sent tok.
func readToken(t *testing.T, c net.Conn, tok string) {
	t.Helper()
	b := make([]byte, len(tok))
	if err := c.SetReadDeadline(time.Now().Add(waitFor)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, b); err != nil || string(b) != tok {
		t.Fatalf("read %q, %v; want %q", b, err, tok)
	}
	_ = c.SetReadDeadline(time.Time{})
}

func (g *testGate) forwarded(t *testing.T, tok string) net.Conn {
	t.Helper()
	select {
	case c := <-g.fwd:
		readToken(t, c, tok)
		return c
	case <-time.After(waitFor):
		t.Fatalf("no connection forwarded in %v", waitFor)
		return nil
	}
}

// accept runs l.Accept with a bound.
func accept(t *testing.T, l net.Listener) net.Conn {
	t.Helper()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := l.Accept()
		ch <- res{c, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("Accept: %v", r.err)
		}
		t.Cleanup(func() { r.c.Close() })
		return r.c
	case <-time.After(waitFor):
		l.Close() // ends the Accept
		t.Fatalf("nothing accepted in %v", waitFor)
		return nil
	}
}

func open(t *testing.T, g *testGate) net.Listener {
	t.Helper()
	l, err := g.Open()
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// With no virtual listener open, connections are forwarded, each on its
// own goroutine.
func TestForwardedWhileClosed(t *testing.T) {
	g := newGate(t)
	if g.Serving() {
		t.Fatal("a new gate serves")
	}
	_, tok1 := dial(t, g.addr)
	_, tok2 := dial(t, g.addr)
	a, b := <-g.fwd, <-g.fwd
	defer a.Close()
	defer b.Close()
	// In accept order, but each on its own goroutine: read by the tokens.
	first := make([]byte, len(tok1))
	if _, err := io.ReadFull(a, first); err != nil {
		t.Fatal(err)
	}
	if string(first) == tok2 {
		readToken(t, b, tok1)
	} else if string(first) != tok1 {
		t.Fatalf("read %q", first)
	} else {
		readToken(t, b, tok2)
	}
}

// While a virtual listener is open, its Accept gets every connection,
// and nothing is forwarded; its Addr is the real listener's. Closing it
// makes Accept return net.ErrClosed and the gate forward again; it can be
// opened again, many times; a second Open while one is open fails.
func TestSwitchingServedAndForwarded(t *testing.T) {
	g := newGate(t)
	for round := range 3 {
		l := open(t, g)
		if l.Addr().String() != g.addr {
			t.Fatalf("virtual listener's Addr %s, want %s", l.Addr(), g.addr)
		}
		if _, err := g.Open(); !errors.Is(err, ErrOpen) {
			t.Fatalf("round %d: a second Open: %v, want ErrOpen", round, err)
		}
		for range 2 {
			_, tok := dial(t, g.addr)
			readToken(t, accept(t, l), tok)
		}
		if len(g.fwd) != 0 {
			t.Fatalf("round %d: forwarded while a listener is open", round)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if c, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept after Close: %v %v, want net.ErrClosed", c, err)
		}
		if g.Serving() {
			t.Fatal("serving after the listener's Close")
		}
		_, tok := dial(t, g.addr)
		g.forwarded(t, tok).Close()
		l.Close() // idempotent, and does not close a later one
	}
}

// Accept blocked on the virtual listener returns net.ErrClosed when the
// listener is closed, and when the gate is.
func TestCloseUnblocksAccept(t *testing.T) {
	g := newGate(t)
	for _, closeGate := range []bool{false, true} {
		l := open(t, g)
		errc := make(chan error, 1)
		go func() {
			c, err := l.Accept()
			if c != nil {
				c.Close()
			}
			errc <- err
		}()
		if closeGate {
			g.Close()
		} else {
			l.Close()
		}
		if err := <-errc; !errors.Is(err, net.ErrClosed) {
			t.Fatalf("closeGate=%v: Accept returned %v, want net.ErrClosed", closeGate, err)
		}
	}
	// The gate is closed: no Open, the real listener is closed, Inject
	// closes what it is given.
	if _, err := g.Open(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Open after Close: %v", err)
	}
	if c, err := net.Dial("tcp", g.addr); err == nil {
		c.Close()
		t.Fatal("the real listener still accepts after Close")
	}
	mine, theirs := net.Pipe()
	defer mine.Close()
	g.Inject(theirs)
	if _, err := mine.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("an injected connection after Close: read %v, want io.EOF", err)
	}
	if err := g.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// An injected connection goes to the open listener's Accept, never to
// forward; with no listener open it is closed.
func TestInject(t *testing.T) {
	g := newGate(t)
	mine, theirs := net.Pipe()
	defer mine.Close()
	g.Inject(theirs)
	if _, err := mine.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("injected with no listener open: read %v, want io.EOF (closed)", err)
	}

	l := open(t, g)
	mine2, theirs2 := net.Pipe()
	defer mine2.Close()
	g.Inject(theirs2)
	if c := accept(t, l); c != theirs2 {
		t.Fatalf("Accept returned %v, not the injected connection", c)
	}
	if len(g.fwd) != 0 {
		t.Fatal("an injected connection was forwarded")
	}
}

// A connection waiting for the open listener's Accept when the listener
// closes is forwarded if it came from the real listener (not lost), and
// closed if it was injected (not forwarded).
func TestWaitingWhenListenerClosed(t *testing.T) {
	g := newGate(t)
	offered := make(chan struct{}, 4)
	g.mu.Lock()
	g.offered = func() { offered <- struct{}{} }
	g.mu.Unlock()
	await := func() {
		t.Helper()
		select {
		case <-offered:
		case <-time.After(waitFor):
			t.Fatalf("no connection offered in %v", waitFor)
		}
	}

	l := open(t, g)
	_, tok := dial(t, g.addr)
	await() // the accept loop holds it, waiting for Accept
	l.Close()
	g.forwarded(t, tok).Close()

	l = open(t, g)
	mine, theirs := net.Pipe()
	defer mine.Close()
	g.Inject(theirs)
	await()
	l.Close()
	if _, err := mine.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("an injected connection whose listener closed: read %v, want io.EOF", err)
	}
	if len(g.fwd) != 0 {
		t.Fatal("an injected connection was forwarded")
	}
}

// Close closes the connections whose forward still runs, and waits for
// them to return.
func TestCloseEndsForwarded(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	running := make(chan struct{})
	g := New(ln, func(c net.Conn) {
		running <- struct{}{}
		_, _ = io.Copy(io.Discard, c) // until Close closes c
		c.Close()
	})
	client, _ := dial(t, ln.Addr().String())
	<-running
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Read(make([]byte, 1)); err == nil {
		t.Fatal("a forwarded connection is open after Close")
	}
}

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c, s
}

// Splice carries bytes both ways and passes each half-close on: the
// client's end of input reaches the server, which still answers; once
// both ended Splice closes both and returns nil.
func TestSpliceHalfClose(t *testing.T) {
	client, in := tcpPair(t)
	out, server := tcpPair(t)
	for _, c := range []net.Conn{client, server} {
		if err := c.SetDeadline(time.Now().Add(waitFor)); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- Splice(in, out) }()

	up := bytes.Repeat([]byte("client "), 300_000) // 2.1 MB: more than the socket buffers
	go func() {
		_, _ = client.Write(up)
		_ = client.(*net.TCPConn).CloseWrite()
	}()
	got, err := io.ReadAll(server)
	if err != nil || !bytes.Equal(got, up) {
		t.Fatalf("the server read %d bytes, %v; want %d then the end", len(got), err, len(up))
	}
	down := bytes.Repeat([]byte("server "), 200_000)
	go func() {
		_, _ = server.Write(down)
		_ = server.(*net.TCPConn).CloseWrite()
	}()
	back, err := io.ReadAll(client)
	if err != nil || !bytes.Equal(back, down) {
		t.Fatalf("the client read %d bytes, %v; want %d then the end", len(back), err, len(down))
	}
	if err := <-done; err != nil {
		t.Fatalf("Splice: %v", err)
	}
	for _, c := range []net.Conn{in, out} {
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("a spliced conn is open after Splice: %v", err)
		}
	}
}

// A reset on one side is Splice's error, and ends the other side too.
func TestSpliceReset(t *testing.T) {
	client, in := tcpPair(t)
	out, server := tcpPair(t)
	done := make(chan error, 1)
	go func() { done <- Splice(in, out) }()
	if _, err := client.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 5)
	if _, err := io.ReadFull(server, b); err != nil {
		t.Fatal(err)
	}
	if err := server.SetDeadline(time.Now().Add(waitFor)); err != nil {
		t.Fatal(err)
	}
	_ = client.(*net.TCPConn).SetLinger(0) // Close sends a reset
	client.Close()
	var err error
	select {
	case err = <-done:
	case <-time.After(waitFor):
		t.Fatal("Splice did not return after a reset")
	}
	if err == nil || errors.Is(err, io.EOF) {
		t.Fatalf("Splice after a reset: %v, want the reset", err)
	}
	if _, err := io.ReadAll(server); err != nil {
		t.Fatalf("the other side: %v, want its end", err)
	}
}

// Connections without CloseWrite (net.Pipe) are closed when their
// direction ends: the other side still reads everything, then the end.
func TestSpliceWithoutCloseWrite(t *testing.T) {
	client, in := net.Pipe()
	out, server := net.Pipe()
	done := make(chan error, 1)
	go func() { done <- Splice(in, out) }()
	go func() {
		_, _ = client.Write([]byte("request"))
		client.Close()
	}()
	got, err := io.ReadAll(server)
	if err != nil || string(got) != "request" {
		t.Fatalf("read %q, %v", got, err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Splice: %v", err)
	}
	server.Close()
}
