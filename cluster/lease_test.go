package cluster

import (
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
)

// A lease is held from a renewal until its duration after the round was
// asked; a renewal after a lapse closes the channel Regained gave, and an
// older round never shortens it; once ended it is never held again and
// Regained returns nil.
func TestLeaseRenewLapseEnd(t *testing.T) {
	l := newLease(time.Hour)
	if l.Held() {
		t.Fatal("a new lease is held before any round was confirmed")
	}
	lapsed := l.Regained()
	l.renew(l.since())
	if !l.Held() {
		t.Fatal("not held after a renewal asked now")
	}
	select {
	case <-lapsed:
	default:
		t.Fatal("the renewal after a lapse did not close Regained's channel")
	}
	held := l.Regained()
	if held == lapsed {
		t.Fatal("Regained returned the closed channel again")
	}
	until := l.until.Load()
	l.renew(l.since() - int64(2*time.Hour)) // an older round answered late
	if l.until.Load() != until {
		t.Fatal("an older round moved the lease")
	}
	l.renew(l.since()) // held already: no regain
	select {
	case <-held:
		t.Fatal("a renewal while held closed Regained's channel")
	default:
	}
	// A round asked long ago extends nothing past now: still lapsed.
	short := newLease(time.Millisecond)
	ch := short.Regained()
	short.renew(short.since() - int64(time.Second))
	if short.Held() {
		t.Fatal("held on a round whose lease ran out before it was answered")
	}
	select {
	case <-ch:
		t.Fatal("Regained's channel closed for a round that held nothing")
	default:
	}
	l.end()
	if l.Held() || l.Regained() != nil {
		t.Fatal("an ended lease is held, or offers a channel")
	}
	select {
	case <-held:
	default:
		t.Fatal("the end did not close Regained's channel")
	}
	l.renew(l.since()) // a late answer after the end
	if l.Held() {
		t.Fatal("an ended lease was renewed")
	}
}

// A member withholds its vote and pre-vote for voteHold after a message
// only a leader sends, and after its store opened; other messages pass.
func TestWithholdLeasedVote(t *testing.T) {
	c := &Node{cfg: Config{Tick: 100 * time.Millisecond, ElectionTicks: 10}}
	long := time.Now().Add(-time.Hour).UnixNano()
	c.leaderHeard.Store(long)
	c.opened.Store(long)
	vote := &pb.Message{Type: pb.MsgVote.Enum(), From: new(uint64(2))}
	prevote := &pb.Message{Type: pb.MsgPreVote.Enum(), From: new(uint64(2))}
	if c.withholdLeasedVote(vote) || c.withholdLeasedVote(prevote) {
		t.Fatal("a vote withheld with no leader heard for an hour")
	}
	c.heardLeaderAt(&pb.Message{Type: pb.MsgHeartbeat.Enum()})
	if !c.withholdLeasedVote(vote) || !c.withholdLeasedVote(prevote) {
		t.Fatal("a vote granted right after a leader's heartbeat")
	}
	if c.withholdLeasedVote(&pb.Message{Type: pb.MsgApp.Enum()}) {
		t.Fatal("an append taken as a vote request")
	}
	c.leaderHeard.Store(long)
	c.heardLeaderAt(&pb.Message{Type: pb.MsgVoteResp.Enum()})
	if c.withholdLeasedVote(vote) {
		t.Fatal("a vote response counted as the leader heard")
	}
	c.opened.Store(time.Now().UnixNano())
	if !c.withholdLeasedVote(prevote) {
		t.Fatal("a pre-vote granted right after the store opened")
	}
}

// The serving leader's lease is regained once a quorum confirms it. With
// both followers stopped it lapses, and ends when the leader steps down;
// a new leader's lease is held in its turn.
func TestLeaseFollowsQuorum(t *testing.T) {
	tc := newTestCluster(t)
	l := tc.leader()
	awaitLease(t, l.lease)
	li := tc.index(l.name)
	for i := range tc.names {
		if i != li {
			tc.nodes[i].Close()
			tc.nodes[i] = nil
		}
	}
	// The leader steps down within an election timeout (CheckQuorum);
	// its lease lapsed before and never comes back: Regained's channel
	// closes only at its end (no quorum renews it), then it is nil.
	for ch := l.lease.Regained(); ch != nil; ch = l.lease.Regained() {
		select {
		case <-ch:
		case <-time.After(waitFor):
			t.Fatal("the lease of a leader without its followers never ended")
		}
	}
	if l.lease.Held() {
		t.Fatal("an ended lease is held")
	}
	for i := range tc.names {
		if i != li {
			tc.start(i)
		}
	}
	awaitLease(t, tc.leader().lease)
}

// awaitLease waits until l is held (or was, since the call).
func awaitLease(t *testing.T, l *Lease) {
	t.Helper()
	ch := l.Regained()
	if l.Held() {
		return
	}
	select {
	case <-ch:
		if l.Regained() == nil {
			t.Fatal("the lease ended before it was held")
		}
	case <-time.After(waitFor):
		t.Fatal("the lease was never confirmed")
	}
}
