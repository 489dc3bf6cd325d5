package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/brokerd/brokerd/internal/ratelog"
	pb "go.etcd.io/raft/v3/raftpb"
)

// Defaults of Config's zero fields.
const (
	DefaultMaxFrameSize     = 256 << 20
	DefaultQueueMessages    = 4096
	DefaultQueueBytes       = 16 << 20
	DefaultKeepAlive        = 500 * time.Millisecond
	DefaultDeadAfter        = 3 * time.Second
	DefaultDialTimeout      = 2 * time.Second
	DefaultHandshakeTimeout = 5 * time.Second
	DefaultMinBackoff       = 20 * time.Millisecond
	DefaultMaxBackoff       = time.Second
)

// unreachableEvery is the most often ReportUnreachable runs for one
// (group, peer): raft only moves the peer's progress to probing, so one
// report per Raft tick (100 ms) is as good as one per dropped message.
const unreachableEvery = 100 * time.Millisecond

// Peer is another node of the cluster.
type Peer struct {
	Name string // as in [cluster] peers: "n2"
	Addr string // host:port of its [cluster] listen
	// ID is the peer's Raft id if the owner knows it; 0: learned from
	// the peer's handshake. A peer presenting another id is refused.
	ID uint64
}

// Config configures a Transport. Cluster, Name, ID, Handler and Listen
// (or Listener) are required; the zero value of every other field is its
// default.
type Config struct {
	// Cluster names the cluster: a node naming another is refused.
	Cluster string
	// Name is this node's name, ID its Raft id (nonzero), the same in
	// every group it is a member of.
	Name string
	ID   uint64
	// Listen is the address to listen on ([cluster] listen). Listener,
	// if not nil, is used instead; once New succeeds the Transport owns
	// it (Close closes it).
	Listen   string
	Listener net.Listener
	// Peers are the other nodes; an entry naming this node is ignored.
	Peers []Peer
	// TLS, if not nil, secures every connection both ways: it is the
	// listener's configuration and, cloned with ServerName set to the
	// peer's host when empty, the dialer's. It must be mutual — a client
	// certificate required and verified (ClientAuth
	// RequireAndVerifyClientCert, or a GetConfigForClient giving a
	// configuration that does) — and hold this node's certificate (used
	// as client certificate too), RootCAs and ClientCAs. nil: plain TCP.
	TLS *tls.Config

	// Handler receives every message a peer sends, with its group. It
	// runs on the connection's reader goroutine (one per inbound
	// connection, so concurrently for different peers and streams) and
	// should hand the message on without blocking for long: while it
	// runs, that connection is not read. The message is the handler's.
	Handler func(group uint64, m *pb.Message)
	// ReportUnreachable, if not nil, is told that a message of group to
	// the node whose Raft id is peer may not have arrived — dropped
	// (queue full, not connected, no peer has that id) or lost with a
	// connection — so the group's Raft can probe the peer
	// (RawNode.ReportUnreachable). It runs on the Send caller's goroutine
	// or a transport goroutine, at most once per unreachableEvery for a
	// (group, peer), and must not block.
	ReportUnreachable func(group, peer uint64)
	// ReportSnapshot, if not nil, is told what became of every MsgSnap
	// Send took: ok once it was written to its connection, not ok if it
	// was dropped (RawNode.ReportSnapshot with SnapshotFinish or
	// SnapshotFailure: without either, raft keeps the peer waiting for
	// the snapshot). Written is not received; if it is lost after, the
	// follower rejects the next append and raft sends another. It runs
	// as ReportUnreachable does, once per MsgSnap, and must not block.
	ReportSnapshot func(group, peer uint64, ok bool)
	// PeerState, if not nil, is told when a peer becomes reachable (both
	// its streams connected) and when it stops being (one of them lost),
	// with the Raft id it presented. It runs on a transport goroutine,
	// one call at a time for a peer, and must not block.
	PeerState func(name string, id uint64, up bool)
	// OnConn, if not nil, is given every client connection stream a peer
	// opens (Transport.DialConn) once its handshake is made: service is
	// the dialler's ("amqp", "http"), conn carries the client's raw
	// bytes, and conn.RemoteAddr() is the original client's address as
	// the dialler sent it (network "tcp"). It runs on the stream's own
	// goroutine, which Close waits for; conn is OnConn's to serve or hand
	// on, and Close closes it if it is still open. nil: such streams are
	// refused.
	OnConn func(service string, conn net.Conn)
	// Logger receives connection events; slog.Default() if nil.
	Logger *slog.Logger

	// MaxFrameSize bounds a message frame's body, incoming and outgoing:
	// a peer sending a larger one is disconnected, a larger message is
	// not sent. It must exceed the largest Raft message — an entry holds
	// a whole store batch, so above amqp.max_message_size (default 256
	// MiB).
	MaxFrameSize int
	// QueueMessages and QueueBytes bound each peer's two outbound queues
	// (default 4096 messages, 16 MiB); a message that does not fit is
	// dropped, except that an empty queue takes any one message.
	QueueMessages int
	QueueBytes    int
	// KeepAlive is how often an idle connection carries a ping and an
	// accepted one a pong (default 500 ms); a connection that carried
	// nothing for DeadAfter (default 3 s) is closed: the peer is dead or
	// the path black-holed.
	KeepAlive time.Duration
	DeadAfter time.Duration
	// DialTimeout bounds a dial (default 2 s), HandshakeTimeout the TLS
	// handshake and hello of a connection (default 5 s).
	DialTimeout      time.Duration
	HandshakeTimeout time.Duration
	// MinBackoff and MaxBackoff bound the wait between a failed dial and
	// the next (default 20 ms doubling to 1 s, jittered).
	MinBackoff time.Duration
	MaxBackoff time.Duration

	// singleStream sends everything on the small stream: the tests'
	// control for head-of-line blocking.
	singleStream bool
}

func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.MaxFrameSize, DefaultMaxFrameSize)
	def(&c.QueueMessages, DefaultQueueMessages)
	def(&c.QueueBytes, DefaultQueueBytes)
	defDur(&c.KeepAlive, DefaultKeepAlive)
	defDur(&c.DeadAfter, DefaultDeadAfter)
	defDur(&c.DialTimeout, DefaultDialTimeout)
	defDur(&c.HandshakeTimeout, DefaultHandshakeTimeout)
	defDur(&c.MinBackoff, DefaultMinBackoff)
	defDur(&c.MaxBackoff, DefaultMaxBackoff)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Transport carries Raft messages between this node and its peers over
// TCP (see the package doc). Send is safe for concurrent use; Close stops
// it.
type Transport struct {
	cfg     Config
	log     *slog.Logger
	ln      net.Listener
	ctx     context.Context // cancelled by Close: ends dials and handshakes
	cancel  context.CancelFunc
	done    chan struct{} // closed by Close
	closing sync.Once
	wg      sync.WaitGroup

	peers map[string]*peer // by name; fixed after New
	// byID routes Send: Raft id → peer, rebuilt under idMu when a peer
	// presents an id.
	byID atomic.Pointer[map[uint64]*peer]
	idMu sync.Mutex

	inMu    sync.Mutex
	conns   map[net.Conn]struct{} // every accepted connection and open client stream, for Close
	inbound map[inboundKey]net.Conn

	// reported is when ReportUnreachable last ran for a (group, peer).
	repMu    sync.Mutex
	reported map[[2]uint64]time.Time

	// Events whose rate a caller or peer decides: inbound handshakes
	// refused, received messages rejected, accept errors.
	refusedLog, rejectLog, acceptLog *ratelog.Limiter
	stats                            counters
}

type inboundKey struct {
	peer   string
	stream byte
}

// New listens and starts connecting to every peer. The returned
// Transport's Close must be called.
func New(cfg Config) (*Transport, error) {
	cfg = cfg.withDefaults()
	switch {
	case cfg.Cluster == "" || cfg.Name == "":
		return nil, errors.New("transport: a cluster id and a node name are required")
	case cfg.ID == 0:
		return nil, errors.New("transport: a node's Raft id cannot be 0")
	case cfg.Handler == nil:
		return nil, errors.New("transport: a Handler is required")
	case cfg.TLS != nil && cfg.TLS.ClientAuth != tls.RequireAndVerifyClientCert && cfg.TLS.GetConfigForClient == nil:
		return nil, errors.New("transport: inter-node TLS must be mutual: ClientAuth must be RequireAndVerifyClientCert")
	}
	t := &Transport{
		cfg:      cfg,
		log:      cfg.Logger,
		done:     make(chan struct{}),
		peers:    map[string]*peer{},
		conns:    map[net.Conn]struct{}{},
		inbound:  map[inboundKey]net.Conn{},
		reported: map[[2]uint64]time.Time{},
	}
	t.refusedLog = ratelog.New(t.log, slog.LevelWarn, "transport: refused an inter-node connection", ratelog.Interval)
	t.rejectLog = ratelog.New(t.log, slog.LevelWarn, "transport: dropped a message not from its connection's node, not to this node, or local to a node", ratelog.Interval)
	t.acceptLog = ratelog.New(t.log, slog.LevelError, "transport: cannot accept an inter-node connection", ratelog.Interval)
	for _, p := range cfg.Peers {
		if p.Name == cfg.Name {
			continue
		}
		if p.Name == "" || p.Addr == "" {
			return nil, fmt.Errorf("transport: peer %q at %q: a name and an address are required", p.Name, p.Addr)
		}
		if t.peers[p.Name] != nil {
			return nil, fmt.Errorf("transport: peer %q listed twice", p.Name)
		}
		t.peers[p.Name] = newPeer(t, p)
	}
	if err := t.rebuildRoutes(); err != nil {
		return nil, err
	}
	t.ln = cfg.Listener
	if t.ln == nil {
		ln, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("transport: listen on %s: %w", cfg.Listen, err)
		}
		t.ln = ln
	}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	t.wg.Add(1)
	go t.acceptLoop()
	for _, p := range t.peers {
		for _, s := range p.streams() {
			t.wg.Add(1)
			go s.run()
		}
	}
	return t, nil
}

// Addr is the address the transport listens on.
func (t *Transport) Addr() net.Addr { return t.ln.Addr() }

// Close stops listening, closes every connection (client connection
// streams too, both ways) and waits for the transport's goroutines; no
// hook runs after it returns. Messages queued
// are dropped. Idempotent.
func (t *Transport) Close() error {
	t.closing.Do(func() {
		close(t.done)
		t.cancel()
		t.ln.Close()
		t.inMu.Lock()
		for c := range t.conns {
			c.Close()
		}
		t.inMu.Unlock()
		for _, p := range t.peers {
			for _, s := range p.streams() {
				s.closeConn()
			}
		}
	})
	t.wg.Wait()
	t.refusedLog.Stop()
	t.rejectLog.Stop()
	t.acceptLog.Stop()
	return nil
}

func (t *Transport) closed() bool {
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}

// Sender sends one group's messages: it is what replica.Config.Transport
// takes (replica.Transport). A value; copies are alike.
type Sender struct {
	t     *Transport
	group uint64
}

// Group returns the Sender of group's messages.
func (t *Transport) Group(group uint64) Sender { return Sender{t, group} }

// Send sends msgs (see Transport.Send).
func (s Sender) Send(msgs []*pb.Message) { s.t.Send(s.group, msgs) }

// Send queues group's messages to their peers (m.To, a Raft id) and
// returns without waiting for the network. A message that cannot be
// queued — its peer's queue is full, the peer is not connected, or no
// peer presented that id — is dropped, counted, and reported through
// ReportUnreachable: Raft retransmits. Send keeps the messages until they
// are written (the caller must not modify them). Safe for concurrent
// use.
func (t *Transport) Send(group uint64, msgs []*pb.Message) {
	if t.closed() {
		return
	}
	routes := *t.byID.Load()
	for _, m := range msgs {
		p := routes[m.GetTo()]
		if p == nil {
			t.stats.unroutable.Add(1)
			t.unreachable(group, m.GetTo())
			t.snapshotSent(outMsg{group: group, m: m}, false)
			continue
		}
		s := p.small
		if !t.cfg.singleStream && bulky(m) {
			s = p.bulk
		}
		o := outMsg{group: group, m: m, size: estimate(m)}
		if !s.push(o) {
			s.dropped.Add(1)
			t.stats.dropped.Add(1)
			t.unreachable(group, m.GetTo())
			t.snapshotSent(o, false)
		}
	}
}

// bulky reports whether m goes on the bulk stream: every MsgApp (with
// entries or not: a follower must see a leader's appends in order, or it
// rejects and the leader falls back to probing), snapshots, and forwarded
// proposals. Everything else — heartbeats, votes, responses — is small.
func bulky(m *pb.Message) bool {
	switch m.GetType() {
	case pb.MsgApp, pb.MsgSnap, pb.MsgProp:
		return true
	}
	return false
}

// estimate is m's size as a queue counts it: its payloads and a little
// for the rest, without encoding it.
func estimate(m *pb.Message) int {
	n := 64 + len(m.GetContext())
	for _, e := range m.GetEntries() {
		n += 16 + len(e.GetData())
	}
	if s := m.GetSnapshot(); s != nil {
		n += len(s.GetData())
	}
	return n
}

// unreachable reports (group, id) to the owner unless it was reported
// less than unreachableEvery ago.
func (t *Transport) unreachable(group, id uint64) {
	if t.cfg.ReportUnreachable == nil || t.closed() {
		return
	}
	now := time.Now()
	key := [2]uint64{group, id}
	t.repMu.Lock()
	last, ok := t.reported[key]
	if ok && now.Sub(last) < unreachableEvery {
		t.repMu.Unlock()
		return
	}
	t.reported[key] = now
	t.repMu.Unlock()
	t.cfg.ReportUnreachable(group, id)
}

// snapshotSent reports what became of o if it is a MsgSnap.
func (t *Transport) snapshotSent(o outMsg, ok bool) {
	if o.m.GetType() != pb.MsgSnap || t.cfg.ReportSnapshot == nil || t.closed() {
		return
	}
	t.cfg.ReportSnapshot(o.group, o.m.GetTo(), ok)
}

// learnID records that peer p presented Raft id id, or says why that
// cannot be: the id is this node's or another peer's, or not the one
// configured.
func (t *Transport) learnID(p *peer, id uint64) error {
	t.idMu.Lock()
	defer t.idMu.Unlock()
	switch {
	case id == 0:
		return errors.New("its Raft id is 0")
	case id == t.cfg.ID:
		return fmt.Errorf("its Raft id %d is this node's", id)
	case p.presetID != 0 && id != p.presetID:
		return fmt.Errorf("its Raft id %d is not the configured %d", id, p.presetID)
	}
	for _, q := range t.peers {
		if q != p && q.id.Load() == id {
			return fmt.Errorf("its Raft id %d is node %s's", id, q.name)
		}
	}
	if old := p.id.Swap(id); old != id {
		if old != 0 {
			t.log.Info("transport: a peer's Raft id changed", "peer", p.name, "old_id", old, "id", id)
		}
		return t.rebuildRoutesLocked()
	}
	return nil
}

func (t *Transport) rebuildRoutes() error {
	t.idMu.Lock()
	defer t.idMu.Unlock()
	return t.rebuildRoutesLocked()
}

func (t *Transport) rebuildRoutesLocked() error {
	routes := map[uint64]*peer{}
	for _, p := range t.peers {
		id := p.id.Load()
		if id == 0 {
			continue
		}
		if id == t.cfg.ID {
			return fmt.Errorf("transport: peer %s has this node's Raft id %d", p.name, id)
		}
		if q := routes[id]; q != nil {
			return fmt.Errorf("transport: peers %s and %s have the same Raft id %d", p.name, q.name, id)
		}
		routes[id] = p
	}
	t.byID.Store(&routes)
	return nil
}

// sleep waits d, or until Close; it reports whether the wait ended
// without Close.
func (t *Transport) sleep(d time.Duration) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-t.done:
		return false
	}
}
