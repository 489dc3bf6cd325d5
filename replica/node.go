package replica

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
)

// ErrNoGroup is a proposal's error for a group the node does not host.
var ErrNoGroup = errors.New("replica: no such group on this node")

// ErrClosed is a proposal's error once the node is closed.
var ErrClosed = errors.New("replica: node closed")

// NodeConfig configures a Node.
type NodeConfig struct {
	// Tick is the length of a Raft tick (a group's ElectionTick and
	// HeartbeatTick count them).
	Tick time.Duration
	// Sync makes every group's saved writes durable at once: the node's
	// one log sync per cycle. Nil syncs each group's storage in turn.
	Sync func() error
	// Log receives the node's failures; nil logs to slog.Default.
	Log *slog.Logger
	// AfterCycle, if set, runs on the node's goroutine after each cycle
	// that had work (its commits applied, its messages sent).
	AfterCycle func()
	// OnStop, if set, is told of the failure that stopped the node (Err),
	// on the node's goroutine, before its pending proposals fail.
	OnStop func(err error)
}

// Node hosts the groups this node is a member of and drives them from one
// goroutine: ticks, the messages and proposals handed to it, and in each
// cycle every group's ready writes saved, one Sync for all of them, then
// every group's messages sent, committed entries applied and state
// advanced. So one durable log write covers every group's appends, as a
// Raft log shared by the groups needs.
//
// Step and Propose may be called from any goroutine: they queue the work
// for the node's goroutine and return at once. The Apply callbacks and the
// proposals' done run on that goroutine: they must not block on another
// proposal. A group's storage failing stops the node (Err).
type Node struct {
	cfg NodeConfig
	log *slog.Logger

	mu     sync.Mutex
	groups map[uint64]*Group // the loop goroutine's only (Add queues its change)
	inbox  []func()          // queued work, guarded by mu
	closed bool
	err    error // the failure that stopped the node, guarded by mu

	stopped bool // the loop has ended; loop goroutine only

	wake chan struct{} // cap 1: inbox has work
	quit chan struct{}
	done chan struct{}
}

// NewNode starts a node hosting no group yet.
func NewNode(cfg NodeConfig) *Node {
	n := &Node{cfg: cfg, log: cfg.Log, groups: map[uint64]*Group{}, wake: make(chan struct{}, 1),
		quit: make(chan struct{}), done: make(chan struct{})}
	if n.log == nil {
		n.log = slog.Default()
	}
	go n.run()
	return n
}

// Add makes the node host group id's member g. g is the node's from now
// on: only its goroutine calls it.
func (n *Node) Add(id uint64, g *Group) {
	n.enqueue(func() { n.groups[id] = g })
}

// Step hands group's member the message m from a peer.
func (n *Node) Step(group uint64, m *pb.Message) {
	n.enqueue(func() {
		if g := n.groups[group]; g != nil {
			_ = g.Step(m) // a stale or unexpected message is raft's to refuse
		}
	})
}

// Propose proposes payload (copied) to group; done runs once it applied
// here or failed (Group.Propose's errors, ErrNoGroup, ErrClosed).
func (n *Node) Propose(group uint64, payload []byte, done func(error)) {
	payload = append([]byte(nil), payload...)
	if !n.enqueue(func() {
		g := n.groups[group]
		switch {
		case n.stopped:
			done(ErrClosed)
			return
		case g == nil:
			done(ErrNoGroup)
			return
		}
		if err := g.Propose(payload, done); err != nil {
			done(err)
		}
	}) {
		done(ErrClosed)
	}
}

// Run runs f on the node's goroutine, between cycles, and reports whether
// it was queued (false once the node is closed). f may call the groups the
// node hosts.
func (n *Node) Run(f func()) bool { return n.enqueue(f) }

// ReportUnreachable passes the transport's report that a message to
// member id of group was not delivered (Group.ReportUnreachable).
func (n *Node) ReportUnreachable(group, id uint64) {
	n.enqueue(func() {
		if g := n.groups[group]; g != nil {
			g.ReportUnreachable(id)
		}
	})
}

// ReportSnapshot passes how sending a snapshot to member id of group
// ended (Group.ReportSnapshot).
func (n *Node) ReportSnapshot(group, id uint64, delivered bool) {
	n.enqueue(func() {
		if g := n.groups[group]; g != nil {
			g.ReportSnapshot(id, delivered)
		}
	})
}

// Campaign makes group's member start an election.
func (n *Node) Campaign(group uint64) {
	n.enqueue(func() {
		if g := n.groups[group]; g != nil {
			_ = g.Campaign()
		}
	})
}

// Leader returns what group's member knows of its leader and term, from
// the node's goroutine.
func (n *Node) Leader(group uint64) (lead, term uint64) {
	ch := make(chan [2]uint64, 1)
	if !n.enqueue(func() {
		if g := n.groups[group]; g != nil {
			l, t := g.Leader()
			ch <- [2]uint64{l, t}
			return
		}
		ch <- [2]uint64{}
	}) {
		return 0, 0
	}
	select {
	case r := <-ch:
		return r[0], r[1]
	case <-n.done:
		return 0, 0
	}
}

// Err returns the failure that stopped the node, nil while it runs.
func (n *Node) Err() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.err
}

// Close stops the node's goroutine. Proposals queued or not yet applied
// fail with ErrClosed; other queued work is dropped.
func (n *Node) Close() {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		<-n.done
		return
	}
	n.closed = true
	n.mu.Unlock()
	close(n.quit)
	<-n.done
}

// stop ends the loop's work: what is queued runs (proposals fail with
// ErrClosed) and every group's pending proposals fail.
func (n *Node) stop() {
	n.stopped = true
	n.mu.Lock()
	n.closed = true
	work := n.inbox
	n.inbox = nil
	n.mu.Unlock()
	for _, f := range work {
		f()
	}
	for _, g := range n.groups {
		g.failPendingWith(ErrClosed)
	}
}

func (n *Node) enqueue(f func()) bool {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return false
	}
	n.inbox = append(n.inbox, f)
	n.mu.Unlock()
	select {
	case n.wake <- struct{}{}:
	default:
	}
	return true
}

func (n *Node) run() {
	defer close(n.done)
	defer n.stop()
	ticker := time.NewTicker(n.cfg.Tick)
	defer ticker.Stop()
	for {
		select {
		case <-n.quit:
			return
		case <-ticker.C:
			for _, g := range n.groups {
				g.Tick()
			}
		case <-n.wake:
		}
		n.mu.Lock()
		work := n.inbox
		n.inbox = nil
		n.mu.Unlock()
		for _, f := range work {
			f()
		}
		if err := n.cycle(); err != nil {
			n.mu.Lock()
			n.err, n.closed = err, true
			n.mu.Unlock()
			n.log.Error("replica: node stopped", "err", err)
			if n.cfg.OnStop != nil {
				n.cfg.OnStop(err)
			}
			return
		}
	}
}

// cycle saves every group's ready writes, syncs once, then finishes each
// group's Ready; again while a group has more (applying may make more).
func (n *Node) cycle() error {
	for {
		var ready []func() error
		for id, g := range n.groups {
			rd, ok, err := g.save()
			if err != nil {
				return fmt.Errorf("group %d: %w", id, err)
			}
			if ok {
				ready = append(ready, func() error { return g.finish(rd) })
			}
		}
		if len(ready) == 0 {
			if n.cfg.AfterCycle != nil {
				n.cfg.AfterCycle()
			}
			return nil
		}
		if err := n.sync(); err != nil {
			return err
		}
		for _, finish := range ready {
			if err := finish(); err != nil {
				return err
			}
		}
	}
}

func (n *Node) sync() error {
	if n.cfg.Sync != nil {
		return n.cfg.Sync()
	}
	for id, g := range n.groups {
		if err := g.cfg.Storage.Sync(); err != nil {
			return fmt.Errorf("group %d: sync: %w", id, err)
		}
	}
	return nil
}
