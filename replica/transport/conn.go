package transport

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
)

// DialConn opens a client connection stream to the peer named peer: it
// dials the peer's listen address, makes the handshake every stream makes
// (TLS if configured, the hello naming this cluster, this node and the
// peer), naming service ("amqp", "http": 1 to 32 bytes) and the address
// of the client whose connection the stream carries (client; nil sends
// none), and returns a net.Conn carrying raw bytes both ways from then
// on: no frames, no keepalives, no size bound. The peer hands it to its
// Config.OnConn.
//
// The conn is the caller's: it is safe for concurrent use as a net.Conn
// is, its deadlines work, CloseWrite half-closes it (TLS: close_notify),
// and Close closes the TCP connection at once. Transport.Close closes it
// too. ctx bounds the dial and the handshake (as do DialTimeout and
// HandshakeTimeout), not the conn's life. Errors name the peer; a peer
// not among Config.Peers, and a refusal (with the peer's reason: OnConn
// nil there, another cluster, ...), are errors.
func (t *Transport) DialConn(ctx context.Context, peer string, service string, client net.Addr) (net.Conn, error) {
	wrap := func(err error) error {
		return fmt.Errorf("transport: open a client stream (%s) to peer %s: %w", service, peer, err)
	}
	p := t.peers[peer]
	switch {
	case p == nil:
		return nil, wrap(errors.New("not one of this node's peers"))
	case service == "" || len(service) > maxServiceName:
		return nil, wrap(fmt.Errorf("service name of %d bytes: want 1 to %d", len(service), maxServiceName))
	case t.closed():
		return nil, wrap(net.ErrClosed)
	}
	h := hello{version: protocolVersion, stream: streamConn, id: t.cfg.ID, cluster: t.cfg.Cluster, from: t.cfg.Name, to: p.name, service: service}
	if client != nil {
		h.client = client.String()
		if len(h.client) > maxClientAddr {
			return nil, wrap(fmt.Errorf("client address of %d bytes: the bound is %d", len(h.client), maxClientAddr))
		}
	}
	// Close ends the dial and the handshake as ctx does.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopClose := context.AfterFunc(t.ctx, cancel)
	defer stopClose()
	conn, raw, err := t.dial(ctx, p, h, t.trackConn, t.untrackConn)
	if err != nil {
		if t.closed() {
			err = fmt.Errorf("%w: %w", net.ErrClosed, err)
		}
		return nil, wrap(err)
	}
	t.stats.connsDialled.Add(1)
	return &clientConn{Conn: conn, raw: raw, t: t}, nil
}

// trackConn registers a client stream's TCP connection for Close; false
// if the transport is closing.
func (t *Transport) trackConn(nc net.Conn) bool {
	t.inMu.Lock()
	defer t.inMu.Unlock()
	if t.closed() {
		return false
	}
	t.conns[nc] = struct{}{}
	return true
}

func (t *Transport) untrackConn(nc net.Conn) {
	t.inMu.Lock()
	delete(t.conns, nc)
	t.inMu.Unlock()
}

// serveConn hands an accepted client connection stream, its handshake
// made, to OnConn, on the connection's goroutine. The connection is
// OnConn's from then on; it stays registered for Close until closed.
func (t *Transport) serveConn(nc, conn net.Conn, fr *frameReader, p *peer, h hello) {
	c := &clientConn{Conn: conn, raw: nc, t: t}
	if h.client != "" {
		// A TCP address where it parses as one: code that looks at a
		// client's address (a loopback-only user) asserts *net.TCPAddr.
		if ap, err := netip.ParseAddrPort(h.client); err == nil {
			c.remote = net.TCPAddrFromAddrPort(ap)
		} else {
			c.remote = clientAddr(h.client)
		}
	}
	// The dialer sends nothing before the welcome, but bytes the
	// handshake's reader took beyond the hello are the client's.
	if br, ok := fr.r.(*bufio.Reader); ok && br.Buffered() > 0 {
		b, _ := br.Peek(br.Buffered())
		c.pre = append([]byte(nil), b...)
		c.hasPre.Store(true)
	}
	t.stats.connsAccepted.Add(1)
	t.log.Debug("transport: accepted a client connection stream", "peer", p.name, "service", h.service, "client", h.client)
	t.cfg.OnConn(h.service, c)
}

// clientAddr is a proxied client's address as its node sent it.
type clientAddr string

func (a clientAddr) Network() string { return "tcp" }
func (a clientAddr) String() string  { return string(a) }

// clientConn is one end of a client connection stream: the raw bytes of
// conn (TLS or TCP) over raw, its TCP connection.
type clientConn struct {
	net.Conn          // TLS over raw, or raw
	raw      net.Conn // closed by Close: a TLS close could wait to send its alert
	t        *Transport
	remote   net.Addr // the accepted side's original client; nil: Conn's

	// pre holds client bytes read ahead during the handshake, served
	// first; hasPre spares Read the lock once they are gone.
	hasPre atomic.Bool
	preMu  sync.Mutex
	pre    []byte

	closeOnce sync.Once
	closeErr  error
}

func (c *clientConn) Read(b []byte) (int, error) {
	if c.hasPre.Load() {
		c.preMu.Lock()
		if len(c.pre) > 0 {
			n := copy(b, c.pre)
			c.pre = c.pre[n:]
			if len(c.pre) == 0 {
				c.pre = nil
				c.hasPre.Store(false)
			}
			c.preMu.Unlock()
			return n, nil
		}
		c.preMu.Unlock()
	}
	return c.Conn.Read(b)
}

// RemoteAddr is, on the accepting node, the original client's address
// as the dialling node sent it (the peer node's if it sent none); on the
// dialling node, the peer node's.
func (c *clientConn) RemoteAddr() net.Addr {
	if c.remote != nil {
		return c.remote
	}
	return c.Conn.RemoteAddr()
}

// CloseWrite ends this side's bytes: the other side reads io.EOF and may
// go on writing. Over TLS it sends close_notify.
func (c *clientConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}

// Close closes the TCP connection at once (over TLS, without
// close_notify: the other side reads io.EOF all the same). Idempotent.
func (c *clientConn) Close() error {
	c.closeOnce.Do(func() {
		c.closeErr = c.raw.Close()
		c.t.untrackConn(c.raw)
	})
	return c.closeErr
}
