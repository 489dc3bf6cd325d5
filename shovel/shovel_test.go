package shovel_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
	"github.com/brokerd/brokerd/shovel"
)

// TestShovelQueueToQueue moves a queue's messages between two brokerds in
// each ack mode, with their properties and headers, and leaves the source
// empty.
func TestShovelQueueToQueue(t *testing.T) {
	for _, mode := range []string{shovel.OnConfirm, shovel.OnPublish, shovel.NoAck} {
		t.Run(mode, func(t *testing.T) {
			a, b := brokertest.Start(t, brokertest.Config{}), brokertest.Start(t, brokertest.Config{})
			sa, sb := a.Session(t), b.Session(t)
			sa.Declare("src", nil, brokertest.Durable)
			ts := time.Unix(1700000000, 0)
			props := amqp091.Publishing{
				Headers:     amqp091.Table{"h-str": "v", "h-int": int32(7), "h-tab": amqp091.Table{"x": true}},
				ContentType: "text/plain", ContentEncoding: "gzip", DeliveryMode: 2, Priority: 3,
				CorrelationId: "corr", ReplyTo: "rq", Expiration: "600000", MessageId: "mid",
				Timestamp: ts, Type: "ty", UserId: "guest", AppId: "app",
			}
			for i := range 50 {
				p := props
				p.Body = []byte(fmt.Sprint(i))
				sa.Publish("", "src", p)
			}
			m := manager(t, shovel.Options{})
			m.Start("/", "s1", def(t, map[string]any{
				"src-uri": a.URL, "src-queue": "src", "dest-uri": []string{b.URL}, "dest-queue": "dst",
				"ack-mode": mode, "src-prefetch-count": 7,
			}))
			waitState(t, m, "/", "s1", shovel.StateRunning) // dst is declared
			ds := consume(t, sb, "dst", 50)
			wantBodies(t, ds, 0)
			d := ds[0]
			got := amqp091.Publishing{
				Headers: d.Headers, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding,
				DeliveryMode: d.DeliveryMode, Priority: d.Priority, CorrelationId: d.CorrelationId,
				ReplyTo: d.ReplyTo, Expiration: d.Expiration, MessageId: d.MessageId,
				Timestamp: d.Timestamp, Type: d.Type, UserId: d.UserId, AppId: d.AppId,
			}
			if fmt.Sprint(got) != fmt.Sprint(props) {
				t.Fatalf("properties\n got %v\nwant %v", got, props)
			}
			if d.Exchange != "" || d.RoutingKey != "dst" {
				t.Fatalf("published to %q/%q, want the default exchange, key dst", d.Exchange, d.RoutingKey)
			}
			st := waitState(t, m, "/", "s1", shovel.StateRunning)
			brokertest.Eventually(t, "source empty", func() bool { return sa.Ready("src") == 0 })
			brokertest.Eventually(t, "50 forwarded", func() bool { return status(m, "/", "s1").Forwarded == 50 })
			if st.BlockedStatus != "running" || st.Type != "dynamic" || st.Node != "brokerd@test" ||
				st.SrcQueue != "src" || st.DestQueue != "dst" || strings.Contains(st.SrcURI, "guest") ||
				st.SrcURI != strings.Replace(a.URL, "guest:guest@", "", 1) || st.SrcProtocol != "amqp091" {
				t.Fatalf("status %+v", st)
			}
			m.Stop("/", "s1")
			if s := status(m, "/", "s1"); s.State != "" {
				t.Fatalf("stopped shovel still listed: %+v", s)
			}
		})
	}
}

// TestShovelLocalToRemote shovels from this brokerd ("amqp://", through
// Options.Local) to another, and back into a local vhost named by the URI.
func TestShovelLocalToRemote(t *testing.T) {
	a, b := brokertest.Start(t, brokertest.Config{}), brokertest.Start(t, brokertest.Config{})
	sa, sb := a.Session(t), b.Session(t)
	sa.Declare("src", nil)
	publishN(sa, "src", 0, 20)
	m := manager(t, shovel.Options{Local: local(t, a)})
	m.Start("/", "out", def(t, map[string]any{"src-uri": "amqp://", "src-queue": "src", "dest-uri": b.URL, "dest-queue": "dst"}))
	st := waitState(t, m, "/", "out", shovel.StateRunning)
	wantBodies(t, consume(t, sb, "dst", 20), 0)
	if st.SrcURI != "amqp://" {
		t.Fatalf("src_uri %q, want amqp://", st.SrcURI)
	}
	// The local connection is listed, named by its client as RabbitMQ
	// names a shovel's.
	var named bool
	for _, c := range a.Broker.Connections("") {
		if n, _ := c.ClientProperties.Get("connection_name"); n == "Shovel out" {
			named = c.User == "none" && c.Internal // /api/connections: type direct
		}
	}
	if !named {
		t.Fatalf("no local connection named 'Shovel out' of user none in %+v", a.Broker.Connections(""))
	}
	// Remote to local, into the vhost the URI names ("%2f" is "/").
	sb.Declare("back", nil)
	publishN(sb, "back", 100, 5)
	m.Start("other", "in", def(t, map[string]any{"src-uri": b.URL, "src-queue": "back", "dest-uri": "amqp:///%2f", "dest-queue": "local-in"}))
	waitState(t, m, "other", "in", shovel.StateRunning)
	wantBodies(t, consume(t, sa, "local-in", 5), 100)
}

// TestShovelSrcExchange consumes from an exchange through a server-named
// queue bound with src-exchange-key, and publishes to an exchange with
// dest-exchange-key, or with the message's own key when none is given.
func TestShovelSrcExchange(t *testing.T) {
	a, b := brokertest.Start(t, brokertest.Config{}), brokertest.Start(t, brokertest.Config{})
	sa, sb := a.Session(t), b.Session(t)
	sa.DeclareExchange("events", "topic", nil)
	sb.DeclareExchange("in", "direct", nil)
	sb.Declare("k", nil)
	sb.Bind("k", "k", "in", nil)
	sb.Declare("a.2", nil)
	sb.Bind("a.2", "a.2", "in", nil)
	m := manager(t, shovel.Options{})
	m.Start("/", "x", def(t, map[string]any{
		"src-uri": a.URL, "src-exchange": "events", "src-exchange-key": "a.*",
		"dest-uri": b.URL, "dest-exchange": "in", "dest-exchange-key": "k",
	}))
	st := waitState(t, m, "/", "x", shovel.StateRunning)
	if st.SrcExchange != "events" || st.SrcExchangeKey != "a.*" || st.DestExchange != "in" || st.DestExchangeKey != "k" {
		t.Fatalf("status %+v", st)
	}
	for _, k := range []string{"a.1", "b.1", "a.2"} {
		sa.Publish("events", k, amqp091.Publishing{Body: []byte(k)})
	}
	ds := consume(t, sb, "k", 2)
	if string(ds[0].Body) != "a.1" || string(ds[1].Body) != "a.2" || ds[0].RoutingKey != "k" || ds[0].Exchange != "in" {
		t.Fatalf("got %q %q via %q/%q", ds[0].Body, ds[1].Body, ds[0].Exchange, ds[0].RoutingKey)
	}
	// No dest-exchange-key: the message's routing key is kept.
	m.Start("/", "x", def(t, map[string]any{
		"src-uri": a.URL, "src-exchange": "events", "src-exchange-key": "a.*",
		"dest-uri": b.URL, "dest-exchange": "in",
	}))
	waitState(t, m, "/", "x", shovel.StateRunning)
	sa.Publish("events", "a.2", amqp091.Publishing{Body: []byte("again")})
	if ds := consume(t, sb, "a.2", 1); string(ds[0].Body) != "again" {
		t.Fatalf("got %q", ds[0].Body)
	}
}

// TestShovelForwardHeaders adds RabbitMQ's x-shovelled table (prepended to
// one a message already has) and x-shovelled-timestamp, and sets
// dest-publish-properties on every message.
func TestShovelForwardHeaders(t *testing.T) {
	a, b := brokertest.Start(t, brokertest.Config{}), brokertest.Start(t, brokertest.Config{})
	sa, sb := a.Session(t), b.Session(t)
	sa.Declare("src", nil)
	earlier := amqp091.Table{"shovel-name": "before"}
	sa.Publish("", "src", amqp091.Publishing{Body: []byte("m"), ContentType: "a/b", AppId: "orig",
		Headers: amqp091.Table{"x-shovelled": []any{earlier}, "keep": "me"}})
	m := manager(t, shovel.Options{Node: "rabbit@here"})
	before := time.Now().Unix()
	m.Start("vh", "fwd", def(t, map[string]any{
		"src-uri": a.URL, "src-queue": "src", "dest-uri": b.URL, "dest-queue": "dst",
		"dest-add-forward-headers": true, "dest-add-timestamp-header": true,
		"dest-publish-properties": map[string]any{"delivery_mode": 2, "app_id": "shovel", "priority": 4},
	}))
	waitState(t, m, "vh", "fwd", shovel.StateRunning)
	d := consume(t, sb, "dst", 1)[0]
	if d.DeliveryMode != 2 || d.AppId != "shovel" || d.Priority != 4 || d.ContentType != "a/b" || d.Headers["keep"] != "me" {
		t.Fatalf("properties: %+v", d)
	}
	arr, ok := d.Headers["x-shovelled"].([]any)
	if !ok || len(arr) != 2 {
		t.Fatalf("x-shovelled %#v, want two tables", d.Headers["x-shovelled"])
	}
	want := amqp091.Table{
		"shovelled-by": "rabbit@here", "shovel-type": "dynamic", "shovel-name": "fwd", "shovel-vhost": "vh",
		"src-uri": strings.Replace(a.URL, "guest:guest@", "", 1), "dest-uri": strings.Replace(b.URL, "guest:guest@", "", 1),
		"src-queue": "src", "dest-queue": "dst",
	}
	if fmt.Sprint(arr[0]) != fmt.Sprint(want) || fmt.Sprint(arr[1]) != fmt.Sprint(earlier) {
		t.Fatalf("x-shovelled\n got %v\nwant [%v %v]", arr, want, earlier)
	}
	ts, ok := d.Headers["x-shovelled-timestamp"].(int64)
	if !ok || ts < before || ts > time.Now().Unix() {
		t.Fatalf("x-shovelled-timestamp %#v, want a long from %d to now", d.Headers["x-shovelled-timestamp"], before)
	}
}

// TestShovelDeleteAfter stops after the source queue's length at start
// ("queue-length") or a number of messages, moving exactly that many, and
// calls Options.Deleted.
func TestShovelDeleteAfter(t *testing.T) {
	for _, tc := range []struct {
		deleteAfter any
		mode        string
		moved       int
	}{
		{"queue-length", shovel.OnConfirm, 40},
		{30, shovel.OnConfirm, 30},
		{25, shovel.OnPublish, 25},
		{"queue-length", shovel.NoAck, 40},
	} {
		t.Run(fmt.Sprint(tc.deleteAfter, "/", tc.mode), func(t *testing.T) {
			a, b := brokertest.Start(t, brokertest.Config{}), brokertest.Start(t, brokertest.Config{})
			sa, sb := a.Session(t), b.Session(t)
			sa.Declare("src", nil)
			publishN(sa, "src", 0, 40)
			deleted := make(chan string, 1)
			var m *shovel.Manager
			m = manager(t, shovel.Options{Deleted: func(vhost, name string) {
				m.Stop(vhost, name) // as clearing the parameter does
				deleted <- vhost + "/" + name
			}})
			m.Start("/", "once", def(t, map[string]any{
				"src-uri": a.URL, "src-queue": "src", "dest-uri": b.URL, "dest-queue": "dst",
				"src-delete-after": tc.deleteAfter, "ack-mode": tc.mode, "src-prefetch-count": 4,
			}))
			select {
			case got := <-deleted:
				if got != "//once" {
					t.Fatalf("Deleted(%q)", got)
				}
			case <-time.After(brokertest.Wait):
				t.Fatal("Deleted not called")
			}
			if s := status(m, "/", "once"); s.State != "" {
				t.Fatalf("still listed: %+v", s)
			}
			if got := sb.Ready("dst"); got != tc.moved {
				t.Fatalf("destination holds %d, want %d", got, tc.moved)
			}
			if got := sa.Ready("src"); got != 40-tc.moved {
				t.Fatalf("source holds %d, want %d", got, 40-tc.moved)
			}
			wantBodies(t, sb.DrainDeliveries("dst"), 0)
			wantBodies(t, sa.DrainDeliveries("src"), tc.moved)
		})
	}
}

// TestShovelLocalConnections runs a shovel local→local on a brokerd whose
// one client connection allowed is taken: local connections do not count
// against max_connections, have every permission in the vhost (no user
// "none" exists) and forward a message's user_id unchanged.
func TestShovelLocalConnections(t *testing.T) {
	a := brokertest.Start(t, brokertest.Config{Server: amqp.ServerConfig{MaxConnections: 1}})
	sa := a.Session(t)
	sa.Declare("src", nil)
	sa.Publish("", "src", amqp091.Publishing{Body: []byte("m"), UserId: "guest"})
	// The vhost's connection limit is full with the test's connection,
	// and does not apply to the broker's own.
	if err := a.Broker.SetVHostLimits("/", map[string]int64{"max-connections": 1}); err != nil {
		t.Fatal(err)
	}
	m := manager(t, shovel.Options{Local: local(t, a)})
	m.Start("/", "ll", def(t, map[string]any{"src-uri": "amqp://", "src-queue": "src", "dest-uri": "amqp:///", "dest-queue": "dst"}))
	waitState(t, m, "/", "ll", shovel.StateRunning)
	if d := consume(t, sa, "dst", 1)[0]; d.UserId != "guest" {
		t.Fatalf("user_id %q", d.UserId)
	}
	if n := a.Server().Connections(); n != 1 {
		t.Fatalf("client server counts %d connections, want 1 (the test's)", n)
	}
}

// TestShovelDestinationNack declares the destination queue with
// dest-queue-args that make it refuse publishes once full (reject-publish):
// its nacks make the shovel nack the source deliveries with requeue, so
// what the destination refused stays in the source.
func TestShovelDestinationNack(t *testing.T) {
	a, b := brokertest.Start(t, brokertest.Config{}), brokertest.Start(t, brokertest.Config{})
	sa, sb := a.Session(t), b.Session(t)
	sa.Declare("src", nil)
	publishN(sa, "src", 0, 5)
	m := manager(t, shovel.Options{})
	m.Start("/", "n", def(t, map[string]any{
		"src-uri": a.URL, "src-queue": "src", "dest-uri": b.URL, "dest-queue": "dst",
		"dest-queue-args": map[string]any{"x-max-length": 2, "x-overflow": "reject-publish"},
	}))
	waitState(t, m, "/", "n", shovel.StateRunning)
	brokertest.Eventually(t, "two forwarded", func() bool { return status(m, "/", "n").Forwarded == 2 })
	m.Stop("/", "n")
	sb.WantDrain("dst", "0", "1")
	if got := sa.Drain("src"); len(got) != 3 {
		t.Fatalf("source holds %q, want the 3 refused", got)
	}
}

// TestShovelDeclares declares a missing source queue durable with
// src-queue-args, as RabbitMQ's ensure_queue does, leaves an existing one
// as it is, and with src-predeclared refuses a missing one.
func TestShovelDeclares(t *testing.T) {
	a, b := brokertest.Start(t, brokertest.Config{}), brokertest.Start(t, brokertest.Config{})
	sa := a.Session(t)
	sa.Declare("exists", nil)
	m := manager(t, shovel.Options{})
	m.Start("/", "d1", def(t, map[string]any{"src-uri": a.URL, "src-queue": "made", "src-queue-args": map[string]any{"x-max-length": 5},
		"dest-uri": b.URL, "dest-queue": "dst"}))
	m.Start("/", "d2", def(t, map[string]any{"src-uri": a.URL, "src-queue": "exists", "src-queue-args": map[string]any{"x-max-length": 5},
		"dest-uri": b.URL, "dest-queue": "dst"}))
	m.Start("/", "d3", def(t, map[string]any{"src-uri": a.URL, "src-queue": "absent", "src-predeclared": true,
		"dest-uri": b.URL, "dest-queue": "dst"}))
	waitState(t, m, "/", "d1", shovel.StateRunning)
	waitState(t, m, "/", "d2", shovel.StateRunning)
	q, err := a.Broker.Queue("/", "made")
	if err != nil || !q.Durable || q.Exclusive || q.AutoDelete || fmt.Sprint(q.Arguments) != "[{x-max-length 5}]" {
		t.Fatalf("declared source queue %+v, %v", q, err)
	}
	if q, _ := a.Broker.Queue("/", "exists"); q.Durable || len(q.Arguments) != 0 {
		t.Fatalf("existing source queue changed: %+v", q)
	}
	brokertest.Eventually(t, "d3 refused", func() bool {
		return strings.Contains(status(m, "/", "d3").Reason, "NOT_FOUND - no queue 'absent'")
	})
	if _, err := a.Broker.Queue("/", "absent"); err == nil {
		t.Fatal("predeclared source queue was declared")
	}
}

// TestShovelRedeliveredCopyFlagged: a message its source delivered before
// (flagged redelivered there) reaches this brokerd through a shovel
// flagged redelivered, and still so after a restart: a copy of it may be
// here already (confirmed before a crash took the source's ack with it),
// and a consumer that checks redelivered messages for duplicates must see
// it. Messages never delivered are not flagged; the marking header is
// taken off; from a client it is an ordinary header.
func TestShovelRedeliveredCopyFlagged(t *testing.T) {
	a, b := brokertest.Start(t, brokertest.Config{}), brokertest.Start(t, brokertest.Config{})
	sa, sb := a.Session(t), b.Session(t)
	sb.Declare("src", nil, brokertest.Durable)
	sa.Declare("dst", nil, brokertest.Durable)
	publishN(sb, "src", 0, 4)
	for _, d := range sb.GetN("src", 2) { // 0 and 1 go back flagged redelivered
		if err := d.Reject(true); err != nil {
			t.Fatal(err)
		}
	}
	m := manager(t, shovel.Options{Local: local(t, a)})
	m.Start("/", "in", def(t, map[string]any{"src-uri": b.URL, "src-queue": "src", "dest-uri": "amqp://", "dest-queue": "dst"}))
	waitState(t, m, "/", "in", shovel.StateRunning)
	settled(t, b, "src")
	m.Stop("/", "in")

	a.Restart()
	sa = a.Session(t)
	ds := sa.GetN("dst", 4)
	wantBodies(t, ds, 0)
	for i, d := range ds {
		if want := i < 2; d.Redelivered != want {
			t.Errorf("message %s: redelivered %v, want %v", d.Body, d.Redelivered, want)
		}
		if _, ok := d.Headers[broker.RedeliveredHeader]; ok {
			t.Errorf("message %s keeps the header %s: %v", d.Body, broker.RedeliveredHeader, d.Headers)
		}
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
	}
	sa.Publish("", "dst", amqp091.Publishing{Headers: amqp091.Table{broker.RedeliveredHeader: true}, Body: []byte("client")})
	if d := sa.Get("dst"); d.Redelivered || d.Headers[broker.RedeliveredHeader] != true {
		t.Fatalf("a client's message with the header: redelivered %v, headers %v", d.Redelivered, d.Headers)
	}
}
