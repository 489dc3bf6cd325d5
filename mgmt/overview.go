package mgmt

import (
	"net/http"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/internal/alarm"
)

func (s *Server) routes() {
	s.handle("GET /api/overview", management, s.overview)
	s.handle("GET /api/whoami", management, s.whoami)
	s.handle("GET /api/health/checks/alarms", management, s.healthAlarms)
	s.handle("GET /api/health/checks/local-alarms", management, s.healthAlarms)
	s.handle("GET /api/aliveness-test/{vhost}", management, s.aliveness)
	s.healthRoutes()
	s.handle("GET /api/environment", administrator, s.environment)
	s.resourceRoutes()
	s.connRoutes()
	s.policyRoutes()
	s.parameterRoutes()
	s.shovelRoutes()
	s.accessRoutes()
	s.definitionRoutes()
	s.nodeRoutes()
	s.clusterRoutes()
	s.tenancyRoutes()
	s.uiRoutes()
	if h := s.opts.Metrics; h != nil {
		s.rt.add("GET /metrics", h.ServeHTTP)
	}
}

// ratesMode is RabbitMQ's rates_mode: "basic", or "none" when no rates
// are kept (Options.RatesMode).
func (s *Server) ratesMode() string { return s.opts.RatesMode }

// node is the node name shown where RabbitMQ shows one: a cluster
// node's [cluster] node_name, else brokerd@<host name>.
func (s *Server) node() string {
	if st, ok := s.clusterStatus(); ok {
		return st.Name
	}
	return node()
}

// clusterName is the overview's cluster_name: the [cluster] name, else
// the node's name (as RabbitMQ names a cluster by its first node).
func (s *Server) clusterName() string {
	if st, ok := s.clusterStatus(); ok {
		return st.Cluster
	}
	return node()
}

func node() string {
	host, err := os.Hostname()
	if err != nil {
		host = "localhost"
	}
	return "brokerd@" + host
}

// vhostsFor returns vhost when set (already authorized), else the vhosts
// whose objects u may list: every vhost for an administrator, those it has
// permissions in otherwise (RabbitMQ's filter_vhost: a monitoring user's
// /api/queues has only its own vhosts' queues).
func (s *Server) vhostsFor(u *broker.UserInfo, vhost string) []string {
	if vhost != "" {
		return []string{vhost}
	}
	return s.vhostsWhere(func(v string) bool { return hasTag(u, "administrator") || s.canAccessVHost(u, v) })
}

// visibleVHosts returns the vhosts u sees in /api/vhosts and the
// overview's totals: every vhost for monitoring and administrator users,
// those it has permissions in otherwise (list_visible_vhosts).
func (s *Server) visibleVHosts(u *broker.UserInfo) []string {
	return s.vhostsWhere(func(v string) bool { return hasTag(u, "administrator", "monitoring") || s.canAccessVHost(u, v) })
}

func (s *Server) vhostsWhere(keep func(string) bool) []string {
	var out []string
	for _, v := range s.b.VHosts() {
		if keep(v.Name) {
			out = append(out, v.Name)
		}
	}
	return out
}

func (s *Server) canAccessVHost(u *broker.UserInfo, vhost string) bool {
	return slices.ContainsFunc(s.b.Permissions(), func(p broker.PermissionInfo) bool {
		return p.User == u.Name && p.VHost == vhost
	})
}

func (s *Server) overview(u *broker.UserInfo, r *http.Request) (any, error) {
	var nq, nx, ncons, msgs, ready, unacked int
	visible := s.visibleVHosts(u)
	for _, v := range visible {
		for _, qi := range s.b.Queues(v) {
			nq++
			ncons += qi.Consumers
			msgs += qi.Messages()
			ready += qi.Ready
			unacked += qi.Unacked
		}
		nx += len(s.b.Exchanges(v))
	}
	conns := s.visibleConnections(u, "")
	nch := 0
	for _, c := range conns {
		nch += c.Channels
	}
	st := s.b.Stats()
	listeners := []map[string]any{}
	for _, l := range s.opts.Listeners {
		host, port := hostPort(l.Addr)
		listeners = append(listeners, map[string]any{"node": s.node(), "protocol": l.Protocol, "ip_address": host, "port": port})
	}
	ov := map[string]any{
		"management_version": s.opts.Version, "product_name": "brokerd", "product_version": s.opts.Version,
		"rabbitmq_version": s.opts.Version, "rates_mode": s.ratesMode(),
		"node": s.node(), "cluster_name": s.clusterName(),
		"exchange_types": []map[string]any{
			{"name": "direct", "enabled": true}, {"name": "fanout", "enabled": true},
			{"name": "topic", "enabled": true}, {"name": "headers", "enabled": true},
			{"name": "x-delayed-message", "enabled": true},
		},
		"object_totals": map[string]any{
			"connections": len(conns), "channels": nch, "exchanges": nx, "queues": nq, "consumers": ncons,
		},
		"queue_totals":  map[string]any{"messages": msgs, "messages_ready": ready, "messages_unacknowledged": unacked},
		"message_stats": messageStats(st),
		// brokerd's own: dead-letter totals by reason and drops by cause.
		"dead_letter_stats": map[string]any{
			"dead_lettered": st.DeadLettered, "discarded": st.Discarded, "dropped": st.Dropped,
			"cycles": st.Cycles, "overflowed": st.Overflowed, "backlogged": st.Backlogged,
		},
		"listeners": listeners,
		"contexts":  []any{},
	}
	if s.opts.Daemon != nil && hasTag(u, "administrator", "monitoring") {
		ov["node_status"] = s.nodeStatus(s.opts.Daemon())
	}
	s.overviewRates(ov, visible, rateQueryOf(r))
	return ov, nil
}

// DaemonInfo is what the daemon knows of itself and the broker does not
// (Options.Daemon).
type DaemonInfo struct {
	PID     int
	Started time.Time // when the process started
	// DataDir is the data directory; ConfigFile the configuration file,
	// "" when brokerd runs on its defaults and flags.
	DataDir, ConfigFile string
	// MemoryLimit is the memory high watermark in force and DiskFreeLimit
	// the free disk space limit (both change at a reload); 0: that alarm
	// is off.
	MemoryLimit, DiskFreeLimit uint64
	// Environment is the configuration in force, one key per setting
	// ("amqp.listen"), with no secret in it: /api/environment.
	Environment map[string]any
}

// nodeStatus is the overview's node_status, brokerd's own (RabbitMQ's
// overview has none; its /api/nodes has these fields under these names):
// os_pid (a string, as RabbitMQ's), uptime in milliseconds, db_dir (the
// data directory), config_files, mem_used (the memory held, as the memory
// alarm measures it: alarm.HeldMemory), mem_limit (the watermark; 0:
// none), disk_free (the data directory's filesystem), disk_free_limit
// (0: none), and whether each alarm is raised. brokerctl status reads it.
// Shown to monitoring and administrator users, as RabbitMQ's /api/nodes.
// A measurement that fails is left out.
func (s *Server) nodeStatus(d DaemonInfo) map[string]any {
	alarms := s.b.Alarms()
	configFiles := []string{}
	if d.ConfigFile != "" {
		configFiles = append(configFiles, d.ConfigFile)
	}
	n := map[string]any{
		"os_pid": strconv.Itoa(d.PID), "uptime": time.Since(d.Started).Milliseconds(),
		"db_dir": d.DataDir, "config_files": configFiles,
		"mem_limit": d.MemoryLimit, "mem_alarm": slices.Contains(alarms, broker.AlarmMemory),
		"disk_free_limit": d.DiskFreeLimit, "disk_free_alarm": slices.Contains(alarms, broker.AlarmDisk),
	}
	if held, err := alarm.HeldMemory(); err == nil {
		n["mem_used"] = held
	}
	if free, err := alarm.FreeBytes(d.DataDir); err == nil {
		n["disk_free"] = free
	}
	return n
}

// environment is GET /api/environment, brokerd's own: the configuration in
// force (file, flags and defaults, as last reloaded), one key per setting,
// for brokerctl environment, as rabbitmqctl environment shows RabbitMQ's
// application environment.
func (s *Server) environment(u *broker.UserInfo, r *http.Request) (any, error) {
	if s.opts.Daemon == nil {
		return nil, notFound()
	}
	return s.opts.Daemon().Environment, nil
}

// messageStats is the overview's message_stats: RabbitMQ's totals under
// its names (deliver_get = deliver + deliver_no_ack + get + get_no_ack),
// from the broker's counters, plus brokerd's dead_lettered (messages
// delivered to at least one dead letter queue, any reason). RabbitMQ's
// disk_reads and disk_writes are not kept. The counters only grow, so a
// client computes rates from the change between two reads.
func messageStats(st broker.Stats) map[string]any {
	d := st.Delivered
	var deadLettered uint64
	for _, n := range st.DeadLettered {
		deadLettered += n
	}
	return map[string]any{
		"publish": st.Published, "drop_unroutable": st.Unroutable, "return_unroutable": st.Returned,
		"confirm": st.Confirmed,
		"deliver": d[broker.DeliveredConsumeManualAck], "deliver_no_ack": d[broker.DeliveredConsumeAutoAck],
		"get": d[broker.DeliveredGetManualAck], "get_no_ack": d[broker.DeliveredGetAutoAck],
		"deliver_get": d[broker.DeliveredConsumeManualAck] + d[broker.DeliveredConsumeAutoAck] +
			d[broker.DeliveredGetManualAck] + d[broker.DeliveredGetAutoAck],
		"get_empty": st.GetEmpty, "ack": st.Acknowledged, "redeliver": st.Redelivered,
		"dead_lettered": deadLettered,
	}
}

func (s *Server) whoami(u *broker.UserInfo, r *http.Request) (any, error) {
	tags := u.Tags
	if tags == nil {
		tags = []string{}
	}
	return map[string]any{"name": u.Name, "tags": tags}, nil
}

// healthAlarms is 200 {"status":"ok"} without alarms, 503 with them.
func (s *Server) healthAlarms(u *broker.UserInfo, r *http.Request) (any, error) {
	alarms := s.b.Alarms()
	if len(alarms) == 0 {
		return map[string]any{"status": "ok"}, nil
	}
	list := []map[string]any{}
	for _, a := range alarms {
		list = append(list, map[string]any{"node": s.node(), "resource": a})
	}
	return status{http.StatusServiceUnavailable, map[string]any{
		"status": "failed", "reason": "There are alarms in effect in the cluster", "alarms": list,
	}}, nil
}

// status is a handler result with a status other than 200.
type status struct {
	code int
	body any
}

// aliveness declares the queue aliveness-test in the vhost, publishes a
// message to it and gets it back, as RabbitMQ's aliveness test does. A
// refusal of the declaration or the get is answered as a get's (401 for
// ACCESS_REFUSED, with the channel's text); a message that does not come
// back is 503.
func (s *Server) aliveness(u *broker.UserInfo, r *http.Request) (any, error) {
	const queue, payload = "aliveness-test", "test_message"
	failed := func(reason string) (any, error) {
		return status{http.StatusServiceUnavailable, map[string]any{"status": "failed", "reason": reason}}, nil
	}
	d, err := s.b.OpenDirect(u.Name, r.PathValue("vhost"))
	if err != nil {
		return nil, err
	}
	defer d.Close()
	d.PermitTransientQueues() // whatever [deprecated_features.permit] says
	if _, err := d.Do(&amqp.QueueDeclare{Queue: queue}); err != nil {
		return nil, channelError{err}
	}
	if _, err := d.Publish("", queue, amqp.Properties{}, []byte(payload)); err != nil {
		return failed(err.Text)
	}
	replies, aerr := d.Do(&amqp.BasicGet{Queue: queue, NoAck: true})
	if aerr != nil {
		return nil, channelError{aerr}
	}
	if len(replies) != 1 || string(replies[0].Body) != payload {
		return failed("aliveness-test message not received back")
	}
	return map[string]any{"status": "ok"}, nil
}
