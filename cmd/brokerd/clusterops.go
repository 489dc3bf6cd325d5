package main

import (
	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/cluster"
	"github.com/brokerd/brokerd/metrics"
	"github.com/brokerd/brokerd/mgmt"
	"github.com/brokerd/brokerd/store/diskstore"
)

// mgmtOptions is a cluster node's management API options: a single
// node's, with the node's view of the cluster for /api/nodes,
// /api/overview and /api/cluster, and its Raft metrics on /metrics.
func (cs *clusterServer) mgmtOptions(b *broker.Broker, st *diskstore.Store, srv *amqp.Server) mgmt.Options {
	opts := mgmtOptions(cs.cfg, cs.lv, b, st, srv, cs.mon, cs.listeners, cs.dataDir, cs.started)
	opts.Cluster = cs.clusterStatus
	opts.Metrics = metrics.Handler(metrics.Options{Broker: b, PerQueueLimit: cs.cfg.Metrics.PerQueueLimit,
		StoreStats: metrics.DiskStats(st), Cluster: cs.clusterStatus})
	return opts
}

// clusterStatus is the node's status; only the names while cluster.Open
// has not returned (a node cannot serve that early in practice: it leads
// only after an election over the transport Open starts).
func (cs *clusterServer) clusterStatus() cluster.Status {
	if n := cs.node.Load(); n != nil {
		return n.Status()
	}
	return cluster.Status{Cluster: cs.cfg.Cluster.Name, Name: cs.cfg.Cluster.NodeName}
}

// storeStats is the node's store's statistics (none while it is opened
// again).
func (cs *clusterServer) storeStats() (diskstore.Stats, bool) {
	if n := cs.node.Load(); n != nil {
		if st := n.Store(); st != nil {
			return st.Stats(), true
		}
	}
	return diskstore.Stats{}, false
}
