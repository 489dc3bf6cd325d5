package cluster

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
)

// The leader's lease on deliveries.
//
// Deliveries are not replicated: a message the durable delivered mark
// covers is handed out without a commit, and the next leader flags it
// redelivered. A leader cut off or paused (SIGSTOP) while the others elect
// another would go on delivering until it hears of the new term — the same
// message the new leader delivers, unflagged, a silent duplicate
// (TestClusterDeposedLeaderDelivers). So the leader delivers only under a
// lease (broker.Options.Lease), which the members' own rules make safe:
//
//   - The leader asks a quorum to confirm its leadership every
//     leaseRenewal (replica.Group.ConfirmLeadership: a heartbeat round);
//     a round a quorum answered, asked at time t, holds the lease until
//     t + leaseDuration. A member that answered heard the leader after t.
//   - A member grants no vote (nor pre-vote) for voteHold after it last
//     heard a leader (an append, heartbeat or snapshot), nor after its
//     store opened (a restarted member has forgotten whom it heard):
//     withholdLeasedVote. It campaigns early, when its connections to the
//     leader break (peerState), only campaignHold after it last heard the
//     leader. Raft's own election timeout is longer than both.
//   - So no other leader can be elected before t + voteHold, after the
//     lease it gave ended: voteHold − leaseDuration is the margin for the
//     clocks' rates and the time between checking the lease and writing a
//     delivery.
//
// When the lease lapses (a slow loop, a quorum lost) deliveries wait; a
// basic.get waits for it too. When it ends — the node stops leading, or
// stops serving — nothing more is delivered under it.
//
// With the default tick (100 ms, 10 ticks to an election) the lease lasts
// 200 ms, renewed every 50 ms; votes are held 250 ms and an early campaign
// waits 300 ms after the leader was last heard. All are fractions of the
// election timeout, so configured ticks scale them.
type Lease struct {
	base  time.Time    // the monotonic clock's origin for until
	until atomic.Int64 // nanoseconds after base the lease holds until (0: never held; -1: ended)
	d     time.Duration

	mu       sync.Mutex
	regained chan struct{} // closed at the next lapse's end, or the lease's
}

func newLease(d time.Duration) *Lease {
	return &Lease{base: time.Now(), d: d, regained: make(chan struct{})}
}

// since returns the monotonic time since l.base, in nanoseconds.
func (l *Lease) since() int64 { return int64(time.Since(l.base)) }

// Held reports whether the node may deliver now (queue.Lease).
func (l *Lease) Held() bool { return l.since() < l.until.Load() }

// Regained returns a channel closed when the lease is next held after a
// lapse, or ends; nil once it has ended (queue.Lease).
func (l *Lease) Regained() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.until.Load() < 0 {
		return nil // ended
	}
	return l.regained
}

// renew extends the lease to asked+d, asked being when the confirmed
// round was asked (since l.base). On the loop.
func (l *Lease) renew(asked int64) {
	u := asked + int64(l.d)
	lapsed := !l.Held()
	for {
		// until before the channel: a waiter that takes the new channel
		// sees the lease held (Regained's contract).
		cur := l.until.Load()
		if cur < 0 || u <= cur {
			return // ended, or an older round
		}
		if l.until.CompareAndSwap(cur, u) {
			break
		}
	}
	if !lapsed || !l.Held() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.until.Load() >= 0 { // not ended meanwhile
		close(l.regained)
		l.regained = make(chan struct{})
	}
}

// end ends the lease for good: nothing more is delivered under it.
func (l *Lease) end() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.until.Swap(-1) >= 0 {
		close(l.regained)
	}
}

// leaseTimes are the lease's durations (see Lease), fractions of the
// election timeout.
type leaseTimes struct {
	duration, renewal, voteHold, campaignHold time.Duration
}

func (c *Node) leaseTimes() leaseTimes {
	e := time.Duration(c.cfg.ElectionTicks) * c.cfg.Tick
	return leaseTimes{duration: e / 5, renewal: e / 20, voteHold: e / 4, campaignHold: e * 3 / 10}
}

// leaseAsks are a leader's confirmation rounds not yet answered: their
// sequence numbers (the round's context) and when each was asked. Loop
// goroutine only.
type leaseAsks struct {
	seq  uint64
	asks []leaseAsk
}

type leaseAsk struct {
	seq uint64
	at  int64 // Lease.since when asked
}

// maxLeaseAsks bounds the rounds remembered: a leader whose rounds go
// unanswered (cut off) steps down within an election timeout anyway.
const maxLeaseAsks = 64

// confirmLease asks the group to confirm inc's leadership, if it leads and
// serves and the last round was asked a renewal ago. On the loop.
func (c *Node) confirmLease(inc *incarnation) {
	if !inc.serving || inc.lostSent {
		return
	}
	if lead, _ := inc.g.Leader(); lead != c.id {
		return
	}
	now := inc.lease.since()
	la := &inc.leaseAsks
	if n := len(la.asks); n > 0 && now-la.asks[n-1].at < int64(c.leaseTimes().renewal) {
		return
	}
	la.seq++
	if len(la.asks) == maxLeaseAsks {
		la.asks = append(la.asks[:0], la.asks[1:]...)
	}
	la.asks = append(la.asks, leaseAsk{seq: la.seq, at: now})
	inc.g.ConfirmLeadership(binary.BigEndian.AppendUint64(nil, la.seq))
}

// leaseConfirmed is the group's Confirmed: a quorum answered the round
// ctx names, so the lease holds from when it was asked. On the loop.
func (c *Node) leaseConfirmed(inc *incarnation, ctx []byte) {
	if len(ctx) != 8 || inc.lostSent {
		return
	}
	seq := binary.BigEndian.Uint64(ctx)
	la := &inc.leaseAsks
	for i, a := range la.asks {
		if a.seq == seq {
			inc.lease.renew(a.at)
			la.asks = append(la.asks[:0], la.asks[i+1:]...)
			return
		}
	}
}

// leaderSends reports whether m is one only a leader sends.
func leaderSends(m *pb.Message) bool {
	switch m.GetType() {
	case pb.MsgApp, pb.MsgHeartbeat, pb.MsgSnap:
		return true
	}
	return false
}

// heardLeaderAt records, in the transport's handler, when a message only
// a leader sends arrived (withholdLeasedVote, peerState).
func (c *Node) heardLeaderAt(m *pb.Message) {
	if leaderSends(m) {
		c.leaderHeard.Store(time.Now().UnixNano())
	}
}

// withholdLeasedVote is the transport handler's look at a vote request
// (and a pre-vote): within voteHold of the last message from a leader, or
// of the store's opening, the member does not vote, so that no leader is
// elected while the one it heard may still hold its lease. It reports
// whether it took (dropped) the message.
func (c *Node) withholdLeasedVote(m *pb.Message) bool {
	if t := m.GetType(); t != pb.MsgVote && t != pb.MsgPreVote {
		return false
	}
	hold := int64(c.leaseTimes().voteHold)
	now := time.Now().UnixNano()
	return now-c.leaderHeard.Load() < hold || now-c.opened.Load() < hold
}
