package mgmt_test

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/mgmt"
)

// Telegraf's rabbitmq input (influxdata/telegraf
// plugins/inputs/rabbitmq/rabbitmq.go) decodes the API into these types,
// copied with their Go types and JSON names: a field brokerd sends with
// another JSON type (a string for a number, a number for a string) fails
// json.Unmarshal as it fails Telegraf's gather. Untagged fields match
// case-insensitively, as in Telegraf.
type tgOverview struct {
	MessageStats *tgMessageStats `json:"message_stats"`
	ObjectTotals *tgObjectTotals `json:"object_totals"`
	QueueTotals  *tgQueueTotals  `json:"queue_totals"`
	Listeners    []tgListener    `json:"listeners"`
}

type tgListener struct {
	Protocol string `json:"protocol"`
}

type tgDetails struct {
	Rate float64 `json:"rate"`
}

type tgMessageStats struct {
	Ack                     int64
	AckDetails              tgDetails `json:"ack_details"`
	Deliver                 int64
	DeliverDetails          tgDetails `json:"deliver_details"`
	DeliverGet              int64     `json:"deliver_get"`
	DeliverGetDetails       tgDetails `json:"deliver_get_details"`
	Publish                 int64
	PublishDetails          tgDetails `json:"publish_details"`
	Redeliver               int64
	RedeliverDetails        tgDetails `json:"redeliver_details"`
	PublishIn               int64     `json:"publish_in"`
	PublishInDetails        tgDetails `json:"publish_in_details"`
	PublishOut              int64     `json:"publish_out"`
	PublishOutDetails       tgDetails `json:"publish_out_details"`
	ReturnUnroutable        int64     `json:"return_unroutable"`
	ReturnUnroutableDetails tgDetails `json:"return_unroutable_details"`
}

type tgObjectTotals struct {
	Channels    int64
	Connections int64
	Consumers   int64
	Exchanges   int64
	Queues      int64
}

type tgQueueTotals struct {
	Messages                   int64
	MessagesReady              int64 `json:"messages_ready"`
	MessagesUnacknowledged     int64 `json:"messages_unacknowledged"`
	MessageBytes               int64 `json:"message_bytes"`
	MessageBytesReady          int64 `json:"message_bytes_ready"`
	MessageBytesUnacknowledged int64 `json:"message_bytes_unacknowledged"`
	MessageRAM                 int64 `json:"message_bytes_ram"`
	MessagePersistent          int64 `json:"message_bytes_persistent"`
}

type tgQueue struct {
	tgQueueTotals
	tgMessageStats         `json:"message_stats"`
	Memory                 int64
	Consumers              int64
	ConsumerUtilisation    float64 `json:"consumer_utilisation"`
	Name                   string
	Node                   string
	Vhost                  string
	Type                   string
	Durable                bool
	AutoDelete             bool     `json:"auto_delete"`
	IdleSince              string   `json:"idle_since"`
	SlaveNodes             []string `json:"slave_nodes"`
	SynchronisedSlaveNodes []string `json:"synchronised_slave_nodes"`
	HeadMessageTimestamp   *int64   `json:"head_message_timestamp"`
}

type tgNode struct {
	Name string

	DiskFree                 int64     `json:"disk_free"`
	DiskFreeLimit            int64     `json:"disk_free_limit"`
	DiskFreeAlarm            bool      `json:"disk_free_alarm"`
	FdTotal                  int64     `json:"fd_total"`
	FdUsed                   int64     `json:"fd_used"`
	MemLimit                 int64     `json:"mem_limit"`
	MemUsed                  int64     `json:"mem_used"`
	MemAlarm                 bool      `json:"mem_alarm"`
	ProcTotal                int64     `json:"proc_total"`
	ProcUsed                 int64     `json:"proc_used"`
	RunQueue                 int64     `json:"run_queue"`
	SocketsTotal             int64     `json:"sockets_total"`
	SocketsUsed              int64     `json:"sockets_used"`
	Running                  bool      `json:"running"`
	Uptime                   int64     `json:"uptime"`
	MnesiaDiskTxCount        int64     `json:"mnesia_disk_tx_count"`
	MnesiaDiskTxCountDetails tgDetails `json:"mnesia_disk_tx_count_details"`
	MnesiaRAMTxCount         int64     `json:"mnesia_ram_tx_count"`
	MnesiaRAMTxCountDetails  tgDetails `json:"mnesia_ram_tx_count_details"`
	GcNum                    int64     `json:"gc_num"`
	GcNumDetails             tgDetails `json:"gc_num_details"`
	GcBytesReclaimed         int64     `json:"gc_bytes_reclaimed"`
	GcBytesReclaimedDetails  tgDetails `json:"gc_bytes_reclaimed_details"`
	IoReadAvgTime            float64   `json:"io_read_avg_time"`
	IoReadAvgTimeDetails     tgDetails `json:"io_read_avg_time_details"`
	IoReadBytes              int64     `json:"io_read_bytes"`
	IoReadBytesDetails       tgDetails `json:"io_read_bytes_details"`
	IoWriteAvgTime           float64   `json:"io_write_avg_time"`
	IoWriteAvgTimeDetails    tgDetails `json:"io_write_avg_time_details"`
	IoWriteBytes             int64     `json:"io_write_bytes"`
	IoWriteBytesDetails      tgDetails `json:"io_write_bytes_details"`
}

type tgExchange struct {
	Name           string
	tgMessageStats `json:"message_stats"`
	Type           string
	Internal       bool
	Vhost          string
	Durable        bool
	AutoDelete     bool `json:"auto_delete"`
}

type tgFederationLink struct {
	Type     string `json:"type"`
	Queue    string `json:"queue"`
	Exchange string `json:"exchange"`
	Vhost    string `json:"vhost"`
	Upstream string `json:"upstream"`
}

type tgMemoryResponse struct {
	Memory *tgMemory `json:"memory"`
}

type tgMemory struct {
	ConnectionReaders   int64 `json:"connection_readers"`
	ConnectionWriters   int64 `json:"connection_writers"`
	ConnectionChannels  int64 `json:"connection_channels"`
	ConnectionOther     int64 `json:"connection_other"`
	QueueProcs          int64 `json:"queue_procs"`
	QueueSlaveProcs     int64 `json:"queue_slave_procs"`
	Plugins             int64 `json:"plugins"`
	OtherProc           int64 `json:"other_proc"`
	Metrics             int64 `json:"metrics"`
	MgmtDB              int64 `json:"mgmt_db"`
	Mnesia              int64 `json:"mnesia"`
	OtherEts            int64 `json:"other_ets"`
	Binary              int64 `json:"binary"`
	MsgIndex            int64 `json:"msg_index"`
	Code                int64 `json:"code"`
	Atom                int64 `json:"atom"`
	OtherSystem         int64 `json:"other_system"`
	AllocatedUnused     int64 `json:"allocated_unused"`
	ReservedUnallocated int64 `json:"reserved_unallocated"`
	Total               any   `json:"total"`
}

// tgGet requests path as Telegraf's requestJSON does (basic auth, GET, a
// 2xx or an error, json.Unmarshal into target).
func tgGet(t *testing.T, a *api, path string, target any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "GET", strings.TrimSuffix(a.base, "/api")+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth("guest", "guest")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	buf, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode < 200 || res.StatusCode > 299 {
		t.Fatalf("getting %q failed: %v %s", path, res.StatusCode, buf)
	}
	if err := json.Unmarshal(buf, target); err != nil {
		t.Fatalf("decoding answer from %q failed: %v", path, err)
	}
}

// tgMemTotal is Telegraf's mem_total: total as a number, or the first of
// its rss, allocated and erlang estimates.
func tgMemTotal(t *testing.T, total any) int64 {
	t.Helper()
	switch v := total.(type) {
	case float64:
		return int64(v)
	case map[string]any:
		for _, est := range []string{"rss", "allocated", "erlang"} {
			if x, ok := v[est]; ok {
				f, ok := x.(float64)
				if !ok {
					t.Fatalf("unknown type %T for %q total memory", x, est)
				}
				return int64(f)
			}
		}
		t.Fatalf("no known memory estimation in %v", v)
	}
	t.Fatalf("unknown type %T for total memory", total)
	return 0
}

// Telegraf's rabbitmq input reads brokerd as it reads RabbitMQ: every
// endpoint it gathers from answers (/api/overview, /api/nodes and each
// node's /memory, /api/queues, /api/exchanges, /api/federation-links),
// decodes into its types, and gives values that say what the broker
// holds: the messages published, the connection and consumer, the node's
// memory, descriptors, disk and limits, a queue's bytes and head message
// timestamp, an exchange's publishes in and out.
func TestTelegrafReadsBrokerd(t *testing.T) {
	dir := t.TempDir()
	a := startNodeAPI(t, 100, mgmt.NodeOptions{DataDir: dir,
		MemoryLimit: func() uint64 { return 3 << 30 }, DiskFreeLimit: func() uint64 { return 50 << 20 }})
	amqpAddr, err := net.ResolveTCPAddr("tcp", a.Addr)
	if err != nil {
		t.Fatal(err)
	}
	a.stopAPI()
	a.opts.Listeners = []mgmt.Listener{{Protocol: "amqp", Addr: amqpAddr}}
	a.serve()

	conn, ch := a.Channel(t)
	defer conn.Close()
	const n, body = 5, "telegraf"
	stamp := time.Unix(1700000000, 0)
	if err := ch.ExchangeDeclare("tg.x", "direct", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"tg.q", "tg.consumed"} {
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if err := ch.QueueBind(q, q, "tg.x", false, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		c, err := ch.PublishWithDeferredConfirmWithContext(t.Context(), "tg.x", "tg.q", false, false,
			amqp091.Publishing{Body: []byte(body), DeliveryMode: amqp091.Persistent, Timestamp: stamp})
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := c.WaitContext(t.Context()); !ok || err != nil {
			t.Fatalf("publish %d: confirmed %v, %v", i, ok, err)
		}
	}
	// One delivery held unacknowledged by a consumer.
	if err := ch.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	if err := ch.Publish("tg.x", "tg.consumed", false, false, amqp091.Publishing{Body: []byte(body)}); err != nil {
		t.Fatal(err)
	}
	dels, err := ch.Consume("tg.consumed", "tg", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-dels

	var ov tgOverview
	tgGet(t, a, "/api/overview", &ov)
	if ov.QueueTotals == nil || ov.ObjectTotals == nil || ov.MessageStats == nil {
		t.Fatalf("overview: %+v: Telegraf reports %q", ov, "wrong answer from rabbitmq, probably auth issue")
	}
	amqpListeners := 0
	for _, l := range ov.Listeners {
		if l.Protocol == "amqp" {
			amqpListeners++
		}
	}
	if q, o, m := ov.QueueTotals, ov.ObjectTotals, ov.MessageStats; q.Messages != n+1 || q.MessagesReady != n || q.MessagesUnacknowledged != 1 ||
		o.Connections != 1 || o.Channels != 1 || o.Consumers != 1 || o.Queues != 2 || o.Exchanges < 7 ||
		m.Publish != n+1 || m.Deliver != 1 || m.DeliverGet != 1 || amqpListeners != 1 {
		t.Errorf("overview: queue_totals %+v object_totals %+v message_stats %+v, %d amqp listeners", *q, *o, *m, amqpListeners)
	}

	var nodes []*tgNode
	tgGet(t, a, "/api/nodes", &nodes)
	if len(nodes) != 1 {
		t.Fatalf("%d nodes, want 1", len(nodes))
	}
	nd := nodes[0]
	var overviewNode struct {
		Node string `json:"node"`
	}
	tgGet(t, a, "/api/overview", &overviewNode)
	if nd.Name != overviewNode.Node || !nd.Running || nd.Uptime <= 0 || nd.MemUsed <= 0 || nd.MemLimit != 3<<30 || nd.MemAlarm ||
		nd.DiskFree <= 0 || nd.DiskFreeLimit != 50<<20 || nd.DiskFreeAlarm || nd.FdTotal <= 0 || nd.FdUsed <= 0 || nd.FdUsed > nd.FdTotal ||
		nd.ProcUsed <= 0 || nd.ProcTotal < nd.ProcUsed || nd.SocketsUsed != 1 || nd.SocketsTotal != 100 || nd.RunQueue < 0 || nd.GcNum < 0 {
		t.Errorf("node: %+v", *nd)
	}
	var mem tgMemoryResponse
	tgGet(t, a, "/api/nodes/"+nd.Name+"/memory", &mem)
	if mem.Memory == nil {
		t.Fatal("node memory: no memory object")
	}
	if total := tgMemTotal(t, mem.Memory.Total); total <= 0 || mem.Memory.OtherProc <= 0 || mem.Memory.OtherSystem <= 0 ||
		mem.Memory.AllocatedUnused < 0 || mem.Memory.OtherProc+mem.Memory.OtherSystem > total+mem.Memory.AllocatedUnused {
		t.Errorf("node memory: total %d, %+v", total, *mem.Memory)
	}
	if r := a.do("GET", "/nodes/nobody@nowhere/memory", nil); r.status != 404 {
		t.Errorf("memory of a node that is not: %d %s", r.status, r.body)
	}

	var queues []tgQueue
	tgGet(t, a, "/api/queues", &queues)
	got := map[string]tgQueue{}
	for _, q := range queues {
		got[q.Name] = q
	}
	q, c := got["tg.q"], got["tg.consumed"]
	if q.Messages != n || q.MessagesReady != n || q.MessageBytes != n*int64(len(body)) || q.MessageBytesReady != q.MessageBytes ||
		q.tgMessageStats.Publish != n || q.Node != nd.Name || q.Vhost != "/" || !q.Durable || q.AutoDelete || q.Type != "classic" ||
		q.Memory <= 0 || q.HeadMessageTimestamp == nil || *q.HeadMessageTimestamp != stamp.Unix() {
		t.Errorf("queue tg.q: %+v (head_message_timestamp %v)", q, q.HeadMessageTimestamp)
	}
	if c.Consumers != 1 || c.MessagesUnacknowledged != 1 || c.MessageBytesUnacknowledged != int64(len(body)) || c.tgMessageStats.Deliver != 1 ||
		c.HeadMessageTimestamp != nil {
		t.Errorf("queue tg.consumed: %+v", c)
	}

	var exchanges []tgExchange
	tgGet(t, a, "/api/exchanges", &exchanges)
	var x *tgExchange
	for i := range exchanges {
		if exchanges[i].Name == "tg.x" {
			x = &exchanges[i]
		}
	}
	if x == nil || x.Type != "direct" || !x.Durable || x.PublishIn != n+1 || x.PublishOut != n+1 {
		t.Errorf("exchange tg.x: %+v", x)
	}

	var links []tgFederationLink
	tgGet(t, a, "/api/federation-links", &links)
	if len(links) != 0 {
		t.Errorf("federation links: %v", links)
	}
	tgGet(t, a, "/api/federation-links/%2F", &links)
	if r := a.do("GET", "/federation-links/nowhere", nil); r.status != 404 {
		t.Errorf("federation links of a vhost that is not: %d %s", r.status, r.body)
	}
}
