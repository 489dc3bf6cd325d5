package amqp

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"
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
	// frame size. props is the raw property list; props and body are only
	// read during the call.
	SendContent(m Method, props, body []byte)
	// Writable reports whether the connection's outbound queue is below
	// its high-water mark.
	Writable() bool
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
	if c.LoginFailureDelay == 0 {
		c.LoginFailureDelay = time.Second
	}
	if c.CloseLinger <= 0 {
		c.CloseLinger = 3 * time.Second
	}
	if c.Product == "" {
		c.Product = "brokerd"
	}
}

// Server accepts AMQP 0-9-1 connections and runs the protocol, calling its
// Handler for everything above it.
type Server struct {
	cfg ServerConfig

	// Events a peer can cause at will are logged through these, so that no
	// peer decides how much the server logs.
	loginLog     *logLimiter // login refused
	handshakeLog *logLimiter // handshake failed before the login succeeded

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*ServerConn]struct{}
	closing   bool
	wg        sync.WaitGroup
}

// NewServer returns a server; Serve starts it on a listener.
func NewServer(cfg ServerConfig) *Server {
	cfg.setDefaults()
	log := cfg.Logger
	return &Server{
		cfg:          cfg,
		loginLog:     newLogLimiter(log, slog.LevelWarn, "login refused", logInterval),
		handshakeLog: newLogLimiter(log, slog.LevelInfo, "handshake failed", logInterval),
		listeners:    map[net.Listener]struct{}{},
		conns:        map[*ServerConn]struct{}{},
	}
}

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = errors.New("amqp: server closed")

// Serve accepts connections on l until l fails or Shutdown is called.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
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
			s.mu.Lock()
			closing := s.closing
			s.mu.Unlock()
			if closing {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		c := newServerConn(s, nc)
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			nc.Close()
			continue
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			c.serve()
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
			c.logEnd()
		}()
	}
}

// Shutdown stops accepting, closes every connection with 320
// CONNECTION_FORCED and waits for them to finish the close handshake. When
// ctx ends first the remaining sockets are closed at once.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	for l := range s.listeners {
		l.Close()
	}
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
	for _, l := range []*logLimiter{s.loginLog, s.handshakeLog} {
		l.stop()
	}
	return err
}
