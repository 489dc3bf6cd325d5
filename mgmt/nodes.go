package mgmt

import (
	"net/http"
	"os"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/internal/alarm"
	"github.com/brokerd/brokerd/internal/fdbudget"
)

// /api/nodes and /api/nodes/{name}: brokerd is one node, described with
// RabbitMQ's fields (rabbit_mgmt_external_stats) so that monitors
// (Telegraf's rabbitmq input, Datadog, Nagios checks, rabbitmqadmin list
// nodes) read it as they read RabbitMQ's. Each value is this process's,
// measured when asked:
//
//	name, type, running    brokerd@<host name>, "disc", true
//	uptime                 milliseconds since NodeOptions.Started
//	os_pid                 the process id, as a string (as RabbitMQ's)
//	mem_used               memory held: resident set less free Go heap (alarm.HeldMemory,
//	                       what the memory alarm compares with its watermark)
//	mem_limit, mem_alarm   the memory watermark in force (0: none) and whether the alarm is raised
//	mem_calculation_strategy  "rss"
//	disk_free              free space of the data directory's filesystem (statfs, as the disk alarm)
//	disk_free_limit, disk_free_alarm  the free-space limit in force and whether the alarm is raised
//	fd_used, fd_total      descriptors open (/proc/self/fd) and the soft RLIMIT_NOFILE
//	sockets_used           AMQP client connections open, handshakes included
//	sockets_total          the AMQP connection limit (limits.max_connections, or the
//	                       descriptor budget's AMQP share; 0: none)
//	proc_used              goroutines (Erlang processes are RabbitMQ's)
//	proc_total             Go has no limit on goroutines: 1048576, the Erlang VM's default
//	                       process limit, so a ratio a monitor computes stays as small as it is
//	run_queue              goroutines runnable and waiting for a thread (runtime/metrics
//	                       /sched/goroutines/runnable), as Erlang's run queue
//	processors             logical CPUs (runtime.NumCPU)
//	gc_num, gc_bytes_reclaimed  Go garbage collections completed, and the heap bytes they freed
//	context_switches       voluntary and involuntary context switches of every thread (getrusage)
//	db_dir                 the data directory
//
// RabbitMQ's lists (applications, enabled_plugins, log_files,
// config_files, partitions, auth_mechanisms) hold brokerd's equivalents or
// nothing; net_ticktime is RabbitMQ's default, 60.

// NodeOptions says what /api/nodes reports of the process beyond what the
// broker knows. Zero fields report nothing for what they feed (0, or no
// limit).
type NodeOptions struct {
	// DataDir is the data directory: db_dir, and the filesystem disk_free
	// measures.
	DataDir string
	// MemoryLimit and DiskFreeLimit return the memory watermark and the
	// free-space limit in force (they change at a reload); 0: no alarm.
	MemoryLimit, DiskFreeLimit func() uint64
	// AMQP is the AMQP server: its open connections (sockets_used, the
	// health check below-node-connection-limit), its connection limit
	// (sockets_total) and whether it accepts connections (the health
	// checks is-in-service and ready-to-accept-clients: health.go).
	// *amqp.Server is one.
	AMQP interface {
		Connections() int
		MaxConnections() int
		Accepting() bool
	}
	// Started is when the process started (uptime); zero: when the Server
	// was made.
	Started time.Time
}

// procTotal is what proc_total reports; see the table above.
const procTotal = 1 << 20

func (s *Server) nodeRoutes() {
	s.handle("GET /api/nodes", monitoring, s.listNodes)
	s.handle("GET /api/nodes/{node}", monitoring, s.getNode)
	s.nodeMemoryRoutes()
	s.federationRoutes()
}

func (s *Server) listNodes(u *broker.UserInfo, r *http.Request) (any, error) {
	if st, ok := s.clusterStatus(); ok {
		return s.clusterNodes(st, r)
	}
	n, err := s.nodeJSON(r)
	if err != nil {
		return nil, err
	}
	return []map[string]any{n}, nil
}

func (s *Server) getNode(u *broker.UserInfo, r *http.Request) (any, error) {
	if st, ok := s.clusterStatus(); ok {
		nodes, err := s.clusterNodes(st, r)
		if err != nil {
			return nil, err
		}
		for _, n := range nodes {
			if n["name"] == r.PathValue("node") {
				return n, nil
			}
		}
		return nil, notFound()
	}
	if r.PathValue("node") != s.node() {
		return nil, notFound()
	}
	return s.nodeJSON(r)
}

// nodeStats are the node's measurements that RabbitMQ samples for rates
// (its node_coarse_stats), read when asked and by the rate sampler.
type nodeStats struct {
	memUsed, diskFree, fdUsed, socketsUsed, procUsed uint64
	gcNum, gcBytesReclaimed, contextSwitches         uint64
}

var nodeMetrics = []string{"/gc/cycles/total:gc-cycles", "/gc/heap/frees:bytes", "/sched/goroutines/runnable:goroutines"}

// readNodeStats measures the process. A measurement that fails reads 0
// (the others still count); the process is not failing for it.
func (s *Server) readNodeStats() (nodeStats, uint64) {
	var st nodeStats
	st.memUsed, _ = alarm.HeldMemory()
	if s.opts.Node.DataDir != "" {
		st.diskFree, _ = alarm.FreeBytes(s.opts.Node.DataDir)
	}
	if n, err := fdbudget.Open(); err == nil {
		st.fdUsed = uint64(n)
	}
	if a := s.opts.Node.AMQP; a != nil {
		st.socketsUsed = uint64(a.Connections())
	}
	st.procUsed = uint64(runtime.NumGoroutine())
	ms := make([]metrics.Sample, len(nodeMetrics))
	for i, name := range nodeMetrics {
		ms[i].Name = name
	}
	metrics.Read(ms)
	u64 := func(i int) uint64 {
		if ms[i].Value.Kind() == metrics.KindUint64 {
			return ms[i].Value.Uint64()
		}
		return 0
	}
	st.gcNum, st.gcBytesReclaimed = u64(0), u64(1)
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		st.contextSwitches = uint64(ru.Nvcsw + ru.Nivcsw)
	}
	return st, u64(2)
}

func (s *Server) nodeJSON(r *http.Request) (map[string]any, error) {
	o := &s.opts.Node
	st, runQueue := s.readNodeStats()
	limit := func(f func() uint64) uint64 {
		if f == nil {
			return 0
		}
		return f()
	}
	fdTotal, _ := fdbudget.Limit()
	socketsTotal := 0
	if o.AMQP != nil {
		socketsTotal = o.AMQP.MaxConnections()
	}
	memAlarm, diskAlarm := false, false
	for _, a := range s.b.Alarms() {
		memAlarm = memAlarm || a == "memory"
		diskAlarm = diskAlarm || a == "disk"
	}
	dataDir := o.DataDir
	configFiles := []string{}
	if s.opts.Daemon != nil {
		if d := s.opts.Daemon(); d.ConfigFile != "" {
			configFiles = append(configFiles, d.ConfigFile)
		}
	}
	m := map[string]any{
		"name": s.node(), "type": "disc", "running": true, "being_drained": false,
		"uptime": time.Since(s.started).Milliseconds(), "os_pid": strconv.Itoa(os.Getpid()),
		"mem_used": st.memUsed, "mem_limit": limit(o.MemoryLimit), "mem_alarm": memAlarm,
		"mem_calculation_strategy": "rss",
		"disk_free":                st.diskFree, "disk_free_limit": limit(o.DiskFreeLimit), "disk_free_alarm": diskAlarm,
		"fd_used": st.fdUsed, "fd_total": fdTotal,
		"sockets_used": st.socketsUsed, "sockets_total": socketsTotal,
		"proc_used": st.procUsed, "proc_total": procTotal,
		"run_queue": runQueue, "processors": runtime.NumCPU(),
		"gc_num": st.gcNum, "gc_bytes_reclaimed": st.gcBytesReclaimed, "context_switches": st.contextSwitches,
		"db_dir": dataDir, "rates_mode": s.ratesMode(),
		"exchange_types": exchangeTypes(), "partitions": []any{}, "applications": []any{},
		"enabled_plugins": []any{}, "log_files": []any{}, "config_files": configFiles,
		"auth_mechanisms": authMechanisms(s.opts.AuthMechanisms),
		"contexts":        []any{}, "net_ticktime": 60,
	}
	s.nodeRates(m, rateQueryOf(r))
	return m, nil
}

// authMechanisms is a node's auth_mechanisms as RabbitMQ lists them:
// every mechanism it has, enabled when configured. EXTERNAL is there only
// when configured, as RabbitMQ has it only with its plugin enabled.
func authMechanisms(configured []string) []map[string]any {
	if len(configured) == 0 {
		configured = []string{"PLAIN", "AMQPLAIN"}
	}
	ms := []map[string]any{
		{"name": "PLAIN", "description": "SASL PLAIN authentication mechanism", "enabled": slices.Contains(configured, "PLAIN")},
		{"name": "AMQPLAIN", "description": "QPid AMQPLAIN mechanism", "enabled": slices.Contains(configured, "AMQPLAIN")},
	}
	if slices.Contains(configured, "EXTERNAL") {
		// rabbit_auth_mechanism_ssl:description/0.
		ms = append(ms, map[string]any{"name": "EXTERNAL", "description": "TLS peer verification-based authentication plugin. Used in combination with the EXTERNAL SASL mechanism.", "enabled": true})
	}
	return ms
}

// exchangeTypes are the exchange types, as the overview and a node list
// them.
func exchangeTypes() []map[string]any {
	return []map[string]any{
		{"name": "direct", "description": "AMQP direct exchange, as per the AMQP specification", "enabled": true},
		{"name": "fanout", "description": "AMQP fanout exchange, as per the AMQP specification", "enabled": true},
		{"name": "headers", "description": "AMQP headers exchange, as per the AMQP specification", "enabled": true},
		{"name": "topic", "description": "AMQP topic exchange, as per the AMQP specification", "enabled": true},
		// As the delayed-message plugin registers it (its description/0).
		{"name": "x-delayed-message", "description": "Delayed Message Exchange.", "enabled": true},
	}
}
