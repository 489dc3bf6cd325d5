package ctl

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// overview is what status reads of /api/overview.
type overview struct {
	Node           string                 `json:"node"`
	ProductName    string                 `json:"product_name"`
	ProductVersion string                 `json:"product_version"`
	RabbitVersion  string                 `json:"rabbitmq_version"`
	Listeners      []listener             `json:"listeners"`
	ObjectTotals   map[string]json.Number `json:"object_totals"`
	QueueTotals    map[string]any         `json:"queue_totals"`
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
// status's where it has the field.
type statusReport struct {
	NodeName       string           `json:"node_name"`
	ProductName    string           `json:"product_name"`
	ProductVersion string           `json:"product_version"`
	RabbitVersion  string           `json:"rabbitmq_version"`
	Alarms         []alarm          `json:"alarms"`
	Listeners      []statusListener `json:"listeners"`
	Totals         statusTotals     `json:"totals"`
	Messages       statusMessages   `json:"messages"`
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

// status: the broker's version, listeners, alarms, object and message
// totals, from /api/overview, /api/health/checks/alarms and /api/vhosts.
func status(r *run, args []string) error {
	var ov overview
	if err := r.c.get(r.ctx, apiPath("overview"), &ov); err != nil {
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
		RabbitVersion: ov.RabbitVersion, Alarms: alarms, Listeners: []statusListener{},
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
		purpose, ok := listenerPurposes[l.Protocol]
		if !ok {
			purpose = l.Protocol
		}
		rep.Listeners = append(rep.Listeners, statusListener{
			Node: l.Node, Protocol: l.Protocol, Interface: iface, Port: l.Port, Purpose: purpose,
		})
	}
	if r.out.json {
		r.out.write(jsonText(rep) + "\n")
		return nil
	}
	r.out.info("Status of node %s ...", rep.NodeName)
	printStatus(r.out, rep)
	return nil
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

func printStatus(p *printer, rep statusReport) {
	var b strings.Builder
	fmt.Fprintf(&b, "Runtime\n\n")
	if rep.ProductName != "" {
		fmt.Fprintf(&b, "Product name: %s\nProduct version: %s\n", rep.ProductName, rep.ProductVersion)
	}
	fmt.Fprintf(&b, "RabbitMQ version: %s\nNode name: %s\n", rep.RabbitVersion, rep.NodeName)
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
