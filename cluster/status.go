package cluster

import (
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"

	hist "github.com/brokerd/brokerd/internal/histogram"
)

// CommitLatencyBounds are the buckets (seconds) of Status.CommitLatency:
// a proposal's time from its proposing on the leader to its applying
// there, which follows its commit (durable on a majority) at once.
var CommitLatencyBounds = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// Member is one member of the group as this node sees it (Status.Members).
type Member struct {
	Name string // its [cluster] node name
	ID   uint64 // its Raft id
	Addr string // its [cluster] listen address
	// Self is this node; Leader the member this node knows as leader.
	Self, Leader bool
	// Reachable is true for this node, and for a peer when both of this
	// node's transport streams to it are connected and a Raft message
	// came from it within an election timeout (a stopped process keeps
	// its connections open; its silence tells).
	Reachable bool
	// LastContact is when this node last received a Raft message from
	// the member; zero for this node, and for a peer not heard from
	// since this process started.
	LastContact time.Time
	// Tracked is true on the leader, which alone knows the members'
	// progress: Match is the highest log index known to be in the
	// member's log, Lag the leader's last index less Match (0 for the
	// leader), ProgressState raft's state of the member's replication
	// ("StateReplicate", "StateProbe" or "StateSnapshot").
	Tracked       bool
	Match, Lag    uint64
	ProgressState string
}

// memberProgress is a member's progress, as the leader's loop last saw it.
type memberProgress struct {
	match uint64
	state string
}

// ops is what the node counts and remembers for Status beyond what raft
// keeps: built in Open, then updated by the transport's handler and the
// loop, and read by Status, all through atomics (contact is not changed
// after Open).
type ops struct {
	contact map[uint64]*atomic.Int64 // peer's Raft id → unix nanoseconds of its last message
	// counted is the last term whose leader was counted in leaderChanges.
	counted                  atomic.Uint64
	leaderChanges, committed atomic.Uint64
	commitLatency            *hist.Histogram
}

func (o *ops) init(cluster string, peers []Peer) {
	o.contact = make(map[uint64]*atomic.Int64, len(peers))
	for _, p := range peers {
		o.contact[RaftID(cluster, p.Name)] = new(atomic.Int64)
	}
	o.commitLatency = hist.New(CommitLatencyBounds...)
}

// heard records a Raft message from peer id (the transport's handler).
func (o *ops) heard(id uint64) {
	if t := o.contact[id]; t != nil {
		t.Store(time.Now().UnixNano())
	}
}

// sawLeader counts a leader known for a term later than the last one
// counted: each election this node sees won, whichever node won it.
func (o *ops) sawLeader(lead, term uint64) {
	if lead != 0 && term > o.counted.Load() {
		o.counted.Store(term)
		o.leaderChanges.Add(1)
	}
}

// proposed returns the done of a proposal made now: on success it counts
// the proposal committed and observes its latency.
func (o *ops) proposed() func(error) {
	t0 := time.Now()
	return func(err error) {
		if err == nil {
			o.committed.Add(1)
			o.commitLatency.Observe(time.Since(t0).Seconds())
		}
	}
}

// recordProgress adds to st, built by the loop from rs, the leader's last
// index and each member's progress.
func (c *Node) recordProgress(inc *incarnation, rs raft.Status, st *Status) {
	st.LastIndex, _ = inc.rlog.LastIndex()
	if rs.RaftState != raft.StateLeader {
		return
	}
	st.progress = make(map[uint64]memberProgress, len(rs.Progress))
	for id, pr := range rs.Progress {
		st.progress[id] = memberProgress{match: pr.Match, state: pr.State.String()}
	}
}

// withLive returns st with what changes between the loop's refreshes:
// the members (reachability from the transport, last contacts) and the
// counters.
func (c *Node) withLive(st Status) Status {
	st.Cluster, st.Name = c.cfg.Cluster, c.cfg.Name
	st.LeaderChanges = c.ops.leaderChanges.Load()
	st.ProposalsCommitted = c.ops.committed.Load()
	st.CommitLatency = c.ops.commitLatency.Snapshot()
	st.Snapshots = c.Stats()
	up := map[string]bool{}
	if c.tr != nil {
		for _, p := range c.tr.Peers() {
			up[p.Name] = p.SmallUp && p.BulkUp
		}
	}
	timeout := time.Duration(c.cfg.ElectionTicks) * c.cfg.Tick
	now := time.Now()
	st.Members = make([]Member, 0, len(c.cfg.Peers))
	for _, p := range c.cfg.Peers {
		id := RaftID(c.cfg.Cluster, p.Name)
		m := Member{Name: p.Name, ID: id, Addr: p.Addr, Self: id == c.id, Leader: id == st.Leader}
		if t := c.ops.contact[id]; t != nil && t.Load() != 0 {
			m.LastContact = time.Unix(0, t.Load())
		}
		m.Reachable = m.Self || up[p.Name] && !m.LastContact.IsZero() && now.Sub(m.LastContact) <= timeout
		if pr, ok := st.progress[id]; ok {
			m.Tracked, m.Match, m.ProgressState = true, pr.match, pr.state
			if st.LastIndex > pr.match {
				m.Lag = st.LastIndex - pr.match
			}
		}
		st.Members = append(st.Members, m)
	}
	return st
}
