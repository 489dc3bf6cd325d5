package broker

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync/atomic"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/internal/pipelisten"
)

// LocalConnector opens in-process AMQP 0-9-1 connections to the broker:
// RabbitMQ's direct connection, which its shovels use for an "amqp://" URI
// with no host. Each connection is one end of a net.Pipe (internal/
// pipelisten); the other end is served by an amqp.Server of its own, so
// the whole protocol runs as over a socket, but:
//   - the login is not checked: only this process can reach the server (it
//     has no listener). Every connection is internal (OpenInternalConnection):
//     every permission in the vhost it opens, whatever users and
//     permissions say, under the user name "none" (RabbitMQ's direct
//     connections' user), tagged impersonator so that a message's user_id
//     goes through unchanged;
//   - it does not count against the client server's MaxConnections (nor its
//     Connections, which feed sockets_used), nor against vhost or user
//     connection limits;
//   - it is listed among the broker's connections (so that closing a
//     vhost's connections and Broker.Close reach it), named
//     "local-N -> brokerd", with the client's connection_name ("Shovel NAME"
//     for a shovel) as its user-provided name.
//
// Safe for concurrent use. Close stops it; it must be called before the
// broker's Close returns for good (cmd/brokerd: after the shovels' Close).
type LocalConnector struct {
	srv    *amqp.Server
	ln     *pipelisten.Listener
	seq    atomic.Uint64
	served chan struct{}
}

// LocalUser is the user name of local connections.
const LocalUser = "none"

// NewLocalConnector starts a LocalConnector. cfg is the client server's
// configuration (frame and message limits, logger); its Handler and
// MaxConnections are replaced.
func (b *Broker) NewLocalConnector(cfg amqp.ServerConfig) *LocalConnector {
	cfg.Handler = localHandler{b}
	cfg.MaxConnections = 0
	cfg.LoginFailureDelay = -1
	lc := &LocalConnector{srv: amqp.NewServer(cfg), ln: pipelisten.New(), served: make(chan struct{})}
	go func() {
		defer close(lc.served)
		lc.srv.Serve(namedPipes{lc})
	}()
	return lc
}

// Dial returns the client end of a new in-process connection. The caller
// runs the AMQP handshake on it (amqp091.Open, with any SASL mechanism)
// and opens vhost; vhost is accepted for the signature of
// shovel.Options.Local and not checked here (connection.open names the
// vhost, as over a socket).
func (lc *LocalConnector) Dial(ctx context.Context, vhost string) (io.ReadWriteCloser, error) {
	c, err := lc.ln.Dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("dial local connection to vhost '%s': %w", vhost, err)
	}
	return c, nil
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
	return h.b.OpenInternalConnection(ac, LocalUser, vhost)
}

// namedPipes is the connector's listener, giving the server end of each
// pipe an address of its own, so that each local connection has a name
// of its own in the connection list.
type namedPipes struct{ lc *LocalConnector }

func (l namedPipes) Accept() (net.Conn, error) {
	c, err := l.lc.ln.Accept()
	if err != nil {
		return nil, err
	}
	n := l.lc.seq.Add(1)
	return &pipeConn{Conn: c, remote: pipeAddr("local-" + strconv.FormatUint(n, 10))}, nil
}

func (l namedPipes) Close() error   { return l.lc.ln.Close() }
func (l namedPipes) Addr() net.Addr { return pipeAddr("brokerd") }

type pipeConn struct {
	net.Conn
	remote net.Addr
}

func (c *pipeConn) RemoteAddr() net.Addr { return c.remote }
func (c *pipeConn) LocalAddr() net.Addr  { return pipeAddr("brokerd") }

type pipeAddr string

func (a pipeAddr) Network() string { return "pipe" }
func (a pipeAddr) String() string  { return string(a) }
