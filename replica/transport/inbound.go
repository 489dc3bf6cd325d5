package transport

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// acceptLoop accepts connections until Close.
func (t *Transport) acceptLoop() {
	defer t.wg.Done()
	var backoff time.Duration
	for {
		nc, err := t.ln.Accept()
		if err != nil {
			if t.closed() || errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors, or the like: wait, as amqp.Server does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			t.acceptLog.Event("listener", t.ln.Addr().String(), "err", err, "retry_in", backoff)
			if !t.sleep(backoff) {
				return
			}
			continue
		}
		backoff = 0
		t.inMu.Lock()
		if t.closed() {
			t.inMu.Unlock()
			nc.Close()
			return
		}
		t.conns[nc] = struct{}{}
		t.inMu.Unlock()
		t.wg.Add(1)
		go t.serveInbound(nc)
	}
}

// serveInbound makes an accepted connection's handshake and reads its
// messages until it fails or Close.
func (t *Transport) serveInbound(nc net.Conn) {
	defer t.wg.Done()
	handedOff := false // a client stream is OnConn's
	defer func() {
		if handedOff {
			return
		}
		nc.Close()
		t.inMu.Lock()
		delete(t.conns, nc)
		t.inMu.Unlock()
	}()
	remote := nc.RemoteAddr().String()
	p, h, conn, fr, err := t.handshake(nc)
	if err != nil {
		t.stats.refused.Add(1)
		t.refusedLog.Event("remote", remote, "err", err)
		return
	}
	if h.stream == streamConn {
		handedOff = true
		t.serveConn(nc, conn, fr, p, h)
		return
	}
	key := inboundKey{p.name, h.stream}
	t.inMu.Lock()
	if old := t.inbound[key]; old != nil {
		// The peer has one connection per stream: a new one means the
		// old is dead, though this side may not have noticed yet.
		old.Close()
	}
	t.inbound[key] = nc
	t.inMu.Unlock()
	defer func() {
		t.inMu.Lock()
		if t.inbound[key] == nc {
			delete(t.inbound, key)
		}
		t.inMu.Unlock()
	}()

	beaconDone := make(chan struct{})
	stopBeacon := make(chan struct{})
	go func() {
		defer close(beaconDone)
		t.beacon(conn, stopBeacon)
	}()
	err = t.readMessages(conn, fr, p, h)
	close(stopBeacon)
	nc.Close() // not conn: a TLS close would send an alert, which can wait
	<-beaconDone
	switch {
	case t.closed():
	case errors.Is(err, errFrameTooLarge) || errors.Is(err, errBadFrame):
		t.stats.protocolErrors.Add(1)
		t.log.Warn("transport: closed an inter-node connection for a bad frame", "peer", p.name, "remote", remote, "stream", streamName(h.stream), "err", err)
	default:
		t.log.Debug("transport: an inter-node connection ended", "peer", p.name, "remote", remote, "stream", streamName(h.stream), "err", err)
	}
}

func streamName(kind byte) string {
	if kind == streamBulk {
		return "bulk"
	}
	return "small"
}

// handshake makes an accepted connection's TLS handshake if configured,
// reads its hello, and answers welcome, or refuse with the reason (then
// the error says it too).
func (t *Transport) handshake(nc net.Conn) (*peer, hello, net.Conn, *frameReader, error) {
	if err := nc.SetDeadline(time.Now().Add(t.cfg.HandshakeTimeout)); err != nil {
		return nil, hello{}, nil, nil, fmt.Errorf("set handshake deadline: %w", err)
	}
	conn := nc
	if t.cfg.TLS != nil {
		tc := tls.Server(nc, t.cfg.TLS)
		if err := tc.HandshakeContext(t.ctx); err != nil {
			return nil, hello{}, nil, nil, fmt.Errorf("TLS handshake: %w", err)
		}
		conn = tc
	}
	fr := &frameReader{r: bufio.NewReaderSize(conn, 64<<10)}
	typ, _, body, err := fr.read(maxHandshakeFrame, nil)
	if err != nil {
		return nil, hello{}, nil, nil, fmt.Errorf("read hello: %w", err)
	}
	if typ != frameHello {
		return nil, hello{}, nil, nil, fmt.Errorf("%w: frame type %d before a hello", errBadFrame, typ)
	}
	h, err := decodeHello(body)
	if err != nil {
		return nil, hello{}, nil, nil, err
	}
	p, reason := t.check(h)
	if reason != "" {
		frame := appendHeader(nil, frameRefuse, 0, 0)
		frame = append(frame, reason...)
		putLength(frame)
		_, _ = conn.Write(frame) // best effort: the caller learns why
		return nil, hello{}, nil, nil, fmt.Errorf("refused node %q of cluster %q: %s", h.from, h.cluster, reason)
	}
	frame := appendHeader(nil, frameWelcome, 0, 0)
	frame = welcome{id: t.cfg.ID, name: t.cfg.Name}.append(frame)
	putLength(frame)
	if _, err := conn.Write(frame); err != nil {
		return nil, hello{}, nil, nil, fmt.Errorf("send welcome: %w", err)
	}
	if err := nc.SetDeadline(time.Time{}); err != nil {
		return nil, hello{}, nil, nil, fmt.Errorf("clear handshake deadline: %w", err)
	}
	return p, h, conn, fr, nil
}

// check decides on a hello: the peer it names, or why it is refused.
func (t *Transport) check(h hello) (*peer, string) {
	if h.version != protocolVersion {
		return nil, fmt.Sprintf("protocol version %d is not supported (this node speaks %d)", h.version, protocolVersion)
	}
	if h.cluster != t.cfg.Cluster {
		return nil, fmt.Sprintf("cluster id %q is not this node's cluster %q", h.cluster, t.cfg.Cluster)
	}
	if h.to != t.cfg.Name {
		return nil, fmt.Sprintf("this node is %q, not %q: check the caller's peers", t.cfg.Name, h.to)
	}
	p := t.peers[h.from]
	if p == nil {
		return nil, fmt.Sprintf("node name %q is not one of this node's peers", h.from)
	}
	switch h.stream {
	case streamSmall, streamBulk:
	case streamConn:
		switch {
		case t.cfg.OnConn == nil:
			return nil, "this node takes no client connection streams"
		case h.service == "" || len(h.service) > maxServiceName:
			return nil, fmt.Sprintf("service name %q: want 1 to %d bytes", h.service, maxServiceName)
		case len(h.client) > maxClientAddr:
			return nil, fmt.Sprintf("client address of %d bytes: the bound is %d", len(h.client), maxClientAddr)
		}
	default:
		return nil, fmt.Sprintf("unknown stream kind %d", h.stream)
	}
	if err := t.learnID(p, h.id); err != nil {
		return nil, fmt.Sprintf("node %s: %v", p.name, err)
	}
	return p, ""
}

// beacon writes a pong every KeepAlive until stop: the dialer's proof
// that this side lives and the path back is open.
func (t *Transport) beacon(conn net.Conn, stop <-chan struct{}) {
	tick := time.NewTicker(t.cfg.KeepAlive)
	defer tick.Stop()
	pong := appendHeader(nil, framePong, 0, 0)
	for {
		select {
		case <-tick.C:
		case <-stop:
			return
		}
		if err := conn.SetWriteDeadline(time.Now().Add(t.cfg.DeadAfter)); err != nil {
			return
		}
		if _, err := conn.Write(pong); err != nil {
			return // the reader's next read fails, or it is stopping
		}
	}
}

// readMessages reads frames from an accepted connection and hands its
// messages to the Handler, until an error.
func (t *Transport) readMessages(conn net.Conn, fr *frameReader, p *peer, h hello) error {
	deadline := func() { _ = conn.SetReadDeadline(time.Now().Add(t.cfg.DeadAfter)) }
	for {
		typ, group, body, err := fr.read(t.cfg.MaxFrameSize, deadline)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return err
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return fmt.Errorf("the peer was silent for %v: %w", t.cfg.DeadAfter, err)
			}
			return fmt.Errorf("read: %w", err)
		}
		switch typ {
		case framePing:
			continue
		case frameMsg:
		default:
			return fmt.Errorf("%w: frame type %d from a dialer", errBadFrame, typ)
		}
		m := new(pb.Message)
		if err := proto.Unmarshal(body, m); err != nil {
			return fmt.Errorf("%w: group %d: a Raft message that does not decode: %w", errBadFrame, group, err)
		}
		// A peer speaks for itself, to this node, and never with a
		// message raft keeps inside a node.
		if m.GetFrom() != h.id || m.GetTo() != t.cfg.ID || raft.IsLocalMsg(m.GetType()) {
			t.stats.rejected.Add(1)
			t.rejectLog.Event("peer", p.name, "peer_id", h.id, "group", group, "type", m.GetType().String(), "from", m.GetFrom(), "to", m.GetTo())
			continue
		}
		t.stats.received.Add(1)
		t.stats.receivedBytes.Add(uint64(headerSize + len(body)))
		t.cfg.Handler(group, m)
	}
}
