// Package faultproxy is a TCP proxy for one directed network link whose
// faults tests control: pass, cut, black-hole, one-way and delay. A test
// puts one in front of every address a node dials (for a cluster, one per
// ordered pair of nodes: the link a → b is what a dials to reach b) and
// breaks links by calling methods; no privileges are needed.
//
// Modes, applied to the connections open and to new ones:
//
//   - Pass: bytes flow both ways, after the delay if one is set.
//   - Cut: every connection is closed (reset), and new ones are accepted
//     and reset at once: the dialer sees its connection fail.
//   - BlackHole: nothing passes either way, and nobody is told: the bytes
//     are read and discarded, a close is not passed on, new connections
//     are accepted and swallowed without reaching the target. Each side
//     sees silence, as with a dead route.
//   - OneWay(dir): dir is silenced as by BlackHole, the other direction
//     passes.
//
// A byte stream that lost bytes in a silenced direction has a hole TCP
// would never deliver past, so when the direction passes again the
// connection is closed (with a real route the endpoints would have timed
// out or kept waiting; either way nothing after the hole arrives).
//
// Delay holds every chunk read for d before writing it, in order, in
// either direction: it adds latency, not a bandwidth limit.
package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// Direction is one way through a proxy.
type Direction int

const (
	// Forward is from the dialer to the target.
	Forward Direction = iota
	// Backward is from the target to the dialer.
	Backward
)

func (d Direction) String() string {
	if d == Backward {
		return "backward"
	}
	return "forward"
}

// Mode is what a proxy does with its connections.
type Mode int

const (
	Pass Mode = iota
	Cut
	BlackHole
	SilentForward  // OneWay(Forward): the dialer's bytes vanish
	SilentBackward // OneWay(Backward): the target's bytes vanish
)

func (m Mode) String() string {
	return [...]string{"pass", "cut", "black-hole", "silent-forward", "silent-backward"}[m]
}

// silences reports whether mode m silences direction d.
func (m Mode) silences(d Direction) bool {
	return m == BlackHole || (m == SilentForward && d == Forward) || (m == SilentBackward && d == Backward)
}

// Stats count what a proxy did.
type Stats struct {
	Accepted  uint64    // connections accepted (reset ones included)
	Reset     uint64    // connections closed by Cut, or accepted and reset during one
	Forwarded [2]uint64 // bytes let through to the other side, by Direction
	Swallowed [2]uint64 // bytes read and discarded, by Direction
	// SwallowedEnds counts the ends of a side's stream (a close) not
	// passed on, by Direction.
	SwallowedEnds [2]uint64
}

// Proxy forwards the connections made to its address to a target
// address, with the faults its mode says. Safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	mode  Mode
	delay time.Duration
	conns map[*pconn]struct{}
	stats Stats
	// changed is closed and replaced whenever stats change (Await).
	changed chan struct{}
	done    bool

	wg sync.WaitGroup
}

// pconn is one proxied connection; server is nil for a connection
// accepted while the forward direction was silenced (it never reached
// the target).
type pconn struct {
	client, server net.Conn
	holed          [2]bool // bytes or a close were swallowed, by Direction
	closed         bool
}

// New starts a proxy on a loopback port forwarding to target, in mode
// Pass with no delay. Close stops it.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[*pconn]struct{}{}, changed: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address to dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Pass lets bytes through again; connections with a hole are closed.
func (p *Proxy) Pass() { p.SetMode(Pass) }

// Cut closes every connection and resets new ones.
func (p *Proxy) Cut() { p.SetMode(Cut) }

// BlackHole silences both directions.
func (p *Proxy) BlackHole() { p.SetMode(BlackHole) }

// OneWay silences direction silent; the other passes.
func (p *Proxy) OneWay(silent Direction) {
	if silent == Forward {
		p.SetMode(SilentForward)
	} else {
		p.SetMode(SilentBackward)
	}
}

// SetMode sets the proxy's mode (see the package doc).
func (p *Proxy) SetMode(m Mode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = m
	for c := range p.conns {
		switch {
		case m == Cut:
			p.resetLocked(c)
		case c.holed[Forward] && !m.silences(Forward), c.holed[Backward] && !m.silences(Backward):
			p.closeLocked(c)
		}
	}
}

// Mode returns the proxy's mode.
func (p *Proxy) Mode() Mode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// SetDelay sets the latency added to every chunk read from now on (0:
// none).
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// Stats returns the proxy's counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Await waits until cond holds of the proxy's counters (it is evaluated
// at once and after every change) or ctx ends.
func (p *Proxy) Await(ctx context.Context, cond func(Stats) bool) error {
	for {
		p.mu.Lock()
		ok := cond(p.stats)
		changed := p.changed
		p.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("faultproxy: await: %w", ctx.Err())
		}
	}
}

// statsChangedLocked wakes Await.
func (p *Proxy) statsChangedLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// Close stops accepting, closes every connection and waits for the
// proxy's goroutines. Idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if !p.done {
		p.done = true
		p.ln.Close()
		for c := range p.conns {
			p.closeLocked(c)
		}
	}
	p.mu.Unlock()
	p.wg.Wait()
	return nil
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // a test proxy on loopback: nothing else to do
		}
		p.mu.Lock()
		p.stats.Accepted++
		mode := p.mode
		if mode == Cut {
			p.stats.Reset++ // before the reset, which the dialer may see at once
		}
		p.statsChangedLocked()
		p.mu.Unlock()
		switch {
		case mode == Cut:
			reset(client)
			continue
		case mode.silences(Forward):
			// The connection never reaches the target: the dialer's
			// bytes vanish until the link heals, which closes it.
			p.start(&pconn{client: client, holed: [2]bool{Forward: true}})
			continue
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			reset(client) // as a refused connection would look
			continue
		}
		p.start(&pconn{client: client, server: server})
	}
}

// start registers c and starts its pumps, unless the proxy was closed or
// the mode changed meanwhile.
func (p *Proxy) start(c *pconn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done || p.mode == Cut {
		if !p.done {
			// Registered after a Cut that could not see it: it counts
			// as one the Cut reset.
			p.stats.Reset++
			p.statsChangedLocked()
		}
		reset(c.client)
		if c.server != nil {
			c.server.Close()
		}
		return
	}
	if c.server != nil && p.mode.silences(Forward) {
		c.holed[Forward] = true
	}
	p.conns[c] = struct{}{}
	if c.server == nil {
		p.wg.Add(1)
		go p.swallow(c)
		return
	}
	p.wg.Add(2)
	go p.pump(c, Forward, c.client, c.server)
	go p.pump(c, Backward, c.server, c.client)
}

// chunk is what a pump read, on its way to the writer: data, or the end
// of the source (eof) with its error.
type chunk struct {
	data []byte
	due  time.Time
	eof  bool
}

// pump reads src and has a writer write to dst what the mode lets
// through, each chunk once its delay passed.
func (p *Proxy) pump(c *pconn, d Direction, src, dst net.Conn) {
	defer p.wg.Done()
	ch := make(chan chunk, 64)
	p.wg.Add(1)
	go p.write(c, d, dst, ch)
	defer close(ch)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			delay := p.delay
			p.mu.Unlock()
			ch <- chunk{data: append([]byte(nil), buf[:n]...), due: time.Now().Add(delay)}
		}
		if err != nil {
			ch <- chunk{eof: true, due: time.Now()}
			return
		}
	}
}

// write delivers a pump's chunks: it waits for each one's due time (the
// delay is the point), then writes it, or swallows it if the direction is
// silenced by then. A source's end closes the connection unless silenced:
// then the other side keeps waiting, as across a dead route.
func (p *Proxy) write(c *pconn, d Direction, dst net.Conn, ch <-chan chunk) {
	defer p.wg.Done()
	for k := range ch {
		if wait := time.Until(k.due); wait > 0 {
			time.Sleep(wait)
		}
		p.mu.Lock()
		silent := p.mode.silences(d)
		switch {
		case c.closed:
			p.mu.Unlock()
			continue // drain: the pump ends on its read error
		case silent:
			c.holed[d] = true
			if k.eof {
				p.stats.SwallowedEnds[d]++
			}
			p.stats.Swallowed[d] += uint64(len(k.data))
			p.statsChangedLocked()
			p.mu.Unlock()
			continue
		case c.holed[d]:
			// Passing again after a hole: nothing after it may arrive.
			p.closeLocked(c)
			p.mu.Unlock()
			continue
		case k.eof:
			p.closeLocked(c)
			p.mu.Unlock()
			continue
		}
		// Counted as it is let through, under the lock the mode is: a
		// chunk counted after SetMode returned was let through after it.
		p.stats.Forwarded[d] += uint64(len(k.data))
		p.statsChangedLocked()
		p.mu.Unlock()
		if _, err := dst.Write(k.data); err != nil {
			p.mu.Lock()
			p.closeLocked(c)
			p.mu.Unlock()
		}
	}
}

// swallow reads and discards what a dialer sends on a connection that
// never reached the target, until it ends or the link heals.
func (p *Proxy) swallow(c *pconn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := c.client.Read(buf)
		p.mu.Lock()
		p.stats.Swallowed[Forward] += uint64(n)
		if err != nil {
			if !c.closed {
				p.stats.SwallowedEnds[Forward]++
			}
			p.closeLocked(c)
		}
		p.statsChangedLocked()
		p.mu.Unlock()
		if err != nil {
			return
		}
	}
}

func (p *Proxy) closeLocked(c *pconn) {
	if c.closed {
		return
	}
	c.closed = true
	c.client.Close()
	if c.server != nil {
		c.server.Close()
	}
	delete(p.conns, c)
}

func (p *Proxy) resetLocked(c *pconn) {
	if c.closed {
		return
	}
	p.stats.Reset++
	p.statsChangedLocked()
	reset(c.client)
	if c.server != nil {
		reset(c.server)
	}
	c.closed = true
	delete(p.conns, c)
}

// reset closes conn with a TCP reset rather than an orderly close.
func reset(conn net.Conn) {
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	conn.Close()
}
