package broker

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/auth"
)

// LocalConnector opens in-process AMQP 0-9-1 connections to the broker:
// RabbitMQ's direct connection, which its shovels use for an "amqp://" URI
// with no host. Each connection is one end of a net.Pipe; the other end is
// served by an amqp.Server of its own, so the whole protocol runs as over a
// socket, but:
//   - the login is not checked: only this process can reach the server (it
//     has no listener), and every connection gets every permission in the
//     vhost it opens, under the user name it logged in with ("none" for a
//     shovel, as RabbitMQ's direct connections), tagged impersonator so that
//     a message's user_id goes through unchanged;
//   - it does not count against the client server's MaxConnections (nor its
//     Connections, which feed sockets_used);
//   - it is listed among the broker's connections (so that closing a
//     vhost's connections and Broker.Close reach it), named
//     "local-N -> brokerd", with the client's connection_name ("Shovel NAME"
//     for a shovel) as its user-provided name.
//
// Safe for concurrent use. Close stops it; it must be called before the
// broker's Close returns for good (cmd/brokerd: after the shovels' Close).
type LocalConnector struct {
	b      *Broker
	srv    *amqp.Server
	ln     *pipeListener
	served chan struct{}
}

// NewLocalConnector starts a LocalConnector. cfg is the client server's
// configuration (frame and message limits, logger); its Handler and
// MaxConnections are replaced.
func (b *Broker) NewLocalConnector(cfg amqp.ServerConfig) *LocalConnector {
	cfg.Handler = localHandler{b}
	cfg.MaxConnections = 0
	cfg.LoginFailureDelay = -1
	lc := &LocalConnector{b: b, srv: amqp.NewServer(cfg), ln: newPipeListener(), served: make(chan struct{})}
	go func() {
		defer close(lc.served)
		lc.srv.Serve(lc.ln)
	}()
	return lc
}

// Dial returns the client end of a new in-process connection. The caller
// runs the AMQP handshake on it (amqp091.Open) and opens vhost; vhost is
// accepted for the signature of shovel.Options.Local and not checked here
// (connection.open names the vhost, as over a socket).
func (lc *LocalConnector) Dial(ctx context.Context, vhost string) (io.ReadWriteCloser, error) {
	client, server := net.Pipe()
	n := lc.ln.seq.Add(1)
	sc := &pipeConn{Conn: server, remote: pipeAddr("local-" + strconv.FormatUint(n, 10))}
	select {
	case lc.ln.conns <- sc:
		return client, nil
	case <-lc.ln.done:
		client.Close()
		server.Close()
		return nil, fmt.Errorf("dial local connection to vhost '%s': %w", vhost, net.ErrClosed)
	case <-ctx.Done():
		client.Close()
		server.Close()
		return nil, fmt.Errorf("dial local connection to vhost '%s': %w", vhost, ctx.Err())
	}
}

// Close closes the local connections (320 CONNECTION_FORCED) and waits
// for them, at most until ctx ends. Idempotent.
func (lc *LocalConnector) Close(ctx context.Context) error {
	err := lc.srv.Shutdown(ctx)
	lc.ln.Close()
	<-lc.served
	return err
}

// localHandler is the amqp.Handler of local connections.
type localHandler struct{ b *Broker }

// Authenticate accepts every login: the server is reachable only through
// LocalConnector.Dial.
func (localHandler) Authenticate(string, string, net.Addr) error { return nil }

func (h localHandler) OpenConnection(ac *amqp.ServerConn, user, vhost string) (amqp.Session, *amqp.Error) {
	b := h.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, amqp.Errorf(amqp.ConnectionForced, "broker is shutting down")
	}
	v := b.vhosts[vhost]
	if v == nil {
		return nil, amqp.Errorf(amqp.NotAllowed, "vhost %s not found", vhost)
	}
	u := auth.StoredUser(user, "", nil, []string{"impersonator"})
	c := &conn{b: b, ac: ac, vhost: v, userName: user, channels: map[uint16]*channel{}, done: make(chan struct{}), opened: time.Now(), bursts: true}
	c.user.Store(u)
	c.perm.Store(allPermissions)
	c.ctx, c.cancel = context.WithCancel(context.Background())
	b.conns[c] = struct{}{}
	return c, nil
}

// pipeListener is a net.Listener whose connections are handed to it by
// LocalConnector.Dial.
type pipeListener struct {
	conns chan net.Conn
	seq   atomic.Uint64
	once  sync.Once
	done  chan struct{}
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr("brokerd") }

// pipeConn gives the server end of a pipe distinct addresses, so that each
// local connection has a name of its own in the connection list.
type pipeConn struct {
	net.Conn
	remote net.Addr
}

func (c *pipeConn) RemoteAddr() net.Addr { return c.remote }
func (c *pipeConn) LocalAddr() net.Addr  { return pipeAddr("brokerd") }

type pipeAddr string

func (a pipeAddr) Network() string { return "pipe" }
func (a pipeAddr) String() string  { return string(a) }
