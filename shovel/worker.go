package shovel

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// errDeleteAfter ends a session whose src-delete-after was reached.
var errDeleteAfter = errors.New("shovel: src-delete-after reached")

// dialTimeout bounds a connect: TCP, TLS and the AMQP handshake.
const dialTimeout = 30 * time.Second

// closeTimeout bounds the close handshake of a connection, and Stop's
// wait for the worker's goroutine before its sockets are closed under it
// (a publish blocked on a destination that stopped reading).
const closeTimeout = 5 * time.Second

// worker runs one shovel: run is its goroutine.
type worker struct {
	m           *Manager
	vhost, name string
	def         Definition
	log         *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	// done is closed when the worker's connections are closed and it does
	// nothing more but, maybe, call Options.Deleted.
	done chan struct{}

	forwarded atomic.Uint64

	// remaining counts the messages still to settle before
	// src-delete-after (-1: never), kept across reconnects; run's
	// goroutine only.
	remaining    int64
	remainingSet bool

	mu      sync.Mutex
	state   string      // mu
	reason  string      // mu
	since   time.Time   // mu
	blocked bool        // mu
	srcURI  string      // mu: in use, without credentials
	destURI string      // mu
	raw     []io.Closer // mu: the transports of the session's connections
}

func newWorker(m *Manager, vhost, name string, d Definition) *worker {
	w := &worker{
		m: m, vhost: vhost, name: name, def: d,
		log:     m.o.Logger.With("shovel", name, "vhost", vhost),
		done:    make(chan struct{}),
		state:   StateStarting,
		since:   time.Now(),
		srcURI:  redact(d.SrcURIs[0]),
		destURI: redact(d.DestURIs[0]),
	}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	return w
}

// stop ends the worker and waits until its connections are closed.
func (w *worker) stop() {
	w.cancel()
	t := time.NewTimer(closeTimeout)
	defer t.Stop()
	select {
	case <-w.done:
		return
	case <-t.C:
	}
	// The goroutine is stuck in a write (a destination that stopped
	// reading): close its transports under it.
	w.mu.Lock()
	raw := append([]io.Closer(nil), w.raw...)
	w.mu.Unlock()
	for _, c := range raw {
		c.Close()
	}
	<-w.done
}

func (w *worker) setState(state, reason string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.state, w.reason, w.since = state, reason, time.Now()
	if state != StateRunning {
		w.blocked = false
	}
}

func (w *worker) status() Status {
	w.mu.Lock()
	s := Status{
		Node: w.m.o.Node, Timestamp: w.since.Format(timestampLayout), Name: w.name, Vhost: w.vhost,
		Type: "dynamic", State: w.state, Reason: w.reason, SrcURI: w.srcURI, DestURI: w.destURI,
		SrcProtocol: "amqp091", DestProtocol: "amqp091",
	}
	if w.state == StateRunning {
		s.BlockedStatus = "running"
		if w.blocked {
			s.BlockedStatus = "blocked"
		}
	}
	w.mu.Unlock()
	d := &w.def
	if d.SrcIsExchange {
		s.SrcExchange, s.SrcExchangeKey = d.SrcExchange, d.SrcExchangeKey
	} else {
		s.SrcQueue = d.SrcQueue
	}
	s.DestQueue, s.DestExchange, s.DestExchangeKey = d.DestQueue, d.DestExchange, d.DestExchangeKey
	s.Forwarded = w.forwarded.Load()
	return s
}

// run connects, shovels until a side fails, and reconnects after
// ReconnectDelay, until stopped, terminated or src-delete-after is reached.
func (w *worker) run() {
	deleted := false
	for {
		err := w.session()
		if w.ctx.Err() != nil {
			break
		}
		if errors.Is(err, errDeleteAfter) {
			w.log.Info("shovel reached src-delete-after; stopping")
			w.setState(StateTerminated, "autodelete")
			deleted = true
			break
		}
		reason := strings.ReplaceAll(err.Error(), "\n", "; ") // errors.Join's lines: one per URI tried
		if w.def.ReconnectDelay == 0 {
			w.log.Warn("shovel failed; terminated (reconnect-delay 0)", "err", err)
			w.setState(StateTerminated, reason)
			break
		}
		w.log.Warn("shovel failed; reconnecting", "err", err, "delay", w.def.ReconnectDelay)
		w.setState(StateStarting, reason)
		t := time.NewTimer(w.def.ReconnectDelay)
		select {
		case <-t.C:
		case <-w.ctx.Done():
			t.Stop()
		}
		if w.ctx.Err() != nil {
			break
		}
	}
	close(w.done)
	if deleted && w.ctx.Err() == nil && w.m.o.Deleted != nil {
		w.m.o.Deleted(w.vhost, w.name)
	}
}

// session is one connection to each side: it returns why it ended. Its
// deferred closes hand the source's unacknowledged deliveries back.
func (w *worker) session() error {
	ctx, cancel := context.WithCancel(w.ctx)
	defer cancel()
	defer func() {
		w.mu.Lock()
		w.raw = nil
		w.mu.Unlock()
	}()
	src, srcURI, err := w.dial(ctx, w.def.SrcURIs)
	if err != nil {
		return fmt.Errorf("connect to source: %w", err)
	}
	defer closeConn(src)
	dst, dstURI, err := w.dial(ctx, w.def.DestURIs)
	if err != nil {
		return fmt.Errorf("connect to destination: %w", err)
	}
	defer func() {
		w.mu.Lock()
		blocked := w.blocked
		w.mu.Unlock()
		if blocked {
			// A blocked destination reads nothing more once it holds a
			// publish's content: it would not read the close either.
			dst.CloseDeadline(time.Now())
			return
		}
		closeConn(dst)
	}()
	w.mu.Lock()
	w.srcURI, w.destURI = srcURI, dstURI
	w.mu.Unlock()

	s := &session{w: w, ctx: ctx, src: src, dst: dst, srcURI: srcURI, dstURI: dstURI, dstLocal: isLocal(dstURI)}
	defer func() {
		// The broker answers channel.close once the channel's unacked
		// deliveries are back in their queues (RabbitMQ's close_source
		// closes the channel first too): when Stop returns they are.
		if s.srcCh != nil {
			s.srcCh.Close()
		}
	}()
	if err := s.setup(); err != nil {
		return err
	}
	return s.loop()
}

func closeConn(c *amqp091.Connection) {
	_ = c.CloseDeadline(time.Now().Add(closeTimeout)) // best effort: a dead peer's socket is closed anyway
}

// dial connects to one of uris, picked at random as RabbitMQ picks, the
// others tried in turn when it fails. It returns the URI without its
// credentials.
func (w *worker) dial(ctx context.Context, uris []string) (*amqp091.Connection, string, error) {
	var errs []error
	for _, i := range rand.Perm(len(uris)) {
		c, err := w.dialOne(ctx, uris[i])
		if err == nil {
			return c, redact(uris[i]), nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", redact(uris[i]), err))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, "", errors.Join(errs...)
}

// isLocal says whether uri (as dial returns it) is this brokerd's.
func isLocal(uri string) bool {
	u, err := url.Parse(uri)
	return err == nil && u.Host == ""
}

func (w *worker) dialOne(ctx context.Context, uri string) (*amqp091.Connection, error) {
	u, err := url.Parse(uri)
	if err != nil {
		return nil, fmt.Errorf("parse uri: %w", err)
	}
	cfg := amqp091.Config{
		Properties: amqp091.Table{"connection_name": "Shovel " + w.name, "product": "brokerd shovel"},
		Heartbeat:  10 * time.Second,
		Locale:     "en_US",
	}
	if u.Host == "" { // this brokerd
		if w.m.o.Local == nil {
			return nil, errors.New("no local connections in this process")
		}
		vhost, err := url.PathUnescape(strings.TrimPrefix(u.EscapedPath(), "/"))
		if err != nil {
			return nil, fmt.Errorf("parse vhost of uri: %w", err)
		}
		if vhost == "" {
			vhost = "/" // RabbitMQ 3.10's, whatever the parameter's vhost
		}
		rwc, err := w.m.o.Local(ctx, vhost)
		if err != nil {
			return nil, fmt.Errorf("open local connection: %w", err)
		}
		w.track(rwc)
		stop := context.AfterFunc(ctx, func() { rwc.Close() })
		defer stop()
		cfg.Vhost = vhost
		cfg.SASL = []amqp091.Authentication{&amqp091.PlainAuth{Username: "none"}}
		c, err := amqp091.Open(rwc, cfg)
		if err != nil {
			rwc.Close()
			return nil, fmt.Errorf("open local connection to vhost '%s': %w", vhost, err)
		}
		return c, nil
	}
	if u.Scheme == "amqps" && u.Query().Get("verify") == "verify_none" {
		pu, err := amqp091.ParseURI(uri)
		if err != nil {
			return nil, fmt.Errorf("parse uri: %w", err)
		}
		if cfg.TLSClientConfig, err = tlsConfig(pu); err != nil {
			return nil, err
		}
		cfg.TLSClientConfig.InsecureSkipVerify = true
	}
	var stop func() bool
	cfg.Dial = func(network, addr string) (net.Conn, error) {
		d := net.Dialer{Timeout: dialTimeout}
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		w.track(c)
		stop = context.AfterFunc(ctx, func() { c.Close() })
		// Bounds the TLS and AMQP handshakes; amqp091.Open clears it.
		if err := c.SetDeadline(time.Now().Add(dialTimeout)); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}
	c, err := amqp091.DialConfig(uri, cfg)
	if stop != nil {
		stop()
	}
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (w *worker) track(c io.Closer) {
	w.mu.Lock()
	w.raw = append(w.raw, c)
	w.mu.Unlock()
}

// tlsConfig is amqp091's configuration from the URI's cacertfile,
// certfile and keyfile, for verify=verify_none (which amqp091 does not
// read).
func tlsConfig(u amqp091.URI) (*tls.Config, error) {
	cfg := &tls.Config{ServerName: u.ServerName, MinVersion: tls.VersionTLS12}
	if u.CACertFile != "" {
		data, err := os.ReadFile(u.CACertFile)
		if err != nil {
			return nil, fmt.Errorf("read CA certificate: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		cfg.RootCAs.AppendCertsFromPEM(data)
	}
	if u.CertFile != "" && u.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(u.CertFile, u.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("load client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// redact removes the credentials from a URI (RabbitMQ's
// amqp_uri:remove_credentials).
func redact(uri string) string {
	u, err := url.Parse(uri)
	if err != nil || u.User == nil {
		return uri
	}
	u.User = nil
	return u.String()
}
