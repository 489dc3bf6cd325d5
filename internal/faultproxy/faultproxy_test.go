package faultproxy

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain fails the package if any goroutine outlives the tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const waitFor = 20 * time.Second

// target is a server whose accepted connections a test takes.
type target struct {
	ln    net.Listener
	conns chan net.Conn
	done  chan struct{}
}

func newTarget(t *testing.T) *target {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tg := &target{ln: ln, conns: make(chan net.Conn, 16), done: make(chan struct{})}
	go func() {
		defer close(tg.done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tg.conns <- c
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-tg.done
		close(tg.conns)
		for c := range tg.conns {
			c.Close()
		}
	})
	return tg
}

func (tg *target) accept(t *testing.T) net.Conn {
	t.Helper()
	select {
	case c := <-tg.conns:
		t.Cleanup(func() { c.Close() })
		return c
	case <-time.After(waitFor):
		t.Fatal("the target accepted no connection")
		return nil
	}
}

// pair starts a proxy to a new target and returns a connection through
// it, at both ends.
func pair(t *testing.T) (*Proxy, *target, net.Conn, net.Conn) {
	t.Helper()
	tg := newTarget(t)
	p, err := New(tg.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	client, server := dial(t, p), tg.accept(t)
	return p, tg, client, server
}

func dial(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func send(t *testing.T, c net.Conn, s string) {
	t.Helper()
	if _, err := c.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
}

func expect(t *testing.T, c net.Conn, s string) {
	t.Helper()
	buf := make([]byte, len(s))
	_ = c.SetReadDeadline(time.Now().Add(waitFor))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != s {
		t.Fatalf("read %q, %v; want %q", buf, err, s)
	}
}

// expectEnd reads until c ends (a close or a reset).
func expectEnd(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(waitFor))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the connection did not end")
	}
}

func await(t *testing.T, p *Proxy, cond func(Stats) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := p.Await(ctx, cond); err != nil {
		t.Fatalf("%v; stats %+v", err, p.Stats())
	}
}

func TestPass(t *testing.T) {
	p, _, client, server := pair(t)
	send(t, client, "ping")
	expect(t, server, "ping")
	send(t, server, "pong")
	expect(t, client, "pong")
	if st := p.Stats(); st.Forwarded != [2]uint64{4, 4} || st.Accepted != 1 {
		t.Fatalf("%+v", st)
	}
}

// Cut resets the connections open, both ends, and new connections; Pass
// lets new ones through again.
func TestCut(t *testing.T) {
	p, tg, client, server := pair(t)
	p.Cut()
	expectEnd(t, client)
	expectEnd(t, server)
	// The kernel completes the connect and the proxy resets it, before or
	// after the dialer has looked at the socket: either ends it.
	if c2, err := net.Dial("tcp", p.Addr()); err == nil {
		expectEnd(t, c2)
		c2.Close()
	} else if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Reset != 2 {
		t.Fatalf("%+v", st)
	}
	p.Pass()
	c3 := dial(t, p)
	s3 := tg.accept(t)
	send(t, c3, "again")
	expect(t, s3, "again")
}

// A black hole swallows both directions, a close included, and lets
// nothing through; when it heals the holed connection is closed, and new
// ones pass.
func TestBlackHole(t *testing.T) {
	p, tg, client, server := pair(t)
	p.BlackHole()
	send(t, client, "lost")
	send(t, server, "gone")
	await(t, p, func(s Stats) bool { return s.Swallowed == [2]uint64{4, 4} })
	server.Close()
	await(t, p, func(s Stats) bool { return s.SwallowedEnds[Backward] == 1 })
	// The client was not told: the proxy still reads what it sends.
	send(t, client, "more")
	await(t, p, func(s Stats) bool { return s.Swallowed[Forward] == 8 })
	// A new connection is accepted and never reaches the target.
	c2 := dial(t, p)
	send(t, c2, "void")
	await(t, p, func(s Stats) bool { return s.Swallowed[Forward] == 12 })
	if st := p.Stats(); st.Forwarded != [2]uint64{} || len(tg.conns) != 0 {
		t.Fatalf("%+v, target accepted %d", st, len(tg.conns))
	}
	p.Pass()
	expectEnd(t, client)
	expectEnd(t, c2)
	c3 := dial(t, p)
	s3 := tg.accept(t)
	send(t, c3, "back")
	expect(t, s3, "back")
}

// One way: the silenced direction's bytes vanish, the other's pass; when
// both pass again, the holed connection is closed.
func TestOneWay(t *testing.T) {
	for _, silent := range []Direction{Forward, Backward} {
		t.Run(silent.String(), func(t *testing.T) {
			p, _, client, server := pair(t)
			p.OneWay(silent)
			from, to := client, server
			if silent == Backward {
				from, to = server, client
			}
			send(t, from, "lost")
			send(t, to, "kept")
			expect(t, from, "kept")
			await(t, p, func(s Stats) bool { return s.Swallowed[silent] == 4 })
			if st := p.Stats(); st.Forwarded[silent] != 0 || st.Forwarded[1-silent] != 4 {
				t.Fatalf("%+v", st)
			}
			p.Pass()
			expectEnd(t, client)
		})
	}
}

// Delay holds every chunk at least d in each direction.
func TestDelay(t *testing.T) {
	p, _, client, server := pair(t)
	const d = 100 * time.Millisecond
	p.SetDelay(d)
	start := time.Now()
	send(t, client, "ping")
	expect(t, server, "ping")
	send(t, server, "pong")
	expect(t, client, "pong")
	if rtt := time.Since(start); rtt < 2*d {
		t.Fatalf("round trip %v through a proxy delaying %v each way", rtt, d)
	}
	p.SetDelay(0)
	send(t, client, "fast")
	expect(t, server, "fast")
}

// Close ends every connection and goroutine (goleak checks the latter).
func TestClose(t *testing.T) {
	p, _, client, _ := pair(t)
	p.BlackHole()
	c2 := dial(t, p)
	send(t, c2, "x")
	await(t, p, func(s Stats) bool { return s.Swallowed[Forward] == 1 })
	p.Close()
	expectEnd(t, client)
	expectEnd(t, c2)
	if _, err := net.Dial("tcp", p.Addr()); err == nil {
		t.Fatal("a closed proxy accepts connections")
	}
}
