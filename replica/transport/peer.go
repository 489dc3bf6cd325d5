package transport

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// peer is another node: its address, the Raft id it presented, and the
// two outbound streams to it.
type peer struct {
	t          *Transport
	name, addr string
	presetID   uint64
	id         atomic.Uint64 // 0 until known
	small      *stream
	bulk       *stream

	// streamsUp counts the streams connected; PeerState hears of a change
	// between 2 and less, in order (the hook runs under stateMu).
	stateMu   sync.Mutex
	streamsUp int
}

// streamUp and streamDown count a stream's connection made and lost.
func (p *peer) streamUp() {
	p.stateMu.Lock()
	defer p.stateMu.Unlock()
	if p.streamsUp++; p.streamsUp == 2 && p.t.cfg.PeerState != nil {
		p.t.cfg.PeerState(p.name, p.id.Load(), true)
	}
}

func (p *peer) streamDown() {
	p.stateMu.Lock()
	defer p.stateMu.Unlock()
	if p.streamsUp--; p.streamsUp == 1 && p.t.cfg.PeerState != nil {
		p.t.cfg.PeerState(p.name, p.id.Load(), false)
	}
}

func newPeer(t *Transport, p Peer) *peer {
	pr := &peer{t: t, name: p.Name, addr: p.Addr, presetID: p.ID}
	pr.id.Store(p.ID)
	pr.small = &stream{p: pr, kind: streamSmall, wake: make(chan struct{}, 1)}
	pr.bulk = &stream{p: pr, kind: streamBulk, wake: make(chan struct{}, 1)}
	return pr
}

func (p *peer) streams() [2]*stream { return [2]*stream{p.small, p.bulk} }

// outMsg is a message queued to a peer.
type outMsg struct {
	group uint64
	m     *pb.Message
	size  int // estimate()
}

// stream is one outbound connection to a peer and its queue: Send pushes,
// the stream's goroutine (run) dials, writes what was pushed, and dials
// again when the connection fails.
type stream struct {
	p       *peer
	kind    byte
	wake    chan struct{} // cap 1: something was pushed
	dropped atomic.Uint64

	mu sync.Mutex
	up bool // connected: push accepts messages
	// conn is the current TCP connection (dialled, maybe not up yet),
	// for Close, which closes it under any TLS one: a TLS close would
	// try to send an alert.
	conn  net.Conn
	queue []outMsg
	bytes int
	spare []outMsg // the writer's last batch, reused
}

func (s *stream) name() string {
	if s.kind == streamBulk {
		return "bulk"
	}
	return "small"
}

// push queues a message if the stream is up and it fits (an empty queue
// takes any one); it reports whether it did.
func (s *stream) push(o outMsg) bool {
	cfg := &s.p.t.cfg
	s.mu.Lock()
	if !s.up || (len(s.queue) > 0 && (len(s.queue) >= cfg.QueueMessages || s.bytes+o.size > cfg.QueueBytes)) {
		s.mu.Unlock()
		return false
	}
	s.queue = append(s.queue, o)
	s.bytes += o.size
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return true
}

// take returns what is queued, leaving the queue empty; the batch is
// valid until the next take.
func (s *stream) take() []outMsg {
	s.mu.Lock()
	defer s.mu.Unlock()
	batch := s.queue
	clear(s.spare) // drop the references to the messages sent
	s.queue, s.spare = s.spare[:0], batch
	s.bytes = 0
	return batch
}

func (s *stream) isUp() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.up
}

func (s *stream) closeConn() {
	s.mu.Lock()
	if s.conn != nil {
		s.conn.Close()
	}
	s.mu.Unlock()
}

// run is the stream's goroutine: connect, serve the connection until it
// fails, drop what was queued, and connect again after a backoff, until
// Close.
func (s *stream) run() {
	t := s.p.t
	defer t.wg.Done()
	var backoff time.Duration
	var lastErr string // the last failure logged, so an outage logs once
	for {
		conn, raw, err := s.connect()
		if err != nil {
			if t.closed() {
				return
			}
			if msg := err.Error(); msg != lastErr {
				lastErr = msg
				level := slog.LevelWarn
				if s.kind == streamBulk && !errors.Is(err, errRefused) {
					level = slog.LevelDebug // the small stream says it
				}
				t.log.Log(t.ctx, level, "transport: cannot connect to a peer", "peer", s.p.name, "addr", s.p.addr, "stream", s.name(), "err", err)
			}
			backoff = min(max(2*backoff, t.cfg.MinBackoff), t.cfg.MaxBackoff)
			if !t.sleep(backoff/2 + rand.N(backoff/2+1)) {
				return
			}
			continue
		}
		lastErr = ""
		connected := time.Now()
		s.setUp(true)
		t.stats.connects.Add(1)
		level := slog.LevelInfo
		if s.kind == streamBulk {
			level = slog.LevelDebug
		}
		t.log.Log(t.ctx, level, "transport: connected to a peer", "peer", s.p.name, "addr", s.p.addr, "id", s.p.id.Load(), "stream", s.name())
		s.p.streamUp()
		groups, err := s.serve(conn, raw)
		s.setUp(false)
		t.stats.disconnects.Add(1)
		// What was queued is dropped (Raft retransmits), and every group
		// that sent on the connection is told: what it wrote last may be
		// lost in the kernel's buffers.
		id := s.p.id.Load()
		for _, o := range s.take() {
			s.dropped.Add(1)
			t.stats.dropped.Add(1)
			groups[o.group] = struct{}{}
			t.snapshotSent(o, false)
		}
		for g := range groups {
			t.unreachable(g, id)
		}
		if t.closed() {
			return
		}
		level = slog.LevelWarn
		if s.kind == streamBulk {
			level = slog.LevelDebug
		}
		t.log.Log(t.ctx, level, "transport: lost the connection to a peer", "peer", s.p.name, "addr", s.p.addr, "stream", s.name(), "err", err)
		s.p.streamDown()
		// The backoff starts again after a connection that lasted; one
		// that fails as soon as it is made (a peer that closes it at the
		// first message) is redialled ever more slowly, as a failed dial.
		if time.Since(connected) >= t.cfg.MaxBackoff {
			backoff = 0
		}
		backoff = min(max(2*backoff, t.cfg.MinBackoff), t.cfg.MaxBackoff)
		if !t.sleep(backoff/2 + rand.N(backoff/2+1)) {
			return
		}
	}
}

func (s *stream) setUp(up bool) {
	s.mu.Lock()
	s.up = up
	if !up {
		s.conn = nil
	}
	s.mu.Unlock()
}

// errRefused is wrapped by connect's error when the peer refused the
// hello.
var errRefused = errors.New("refused by the peer")

// connect dials the peer and makes the handshake (Transport.dial). The
// TCP connection is registered for Close as soon as it is dialled.
func (s *stream) connect() (conn, raw net.Conn, err error) {
	t := s.p.t
	h := hello{version: protocolVersion, stream: s.kind, id: t.cfg.ID, cluster: t.cfg.Cluster, from: t.cfg.Name, to: s.p.name}
	track := func(nc net.Conn) bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		if t.closed() {
			return false
		}
		s.conn = nc
		return true
	}
	untrack := func(net.Conn) {
		s.mu.Lock()
		s.conn = nil
		s.mu.Unlock()
	}
	return t.dial(t.ctx, s.p, h, track, untrack)
}

// dial dials peer p and makes the handshake: TLS if configured, then
// hello h → welcome. It returns the connection to use and the TCP one
// under it (the same without TLS), which is what is closed: closing a TLS
// connection sends an alert, which can wait on a full send buffer. track
// is given the TCP connection as soon as it is dialled, so that Close can
// end the handshake (false: the transport is closing, give up); untrack
// is told if the handshake fails after. ctx, and HandshakeTimeout, bound
// the handshake.
func (t *Transport) dial(ctx context.Context, p *peer, h hello, track func(net.Conn) bool, untrack func(net.Conn)) (conn, raw net.Conn, err error) {
	d := net.Dialer{Timeout: t.cfg.DialTimeout}
	nc, err := d.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, nil, fmt.Errorf("dial: %w", err)
	}
	if !track(nc) {
		nc.Close()
		return nil, nil, net.ErrClosed
	}
	fail := func(err error) (net.Conn, net.Conn, error) {
		nc.Close()
		untrack(nc)
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
			err = fmt.Errorf("%w (%w)", err, cerr)
		}
		return nil, nil, err
	}
	if err := nc.SetDeadline(time.Now().Add(t.cfg.HandshakeTimeout)); err != nil {
		return fail(fmt.Errorf("set handshake deadline: %w", err))
	}
	// ctx's end (its deadline too: not copied to the connection, so that
	// a failure it causes is always told by stop below) ends the
	// handshake's reads and writes.
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Unix(1, 0)) })
	conn = nc
	if t.cfg.TLS != nil {
		c := t.cfg.TLS.Clone()
		if c.ServerName == "" {
			if host, _, err := net.SplitHostPort(p.addr); err == nil {
				c.ServerName = host
			}
		}
		tc := tls.Client(nc, c)
		if err := tc.HandshakeContext(ctx); err != nil {
			stop()
			return fail(fmt.Errorf("TLS handshake: %w", err))
		}
		conn = tc
	}
	frame := appendHeader(nil, frameHello, 0, 0)
	frame = h.append(frame)
	putLength(frame)
	if _, err := conn.Write(frame); err != nil {
		stop()
		return fail(fmt.Errorf("send hello: %w", err))
	}
	// Unbuffered: after a client stream's welcome come the client's bytes,
	// which are not this reader's.
	fr := frameReader{r: conn}
	typ, _, body, err := fr.read(maxHandshakeFrame, nil)
	if !stop() {
		// ctx ended during the handshake: its deadline may be set now.
		return fail(fmt.Errorf("handshake: %w", context.Cause(ctx)))
	}
	if err != nil {
		return fail(fmt.Errorf("read the hello's answer: %w", err))
	}
	switch typ {
	case frameRefuse:
		return fail(fmt.Errorf("%w: %s", errRefused, body))
	case frameWelcome:
	default:
		return fail(fmt.Errorf("%w: frame type %d in answer to a hello", errBadFrame, typ))
	}
	w, err := decodeWelcome(body)
	if err != nil {
		return fail(err)
	}
	if w.name != p.name {
		return fail(fmt.Errorf("the node at %s is %q, not %q", p.addr, w.name, p.name))
	}
	if err := t.learnID(p, w.id); err != nil {
		return fail(fmt.Errorf("node %s: %w", p.name, err))
	}
	if err := nc.SetDeadline(time.Time{}); err != nil {
		return fail(fmt.Errorf("clear handshake deadline: %w", err))
	}
	return conn, nc, nil
}

// serve writes what is pushed to conn, and a ping when it was idle for
// KeepAlive, while a watcher reads the peer's pongs, until a write fails,
// the peer falls silent for DeadAfter, or Close; then it closes raw. It
// returns the groups whose messages it wrote.
func (s *stream) serve(conn, raw net.Conn) (map[uint64]struct{}, error) {
	t := s.p.t
	groups := map[uint64]struct{}{}
	watchErr := make(chan error, 1)
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		watchErr <- s.watch(conn)
	}()
	var snaps []outMsg // MsgSnap written in this batch, reported once flushed
	stop := func(err error) (map[uint64]struct{}, error) {
		raw.Close()
		if werr := <-watchErr; err == nil {
			err = werr
		}
		for _, o := range snaps {
			t.snapshotSent(o, false)
		}
		return groups, err
	}
	bw := bufio.NewWriterSize(conn, 64<<10)
	keep := time.NewTicker(t.cfg.KeepAlive)
	defer keep.Stop()
	var buf []byte
	wrote := false // since the last keepalive tick
	for {
		ping := false
		select {
		case <-s.wake:
		case <-keep.C:
			ping, wrote = !wrote, false
		case err := <-watchErr:
			raw.Close()
			return groups, err
		case <-t.done:
			return stop(net.ErrClosed)
		}
		batch := s.take()
		if len(batch) == 0 && !ping {
			continue
		}
		if err := conn.SetWriteDeadline(time.Now().Add(t.cfg.DeadAfter)); err != nil {
			return stop(fmt.Errorf("set write deadline: %w", err))
		}
		if ping {
			if _, err := bw.Write(appendHeader(buf[:0], framePing, 0, 0)); err != nil {
				return stop(fmt.Errorf("write: %w", err))
			}
		}
		var sent, bytes uint64
		snaps = snaps[:0]
		for i := range batch {
			o := &batch[i]
			var err error
			buf = appendHeader(buf[:0], frameMsg, o.group, 0)
			if buf, err = (proto.MarshalOptions{}).MarshalAppend(buf, o.m); err != nil {
				// A message raft made always encodes; this is a bug.
				t.log.Error("transport: cannot encode a Raft message", "peer", s.p.name, "group", o.group, "type", o.m.GetType().String(), "err", err)
				continue
			}
			if len(buf)-headerSize > t.cfg.MaxFrameSize {
				t.stats.tooLarge.Add(1)
				t.log.Error("transport: a Raft message is larger than max_frame_size and was not sent", "peer", s.p.name, "group", o.group, "type", o.m.GetType().String(), "size", len(buf)-headerSize, "max_frame_size", t.cfg.MaxFrameSize)
				t.unreachable(o.group, o.m.GetTo())
				t.snapshotSent(*o, false)
				continue
			}
			putLength(buf)
			if len(buf) > bw.Available() {
				// A large frame may take a while: the deadline is for
				// each frame, not the batch.
				if err := conn.SetWriteDeadline(time.Now().Add(t.cfg.DeadAfter)); err != nil {
					return stop(fmt.Errorf("set write deadline: %w", err))
				}
			}
			if _, err := bw.Write(buf); err != nil {
				return stop(fmt.Errorf("write: %w", err))
			}
			groups[o.group] = struct{}{}
			if o.m.GetType() == pb.MsgSnap {
				snaps = append(snaps, *o)
			}
			sent++
			bytes += uint64(len(buf))
			if cap(buf) > 4<<20 {
				buf = nil // not kept for every later small message
			}
		}
		if err := bw.Flush(); err != nil {
			return stop(fmt.Errorf("write: %w", err))
		}
		wrote = true
		t.stats.sent.Add(sent)
		t.stats.sentBytes.Add(bytes)
		for _, o := range snaps {
			t.snapshotSent(o, true)
		}
		snaps = snaps[:0]
	}
}

// watch reads conn's incoming side: the acceptor's pongs, one every
// KeepAlive. Silence for DeadAfter, or anything else, ends it.
func (s *stream) watch(conn net.Conn) error {
	t := s.p.t
	fr := frameReader{r: conn}
	for {
		if err := conn.SetReadDeadline(time.Now().Add(t.cfg.DeadAfter)); err != nil {
			return fmt.Errorf("set read deadline: %w", err)
		}
		typ, _, _, err := fr.read(maxHandshakeFrame, nil)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return fmt.Errorf("the peer was silent for %v: %w", t.cfg.DeadAfter, err)
			}
			return fmt.Errorf("read: %w", err)
		}
		if typ != framePong {
			return fmt.Errorf("%w: frame type %d from an acceptor", errBadFrame, typ)
		}
	}
}
