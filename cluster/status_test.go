package cluster

import (
	"testing"
	"time"

	"github.com/brokerd/brokerd/store"
)

// awaitStatus polls node i's Status until ok holds (the status is
// refreshed by the node's loop: no event says when), failing after
// waitFor with the last status.
func (tc *testCluster) awaitStatus(i int, what string, ok func(Status) bool) Status {
	tc.t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		st := tc.nodes[i].Status()
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			tc.t.Fatalf("%s: %s never held; status %+v", tc.names[i], what, st)
		}
		time.Sleep(10 * time.Millisecond) // polls the loop's refreshes
	}
}

func member(st Status, name string) Member {
	for _, m := range st.Members {
		if m.Name == name {
			return m
		}
	}
	return Member{}
}

// The leader's Status lists every member with its progress (match, lag
// behind the leader's last index), reachability and last contact, and
// counts the election it won and its proposals committed with their
// latency; a follower's names the leader and knows no progress. A member
// stopped is unreachable from the leader and falls behind by what the
// leader commits without it.
func TestStatusMembersAndCounters(t *testing.T) {
	tc := newTestCluster(t)
	const q = store.QueueID(3)
	l := tc.leader()
	li := tc.index(l.name)
	publish(t, l.st, q, 1, 50)
	for i := range tc.names {
		tc.awaitApplied(i, q, 50)
	}
	st := tc.awaitStatus(li, "every member reachable and caught up", func(st Status) bool {
		for _, m := range st.Members {
			if !m.Reachable || !m.Tracked || m.Lag != 0 {
				return false
			}
		}
		return len(st.Members) == 3
	})
	if st.Name != l.name || st.Cluster != "test" || st.LeaderName != l.name || st.State != "StateLeader" {
		t.Fatalf("leader's status names %q in %q, leader %q, state %q", st.Name, st.Cluster, st.LeaderName, st.State)
	}
	if st.LeaderChanges < 1 || st.ProposalsCommitted < 1 || st.CommitLatency.Count != st.ProposalsCommitted {
		t.Fatalf("leader counted %d leader changes, %d proposals committed, %d latencies", st.LeaderChanges, st.ProposalsCommitted, st.CommitLatency.Count)
	}
	for i, m := range st.Members {
		if m.Name != tc.names[i] || m.ID != RaftID("test", m.Name) || m.Addr != tc.addrs[i] {
			t.Fatalf("member %d is %+v", i, m)
		}
		if m.Self != (m.Name == l.name) || m.Leader != (m.Name == l.name) || m.Match == 0 || m.Match > st.LastIndex {
			t.Fatalf("member %+v of a leader whose last index is %d", m, st.LastIndex)
		}
		if !m.Self && m.LastContact.IsZero() {
			t.Fatalf("the leader has no contact time for %s", m.Name)
		}
	}
	fi := (li + 1) % 3
	fst := tc.awaitStatus(fi, "the leader known and reachable", func(st Status) bool {
		// The transport's reachability and the Raft status that names
		// the leader are refreshed apart: wait for both.
		m := member(st, l.name)
		return m.Reachable && m.Leader && st.LeaderName == l.name
	})
	for _, m := range fst.Members {
		if m.Tracked || m.Leader != (m.Name == l.name) || m.Self != (m.Name == tc.names[fi]) {
			t.Fatalf("a follower's member %+v", m)
		}
	}
	if fst.LeaderChanges < 1 || fst.ProposalsCommitted != 0 {
		t.Fatalf("a follower counted %d leader changes, %d proposals committed", fst.LeaderChanges, fst.ProposalsCommitted)
	}

	// Stop a follower: the leader sees it unreachable, and behind by what
	// it commits since.
	down := tc.names[fi]
	tc.nodes[fi].Close()
	tc.nodes[fi] = nil
	tc.awaitStatus(li, down+" unreachable", func(st Status) bool { return !member(st, down).Reachable })
	// One at a time: each is an entry of its own (batches applied
	// together share one).
	for i := range 5 {
		publish(t, l.st, q, uint64(51+i), 1)
	}
	st = tc.awaitStatus(li, down+" lagging", func(st Status) bool { return member(st, down).Lag >= 5 })
	if m := member(st, down); m.Match+m.Lag != st.LastIndex {
		t.Fatalf("%s: match %d + lag %d != the leader's last index %d", down, m.Match, m.Lag, st.LastIndex)
	}
	t.Logf("leader %s: last index %d, %s lag %d", l.name, st.LastIndex, down, member(st, down).Lag)
}
