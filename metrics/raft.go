package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/brokerd/brokerd/cluster"
)

// collectRaft exports a cluster node's view of its Raft group, under the
// names of RabbitMQ's Raft metrics (rabbitmq_raft_term_total,
// rabbitmq_raft_log_commit_index, …) with a brokerd_ prefix, plus
// brokerd's own: leadership, elections seen, commits and their latency,
// and, on the leader, each follower's lag and reachability (label node:
// the member's [cluster] node name).
func collectRaft(ch chan<- prometheus.Metric, st cluster.Status) {
	// RabbitMQ exports the term as a counter (rabbitmq_raft_term_total):
	// it only grows.
	counter(ch, "raft_term_total", "Current Raft term of the node", st.Term)
	gauge(ch, "raft_log_commit_index", "Raft log index the node knows committed (durable on a majority)", float64(st.Commit))
	gauge(ch, "raft_log_last_applied_index", "Raft log index the node last applied to its store", float64(st.Applied))
	gauge(ch, "raft_log_last_written_index", "Last Raft log index in the node's log", float64(st.LastIndex))
	gauge(ch, "raft_is_leader", "1 while the node leads the cluster's group (and serves clients once it has applied its term's first entry), else 0", bool01(st.State == "StateLeader"))
	gauge(ch, "raft_serving", "1 while the node leads and its broker serves clients, else 0", bool01(st.Serving))
	counter(ch, "raft_leader_changes_total", "Elections the node has seen won (a leader known in a later term) since it started", st.LeaderChanges)
	counter(ch, "raft_proposals_committed_total", "Entries the node proposed as leader and saw committed, since it started", st.ProposalsCommitted)
	histogram(ch, "raft_entry_commit_latency_seconds", "Time from proposing an entry on the leader to its commit (durable on a majority) and apply there", st.CommitLatency)
	counter(ch, "raft_snapshots_sent_total", "Snapshots of this node's store a follower fetched whole from it (as leader)", st.Snapshots.SnapshotsSent)
	counter(ch, "raft_snapshots_installed_total", "Snapshots this node installed in place of its store (it was behind the leader's log)", st.Snapshots.SnapshotsInstalled)
	reach := prometheus.NewDesc("brokerd_raft_member_reachable", "1 while the member is reachable from this node (inter-node connections up, heard from within an election timeout; always 1 for the node itself), by member", []string{"node"}, nil)
	lag := prometheus.NewDesc("brokerd_raft_follower_lag_entries", "On the leader: entries of its log a member does not have yet (the leader's last index less the member's match index), by member; absent on a follower", []string{"node"}, nil)
	for _, m := range st.Members {
		ch <- prometheus.MustNewConstMetric(reach, prometheus.GaugeValue, bool01(m.Reachable), m.Name)
		if m.Tracked {
			ch <- prometheus.MustNewConstMetric(lag, prometheus.GaugeValue, float64(m.Lag), m.Name)
		}
	}
}
