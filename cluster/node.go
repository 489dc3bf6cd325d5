package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	hist "github.com/brokerd/brokerd/internal/histogram"
	"github.com/brokerd/brokerd/replica"
	"github.com/brokerd/brokerd/replica/transport"
	"github.com/brokerd/brokerd/store/diskstore"
)

// DataGroup is the replication group every durable queue and definition
// belongs to in phase 1 (designs/replication.md 4.11): one group, whose
// leader runs the broker.
const DataGroup = 1

// Peer is a node of the cluster.
type Peer struct {
	Name string // [cluster] node name
	Addr string // its [cluster] listen address
}

// Config configures a Node.
type Config struct {
	Cluster string // the cluster's name; nodes of another are refused
	Name    string // this node's, one of Peers
	Peers   []Peer // every node, this one included
	// Listen is the inter-node address; Listener, if set, is used
	// instead (the Node owns it).
	Listen   string
	Listener net.Listener
	TLS      *tls.Config
	// Dir is the store's directory; Store its options (Replication is
	// the Node's).
	Dir   string
	Store diskstore.Options
	// Tick is a Raft tick (default 100 ms); ElectionTicks (default 10)
	// and HeartbeatTicks (default 1) count them.
	Tick                          time.Duration
	ElectionTicks, HeartbeatTicks int
	Logger                        *slog.Logger
	// Serve runs the broker over st while this node leads the group:
	// the Node calls it once the node leads and has applied every entry
	// of the terms before its own, and cancels ctx when it stops leading
	// (or closes). Serve returns once nothing it started uses st any
	// more; the Node then reopens the store from what the group
	// committed. It delivers messages only while lease is held (package
	// broker's Options.Lease; lease.go): the lease ends when ctx does.
	Serve func(ctx context.Context, st *diskstore.Store, lease *Lease)
	// LogKeepBytes is how much of the group's log (entry bytes) is kept
	// behind the applied entry (default DefaultLogKeepBytes, 256 MiB):
	// a member that restarts finds there what it missed. What members
	// behind still need is kept up to 4 × LogKeepBytes; a member further
	// behind catches up from a snapshot of the store.
	LogKeepBytes int64
	// OnConn, if set, receives the client connections another node
	// forwards to this one (transport.Config.OnConn).
	OnConn func(service string, c net.Conn)
}

// RaftID returns the Raft id of node name in cluster: a hash of both,
// never 0, the same on every node (so a static cluster bootstraps
// without exchanging ids).
func RaftID(cluster, name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(cluster))
	h.Write([]byte{0})
	h.Write([]byte(name))
	if id := h.Sum64(); id != 0 {
		return id
	}
	return 1
}

// Node is this process's member of the cluster: the transport, the
// group's member over the replicated store, and the broker while it
// leads. See the package doc.
type Node struct {
	cfg Config
	log *slog.Logger
	id  uint64
	tr  *transport.Transport
	// send, when set (the simulation), replaces the transport's Send.
	send func(group uint64, msgs []*pb.Message)
	// simElections (the simulation) leaves elections to the caller:
	// raft's own timeouts never fire and CheckQuorum is off.
	simElections bool

	// cur is the running incarnation: store, log, group and its loop.
	// A leadership loss replaces it (the store reopened).
	mu  sync.Mutex
	cur *incarnation

	events chan event
	quit   chan struct{}
	done   chan struct{}
	err    atomic.Pointer[error]

	// snaps: the snapshots this node makes, sends and installs;
	// snapReq hands supervise a MsgSnap to install. ctx ends at Close.
	snaps   snapshots
	snapReq chan *pb.Message
	ctx     context.Context
	cancel  context.CancelFunc

	// catchUp: after starting with an empty log (rejoin.go).
	catchUp catchUp

	status atomic.Pointer[Status]
	// joined is closed once the node first knows a leader.
	joined     chan struct{}
	joinedOnce sync.Once
	// changed is closed (and replaced) when the status's leader or
	// serving changes; under mu.
	changed chan struct{}

	ops ops // counters and contacts for Status (status.go)
	// leaderHeard and opened are when (unix nanoseconds) a message only a
	// leader sends last arrived, and the store was last opened: votes are
	// withheld for a while after either (lease.go).
	leaderHeard, opened atomic.Int64
}

// Status is what the node last knew of the group.
type Status struct {
	ID, Leader, Term  uint64
	Commit, Applied   uint64
	Serving           bool
	Progress          map[uint64]uint64 // on the leader: each member's match index
	LeaderName, State string

	// The rest is status.go's: the cluster's and this node's names, the
	// last index of this node's log, every member as this node sees it
	// (in the Peers' order), and this node's counters.
	Cluster, Name      string
	LastIndex          uint64
	Members            []Member
	LeaderChanges      uint64        // elections seen won (a leader known in a later term)
	ProposalsCommitted uint64        // this node's proposals committed, while it led
	CommitLatency      hist.Snapshot // theirs, proposed to committed (CommitLatencyBounds)
	// Snapshots are the node's snapshot counters (Node.Stats).
	Snapshots Stats
	progress  map[uint64]memberProgress
}

type event struct {
	ready bool   // this node may serve from term
	term  uint64 // the term it leads (ready) or the loss happened in
	inc   *incarnation
}

// incarnation is one opening of the store and the group over it.
type incarnation struct {
	st    *diskstore.Store
	rlog  *raftLog
	g     *replica.Group
	n     *replica.Node
	woken atomic.Bool // a proposal pump is queued on n

	// lease is the leader's lease on deliveries while it serves
	// (lease.go); leaseStop ends the goroutine that renews it, which
	// closes leaseDone.
	lease                *Lease
	leaseStop, leaseDone chan struct{}

	// Loop goroutine only:
	serving, lostSent bool
	leaseAsks         leaseAsks
	term              uint64
	lastStatus        time.Time
	needIdx           atomic.Uint64
}

// Open starts the node: it opens the store (recovering the group's log
// from its WAL), joins the group (bootstrapping it with every peer when
// the store is new) and starts the transport.
func Open(cfg Config) (*Node, error) {
	if cfg.Tick <= 0 {
		cfg.Tick = 100 * time.Millisecond
	}
	if cfg.ElectionTicks <= 0 {
		cfg.ElectionTicks = 10
	}
	if cfg.HeartbeatTicks <= 0 {
		cfg.HeartbeatTicks = 1
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.LogKeepBytes <= 0 {
		cfg.LogKeepBytes = DefaultLogKeepBytes
	}
	found := false
	for _, p := range cfg.Peers {
		found = found || p.Name == cfg.Name
	}
	if !found {
		return nil, fmt.Errorf("cluster: node %q is not among the peers", cfg.Name)
	}
	c := &Node{cfg: cfg, log: cfg.Logger.With("node", cfg.Name), id: RaftID(cfg.Cluster, cfg.Name),
		events: make(chan event, 16), quit: make(chan struct{}), done: make(chan struct{}), joined: make(chan struct{}),
		changed: make(chan struct{})}
	c.status.Store(&Status{ID: c.id})
	c.ops.init(cfg.Cluster, cfg.Peers)
	c.snapReq = make(chan *pb.Message, 1)
	c.snaps.fs = cfg.Store.FS
	if c.snaps.fs == nil {
		c.snaps.fs = vfs.Default
	}
	c.snaps.dir = filepath.Join(cfg.Dir, snapDirName)
	// Snapshots made or received before are caches of another time.
	for _, d := range []string{c.snaps.dir, filepath.Join(cfg.Dir, recvDirName)} {
		if err := c.snaps.fs.RemoveAll(d); err != nil {
			return nil, fmt.Errorf("cluster: remove old snapshots: %w", err)
		}
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	inc, err := c.open()
	if err != nil {
		c.cancel()
		return nil, err
	}
	c.cur = inc
	var peers []transport.Peer
	for _, p := range cfg.Peers {
		if p.Name != cfg.Name {
			peers = append(peers, transport.Peer{Name: p.Name, Addr: p.Addr, ID: RaftID(cfg.Cluster, p.Name)})
		}
	}
	tr, err := transport.New(transport.Config{
		Cluster: cfg.Cluster, Name: cfg.Name, ID: c.id, Listen: cfg.Listen, Listener: cfg.Listener,
		Peers: peers, TLS: cfg.TLS, Logger: c.log,
		Handler: func(group uint64, m *pb.Message) {
			c.ops.heard(m.GetFrom())
			if group == DataGroup {
				c.heardLeaderAt(m)
			}
			if group == DataGroup && (c.heardLeader(m) || m.GetType() == pb.MsgSnap && c.offerSnapshot(m) || m.GetType() == pb.MsgHeartbeat && c.lostLog(m) || c.withholdVote(m) || c.withholdLeasedVote(m)) {
				return
			}
			if n := c.replicaNode(); n != nil {
				n.Step(group, m)
			}
		},
		ReportUnreachable: func(group, peer uint64) {
			if n := c.replicaNode(); n != nil {
				n.ReportUnreachable(group, peer)
			}
		},
		ReportSnapshot: func(group, peer uint64, ok bool) {
			if n := c.replicaNode(); n != nil {
				n.ReportSnapshot(group, peer, ok)
			}
		},
		OnConn: func(service string, conn net.Conn) {
			switch {
			case service == snapService:
				c.serveSnapshot(conn)
			case cfg.OnConn != nil:
				cfg.OnConn(service, conn)
			default:
				conn.Close()
			}
		},
		PeerState: c.peerState,
	})
	if err != nil {
		c.cancel()
		c.closeIncarnation(inc, false)
		return nil, fmt.Errorf("cluster: %w", err)
	}
	c.tr = tr
	c.start(inc)
	go c.supervise()
	return c, nil
}

// peerState is the transport's PeerState: when the connections to the
// node this one follows break (a killed process resets them), the
// follower runs its election clock forward by the election timeout's
// fixed part, so it campaigns within the random part, and no longer holds
// the leader's lease against the other followers' votes. A leader merely
// slow to reconnect loses nothing: pre-vote fails while the others still
// hear it.
//
// It does so only campaignHold after it last heard the leader, so that
// the leader's lease on deliveries has ended (lease.go): until then it
// waits, and campaigns then if the leader has not been heard since.
func (c *Node) peerState(name string, id uint64, up bool) {
	if up {
		return
	}
	heard := c.leaderHeard.Load()
	if wait := time.Duration(heard + int64(c.leaseTimes().campaignHold) - time.Now().UnixNano()); wait > 0 {
		time.AfterFunc(wait, func() {
			if c.leaderHeard.Load() == heard {
				c.campaignEarly(name, id)
			}
		})
		return
	}
	c.campaignEarly(name, id)
}

// campaignEarly runs the election clock forward (peerState) if the node
// still follows the leader id.
func (c *Node) campaignEarly(name string, id uint64) {
	c.mu.Lock()
	inc := c.cur
	c.mu.Unlock()
	if inc == nil || inc.n == nil {
		return
	}
	inc.n.Run(func() {
		if lead, _ := inc.g.Leader(); lead != id || lead == c.id {
			return
		}
		c.log.Info("cluster: lost the connections to the leader; campaigning early", "leader", name)
		for range c.cfg.ElectionTicks - 1 {
			inc.g.Tick()
		}
	})
}

// Transport returns the node's transport (to forward client connections
// with DialConn).
func (c *Node) Transport() *transport.Transport { return c.tr }

// AwaitLeader waits until the node knows a leader that serves (another
// node, or this one once it serves) and returns its name, or ctx's error.
func (c *Node) AwaitLeader(ctx context.Context) (string, error) {
	for {
		c.mu.Lock()
		ch := c.changed
		c.mu.Unlock()
		st := c.status.Load()
		if st.LeaderName != "" && (st.Leader != c.id || st.Serving) {
			return st.LeaderName, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// Changed returns a channel closed at the next change of the leader the
// node knows, or of its serving.
func (c *Node) Changed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

// Joined is closed once the node first knows the group's leader: it is
// part of the cluster (sd_notify READY waits for it).
func (c *Node) Joined() <-chan struct{} { return c.joined }

// ID returns this node's Raft id.
func (c *Node) ID() uint64 { return c.id }

// Status returns what the node last knew of the group (refreshed every
// tick or so).
func (c *Node) Status() Status { return c.withLive(*c.status.Load()) }

// LeaderName returns the name of the node this one last knew as leader,
// "" if none.
func (c *Node) LeaderName() string { return c.status.Load().LeaderName }

func (c *Node) replicaNode() *replica.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur == nil {
		return nil
	}
	return c.cur.n
}

func (c *Node) nameOf(id uint64) string {
	for _, p := range c.cfg.Peers {
		if RaftID(c.cfg.Cluster, p.Name) == id {
			return p.Name
		}
	}
	return ""
}

// open opens the store and the group's member over it (not started).
func (c *Node) open() (*incarnation, error) {
	c.opened.Store(time.Now().UnixNano())
	lt := c.leaseTimes()
	inc := &incarnation{rlog: newRaftLog(DataGroup), lease: newLease(lt.duration),
		leaseStop: make(chan struct{}), leaseDone: make(chan struct{})}
	opts := c.cfg.Store
	opts.Replication = &diskstore.Replication{Group: DataGroup, Log: inc.rlog, Wake: func() { c.pump(inc) }}
	st, err := diskstore.Open(c.cfg.Dir, opts)
	if err != nil {
		return nil, fmt.Errorf("cluster: open store: %w", err)
	}
	inc.st = st
	applied, err := inc.rlog.attach(st)
	if err != nil {
		st.Abandon()
		return nil, fmt.Errorf("cluster: %w", err)
	}
	inc.rlog.need = func() uint64 { return inc.needIdx.Load() }
	inc.rlog.keepBytes = c.cfg.LogKeepBytes
	inc.rlog.snapshot = func(point uint64) (*pb.Snapshot, error) { return c.snapshotFor(inc, point) }
	gcfg := replica.Config{
		ID: c.id, ElectionTick: c.cfg.ElectionTicks, HeartbeatTick: c.cfg.HeartbeatTicks,
		Storage: inc.rlog, Transport: sender{c}, Logger: raftLogger{c.log},
		Applied:   func(index, term uint64, payload []byte, own bool) { c.applied(inc, index, term, payload, own) },
		Confirmed: func(ctx []byte) { c.leaseConfirmed(inc, ctx) },
	}
	if c.simElections {
		gcfg.ElectionTick, gcfg.DisableCheckQuorum = 1<<30, true
	}
	hs, _, _ := inc.rlog.InitialState()
	last, _ := inc.rlog.LastIndex()
	if last == 0 && raft.IsEmptyHardState(hs) {
		if err := c.markCatchingUp(); err != nil {
			st.Abandon()
			return nil, fmt.Errorf("cluster: %w", err)
		}
		for _, p := range c.cfg.Peers {
			gcfg.Peers = append(gcfg.Peers, RaftID(c.cfg.Cluster, p.Name))
		}
		inc.g, err = replica.NewGroup(gcfg)
	} else {
		if err = c.loadCatchingUp(); err == nil {
			c.checkCaughtUp(inc)
			inc.g, err = replica.RestartGroup(gcfg, applied)
		}
	}
	if err != nil {
		st.Abandon()
		return nil, fmt.Errorf("cluster: %w", err)
	}
	return inc, nil
}

// start runs inc's loop.
func (c *Node) start(inc *incarnation) {
	inc.n = replica.NewNode(replica.NodeConfig{Tick: c.cfg.Tick, Sync: inc.st.SyncReplica, Log: c.log,
		AfterCycle: func() { c.afterCycle(inc) },
		// The loop stopped on a failure (its log could not be written):
		// this incarnation ends as a lost leadership does, and the store
		// is opened again (or the node fails), never left serving.
		OnStop: func(err error) { c.lose(inc, err) }})
	inc.n.Add(DataGroup, inc.g)
	go c.renewLease(inc)
	c.mu.Lock()
	c.cur = inc
	c.mu.Unlock()
}

// renewLease asks, every renewal, for the confirmation that renews inc's
// lease while it leads (confirmLease), until inc closes: the loop's own
// cycles come only every tick when idle.
func (c *Node) renewLease(inc *incarnation) {
	defer close(inc.leaseDone)
	t := time.NewTicker(c.leaseTimes().renewal)
	defer t.Stop()
	for {
		select {
		case <-inc.leaseStop:
			return
		case <-t.C:
			inc.n.Run(func() { c.confirmLease(inc) })
		}
	}
}

type sender struct{ c *Node }

func (s sender) Send(msgs []*pb.Message) {
	switch {
	case s.c.send != nil:
		s.c.send(DataGroup, msgs)
	case s.c.tr != nil:
		s.c.tr.Send(DataGroup, msgs)
	}
}

// pump is the store's Wake: it queues, once, the taking of the store's
// proposals on the loop.
func (c *Node) pump(inc *incarnation) {
	if inc.woken.Swap(true) || inc.n == nil {
		return
	}
	inc.n.Run(func() { c.take(inc) })
}

// take proposes the store's queued proposals, in order; on the loop. A
// proposal that fails (refused, or its confirmation became impossible)
// ends the incarnation: the store's memory holds its batches.
func (c *Node) take(inc *incarnation) {
	inc.woken.Store(false)
	for _, p := range inc.st.TakeProposals(nil) {
		counted := c.ops.proposed()
		if err := inc.g.Propose(p.Data(), func(err error) {
			counted(err)
			if err != nil {
				c.lose(inc, err)
			}
		}); err != nil {
			c.lose(inc, err)
			return
		}
	}
}

// lose ends inc's serving, once: its store fails with err (what it has not
// committed never will be by it) and the supervisor reopens it. On the
// loop.
func (c *Node) lose(inc *incarnation, err error) {
	if inc.lostSent {
		inc.st.Failed(err)
		return
	}
	inc.lostSent = true
	inc.lease.end()
	inc.st.Failed(err)
	_, term := inc.g.Leader()
	c.events <- event{term: term, inc: inc}
}

// applied is the group's Applied: committed entries, in order, on the
// loop.
func (c *Node) applied(inc *incarnation, index, term uint64, payload []byte, own bool) {
	var err error
	switch {
	case own:
		err = inc.st.Committed(index, term)
	case payload != nil:
		err = inc.st.ApplyEntry(index, term, payload)
	default:
		inc.st.MarkApplied(index, term)
	}
	if err != nil && !inc.lostSent {
		// The store cannot apply what the group committed (it failed):
		// this incarnation stops serving and the store is opened again,
		// which recovers it from its index and the log, or fails the
		// node.
		c.log.Error("cluster: apply a committed entry; reopening the store", "index", index, "err", err)
		c.lose(inc, err)
		return
	}
	if lead, lt := inc.g.Leader(); lead == c.id && term == lt && !inc.serving && !inc.lostSent {
		// An entry of this node's own term applied: every entry before
		// it did too, so the store holds everything committed.
		inc.serving, inc.term = true, lt
		c.confirmLease(inc) // deliveries wait for the first round
		c.events <- event{ready: true, term: lt, inc: inc}
	}
}

// afterCycle runs after each of the loop's cycles: the commits'
// AfterGroup hooks, leadership changes, and the status.
func (c *Node) afterCycle(inc *incarnation) {
	inc.st.EndGroup()
	c.checkCaughtUp(inc)
	lead, term := inc.g.Leader()
	c.ops.sawLeader(lead, term)
	if inc.serving && !inc.lostSent && (lead != c.id || term != inc.term) {
		c.lose(inc, replica.ErrLeadershipLost)
	}
	if now := time.Now(); now.Sub(inc.lastStatus) >= c.cfg.Tick {
		inc.lastStatus = now
		rs := inc.g.Status()
		st := &Status{ID: c.id, Leader: rs.Lead, Term: rs.GetTerm(), Commit: rs.GetCommit(), Applied: rs.Applied,
			Serving: inc.serving && !inc.lostSent, LeaderName: c.nameOf(rs.Lead), State: rs.RaftState.String()}
		c.recordProgress(inc, rs, st)
		var need uint64
		if rs.RaftState == raft.StateLeader {
			st.Progress = make(map[uint64]uint64, len(rs.Progress))
			for id, pr := range rs.Progress {
				st.Progress[id] = pr.Match
				if id != c.id && (need == 0 || pr.Match+1 < need) {
					need = pr.Match + 1
				}
			}
		}
		inc.needIdx.Store(need)
		c.dropSnapshots(rs.RaftState == raft.StateLeader, need-1)
		if old := c.status.Swap(st); old == nil || old.Leader != st.Leader || old.Serving != st.Serving {
			c.mu.Lock()
			if c.changed != nil {
				close(c.changed)
				c.changed = make(chan struct{})
			}
			c.mu.Unlock()
		}
		if rs.Lead != 0 {
			c.joinedOnce.Do(func() { close(c.joined) })
		}
	}
}

// supervise serves while the node leads and reopens the store when it
// stops leading.
func (c *Node) supervise() {
	defer close(c.done)
	var sv serving
	defer sv.stop()
	for {
		select {
		case <-c.quit:
			return
		case m := <-c.snapReq:
			if err := c.installSnapshot(m, &sv); err != nil {
				c.log.Error("cluster: reopen the store after a snapshot", "err", err)
				c.err.Store(&err)
				return
			}
		case ev := <-c.events:
			c.mu.Lock()
			inc := c.cur
			c.mu.Unlock()
			if ev.inc != inc {
				continue // from an incarnation already replaced
			}
			if ev.ready {
				if sv.running() || inc == nil {
					continue
				}
				c.log.Info("cluster: leading; serving", "term", ev.term)
				sv.start(func(ctx context.Context) {
					stop := context.AfterFunc(ctx, inc.lease.end)
					defer stop()
					c.cfg.Serve(ctx, inc.st, inc.lease)
				})
				continue
			}
			c.log.Info("cluster: leadership lost; reopening the store from what the group committed", "term", ev.term)
			sv.stop()
			if err := c.reopen(); err != nil {
				c.log.Error("cluster: reopen the store", "err", err)
				c.err.Store(&err)
				return
			}
		}
	}
}

// serving is Config.Serve running: supervise's only.
type serving struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (s *serving) running() bool { return s.cancel != nil }

func (s *serving) start(serve func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	s.cancel, s.done = cancel, done
	go func() {
		defer close(done)
		serve(ctx)
	}()
}

// stop cancels Serve and waits for it to return.
func (s *serving) stop() {
	if s.cancel != nil {
		s.cancel()
		<-s.done
		s.cancel = nil
	}
}

// reopen replaces the current incarnation with a new opening of the store.
func (c *Node) reopen() error {
	c.mu.Lock()
	old := c.cur
	c.cur = nil
	c.mu.Unlock()
	c.closeIncarnation(old, false)
	// Events the old loop sent after the loss are stale.
	for len(c.events) > 0 {
		<-c.events
	}
	inc, err := c.open()
	if err != nil {
		return err
	}
	c.start(inc)
	return nil
}

func (c *Node) closeIncarnation(inc *incarnation, clean bool) {
	if inc == nil {
		return
	}
	inc.lease.end()
	if inc.leaseStop != nil {
		close(inc.leaseStop)
		if inc.n != nil { // renewLease runs
			<-inc.leaseDone
		}
	}
	if inc.n != nil {
		inc.n.Close()
	}
	if clean {
		inc.st.Close()
	} else {
		inc.st.Abandon()
	}
}

// Err returns the failure that stopped the node, nil while it runs.
func (c *Node) Err() error {
	if p := c.err.Load(); p != nil {
		return *p
	}
	return nil
}

// Check is the node's liveness check (the systemd watchdog's): nil once
// the Raft loop has run a function queued on it, the node's failure if it
// failed, ctx's error if the loop did not get to it in time. A store being
// opened again (no loop for a moment) passes.
func (c *Node) Check(ctx context.Context) error {
	if err := c.Err(); err != nil {
		return err
	}
	n := c.replicaNode()
	if n == nil {
		return nil
	}
	done := make(chan struct{})
	if !n.Run(func() { close(done) }) {
		return nil // stopping: the store is opened again, or the node closes
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		if err := c.Err(); err != nil {
			return err
		}
		if c.replicaNode() != n {
			return nil // replaced meanwhile
		}
		return fmt.Errorf("cluster: the Raft loop did not answer: %w", ctx.Err())
	}
}

// Close stops serving, the loop and the transport, and closes the store.
func (c *Node) Close() error {
	select {
	case <-c.quit:
	default:
		close(c.quit)
	}
	if c.cancel != nil {
		c.cancel() // a snapshot fetch
	}
	<-c.done
	c.mu.Lock()
	inc := c.cur
	c.cur = nil
	c.mu.Unlock()
	var err error
	if c.tr != nil {
		err = c.tr.Close()
	}
	c.closeIncarnation(inc, false)
	c.snaps.wg.Wait() // a snapshot being made ends with the store
	return err
}

// Store returns the store the node runs now (it changes when the node
// reopens it); nil while it reopens.
func (c *Node) Store() *diskstore.Store {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur == nil {
		return nil
	}
	return c.cur.st
}
