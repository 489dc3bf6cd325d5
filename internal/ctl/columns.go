package ctl

import (
	"slices"
	"strings"
)

// column is one column of a list verb: rabbitmqctl's name, where its value
// is in an object of the API's answer, and how it prints.
type column struct {
	name string
	get  func(obj map[string]any) any // the value in an API object
	text func(any) string             // table rendering
	json func(any) any                // --formatter json rendering
}

// field is a column whose value is the API field of the same name.
func field(name string) column { return fieldAs(name, name) }

// fieldAs is a column named name whose value is the API field api.
func fieldAs(name, api string) column {
	return column{name: name, get: func(o map[string]any) any { return o[api] }, text: plain, json: nullEmpty}
}

// nested is a column named name whose value is at path in the API's
// object ("queue", "name": the name field of the object in queue).
func nested(name string, path ...string) column {
	c := field(name)
	c.get = func(o map[string]any) any {
		var v any = o
		for _, k := range path {
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		}
		return v
	}
	return c
}

func (c column) withText(f func(any) string) column { c.text = f; return c }
func (c column) withJSON(f func(any) any) column    { c.json = f; return c }

// constant is a column with the same value in every row.
func constant(name string, v any) column {
	return column{name: name, get: func(map[string]any) any { return v }, text: plain, json: nullEmpty}
}

// table columns hold AMQP field tables; JSON output keeps the API's object
// (an empty table is {}).
func table(name string) column {
	return field(name).withText(term).withJSON(func(v any) any {
		if v == nil {
			return map[string]any{}
		}
		return v
	})
}

// definition columns hold a policy definition: JSON text in both outputs,
// as rabbitmqctl prints it.
func definition(name string) column {
	return field(name).withText(compactJSON).withJSON(func(v any) any { return compactJSON(v) })
}

// listing describes one list verb's columns.
type listing struct {
	all      []column
	defaults []string
}

// pick returns the columns named, or the defaults. An unknown name is a
// usage error listing them, as rabbitmqctl's "Info key(s) x are not
// supported".
func (l listing) pick(verb string, names []string) ([]column, error) {
	if len(names) == 0 {
		names = l.defaults
	}
	var bad []string
	cols := make([]column, 0, len(names))
	for _, n := range names {
		// rabbitmqctl also takes "name,messages" as one argument.
		for _, n := range strings.Split(n, ",") {
			n = strings.TrimSpace(n)
			if n == "" {
				continue
			}
			i := slices.IndexFunc(l.all, func(c column) bool { return c.name == n })
			if i < 0 {
				bad = append(bad, n)
				continue
			}
			cols = append(cols, l.all[i])
		}
	}
	if len(bad) > 0 {
		return nil, usagef(verb, "Info key(s) %s are not supported", strings.Join(bad, ","))
	}
	return cols, nil
}

func (l listing) names() []string {
	out := make([]string, len(l.all))
	for i, c := range l.all {
		out[i] = c.name
	}
	slices.Sort(out)
	return out
}

// rowsOf extracts cols from each API object.
func rowsOf(objs []map[string]any, cols []column) [][]any {
	rows := make([][]any, len(objs))
	for i, o := range objs {
		r := make([]any, len(cols))
		for j, c := range cols {
			r[j] = c.get(o)
		}
		rows[i] = r
	}
	return rows
}

// The list verbs' columns. Names are rabbitmqctl 3.10's; those it has and
// the API does not (pids, slave_pids, disk_reads ...) are left out.
var (
	queueColumns = listing{
		defaults: []string{"name", "messages"},
		all: []column{
			field("name"), field("durable"), field("auto_delete"), field("exclusive"),
			table("arguments"), field("policy"), field("operator_policy"),
			definition("effective_policy_definition"),
			field("messages"), field("messages_ready"), field("messages_unacknowledged"),
			field("messages_ready_ram"), field("messages_unacknowledged_ram"),
			field("messages_ram"), field("messages_persistent"),
			field("message_bytes"), field("message_bytes_ready"),
			field("message_bytes_unacknowledged"), field("message_bytes_ram"),
			field("message_bytes_persistent"),
			field("head_message_timestamp"), field("consumers"),
			field("consumer_utilisation"), field("consumer_capacity"),
			field("exclusive_consumer_tag"), field("memory"), field("state"), field("type"),
			// Messages waiting out a retry delay (RabbitMQ 4.3's name).
			field("messages_delayed"),
		},
	}
	exchangeColumns = listing{
		defaults: []string{"name", "type"},
		all: []column{
			field("name"), field("type"), field("durable"), field("auto_delete"),
			field("internal"), table("arguments"), field("policy"),
			// brokerd's own (a delayed exchange's; blank for others).
			field("messages_delayed"),
		},
	}
	bindingColumns = listing{
		defaults: []string{"source_name", "source_kind", "destination_name", "destination_kind", "routing_key", "arguments"},
		all: []column{
			fieldAs("source_name", "source"), constant("source_kind", "exchange"),
			fieldAs("destination_name", "destination"),
			fieldAs("destination_kind", "destination_type"),
			field("routing_key"), table("arguments"),
		},
	}
	connectionColumns = listing{
		defaults: []string{"user", "peer_host", "peer_port", "state"},
		all: []column{
			field("name"), field("user"), field("vhost"), field("host"), field("port"),
			field("peer_host"), field("peer_port"), field("state"), field("channels"),
			field("protocol").withText(protocolTerm).withJSON(func(v any) any { return protocolTerm(v) }),
			field("auth_mechanism"), table("client_properties"), field("connected_at"),
			field("ssl"), field("ssl_protocol"), field("ssl_key_exchange"),
			field("ssl_cipher"), field("ssl_hash"), field("peer_cert_subject"),
			field("peer_cert_issuer"), field("peer_cert_validity"),
			field("frame_max"), field("channel_max"), field("timeout"),
			field("recv_oct"), field("recv_cnt"), field("send_oct"), field("send_cnt"),
			field("send_pend"),
		},
	}
	// Channels and consumers are named by the channel's name (the pid
	// and channel_pid columns), as close_connection takes connections.
	channelColumns = listing{
		defaults: []string{"pid", "user", "consumer_count", "messages_unacknowledged"},
		all: []column{
			fieldAs("pid", "name"), nested("connection", "connection_details", "name"),
			field("name"), field("number"), field("user"), field("vhost"),
			field("transactional"), field("confirm"), field("consumer_count"),
			field("messages_unacknowledged"), field("messages_uncommitted"),
			field("acks_uncommitted"), field("messages_unconfirmed"),
			field("prefetch_count"), field("global_prefetch_count"),
		},
	}
	consumerColumns = listing{
		// rabbitmqctl 3.10's defaults: every column but activity_status.
		defaults: []string{"queue_name", "channel_pid", "consumer_tag", "ack_required", "prefetch_count", "active", "arguments"},
		all: []column{
			nested("queue_name", "queue", "name"), nested("channel_pid", "channel_details", "name"),
			field("consumer_tag"), field("ack_required"), field("prefetch_count"),
			field("active"), field("activity_status"), table("arguments"),
		},
	}
	vhostColumns = listing{
		defaults: []string{"name"},
		all: []column{
			field("name"), field("description"),
			field("tags").withText(atomList).withJSON(func(v any) any { return stringList(v) }),
			field("tracing"),
			field("cluster_state").withText(nodeStates),
			field("default_queue_type"),
		},
	}
	userColumns = listing{
		defaults: []string{"user", "tags"},
		all: []column{
			fieldAs("user", "name"),
			field("tags").withText(atomList).withJSON(func(v any) any { return stringList(v) }),
		},
	}
	policyColumns = listing{
		defaults: []string{"vhost", "name", "pattern", "apply-to", "definition", "priority"},
		all: []column{
			field("vhost"), field("name"), field("pattern"), field("apply-to"),
			definition("definition"), field("priority"),
		},
	}
	permissionColumns = listing{
		defaults: []string{"user", "configure", "write", "read"},
		all:      []column{field("user"), field("configure"), field("write"), field("read")},
	}
	userPermissionColumns = listing{
		defaults: []string{"vhost", "configure", "write", "read"},
		all:      []column{field("vhost"), field("configure"), field("write"), field("read")},
	}
)
