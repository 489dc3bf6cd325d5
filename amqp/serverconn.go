package amqp

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Outbound queue marks: deliveries pause while more than writeHighWater
// bytes wait for the socket, and resume (Session.Drained) once the writer
// has brought it below writeLowWater. What deliveries do not cover —
// confirms and basic.return, answers to the connection's own publishes,
// and direct reply-to replies, pushed by other connections — is bounded by
// writeHardLimit: past it the reader stops reading the client (until the
// writer has taken the queue) and replies are refused (Saturated), so a
// client that does not read holds at most about twice writeHardLimit
// (the queue and the write in progress) until writeTimeout drops it.
const (
	writeHighWater = 4 << 20
	writeLowWater  = 1 << 20
	writeHardLimit = 32 << 20
	// closeTimeout bounds the wait for connection.close-ok.
	closeTimeout = 3 * time.Second
)

// ServerConn is one client connection. It has a reader goroutine (serve:
// decodes frames, runs the handshake, calls the handler) and a writer
// goroutine (flushes the outbound queue, sends heartbeats).
type ServerConn struct {
	srv *Server
	nc  net.Conn
	log *slog.Logger
	fr  *FrameReader

	// Negotiated at tune-ok; fixed afterwards.
	frameMax    uint32
	channelMax  uint16
	heartbeat   time.Duration
	hbNanos     atomic.Int64 // heartbeat, for the writer goroutine
	clientProps Table
	user        string
	mechanism   string
	spoke       atomic.Bool // the client sent a valid protocol header

	// How serve ended, for logEnd: the error, whether the handshake had
	// completed, and whether the failure was a refused login (logged
	// then, aggregated).
	endErr error
	opened bool
	// openLog is log with the connection's user, vhost and
	// client-provided name, set once connection.open succeeded: the
	// open and close lines carry them. Reader goroutine, then logEnd.
	openLog     *slog.Logger
	loginFailed bool
	// linger asks finish to half-close the socket and discard input until
	// the client hangs up (see ServerConfig.CloseLinger). Reader goroutine
	// only.
	linger bool

	session  Session                   // set under wmu (the writer reads it)
	bursts   BurstEnder                // the session's, if it is one; reader only
	channels map[uint16]*serverChannel // reader goroutine only
	// unfinished is the capacity of the channels' bodies still being
	// assembled (reader goroutine only; bounded by MaxUnfinishedContent).
	unfinished uint64
	// reserved is the budget the channels' bodies in assembly reserved
	// (Server.budget; reader goroutine only).
	reserved uint64
	// received counts the body bytes read (the reader adds, ContentStats
	// reads).
	received atomic.Uint64
	// traffic counts the bytes and the reads and writes that moved them,
	// both ways (Traffic).
	recvOct, recvCnt, sendOct, sendCnt atomic.Uint64
	// holder holds the reader at content frames, if the session is one
	// (ContentHolder).
	holder ContentHolder

	// Outbound queue, guarded by wmu.
	wmu    sync.Mutex
	wbuf   []byte
	wlater []func() // for the writer to run before it takes wbuf (ChannelOut.Later)
	// wcontent are content frames queued after wbuf's and not encoded
	// yet (sendContent); wcontentBytes is about what they encode to.
	wcontent      []pendingContent
	wcontentBytes int
	wclosed       bool
	wblocked      bool // a Writable() call returned false since the last drain
	wsignal       chan struct{}
	wdone         chan struct{} // closed when the writer exits
	wtaken        chan struct{} // closed (and replaced) when the writer takes a queue of writeHardLimit, or fails
	wfull         atomic.Bool   // the queue reached writeHardLimit since the writer last took it

	// Connection close state, guarded by cmu. cmu also orders the
	// changes of the read deadline that are made off the reader goroutine.
	cmu       sync.Mutex
	closing   bool          // connection.close sent, waiting for close-ok
	paused    bool          // the heartbeat monitor is paused (Blocked)
	outPaused bool          // ... or the reader waits for outbound room
	closingCh chan struct{} // closed with closing, or when the connection ends
	closeOnce sync.Once
	quit      chan struct{} // closed to stop the writer
}

func newServerConn(s *Server, nc net.Conn) *ServerConn {
	c := &ServerConn{
		srv:       s,
		nc:        nc,
		log:       s.cfg.Logger.With("remote", nc.RemoteAddr().String()),
		channels:  map[uint16]*serverChannel{},
		wsignal:   make(chan struct{}, 1),
		wdone:     make(chan struct{}),
		wtaken:    make(chan struct{}),
		quit:      make(chan struct{}),
		closingCh: make(chan struct{}),
		frameMax:  s.cfg.FrameMax,
	}
	c.fr = NewFrameReader(&countingReader{r: nc, c: c})
	return c
}

// countingReader counts what a connection reads: each Read is one read
// of the socket (the frame reader's buffer is in front of it), so the
// count costs an atomic add per read, not per frame.
type countingReader struct {
	r io.Reader
	c *ServerConn
}

func (cr *countingReader) Read(p []byte) (int, error) {
	n, err := cr.r.Read(p)
	if n > 0 {
		cr.c.recvOct.Add(uint64(n))
		cr.c.recvCnt.Add(1)
	}
	return n, err
}

// Traffic returns the bytes the connection received and the reads that
// brought them, and the bytes it sent and the writes that took them.
// Safe for concurrent use.
func (c *ServerConn) Traffic() (recvOct, recvCnt, sendOct, sendCnt uint64) {
	return c.recvOct.Load(), c.recvCnt.Load(), c.sendOct.Load(), c.sendCnt.Load()
}

// RemoteAddr returns the client's address.
func (c *ServerConn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// ClientProperties returns the properties the client sent in start-ok.
func (c *ServerConn) ClientProperties() Table { return c.clientProps }

// LocalAddr returns the server's address of the connection.
func (c *ServerConn) LocalAddr() net.Addr { return c.nc.LocalAddr() }

// Tuning is what a connection negotiated at its handshake.
type Tuning struct {
	FrameMax   uint32
	ChannelMax uint16
	Heartbeat  time.Duration
	// Mechanism is the SASL mechanism the client logged in with.
	Mechanism string
	// TLS is set for a connection over TLS.
	TLS *tls.ConnectionState
}

// Tuning returns what the connection negotiated. Valid once the
// connection is open (from Handler.OpenConnection on); fixed afterwards.
func (c *ServerConn) Tuning() Tuning {
	t := Tuning{FrameMax: c.frameMax, ChannelMax: c.channelMax, Heartbeat: c.heartbeat, Mechanism: c.mechanism}
	if tc, ok := c.nc.(*tls.Conn); ok {
		st := tc.ConnectionState()
		t.TLS = &st
	}
	return t
}

// Close closes the connection from the server side with err (a hard
// error: connection.close). Safe to call from any goroutine, more than once.
func (c *ServerConn) Close(err *Error) {
	if !c.spoke.Load() {
		// A peer that has not sent the protocol header cannot read a
		// frame: hang up rather than wait closeTimeout for its close-ok.
		c.nc.Close()
		return
	}
	c.sendClose(err)
}

// Blocked tells the client that its publishes are held back (a resource
// alarm), if it announced the connection.blocked capability, and pauses
// the heartbeat monitor until Unblocked: the caller stops reading the
// connection (it parks the reader goroutine in ChannelHandler.Publish or
// ContentHolder.HoldContent), so the client's heartbeats cannot be seen,
// and a client blocked for longer than two heartbeat intervals must not be
// dropped for it — RabbitMQ pauses its monitor the same way. Safe from any
// goroutine.
func (c *ServerConn) Blocked(reason string) {
	c.cmu.Lock()
	c.paused = true
	c.armReadDeadlineLocked()
	c.cmu.Unlock()
	if c.clientCapability("connection.blocked") {
		c.send(0, &ConnectionBlocked{Reason: reason})
	}
}

// Unblocked tells the client that publishing may resume and restarts the
// heartbeat monitor: the client has two intervals from now to be heard.
func (c *ServerConn) Unblocked() {
	c.cmu.Lock()
	if c.paused {
		c.paused = false
		c.armReadDeadlineLocked()
	}
	c.cmu.Unlock()
	if c.clientCapability("connection.blocked") {
		c.send(0, &ConnectionUnblocked{})
	}
}

// Done is closed when the connection starts closing (either side) or has
// ended: code that waits on behalf of the connection should stop.
func (c *ServerConn) Done() <-chan struct{} { return c.closingCh }

// serve runs the connection until it ends. The server calls logEnd after.
func (c *ServerConn) serve() {
	go c.writer()
	defer c.finish()
	if c.endErr = c.handshake(); c.endErr != nil {
		return
	}
	c.opened = true
	c.openLog.Info("connection open")
	c.endErr = c.readLoop()
}

// logEnd logs how the connection ended. Failures before the login
// succeeded go through the server's aggregating loggers: any peer can
// cause them, as often as it likes.
func (c *ServerConn) logEnd() {
	err := c.endErr
	var ae *Error
	log := c.log
	if c.openLog != nil {
		log = c.openLog
	}
	switch {
	case c.opened && (err == nil || errors.Is(err, errClosedByPeer)):
		log.Info("connection closed")
	case c.opened && (errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed)):
		log.Info("connection closed", "err", "client hung up")
	case err == nil, errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed), errors.Is(err, errClosedByPeer):
		c.log.Debug("connection closed before it opened")
	case c.loginFailed:
		// Logged when it was refused.
	case !c.opened && c.user == "":
		c.srv.handshakeLog.Event("remote", c.nc.RemoteAddr().String(), "err", err)
	case errors.As(err, &ae):
		log.Warn("connection closed with error", "code", ae.Code, "text", ae.Text)
	default:
		log.Info("connection closed", "err", err)
	}
}

// errClosedByPeer ends the read loop after a clean connection.close.
var errClosedByPeer = errors.New("amqp: connection closed by peer")

// finish tears down: channels, session, writer, socket.
func (c *ServerConn) finish() {
	c.cmu.Lock()
	if !c.closing {
		c.closing = true
		close(c.closingCh)
	}
	c.cmu.Unlock()
	for id, ch := range c.channels {
		ch.release()
		delete(c.channels, id)
	}
	if c.session != nil {
		c.session.Closed()
	}
	c.stopWriter()
	<-c.wdone // everything queued, close-ok included, is written
	if c.linger {
		c.lingerClose()
	}
	c.nc.Close()
}

// lingerClose ends a connection whose close handshake the client may still
// be writing into (it sent connection.close ahead of publishes, or was
// writing when the server closed). Closing the socket with unread input
// would make the kernel answer with a reset, which can destroy the
// close-ok in flight and fails the client's pending writes. Instead the
// write side is shut (the client reads everything sent, then end of
// stream) and input is discarded until the client hangs up or
// ServerConfig.CloseLinger passes, as RabbitMQ does.
func (c *ServerConn) lingerClose() {
	cw, ok := c.nc.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return
	}
	c.nc.SetReadDeadline(time.Now().Add(c.srv.cfg.CloseLinger))
	io.Copy(io.Discard, c.nc)
}

func (c *ServerConn) stopWriter() {
	c.closeOnce.Do(func() { close(c.quit) })
}

// handshake runs protocol header, start, tune and open.
func (c *ServerConn) handshake() error {
	cfg := &c.srv.cfg
	c.nc.SetReadDeadline(time.Now().Add(cfg.HandshakeTimeout))
	hdr, err := c.fr.ReadProtocolHeader()
	if err != nil {
		return fmt.Errorf("read protocol header: %w", err)
	}
	if hdr != ProtocolHeader {
		// Tell the client which protocol we speak, then hang up.
		c.nc.SetWriteDeadline(time.Now().Add(time.Second))
		c.nc.Write(ProtocolHeader[:])
		c.linger = true // an HTTP client, say, sent more than 8 bytes
		return fmt.Errorf("bad protocol header %q", hdr[:])
	}
	c.spoke.Store(true)
	c.send(0, &ConnectionStart{
		VersionMajor:     0,
		VersionMinor:     9,
		ServerProperties: c.serverProperties(),
		Mechanisms:       strings.Join(c.offered(), " "),
		Locales:          "en_US",
	})
	m, err := c.expect(0, "connection.start-ok")
	if err != nil {
		return err
	}
	so := m.(*ConnectionStartOk)
	c.clientProps = so.ClientProperties
	if err := c.login(so); err != nil {
		return err
	}
	c.send(0, &ConnectionTune{
		ChannelMax: cfg.ChannelMax,
		FrameMax:   cfg.FrameMax,
		Heartbeat:  uint16(cfg.Heartbeat / time.Second),
	})
	m, err = c.expect(0, "connection.tune-ok")
	if err != nil {
		return err
	}
	to := m.(*ConnectionTuneOk)
	switch {
	case to.FrameMax != 0 && to.FrameMax < FrameMinSize:
		return c.fatal(Errorf(NotAllowed, "frame_max=%d < %d min size", to.FrameMax, FrameMinSize))
	case to.FrameMax > cfg.FrameMax:
		return c.fatal(Errorf(NotAllowed, "frame_max=%d > %d max size", to.FrameMax, cfg.FrameMax))
	case to.ChannelMax > cfg.ChannelMax:
		return c.fatal(Errorf(NotAllowed, "channel_max=%d > %d max size", to.ChannelMax, cfg.ChannelMax))
	}
	c.frameMax = cfg.FrameMax
	if to.FrameMax != 0 {
		c.frameMax = to.FrameMax
	}
	c.channelMax = cfg.ChannelMax
	if to.ChannelMax != 0 {
		c.channelMax = to.ChannelMax
	}
	// Until here the reader kept its small pre-tune limit, so an
	// unauthenticated peer cannot make us buffer large frames.
	c.fr.SetMaxFrameSize(c.frameMax)
	c.heartbeat = time.Duration(to.Heartbeat) * time.Second
	c.hbNanos.Store(int64(c.heartbeat))
	m, err = c.expect(0, "connection.open")
	if err != nil {
		return err
	}
	open := m.(*ConnectionOpen)
	sess, oerr := cfg.Handler.OpenConnection(c, c.user, open.VirtualHost)
	if oerr != nil {
		return c.fatal(oerr)
	}
	c.wmu.Lock()
	c.session = sess
	c.wmu.Unlock()
	c.bursts, _ = sess.(BurstEnder)
	c.holder, _ = sess.(ContentHolder)
	var name string
	if v, ok := c.clientProps.Get("connection_name"); ok {
		name, _ = v.(string)
	}
	c.openLog = c.log.With("user", c.user, "vhost", open.VirtualHost, "name", name)
	c.send(0, &ConnectionOpenOk{})
	c.armReadDeadline()
	return nil
}

// login authenticates start-ok and sets c.user, or refuses the login. A
// refusal — malformed response, unknown mechanism, unknown user, wrong
// password alike — is sent LoginFailureDelay after the start-ok was read,
// whichever path it took and however long the Handler took to decide, and
// is logged through the server's aggregating logger.
func (c *ServerConn) login(so *ConnectionStartOk) error {
	cfg := &c.srv.cfg
	refuseAt := time.Now().Add(cfg.LoginFailureDelay)
	var user string
	var reason error
	refusal := c.checkMechanism(so.Mechanism)
	switch {
	case refusal != nil:
		reason = refusal
	case so.Mechanism == MechanismEXTERNAL:
		// The response is not read: the certificate is the credential,
		// as in rabbit_auth_mechanism_ssl.
		user, reason = c.certUser()
		if reason == nil {
			reason = errors.New("the broker takes no certificate logins")
			if ea, ok := cfg.Handler.(ExternalAuthenticator); ok {
				reason = ea.AuthenticateExternal(user, c.nc.RemoteAddr())
			}
		}
	default:
		var pass string
		user, pass, refusal = parseLogin(so.Mechanism, []byte(so.Response))
		if refusal != nil {
			reason = refusal
		} else {
			reason = cfg.Handler.Authenticate(user, pass, c.nc.RemoteAddr())
		}
	}
	if reason == nil {
		c.user, c.mechanism = user, so.Mechanism
		return nil
	}
	c.loginFailed = true
	c.srv.loginLog.Event("remote", c.nc.RemoteAddr().String(), "user", user, "mechanism", so.Mechanism, "reason", reason.Error())
	if d := time.Until(refuseAt); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-c.closingCh: // the server is shutting down
			t.Stop()
		}
	}
	if refusal != nil {
		return c.fatal(refusal)
	}
	if c.clientCapability("authentication_failure_close") {
		return c.fatal(Errorf(AccessRefused, "Login was refused using authentication mechanism %s. For details see the broker logfile.", so.Mechanism))
	}
	return fmt.Errorf("login refused for user %q: %w", user, reason)
}

// offered returns the mechanisms connection.start offers this
// connection: the configured ones, EXTERNAL only over TLS (as
// rabbit_auth_mechanism_ssl:should_offer; a TLS client without a
// certificate is offered it, and refused with a reason that says so).
func (c *ServerConn) offered() []string {
	_, isTLS := c.nc.(*tls.Conn)
	out := make([]string, 0, len(c.srv.cfg.Mechanisms))
	for _, m := range c.srv.cfg.Mechanisms {
		if m != MechanismEXTERNAL || isTLS {
			out = append(out, m)
		}
	}
	return out
}

// checkMechanism refuses a start-ok's mechanism when it was not offered,
// with rabbit_reader's codes and texts: a mechanism brokerd has but did
// not offer is invalid; EXTERNAL, when not configured (RabbitMQ without
// its plugin), and any other is unknown.
func (c *ServerConn) checkMechanism(m string) *Error {
	if slices.Contains(c.offered(), m) {
		return nil
	}
	if m == MechanismPLAIN || m == MechanismAMQPLAIN || (m == MechanismEXTERNAL && slices.Contains(c.srv.cfg.Mechanisms, m)) {
		return Errorf(CommandInvalid, "invalid authentication mechanism '%s'", m)
	}
	return Errorf(CommandInvalid, "unknown authentication mechanism '%s'", m)
}

// certUser returns the user name of the client's TLS certificate, or why
// there is none, in rabbit_auth_mechanism_ssl's words.
func (c *ServerConn) certUser() (string, error) {
	tc, ok := c.nc.(*tls.Conn)
	if !ok {
		return "", errors.New("not a TLS-enabled connection")
	}
	st := tc.ConnectionState()
	if len(st.PeerCertificates) == 0 {
		return "", errors.New("connection peer presented no TLS (x.509) certificate")
	}
	if len(st.VerifiedChains) == 0 {
		// The listener does not verify client certificates: a name in
		// one could be anyone's.
		return "", errors.New("TLS configuration is unsafe: client certificates are not verified")
	}
	return c.srv.cfg.CertLogin.UserName(st.PeerCertificates[0])
}

// expect reads the next frame, which must be the named method on channel
// ch (heartbeats are skipped).
func (c *ServerConn) expect(ch uint16, name string) (Method, error) {
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return nil, c.readError(err)
		}
		if f.Type == FrameHeartbeat {
			continue
		}
		if f.Type != FrameMethod || f.Channel != ch {
			return nil, c.fatal(Errorf(CommandInvalid, "expected '%s' on channel %d", name, ch))
		}
		m, err := DecodeMethod(f.Payload)
		if err != nil {
			return nil, c.readError(err)
		}
		if _, ok := m.(*ConnectionClose); ok {
			c.sendRaw(AppendMethodFrame(nil, 0, &ConnectionCloseOk{}))
			c.linger = true
			return nil, errClosedByPeer
		}
		if _, ok := m.(*ConnectionCloseOk); ok && c.isClosing() {
			// The answer to our close (Shutdown mid-handshake).
			return nil, errClosedByPeer
		}
		if m.Name() != name {
			return nil, c.fatal(Errorf(CommandInvalid, "expected '%s', got '%s'", name, m.Name()))
		}
		return m, nil
	}
}

// readError turns a read failure into the connection's end: protocol
// errors are reported to the client, io errors just end it.
func (c *ServerConn) readError(err error) error {
	var ae *Error
	if errors.As(err, &ae) {
		return c.fatal(ae)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		if c.session == nil {
			return fmt.Errorf("handshake not completed within %s: %w", c.srv.cfg.HandshakeTimeout, err)
		}
		return fmt.Errorf("missed heartbeats from client, timeout: %ds: %w", int(c.heartbeat/time.Second), err)
	}
	return err
}

// fatal closes the connection with a hard error and waits (bounded) for
// close-ok, then returns the error so serve ends.
func (c *ServerConn) fatal(err *Error) error {
	c.sendClose(err)
	c.awaitCloseOk()
	return err
}

// sendClose sends connection.close once.
func (c *ServerConn) sendClose(err *Error) {
	c.cmu.Lock()
	if c.closing {
		c.cmu.Unlock()
		return
	}
	c.closing = true
	close(c.closingCh)
	c.cmu.Unlock()
	c.send(0, &ConnectionClose{ReplyCode: err.Code, ReplyText: err.Text, FailingClassID: err.ClassID, FailingMethodID: err.MethodID})
	// Unblock a reader that waits for frames that will never come.
	c.nc.SetReadDeadline(time.Now().Add(closeTimeout))
}

// awaitCloseOk discards frames until connection.close-ok (or close),
// a read error, or the close timeout. Unless the client answered or timed
// out, the connection then lingers (see lingerClose): after a frame error
// the stream cannot be parsed, but the client may still be writing.
func (c *ServerConn) awaitCloseOk() {
	c.nc.SetReadDeadline(time.Now().Add(closeTimeout))
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			c.linger = !errors.Is(err, os.ErrDeadlineExceeded)
			return
		}
		if f.Type != FrameMethod || f.Channel != 0 {
			continue
		}
		m, err := DecodeMethod(f.Payload)
		if err != nil {
			c.linger = true
			return
		}
		switch m.(type) {
		case *ConnectionCloseOk:
			return
		case *ConnectionClose:
			c.sendRaw(AppendMethodFrame(nil, 0, &ConnectionCloseOk{}))
			c.linger = true
			return
		}
	}
}

func (c *ServerConn) isClosing() bool {
	c.cmu.Lock()
	defer c.cmu.Unlock()
	return c.closing
}

// armReadDeadline sets the deadline for the next frame: two heartbeat
// intervals plus a quarter (the read loop re-arms at most every quarter
// interval, so a peer is dropped after between 2 and 2.25 silent intervals,
// never sooner than 2), or none without heartbeats or while the monitor is
// paused (Blocked). Once the connection is closing the close handshake owns
// the deadline and it is left alone.
func (c *ServerConn) armReadDeadline() {
	c.cmu.Lock()
	c.armReadDeadlineLocked()
	c.cmu.Unlock()
}

func (c *ServerConn) armReadDeadlineLocked() {
	switch {
	case c.closing:
	case c.heartbeat > 0 && !c.paused && !c.outPaused:
		c.nc.SetReadDeadline(time.Now().Add(2*c.heartbeat + c.heartbeat/4))
	default:
		c.nc.SetReadDeadline(time.Time{})
	}
}

// readLoop reads frames after the handshake until the connection ends.
func (c *ServerConn) readLoop() error {
	lastArm := time.Now()
	for {
		if c.isClosing() {
			c.awaitCloseOk()
			return nil
		}
		c.awaitOutboundRoom()
		f, err := c.fr.ReadFrame()
		if err != nil {
			if c.isClosing() {
				return nil
			}
			return c.readError(err)
		}
		if c.heartbeat > 0 {
			// Re-arming costs a timer update, so it is done at most
			// once per quarter interval (see armReadDeadline).
			if now := time.Now(); now.Sub(lastArm) > c.heartbeat/4 {
				c.armReadDeadline()
				lastArm = now
			}
		}
		if err := c.dispatch(f); err != nil {
			if errors.Is(err, errClosedByPeer) {
				return nil
			}
			var ae *Error
			if errors.As(err, &ae) {
				return c.fatal(ae)
			}
			return c.fatal(Errorf(InternalError, "%s", err))
		}
		if c.bursts != nil && !c.fr.HasFrame() {
			c.bursts.EndBurst()
		}
	}
}

// dispatch handles one frame.
func (c *ServerConn) dispatch(f Frame) error {
	switch f.Type {
	case FrameHeartbeat:
		if f.Channel != 0 {
			return Errorf(FrameError, "heartbeat frame on channel %d", f.Channel)
		}
		return nil
	case FrameMethod, FrameHeader, FrameBody:
	default:
		return Errorf(FrameError, "unknown frame type %d", f.Type)
	}
	if f.Channel == 0 {
		return c.connectionFrame(f)
	}
	ch := c.channels[f.Channel]
	if ch == nil {
		return c.openChannel(f)
	}
	return ch.frame(f)
}

func (c *ServerConn) connectionFrame(f Frame) error {
	if f.Type != FrameMethod {
		return Errorf(UnexpectedFrame, "non-method frame on channel 0")
	}
	m, err := DecodeMethod(f.Payload)
	if err != nil {
		return err
	}
	switch m.(type) {
	case *ConnectionClose:
		c.sendRaw(AppendMethodFrame(nil, 0, &ConnectionCloseOk{}))
		c.linger = true // the client may have written more after its close
		return errClosedByPeer
	case *ConnectionCloseOk:
		return errClosedByPeer
	case *ConnectionUpdateSecret:
		c.send(0, &ConnectionUpdateSecretOk{})
		return nil
	case *ConnectionBlocked, *ConnectionUnblocked:
		return nil
	}
	e := Errorf(CommandInvalid, "unexpected method '%s' on channel 0", m.Name())
	e.ClassID, e.MethodID = m.ClassID(), m.MethodID()
	return e
}

func (c *ServerConn) openChannel(f Frame) error {
	if f.Type != FrameMethod {
		return Errorf(ChannelError, "expected 'channel.open' on channel %d", f.Channel)
	}
	m, err := DecodeMethod(f.Payload)
	if err != nil {
		return err
	}
	if _, ok := m.(*ChannelOpen); !ok {
		e := Errorf(ChannelError, "expected 'channel.open' on channel %d, got '%s'", f.Channel, m.Name())
		e.ClassID, e.MethodID = m.ClassID(), m.MethodID()
		return e
	}
	if f.Channel > c.channelMax {
		return Errorf(NotAllowed, "channel number %d exceeds negotiated channel_max %d", f.Channel, c.channelMax)
	}
	ch := &serverChannel{c: c, id: f.Channel}
	h, herr := c.session.OpenChannel(f.Channel, ch)
	if herr != nil {
		return herr
	}
	ch.h = h
	c.channels[f.Channel] = ch
	c.send(f.Channel, &ChannelOpenOk{})
	return nil
}

// serverProperties advertises what RabbitMQ advertises, so clients enable
// the same features.
func (c *ServerConn) serverProperties() Table {
	cfg := &c.srv.cfg
	host, _ := os.Hostname()
	caps := Table{
		{"publisher_confirms", true},
		{"exchange_exchange_bindings", true},
		{"basic.nack", true},
		{"consumer_cancel_notify", true},
		{"connection.blocked", true},
		{"consumer_priorities", true},
		{"authentication_failure_close", true},
		{"per_consumer_qos", true},
		{"direct_reply_to", true},
	}
	return Table{
		{"capabilities", caps},
		{"cluster_name", "brokerd@" + host},
		{"copyright", "Copyright (c) the brokerd authors"},
		{"information", "brokerd: a persistent AMQP 0-9-1 broker"},
		{"platform", "Go"},
		{"product", cfg.Product},
		{"version", cfg.Version},
	}
}

// clientCapability reports a boolean from the client's capabilities table.
func (c *ServerConn) clientCapability(name string) bool {
	v, ok := c.clientProps.Get("capabilities")
	if !ok {
		return false
	}
	t, ok := v.(Table)
	if !ok {
		return false
	}
	b, _ := t.Get(name)
	on, _ := b.(bool)
	return on
}

// parseLogin decodes a SASL response for PLAIN or AMQPLAIN.
func parseLogin(mechanism string, resp []byte) (user, pass string, err *Error) {
	switch mechanism {
	case "PLAIN":
		// [authzid] NUL authcid NUL passwd
		parts := bytes.Split(resp, []byte{0})
		if len(parts) != 3 {
			return "", "", Errorf(AccessRefused, "invalid PLAIN response")
		}
		return string(parts[1]), string(parts[2]), nil
	case "AMQPLAIN":
		t, derr := DecodeTableBody(resp)
		if derr != nil {
			return "", "", Errorf(AccessRefused, "invalid AMQPLAIN response: %s", derr)
		}
		l, _ := t.Get("LOGIN")
		p, _ := t.Get("PASSWORD")
		ls, ok1 := stringValue(l)
		ps, ok2 := stringValue(p)
		if !ok1 || !ok2 {
			return "", "", Errorf(AccessRefused, "AMQPLAIN response without LOGIN and PASSWORD")
		}
		return ls, ps, nil
	}
	return "", "", Errorf(CommandInvalid, "unknown authentication mechanism '%s'", mechanism)
}

func stringValue(v any) (string, bool) {
	switch s := v.(type) {
	case string:
		return s, true
	case []byte:
		return string(s), true
	}
	return "", false
}
