package mgmt

import (
	"net/http"
	"runtime/metrics"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/internal/alarm"
)

// GET /api/nodes/{node}/memory: the node's memory breakdown, in the shape
// of RabbitMQ's (rabbit_mgmt_wm_node_memory: {"memory": {category: bytes,
// ..., "strategy", "total": {"rss", "allocated", "erlang"}}}). Monitors
// read it beside /api/nodes: Telegraf's rabbitmq input asks it for every
// node and, when it is missing, drops that node's whole rabbitmq_node
// metric. brokerd's memory is the Go runtime's, so the categories are the
// runtime's classes (runtime/metrics /memory/classes/...) put under the
// RabbitMQ names that mean the same thing:
//
//	other_proc            goroutine stacks (Erlang processes are goroutines here)
//	other_system          heap objects, live and not yet swept (message bodies, indexes, ...),
//	                      the runtime's metadata and its other memory
//	allocated_unused      heap memory held free, not returned to the OS
//	reserved_unallocated  resident memory the runtime does not account for (rss less allocated; 0 if less)
//	total.rss             the resident set (/proc/self/statm)
//	total.allocated       memory the runtime holds from the OS, less what it released
//	total.erlang          the same: the runtime's own count, as Erlang's is the VM's
//	strategy              "rss", as mem_calculation_strategy
//
// RabbitMQ's per-component categories (connection_readers, queue_procs,
// mnesia, code, atom, ...) are not measured by brokerd and left out. Only
// the node answering is measured: another cluster member's breakdown is
// 404, as is a node that is not one.
func (s *Server) nodeMemoryRoutes() {
	s.handle("GET /api/nodes/{node}/memory", monitoring, s.nodeMemory)
}

var memoryClasses = []string{
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/unused:bytes",
	"/memory/classes/heap/free:bytes",
	"/memory/classes/heap/released:bytes",
	"/memory/classes/heap/stacks:bytes",
	"/memory/classes/os-stacks:bytes",
	"/memory/classes/metadata/other:bytes",
	"/memory/classes/metadata/mspan/inuse:bytes",
	"/memory/classes/metadata/mspan/free:bytes",
	"/memory/classes/metadata/mcache/inuse:bytes",
	"/memory/classes/metadata/mcache/free:bytes",
	"/memory/classes/profiling/buckets:bytes",
	"/memory/classes/other:bytes",
	"/memory/classes/total:bytes",
}

func (s *Server) nodeMemory(u *broker.UserInfo, r *http.Request) (any, error) {
	if r.PathValue("node") != s.node() {
		return nil, notFound()
	}
	ms := make([]metrics.Sample, len(memoryClasses))
	for i, name := range memoryClasses {
		ms[i].Name = name
	}
	metrics.Read(ms)
	v := map[string]uint64{}
	for _, m := range ms {
		if m.Value.Kind() == metrics.KindUint64 {
			v[m.Name] = m.Value.Uint64()
		}
	}
	c := func(name string) uint64 { return v["/memory/classes/"+name+":bytes"] }
	allocated := c("total") - c("heap/released")
	rss, _ := alarm.ProcessRSS()
	var unaccounted uint64
	if rss > allocated {
		unaccounted = rss - allocated
	}
	return map[string]any{"memory": map[string]any{
		"other_proc": c("heap/stacks") + c("os-stacks"),
		"other_system": c("heap/objects") + c("metadata/other") + c("metadata/mspan/inuse") + c("metadata/mspan/free") +
			c("metadata/mcache/inuse") + c("metadata/mcache/free") + c("profiling/buckets") + c("other"),
		"allocated_unused":     c("heap/unused") + c("heap/free"),
		"reserved_unallocated": unaccounted,
		"strategy":             "rss",
		"total":                map[string]any{"rss": rss, "allocated": allocated, "erlang": allocated},
	}}, nil
}
