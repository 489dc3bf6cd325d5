package mgmt_test

import (
	"testing"
	"time"

	"github.com/brokerd/brokerd/broker/brokertest"
	"github.com/brokerd/brokerd/cluster"
	hist "github.com/brokerd/brokerd/internal/histogram"
	"github.com/brokerd/brokerd/metrics"
)

// leaderStatus is a cluster status as n1, the leader of three, knows it:
// n2 caught up, n3 unreachable and 40 entries behind. Its commit latency
// histogram has three observations.
func leaderStatus() cluster.Status {
	h := hist.New(cluster.CommitLatencyBounds...)
	for _, v := range []float64{0.002, 0.003, 0.2} {
		h.Observe(v)
	}
	now := time.Now()
	return cluster.Status{
		ID: cluster.RaftID("brokerd", "n1"), Leader: cluster.RaftID("brokerd", "n1"), Term: 7, Commit: 140, Applied: 139,
		Serving: true, LeaderName: "n1", State: "StateLeader", Cluster: "brokerd", Name: "n1", LastIndex: 141,
		LeaderChanges: 3, ProposalsCommitted: 120, CommitLatency: h.Snapshot(),
		Snapshots: cluster.Stats{SnapshotsSent: 2, SnapshotsInstalled: 1},
		Members: []cluster.Member{
			{Name: "n1", ID: cluster.RaftID("brokerd", "n1"), Addr: "127.0.0.1:7001", Self: true, Leader: true, Reachable: true, Tracked: true, Match: 141, ProgressState: "StateReplicate"},
			{Name: "n2", ID: cluster.RaftID("brokerd", "n2"), Addr: "127.0.0.1:7002", Reachable: true, LastContact: now.Add(-50 * time.Millisecond), Tracked: true, Match: 141, ProgressState: "StateReplicate"},
			{Name: "n3", ID: cluster.RaftID("brokerd", "n3"), Addr: "127.0.0.1:7003", LastContact: now.Add(-30 * time.Second), Tracked: true, Match: 101, Lag: 40, ProgressState: "StateProbe"},
		},
	}
}

func withCluster(st func() cluster.Status) func(*metrics.Options) {
	return func(o *metrics.Options) { o.Cluster = st }
}

// A cluster node's /metrics has the Raft metrics, read from the node's
// status at the scrape: term, indexes, leadership, elections seen,
// commits and their latency histogram, and on the leader each member's
// lag and reachability; a follower's has no lag.
func TestRaftMetrics(t *testing.T) {
	a := startMetricsAPI(t, brokertest.Disk(), 1000, withCluster(leaderStatus))
	s := a.scrape()
	s.want(t, map[string]float64{
		"brokerd_raft_term_total":                    7,
		"brokerd_raft_log_commit_index":              140,
		"brokerd_raft_log_last_applied_index":        139,
		"brokerd_raft_log_last_written_index":        141,
		"brokerd_raft_is_leader":                     1,
		"brokerd_raft_serving":                       1,
		"brokerd_raft_leader_changes_total":          3,
		"brokerd_raft_proposals_committed_total":     120,
		"brokerd_raft_snapshots_sent_total":          2,
		"brokerd_raft_snapshots_installed_total":     1,
		"brokerd_raft_follower_lag_entries{node=n1}": 0,
		"brokerd_raft_follower_lag_entries{node=n2}": 0,
		"brokerd_raft_follower_lag_entries{node=n3}": 40,
		"brokerd_raft_member_reachable{node=n1}":     1,
		"brokerd_raft_member_reachable{node=n2}":     1,
		"brokerd_raft_member_reachable{node=n3}":     0,
	})
	h := s["brokerd_raft_entry_commit_latency_seconds"]
	if h == nil || len(h.Metric) != 1 || h.Metric[0].Histogram == nil {
		t.Fatalf("brokerd_raft_entry_commit_latency_seconds: %v", h)
	}
	hm := h.Metric[0].Histogram
	if hm.GetSampleCount() != 3 || hm.GetSampleSum() < 0.204 || hm.GetSampleSum() > 0.206 {
		t.Fatalf("commit latency: %d samples summing to %v", hm.GetSampleCount(), hm.GetSampleSum())
	}
	for _, b := range hm.Bucket {
		want := map[float64]uint64{0.001: 0, 0.0025: 1, 0.005: 2, 0.1: 2, 0.25: 3}
		if w, ok := want[b.GetUpperBound()]; ok && b.GetCumulativeCount() != w {
			t.Errorf("commit latency bucket le=%v holds %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), w)
		}
	}

	follower := func() cluster.Status {
		st := leaderStatus()
		st.State, st.Serving, st.Name = "StateFollower", false, "n2"
		for i := range st.Members {
			st.Members[i].Self = st.Members[i].Name == "n2"
			st.Members[i].Tracked, st.Members[i].Match, st.Members[i].Lag = false, 0, 0
		}
		return st
	}
	f := startMetricsAPI(t, brokertest.Disk(), 1000, withCluster(follower)).scrape()
	f.want(t, map[string]float64{"brokerd_raft_is_leader": 0, "brokerd_raft_serving": 0})
	if f["brokerd_raft_follower_lag_entries"] != nil {
		t.Error("a follower exports follower lag, which only the leader knows")
	}

	// A single node has none of them.
	one := startMetricsAPI(t, brokertest.Disk(), 1000).scrape()
	for name := range one {
		if len(name) > len("brokerd_raft_") && name[:len("brokerd_raft_")] == "brokerd_raft_" {
			t.Errorf("a single node exports %s", name)
		}
	}
}
