package gate

import (
	"errors"
	"net"
	"sync"
	"time"
)

// ErrOpen is returned by Open while a virtual listener is open: close it
// first.
var ErrOpen = errors.New("gate: a virtual listener is open already")

// Gate owns a real listener and sends each connection it accepts to the
// open virtual listener, or to forward (see the package doc).
type Gate struct {
	ln      net.Listener
	forward func(net.Conn)
	done    chan struct{} // closed by Close
	wg      sync.WaitGroup

	mu       sync.Mutex
	closed   bool
	cur      *listener             // the open virtual listener; nil: forwarding
	forwards map[net.Conn]struct{} // connections whose forward runs, for Close

	// offered, if not nil, runs when a connection starts waiting for an
	// open listener's Accept (tests).
	offered func()
}

// New starts accepting on l. Each connection accepted while no virtual
// listener is open is passed to forward on its own goroutine; forward
// owns it (must close it) and must return once it is closed. The Gate
// owns l; Close must be called.
func New(l net.Listener, forward func(c net.Conn)) *Gate {
	g := &Gate{ln: l, forward: forward, done: make(chan struct{}), forwards: map[net.Conn]struct{}{}}
	g.wg.Add(1)
	go g.acceptLoop()
	return g
}

// Addr is the real listener's address.
func (g *Gate) Addr() net.Addr { return g.ln.Addr() }

// Open returns a virtual listener that receives every connection
// accepted, or injected, from now until it is closed; closing it sends
// them to forward again. Its Addr is the real listener's. ErrOpen if one
// is open, net.ErrClosed after Close.
func (g *Gate) Open() (net.Listener, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.closed:
		return nil, net.ErrClosed
	case g.cur != nil:
		return nil, ErrOpen
	}
	g.cur = &listener{g: g, ch: make(chan net.Conn), done: make(chan struct{})}
	return g.cur, nil
}

// Serving reports whether a virtual listener is open.
func (g *Gate) Serving() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.cur != nil
}

// Inject hands over c, a connection proxied here from another node: to
// the open virtual listener's Accept, or, if none is open (or none is by
// the time one would take it), c is closed; it is never forwarded. Inject
// does not wait: a goroutine of the gate offers c.
func (g *Gate) Inject(c net.Conn) {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		c.Close()
		return
	}
	g.wg.Add(1)
	g.mu.Unlock()
	go func() {
		defer g.wg.Done()
		g.dispatch(c, true)
	}()
}

// Close closes the real listener, the open virtual listener (its Accept
// returns net.ErrClosed) and every forwarded connection whose forward
// runs, closes connections being offered, and waits for the gate's
// goroutines. Idempotent.
func (g *Gate) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		g.wg.Wait()
		return nil
	}
	g.closed = true
	close(g.done)
	cur := g.cur
	g.cur = nil
	if cur != nil {
		close(cur.done)
	}
	for c := range g.forwards {
		c.Close()
	}
	g.mu.Unlock()
	err := g.ln.Close()
	g.wg.Wait()
	return err
}

// acceptLoop accepts on the real listener until it is closed.
func (g *Gate) acceptLoop() {
	defer g.wg.Done()
	var backoff time.Duration
	for {
		c, err := g.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			select {
			case <-g.done:
				return
			default:
			}
			// Out of descriptors, or the like: wait, as amqp.Server
			// does, and try again.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-g.done:
				t.Stop()
				return
			}
			continue
		}
		backoff = 0
		g.dispatch(c, false)
	}
}

// dispatch sends c to the open virtual listener, waiting for its Accept,
// or, with none open, forwards it (injected: closes it). A listener
// closed while c waits for it makes c go to what is current then.
func (g *Gate) dispatch(c net.Conn, injected bool) {
	for {
		g.mu.Lock()
		l := g.cur
		switch {
		case g.closed:
			g.mu.Unlock()
			c.Close()
			return
		case l == nil && injected:
			g.mu.Unlock()
			c.Close()
			return
		case l == nil:
			g.forwards[c] = struct{}{}
			g.wg.Add(1)
			g.mu.Unlock()
			go func() {
				defer g.wg.Done()
				g.forward(c)
				g.mu.Lock()
				delete(g.forwards, c)
				g.mu.Unlock()
			}()
			return
		}
		offered := g.offered
		g.mu.Unlock()
		if offered != nil {
			offered()
		}
		select {
		case l.ch <- c:
			return
		case <-l.done:
			// Closed (maybe the gate with it): dispatch again.
		}
	}
}

// listener is a virtual listener: what the gate hands it, until closed.
type listener struct {
	g    *Gate
	ch   chan net.Conn // unbuffered: a connection is Accept's or still the gate's
	done chan struct{} // closed by Close, under g.mu
}

// Accept waits for the next connection, or returns net.ErrClosed once
// the listener (or the gate) is closed.
func (l *listener) Accept() (net.Conn, error) {
	select {
	case <-l.done:
		return nil, net.ErrClosed
	default:
	}
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close closes the listener, not the real one: the gate forwards again.
// Idempotent.
func (l *listener) Close() error {
	g := l.g
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-l.done:
		return nil
	default:
	}
	close(l.done)
	if g.cur == l {
		g.cur = nil
	}
	return nil
}

// Addr is the real listener's address.
func (l *listener) Addr() net.Addr { return l.g.ln.Addr() }
