package ctl

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
)

// overview is what status reads of /api/overview.
type overview struct {
	Node           string                 `json:"node"`
	ClusterName    string                 `json:"cluster_name"`
	ProductName    string                 `json:"product_name"`
	ProductVersion string                 `json:"product_version"`
	RabbitVersion  string                 `json:"rabbitmq_version"`
	Listeners      []listener             `json:"listeners"`
	ObjectTotals   map[string]json.Number `json:"object_totals"`
	QueueTotals    map[string]any         `json:"queue_totals"`
	// NodeStatus is brokerd's own (mgmt/overview.go), for monitoring
	// users: what RabbitMQ's /api/nodes/{node} tells of the node.
	NodeStatus *nodeInfo `json:"node_status"`
}

// nodeInfo is what status reads of the node's process, under the names
// of RabbitMQ's /api/nodes/{node}: os_pid (a string), uptime in
// milliseconds, db_dir, config_files, the memory used and its limit, the
// free disk space and its limit. A field the server left out is "".
type nodeInfo struct {
	OSPid         string      `json:"os_pid"`
	Uptime        json.Number `json:"uptime"`
	DBDir         string      `json:"db_dir"`
	ConfigFiles   []string    `json:"config_files"`
	MemUsed       json.Number `json:"mem_used"`
	MemLimit      json.Number `json:"mem_limit"`
	DiskFree      json.Number `json:"disk_free"`
	DiskFreeLimit json.Number `json:"disk_free_limit"`
}

type listener struct {
	Node      string      `json:"node"`
	Protocol  string      `json:"protocol"`
	IPAddress string      `json:"ip_address"`
	Port      json.Number `json:"port"`
}

// statusListener is a listener as rabbitmqctl status prints it.
type statusListener struct {
	Node      string      `json:"node"`
	Protocol  string      `json:"protocol"`
	Interface string      `json:"interface"`
	Port      json.Number `json:"port"`
	Purpose   string      `json:"purpose"`
}

// alarm is one entry of /api/health/checks/alarms' "alarms".
type alarm struct {
	Node     string `json:"node"`
	Resource string `json:"resource"`
	Type     string `json:"type"`
}

// statusReport is status's JSON output; the names are rabbitmqctl
// status's where it has the field. The node's process (pid to disk_free)
// is left out when the server does not tell it (a RabbitMQ user without
// the monitoring tag); a measurement the server left out is null. Sizes
// are bytes, uptime seconds, as in rabbitmqctl's JSON.
type statusReport struct {
	NodeName       string `json:"node_name"`
	ProductName    string `json:"product_name"`
	ProductVersion string `json:"product_version"`
	RabbitVersion  string `json:"rabbitmq_version"`
	PID            *int64 `json:"pid,omitempty"`
	Uptime         *int64 `json:"uptime,omitempty"`
	DataDirectory  string `json:"data_directory,omitempty"`
	// ConfigFiles is nil when the node is not known, [] when it runs on
	// no file.
	ConfigFiles []string `json:"config_files,omitempty"`
	// Memory is rabbitmqctl's shape: {"total": {"rss": N}}, with
	// VMMemoryCalculationStrategy naming the key.
	Memory                      map[string]map[string]*int64 `json:"memory,omitempty"`
	VMMemoryCalculationStrategy string                       `json:"vm_memory_calculation_strategy,omitempty"`
	VMMemoryHighWatermarkLimit  *int64                       `json:"vm_memory_high_watermark_limit,omitempty"`
	DiskFreeLimit               *int64                       `json:"disk_free_limit,omitempty"`
	DiskFree                    *int64                       `json:"disk_free,omitempty"`
	Alarms                      []alarm                      `json:"alarms"`
	Listeners                   []statusListener             `json:"listeners"`
	Totals                      statusTotals                 `json:"totals"`
	Messages                    statusMessages               `json:"messages"`

	node *nodeInfo // nil: the server does not tell
}

type statusTotals struct {
	VirtualHosts int         `json:"virtual_host_count"`
	Connections  json.Number `json:"connection_count"`
	Channels     json.Number `json:"channel_count"`
	Queues       json.Number `json:"queue_count"`
	Exchanges    json.Number `json:"exchange_count"`
	Consumers    json.Number `json:"consumer_count"`
}

type statusMessages struct {
	Total          json.Number `json:"total"`
	Ready          json.Number `json:"ready"`
	Unacknowledged json.Number `json:"unacknowledged"`
}

// listenerPurposes are rabbitmqctl's words for each protocol.
var listenerPurposes = map[string]string{
	"amqp":             "AMQP 0-9-1 and AMQP 1.0",
	"amqp/ssl":         "AMQP 0-9-1 and AMQP 1.0 over TLS",
	"http":             "HTTP API",
	"https":            "HTTP API over TLS (HTTPS)",
	"clustering":       "inter-node and CLI tool communication",
	"http/prometheus":  "Prometheus exporter API over HTTP",
	"https/prometheus": "Prometheus exporter API over TLS (HTTPS)",
}

// brokerdPurposes are the words for brokerd's listeners, which speak AMQP
// 0-9-1 only.
var brokerdPurposes = map[string]string{
	"amqp":     "AMQP 0-9-1",
	"amqp/ssl": "AMQP 0-9-1 over TLS",
}

// purpose is what a listener is for, as the product that serves it says.
func purpose(product, protocol string) string {
	if product != "RabbitMQ" {
		if p, ok := brokerdPurposes[protocol]; ok {
			return p
		}
	}
	if p, ok := listenerPurposes[protocol]; ok {
		return p
	}
	return protocol
}

// status: the broker's version, process, data directory, memory and disk
// use against their limits, listeners, alarms, object and message totals,
// from /api/overview, /api/nodes/{node}, /api/health/checks/alarms and
// /api/vhosts.
func status(r *run, args []string) error {
	unit, err := infoUnit(r.opts)
	if err != nil {
		return err
	}
	var ov overview
	if err := r.c.get(r.ctx, apiPath("overview"), &ov); err != nil {
		return err
	}
	node, err := r.node(ov)
	if err != nil {
		return err
	}
	alarms, err := r.alarms()
	if err != nil {
		return err
	}
	var vhosts []map[string]any
	if err := r.c.get(r.ctx, apiPath("vhosts"), &vhosts); err != nil {
		return err
	}
	rep := statusReport{
		NodeName: ov.Node, ProductName: ov.ProductName, ProductVersion: ov.ProductVersion,
		RabbitVersion: ov.RabbitVersion, Alarms: alarms, Listeners: []statusListener{}, node: node,
		Totals: statusTotals{
			VirtualHosts: len(vhosts),
			Connections:  count(ov.ObjectTotals["connections"]),
			Channels:     count(ov.ObjectTotals["channels"]),
			Queues:       count(ov.ObjectTotals["queues"]),
			Exchanges:    count(ov.ObjectTotals["exchanges"]),
			Consumers:    count(ov.ObjectTotals["consumers"]),
		},
		Messages: statusMessages{
			Total:          count(ov.QueueTotals["messages"]),
			Ready:          count(ov.QueueTotals["messages_ready"]),
			Unacknowledged: count(ov.QueueTotals["messages_unacknowledged"]),
		},
	}
	for _, l := range ov.Listeners {
		iface := l.IPAddress
		if strings.Contains(iface, ":") {
			iface = "[" + iface + "]"
		}
		rep.Listeners = append(rep.Listeners, statusListener{
			Node: l.Node, Protocol: l.Protocol, Interface: iface, Port: l.Port, Purpose: purpose(ov.ProductName, l.Protocol),
		})
	}
	if node != nil {
		rep.PID = integer(json.Number(node.OSPid))
		if ms := integer(node.Uptime); ms != nil {
			sec := *ms / 1000
			rep.Uptime = &sec
		}
		rep.DataDirectory = node.DBDir
		rep.ConfigFiles = node.ConfigFiles
		if rep.ConfigFiles == nil {
			rep.ConfigFiles = []string{}
		}
		rep.Memory = map[string]map[string]*int64{"total": {"rss": integer(node.MemUsed)}}
		rep.VMMemoryCalculationStrategy = "rss"
		rep.VMMemoryHighWatermarkLimit = integer(node.MemLimit)
		rep.DiskFreeLimit, rep.DiskFree = integer(node.DiskFreeLimit), integer(node.DiskFree)
	}
	if r.out.json {
		r.out.write(jsonText(rep) + "\n")
		return nil
	}
	r.out.info("Status of node %s ...", rep.NodeName)
	printStatus(r.out, rep, unit)
	return nil
}

// node returns what the server tells of the node's process: the
// overview's node_status (brokerd's own, shown to monitoring and
// administrator users: no second request), else RabbitMQ's
// /api/nodes/{node} (which needs the monitoring tag); nil if neither
// tells it.
func (r *run) node(ov overview) (*nodeInfo, error) {
	if ov.NodeStatus != nil {
		return ov.NodeStatus, nil
	}
	var n nodeInfo
	err := r.c.get(r.ctx, apiPath("nodes", ov.Node), &n)
	var ae *apiError
	switch {
	case err == nil:
		return &n, nil
	case errors.As(err, &ae) && ae.status/100 == 4:
		return nil, nil
	}
	return nil, err
}

// integer is n as an integer; nil if the server left it out.
func integer(n json.Number) *int64 {
	v, err := n.Int64()
	if err != nil {
		if f, ferr := n.Float64(); ferr == nil {
			v, err = int64(f), nil
		}
	}
	if err != nil {
		return nil
	}
	return &v
}

// count is a total, 0 when the server left it out (RabbitMQ omits
// queue_totals until its statistics have a sample).
func count(v any) json.Number {
	switch v := v.(type) {
	case json.Number:
		if v != "" {
			return v
		}
	}
	return "0"
}

// alarms reads the alarms in effect. The health check answers 503 with
// the list when there are some.
func (r *run) alarms() ([]alarm, error) {
	var body struct {
		Alarms []alarm `json:"alarms"`
	}
	data, err := r.c.do(r.ctx, request{method: http.MethodGet, path: apiPath("health", "checks", "alarms")})
	var ae *apiError
	if errors.As(err, &ae) && ae.status == http.StatusServiceUnavailable {
		data, err = ae.body, nil
	}
	if err != nil {
		return nil, err
	}
	if err := decodeJSON(data, "health/checks/alarms", &body); err != nil {
		return nil, err
	}
	if body.Alarms == nil {
		body.Alarms = []alarm{}
	}
	return body.Alarms, nil
}

// printStatus prints rep as rabbitmqctl status does, in its order and
// words, sizes in unit; the sections RabbitMQ has and brokerd has not
// (plugins, log files, the memory breakdown, file descriptors) are left
// out, and so are the process's lines and sections when the server does
// not tell them.
func printStatus(p *printer, rep statusReport, unit string) {
	var b strings.Builder
	n := rep.node
	fmt.Fprintf(&b, "Runtime\n\n")
	if n != nil {
		fmt.Fprintf(&b, "OS PID: %s\nUptime (seconds): %s\n", orUnknown(rep.PID), orUnknown(rep.Uptime))
	}
	if rep.ProductName != "" {
		fmt.Fprintf(&b, "Product name: %s\nProduct version: %s\n", rep.ProductName, rep.ProductVersion)
	}
	fmt.Fprintf(&b, "RabbitMQ version: %s\nNode name: %s\n", rep.RabbitVersion, rep.NodeName)
	if n != nil {
		fmt.Fprintf(&b, "\nData directory\n\nNode data directory: %s\n", rep.DataDirectory)
		fmt.Fprintf(&b, "\nConfig files\n\n")
		if len(rep.ConfigFiles) == 0 {
			b.WriteString("(none)\n")
		}
		for _, f := range rep.ConfigFiles {
			fmt.Fprintf(&b, " * %s\n", f)
		}
	}
	fmt.Fprintf(&b, "\nAlarms\n\n")
	if len(rep.Alarms) == 0 {
		b.WriteString("(none)\n")
	}
	for _, a := range rep.Alarms {
		switch a.Resource {
		case "memory":
			fmt.Fprintf(&b, "Memory alarm on node %s\n", a.Node)
		case "disk":
			fmt.Fprintf(&b, "Free disk space alarm on node %s\n", a.Node)
		default:
			fmt.Fprintf(&b, "Alarm %s %s on node %s\n", a.Type, a.Resource, a.Node)
		}
	}
	if n != nil {
		fmt.Fprintf(&b, "\nMemory\n\nTotal memory used: %s\n", size(rep.Memory["total"]["rss"], unit))
		if l := rep.VMMemoryHighWatermarkLimit; l != nil && *l == 0 {
			b.WriteString("Memory high watermark: none (no memory alarm)\n")
		} else {
			fmt.Fprintf(&b, "Memory high watermark: %s\n", size(l, unit))
		}
		fmt.Fprintf(&b, "\nFree Disk Space\n\n")
		if l := rep.DiskFreeLimit; l != nil && *l == 0 {
			b.WriteString("Low free disk space watermark: none (no disk alarm)\n")
		} else {
			fmt.Fprintf(&b, "Low free disk space watermark: %s\n", size(l, unit))
		}
		fmt.Fprintf(&b, "Free disk space: %s\n", size(rep.DiskFree, unit))
	}
	fmt.Fprintf(&b, "\nTotals\n\n")
	t := rep.Totals
	fmt.Fprintf(&b, "Connection count: %s\nChannel count: %s\nQueue count: %s\nExchange count: %s\nConsumer count: %s\nVirtual host count: %d\n",
		t.Connections, t.Channels, t.Queues, t.Exchanges, t.Consumers, t.VirtualHosts)
	m := rep.Messages
	fmt.Fprintf(&b, "\nMessages\n\nTotal: %s\nReady: %s\nUnacknowledged: %s\n", m.Total, m.Ready, m.Unacknowledged)
	fmt.Fprintf(&b, "\nListeners\n\n")
	for _, l := range rep.Listeners {
		fmt.Fprintf(&b, "Interface: %s, port: %s, protocol: %s, purpose: %s\n", l.Interface, l.Port, l.Protocol, l.Purpose)
	}
	p.write(b.String())
}

func orUnknown(v *int64) string {
	if v == nil {
		return "unknown"
	}
	return strconv.FormatInt(*v, 10)
}

// infoUnit is --unit, rabbitmqctl's byte multiple for status: bytes, kb,
// mb, gb (the default), tb, or their long names.
func infoUnit(o *options) (string, error) {
	u := strings.ToLower(o.unit)
	switch u {
	case "":
		return "gb", nil
	case "bytes", "kb", "mb", "gb", "tb":
		return u, nil
	case "kilobytes", "megabytes", "gigabytes", "terabytes":
		return u[:1] + "b", nil
	}
	return "", usagef(o.verb, "unit '%s' is not supported. Please use one of: bytes, mb, gb", o.unit)
}

// size renders a byte count in unit as rabbitmqctl does: "bytes" as an
// integer, others as decimal multiples (1 gb = 10^9 bytes) rounded to four
// places, always with a fraction ("45.8 gb", "1.0 gb").
func size(v *int64, unit string) string {
	if v == nil {
		return "unknown"
	}
	if unit == "bytes" {
		return strconv.FormatInt(*v, 10) + " bytes"
	}
	div := map[string]float64{"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12}[unit]
	f := math.Round(float64(*v)/div*1e4) / 1e4
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s + " " + unit
}
