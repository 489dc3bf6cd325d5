// Package metrics exports the broker's counters and gauges in the
// Prometheus format: a prometheus.Collector that reads, at scrape time, the
// broker's atomic counters (broker.Stats), its queue and connection
// snapshots, its alarms, the store's statistics and, on a cluster node,
// its view of the Raft group (raft.go), plus the Go runtime and
// process collectors. Nothing here runs on the per-message path: the broker
// only adds to atomics, and a scrape turns them into metrics.
//
// Names follow the meanings of RabbitMQ's prometheus plugin
// (rabbitmq_global_messages_received_total, rabbitmq_queue_messages_ready,
// …) with a brokerd_ prefix. Every metric is listed, with its labels and
// meaning, in the "Metrics" section of README.md.
package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/cluster"
	"github.com/brokerd/brokerd/store"
	"github.com/brokerd/brokerd/store/diskstore"
)

// Options configure the exported metrics.
type Options struct {
	// Broker is the broker whose metrics are exported; Current, if set,
	// returns it at each scrape instead (a cluster node's, while it
	// leads). Without a broker only the store's, the cluster's and the
	// process's metrics are exported.
	Broker  *broker.Broker
	Current func() *broker.Broker
	// PerQueueLimit is the most queues exported with their own label set
	// (vhost, queue). With more queues, or when it is 0, the queue
	// metrics are exported without labels, summed over every queue (as
	// RabbitMQ's prometheus plugin does unless per-object metrics are on),
	// so sum(...) over them gives the same in both modes. The same bound,
	// and the same rule, apply to delayed exchanges and their
	// brokerd_exchange_messages_delayed (labels vhost, exchange).
	PerQueueLimit int
	// StoreStats, if set, returns the message store's statistics at each
	// scrape (WAL, fsync latency, group commits, segments, checkpoints,
	// recovery); false: the store has none (memory), so no store metrics.
	// DiskStats makes one from a store.
	StoreStats func() (diskstore.Stats, bool)
	// Cluster, if set, returns the cluster node's status at each scrape
	// (the brokerd_raft_* metrics, raft.go); nil on a single node.
	Cluster func() cluster.Status
}

// DiskStats returns a StoreStats function for st: the disk store's Stats,
// nothing for other stores.
func DiskStats(st store.Store) func() (diskstore.Stats, bool) {
	return func() (diskstore.Stats, bool) {
		ds, ok := st.(*diskstore.Store)
		if !ok {
			return diskstore.Stats{}, false
		}
		return ds.Stats(), true
	}
}

// Handler returns the /metrics handler: a registry holding the broker's
// collector and the Go runtime and process collectors, served in the
// Prometheus text format (or OpenMetrics / protobuf when a scraper asks).
// Safe for concurrent use; each request gathers afresh.
func Handler(opts Options) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		NewCollector(opts),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}
