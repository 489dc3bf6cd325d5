package main

import (
	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/metrics"
	"github.com/brokerd/brokerd/mgmt"
	"github.com/brokerd/brokerd/store/diskstore"
)

// mgmtOptions is a cluster node's management API options: a single
// node's, with the node's view of the cluster for /api/nodes,
// /api/overview and /api/cluster, and its Raft metrics on /metrics.
func (cs *clusterServer) mgmtOptions(b *broker.Broker, st *diskstore.Store, srv *amqp.Server) mgmt.Options {
	opts := mgmtOptions(cs.cfg, cs.lv, b, st, srv, cs.mon, cs.listeners, cs.dataDir, cs.started)
	opts.Cluster = cs.node.Status
	opts.Metrics = metrics.Handler(metrics.Options{Broker: b, PerQueueLimit: cs.cfg.Metrics.PerQueueLimit,
		StoreStats: metrics.DiskStats(st), Cluster: cs.node.Status})
	return opts
}
