package amqp

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/brokerd/brokerd/internal/ratelog"
)

// Handler is the broker as the server sees it. Implementations must be
// safe for concurrent use: every connection calls it from its own
// goroutine.
type Handler interface {
	// Authenticate checks a login (already decoded from PLAIN or
	// AMQPLAIN). A non-nil error refuses it: after
	// ServerConfig.LoginFailureDelay the client sees RabbitMQ's generic
	// refusal, whatever the error; the error is logged, aggregated with
	// other refusals.
	Authenticate(user, password string, remote net.Addr) error
	// OpenConnection is called on connection.open. A returned *Error
	// closes the connection with that code.
	OpenConnection(c *ServerConn, user, vhost string) (Session, *Error)
}

// ExternalAuthenticator is an optional interface of a Handler: without it
// the server refuses every SASL EXTERNAL login.
type ExternalAuthenticator interface {
	// AuthenticateExternal checks a login by TLS client certificate
	// (SASL EXTERNAL) as user, the name ServerConfig.CertLogin took
	// from the verified certificate: no password is checked. A non-nil
	// error refuses it, as Authenticate's does.
	AuthenticateExternal(user string, remote net.Addr) error
}

// Session is the broker's side of one open connection. Its methods are
// called from the connection's goroutines, never concurrently with Closed.
type Session interface {
	// OpenChannel is called on channel.open.
	OpenChannel(id uint16, out ChannelOut) (ChannelHandler, *Error)
	// Drained is called when the outbound queue, which had reached its
	// high-water mark (Writable returned false), has room again.
	Drained()
	// Closed is called once when the connection has ended, after Close
	// of every channel handler still open.
	Closed()
}

// BurstEnder is an optional interface of a Session. EndBurst is called
// from the connection's reader goroutine when it has handled every whole
// frame it has read, before it reads (and maybe waits) again: work put off
// across a burst of frames, such as settling acks, is done once for it.
type BurstEnder interface {
	EndBurst()
}

// ContentHolder is an optional interface of a Session. HoldContent is
// called from the connection's reader goroutine when a content header or
// body frame of a publish has arrived, before the connection takes it in:
// it may block, and the connection is read no further until it returns,
// which is how a resource alarm stops a publisher at its next content
// frame rather than once a whole body (up to MaxMessageSize) is in. It
// must return when the connection starts closing (ServerConn.Done).
type ContentHolder interface {
	HoldContent()
}

// ChannelHandler executes one channel's methods. Handle and Publish are
// called from the connection's reader goroutine, in frame order. A returned
// *Error closes the channel (soft code) or the connection (hard code); any
// other error closes the connection with INTERNAL_ERROR.
type ChannelHandler interface {
	// Handle executes a method without content (channel.open, close and
	// close-ok are handled by the server).
	Handle(m Method) error
	// Publish executes basic.publish with its content. props is the
	// decoded form of raw. raw and body are owned by the handler.
	Publish(m *BasicPublish, props *Properties, raw, body []byte) error
	// Close is called once when the channel closes, by either side or
	// with its connection.
	Close()
}

// ChannelOut is the outbound side of a channel. Safe for concurrent use;
// never blocks on the network (frames are queued for the writer).
type ChannelOut interface {
	Send(m Method)
	// SendContent sends a content method (basic.deliver, get-ok, return)
	// followed by its header and body frames, split by the negotiated
	// frame size. props is the raw property list. A *BasicDeliver is
	// copied during the call (a caller may reuse it); another m, props and
	// body are kept until the frames are encoded, by the connection's
	// writer or before the next frame queued: they must not change.
	SendContent(m Method, props, body []byte)
	// Writable reports whether the connection's outbound queue is below
	// its high-water mark.
	Writable() bool
	// Saturated reports whether the outbound queue is at its hard limit:
	// what would add to it unasked (a direct reply-to reply) is refused.
	Saturated() bool
	// Later runs fn on the connection's writer goroutine before its next
	// write, unless the channel or the connection has closed by then.
	// fn may send (it is how a frame is formatted off the caller's
	// goroutine: publisher confirms completed by the store's); it must
	// not block. Later itself never blocks and never calls fn.
	Later(fn func())
	// Close closes the channel from the server's side with e (a soft
	// error), from any goroutine, as a handler's returned error does:
	// channel.close is sent at once and the channel's later sends are
	// dropped. The handler's Close is called from the connection's
	// reader when the client's next frame for the channel arrives (its
	// close-ok, normally) or when the connection ends. A channel
	// closing already is left as it is.
	Close(e *Error)
}

// ServerConfig configures a Server. Zero fields take the defaults noted.
type ServerConfig struct {
	Handler Handler
	Logger  *slog.Logger // slog.Default()
	// Heartbeat is the interval the server proposes; 0 proposes none.
	Heartbeat time.Duration
	// FrameMax is the largest frame the server accepts and proposes
	// (default 131072, minimum FrameMinSize).
	FrameMax uint32
	// ChannelMax is the highest channel number (default 2047).
	ChannelMax uint16
	// HandshakeTimeout bounds the time from accept to connection.open
	// (default 10s).
	HandshakeTimeout time.Duration
	// MaxMessageSize bounds a message body (default 128 MiB).
	MaxMessageSize uint64
	// MaxUnfinishedContent bounds the body bytes a connection holds for
	// messages whose body frames have not all arrived, across its
	// channels (default twice MaxMessageSize). A body frame that would
	// take it past the bound closes the connection with 506
	// RESOURCE_ERROR (a connection error in AMQP 0-9-1).
	// Bodies are held as their frames arrive, never reserved from the
	// size a content header announces.
	MaxUnfinishedContent uint64
	// MaxUnfinishedContentTotal bounds the body bytes reserved, over
	// every connection, by messages being received: a content header
	// reserves its body size (at most this) before any body frame is
	// read, and a connection whose body does not fit waits, unread,
	// until others complete (default 256 MiB; see contentBudget for the
	// rules that keep it free of deadlock).
	MaxUnfinishedContentTotal uint64
	// MaxConnections bounds the open connections, over all listeners
	// (RabbitMQ's connection_max). A connection accepted beyond it is
	// closed at once, without a handshake. 0: no limit.
	MaxConnections int
	// LoginFailureDelay is how long a refused login waits before the
	// refusal (connection.close or hang-up) is sent, counted from the
	// start-ok, so that one client cannot try passwords at the speed of the
	// network and every refusal takes the same time (default 1s; negative:
	// none).
	LoginFailureDelay time.Duration
	// CloseLinger bounds the time a connection is kept after its close
	// handshake, half-closed, discarding what the client still sends until
	// it hangs up (default 3s). It is what lets a client that was writing
	// when the connection closed read close-ok and a clean end of stream
	// rather than a reset.
	CloseLinger time.Duration
	// Product and Version appear in the server properties.
	Product, Version string
	// Mechanisms are the SASL mechanisms clients may log in with, in the
	// order connection.start offers them (RabbitMQ's auth_mechanisms):
	// MechanismPLAIN, MechanismAMQPLAIN, MechanismEXTERNAL. EXTERNAL is
	// offered on TLS connections only. Default PLAIN and AMQPLAIN.
	Mechanisms []string
	// CertLogin says which name of a client's certificate EXTERNAL logs
	// it in as.
	CertLogin CertLogin
}

func (c *ServerConfig) setDefaults() {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.FrameMax == 0 {
		c.FrameMax = 131072
	}
	if c.FrameMax < FrameMinSize {
		c.FrameMax = FrameMinSize
	}
	if c.ChannelMax == 0 {
		c.ChannelMax = 2047
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = 10 * time.Second
	}
	if c.MaxMessageSize == 0 {
		c.MaxMessageSize = 128 << 20
	}
	if c.MaxUnfinishedContent == 0 {
		c.MaxUnfinishedContent = 2 * c.MaxMessageSize
	}
	if c.MaxUnfinishedContentTotal == 0 {
		c.MaxUnfinishedContentTotal = 256 << 20
	}
	if c.LoginFailureDelay == 0 {
		c.LoginFailureDelay = time.Second
	}
	if c.CloseLinger <= 0 {
		c.CloseLinger = 3 * time.Second
	}
	if c.Product == "" {
		c.Product = "brokerd"
	}
	if len(c.Mechanisms) == 0 {
		c.Mechanisms = []string{MechanismPLAIN, MechanismAMQPLAIN}
	}
}

// Server accepts AMQP 0-9-1 connections and runs the protocol, calling its
// Handler for everything above it.
type Server struct {
	cfg ServerConfig

	// Events a peer can cause at will are logged through these, so that no
	// peer decides how much the server logs.
	acceptLog    *ratelog.Limiter // Accept failed (out of file descriptors, ...)
	overLimitLog *ratelog.Limiter // connection refused over MaxConnections
	loginLog     *ratelog.Limiter // login refused
	handshakeLog *ratelog.Limiter // handshake failed before the login succeeded

	// budget bounds the content being received, over every connection.
	budget *contentBudget

	// maxConns is the MaxConnections in force: SetMaxConnections
	// changes it at run time.
	maxConns atomic.Int64

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*ServerConn]struct{}
	closing   bool
	done      chan struct{} // closed with closing
	wg        sync.WaitGroup
}

// NewServer returns a server; Serve starts it on a listener.
func NewServer(cfg ServerConfig) *Server {
	cfg.setDefaults()
	log := cfg.Logger
	s := &Server{
		cfg:          cfg,
		acceptLog:    ratelog.New(log, slog.LevelError, "accept failed; retrying", ratelog.Interval),
		overLimitLog: ratelog.New(log, slog.LevelWarn, "connection refused: max_connections reached", ratelog.Interval),
		loginLog:     ratelog.New(log, slog.LevelWarn, "login refused", ratelog.Interval),
		handshakeLog: ratelog.New(log, slog.LevelInfo, "handshake failed", ratelog.Interval),
		listeners:    map[net.Listener]struct{}{},
		conns:        map[*ServerConn]struct{}{},
		done:         make(chan struct{}),
		budget:       newContentBudget(cfg.MaxUnfinishedContentTotal),
	}
	s.maxConns.Store(int64(cfg.MaxConnections))
	return s
}

// SetMaxConnections changes ServerConfig.MaxConnections (0: no limit)
// while the server runs (brokerd's SIGHUP reload). Connections already
// open beyond a lowered limit stay open; new ones are refused until the
// count drops below it. Safe for concurrent use.
func (s *Server) SetMaxConnections(n int) { s.maxConns.Store(int64(n)) }

// MaxConnections returns the MaxConnections in force (0: no limit).
func (s *Server) MaxConnections() int { return int(s.maxConns.Load()) }

// Connections returns the number of client connections open, those
// still in their handshake included. Safe for concurrent use.
func (s *Server) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = errors.New("amqp: server closed")

// Serve accepts connections on l until l is closed or Shutdown is called;
// after Shutdown l is closed, even if Serve was called after it.
// Other accept errors — out of file descriptors (EMFILE, ENFILE), out of
// buffers, a connection aborted before it was accepted — do not end it:
// they are logged (at most about once a second, with a count) and accepting
// is retried after a pause that doubles from 5ms to 1s, as net/http does,
// while the connections already open are served as before.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		// Shutdown came first and did not see l: close it here, or its
		// port stays bound (a restart on the same address would fail).
		l.Close()
		return ErrServerClosed
	}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
	}()
	var backoff time.Duration
	for {
		nc, err := l.Accept()
		if err != nil {
			select {
			case <-s.done:
				return ErrServerClosed
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.acceptLog.Event("listener", l.Addr().String(), "err", err, "retry_in", backoff)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-s.done:
				t.Stop()
				return ErrServerClosed
			}
			continue
		}
		backoff = 0
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			nc.Close()
			continue
		}
		if limit := int(s.maxConns.Load()); limit > 0 && len(s.conns) >= limit {
			s.mu.Unlock()
			nc.Close()
			s.overLimitLog.Event("remote", nc.RemoteAddr().String(), "max_connections", limit)
			continue
		}
		c := newServerConn(s, nc)
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			c.serve()
			s.mu.Lock()
			delete(s.conns, c)
			s.budget.received.Add(c.received.Load()) // under s.mu: ContentStats counts it once
			s.mu.Unlock()
			// Logged once the connection no longer counts against
			// MaxConnections.
			c.logEnd()
		}()
	}
}

// Accepting reports whether the server accepts connections: true until
// StopAccepting or Shutdown (the management API's is-in-service and
// ready-to-accept-clients health checks). Safe for concurrent use.
func (s *Server) Accepting() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.closing
}

// StopAccepting closes the listeners and makes Serve return
// ErrServerClosed; the connections open keep being served until Shutdown.
// brokerd calls it first at shutdown, so that no client connects while the
// publisher confirms in flight are delivered. Idempotent; safe for
// concurrent use.
func (s *Server) StopAccepting() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closing {
		s.closing = true
		close(s.done)
	}
	for l := range s.listeners {
		l.Close()
	}
}

// Shutdown stops accepting, closes every connection with 320
// CONNECTION_FORCED and waits for them to finish the close handshake. When
// ctx ends first the remaining sockets are closed at once.
func (s *Server) Shutdown(ctx context.Context) error {
	s.StopAccepting()
	s.mu.Lock()
	conns := make([]*ServerConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.Close(Errorf(ConnectionForced, "broker forced connection closure with reason 'shutdown'"))
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		s.mu.Lock()
		for c := range s.conns {
			c.nc.Close()
		}
		s.mu.Unlock()
		<-done
		err = ctx.Err()
	}
	for _, l := range []*ratelog.Limiter{s.acceptLog, s.overLimitLog, s.loginLog, s.handshakeLog} {
		l.Stop()
	}
	return err
}
