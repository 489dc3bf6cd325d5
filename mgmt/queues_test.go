package mgmt_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/brokerd/brokerd/mgmt"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

func TestOverviewAndWhoami(t *testing.T) {
	a := startAPI(t)
	_, ch := a.Channel(t)
	if _, err := ch.QueueDeclare("q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := ch.Publish("", "q", false, false, amqp091.Publishing{Body: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, func() bool { return a.must(200, "GET", "/queues/%2F/q", nil).object(t)["messages"] == 3.0 })
	o := a.must(200, "GET", "/overview", nil).object(t)
	totals := o["object_totals"].(map[string]any)
	if totals["queues"] != 1.0 || totals["connections"] != 1.0 || totals["channels"] != 1.0 || totals["exchanges"] != 6.0 {
		t.Errorf("object_totals %v", totals)
	}
	if qt := o["queue_totals"].(map[string]any); qt["messages"] != 3.0 || qt["messages_ready"] != 3.0 {
		t.Errorf("queue_totals %v", qt)
	}
	if o["product_name"] != "brokerd" {
		t.Errorf("product_name %v", o["product_name"])
	}
	w := a.must(200, "GET", "/whoami", nil).object(t)
	if w["name"] != "guest" || fmt.Sprint(w["tags"]) != "[administrator]" {
		t.Errorf("whoami %v", w)
	}
}

func TestAuthErrors(t *testing.T) {
	a := startAPI(t)
	r := a.as("guest", "wrong", "GET", "/overview", nil)
	wantError(t, r, 401, "not_authorized", "Login failed")
	if r.header.Get("WWW-Authenticate") == "" {
		t.Error("401 without WWW-Authenticate")
	}
	wantError(t, a.as("nobody", "x", "GET", "/queues", nil), 401, "not_authorized", "Login failed")
	wantError(t, a.do("GET", "/no-such-thing", nil), 404, "Object Not Found", "Not Found")
	// RabbitMQ's 405 and 401-without-credentials have no body.
	r = a.do("POST", "/overview", nil)
	if r.status != 405 || r.header.Get("Allow") != "HEAD, GET, OPTIONS" || len(r.body) != 0 {
		t.Errorf("POST /overview: %d Allow %q %q", r.status, r.header.Get("Allow"), r.body)
	}
	req, _ := http.NewRequest("GET", a.base+"/overview", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 401 || res.Header.Get("WWW-Authenticate") != `Basic realm="RabbitMQ Management"` {
		t.Errorf("no credentials: %d %v", res.StatusCode, res.Header)
	}
	wantError(t, a.do("PUT", "/queues/%2F/q", "{not json"), 400, "bad_request", "not_json")
	wantError(t, a.do("GET", "/queues/nowhere", nil), 404, "Object Not Found", "")
	wantError(t, a.do("PUT", "/queues/nowhere/q", map[string]any{}), 404, "not_found", "vhost_not_found")
	wantError(t, a.do("GET", "/queues/%2F/absent", nil), 404, "Object Not Found", "")
}

func TestQueueLifecycle(t *testing.T) {
	a := startAPI(t)
	args := map[string]any{"x-dead-letter-exchange": "dlx", "x-message-ttl": 60000, "x-max-length": 10, "x-overflow": "reject-publish"}
	a.must(201, "PUT", "/queues/%2F/work", map[string]any{"durable": true, "arguments": args})
	a.must(204, "PUT", "/queues/%2F/work", map[string]any{"durable": true, "arguments": args})
	// Redeclared differently: RabbitMQ's 406 text as a 400.
	changed := map[string]any{"x-dead-letter-exchange": "dlx", "x-message-ttl": 5, "x-max-length": 10, "x-overflow": "reject-publish"}
	wantError(t, a.do("PUT", "/queues/%2F/work", map[string]any{"durable": true, "arguments": changed}),
		400, "bad_request", "inequivalent arg 'x-message-ttl' for queue 'work' in vhost '/': received the value '5'")
	// Invalid argument: the channel's text.
	wantError(t, a.do("PUT", "/queues/%2F/bad", map[string]any{"arguments": map[string]any{"x-max-length": "ten"}}),
		400, "bad_request", "invalid arg 'x-max-length' for queue 'bad' in vhost '/'")
	wantError(t, a.do("PUT", "/queues/%2F/amq.q", map[string]any{}), 401, "not_authorised", "Access refused.")

	q := a.must(200, "GET", "/queues/%2F/work", nil).object(t)
	if q["durable"] != true || q["auto_delete"] != false || q["type"] != "classic" || q["state"] != "running" {
		t.Errorf("queue %v", q)
	}
	if got := q["arguments"].(map[string]any); got["x-message-ttl"] != 60000.0 || got["x-dead-letter-exchange"] != "dlx" || got["x-overflow"] != "reject-publish" {
		t.Errorf("arguments %v", got)
	}

	// The queue is real: a client sees it with its arguments.
	_, ch := a.Channel(t)
	if _, err := ch.QueueDeclarePassive("work", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if err := ch.Publish("", "work", false, false, amqp091.Publishing{Body: []byte(fmt.Sprintf("m%d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, func() bool { return a.must(200, "GET", "/queues/%2F/work", nil).object(t)["messages_ready"] == 4.0 })
	q = a.must(200, "GET", "/queues/%2F/work", nil).object(t)
	if q["message_bytes"] != 8.0 || q["message_bytes_ready"] != 8.0 {
		t.Errorf("bytes %v %v", q["message_bytes"], q["message_bytes_ready"])
	}
	// Unacked messages and a consumer show.
	if err := ch.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	deliveries, err := ch.Consume("work", "c1", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-deliveries
	q = a.must(200, "GET", "/queues/%2F/work", nil).object(t)
	if q["messages"] != 4.0 || q["messages_ready"] != 3.0 || q["messages_unacknowledged"] != 1.0 || q["consumers"] != 1.0 ||
		q["message_bytes_unacknowledged"] != 2.0 {
		t.Errorf("with a consumer: %v", q)
	}
	if cd := q["consumer_details"].([]any); len(cd) != 1 || cd[0].(map[string]any)["consumer_tag"] != "c1" {
		t.Errorf("consumer_details %v", cd)
	}
	if err := ch.Cancel("c1", false); err != nil {
		t.Fatal(err)
	}
	ch.Close()

	// if-empty refuses while messages are there; purge empties it.
	wantError(t, a.do("DELETE", "/queues/%2F/work?if-empty=true", nil), 400, "bad_request", "queue 'work' in vhost '/' not empty")
	a.must(204, "DELETE", "/queues/%2F/work/contents", nil)
	if q := a.must(200, "GET", "/queues/%2F/work", nil).object(t); q["messages"] != 0.0 {
		t.Errorf("after purge: %v messages", q["messages"])
	}
	a.must(204, "DELETE", "/queues/%2F/work?if-empty=true", nil)
	a.must(404, "GET", "/queues/%2F/work", nil)
	a.must(404, "DELETE", "/queues/%2F/work", nil)
	if l := a.must(200, "GET", "/queues/", nil).list(t); len(l) != 0 {
		t.Errorf("queues left: %v", l)
	}
}

func TestGetMessages(t *testing.T) {
	a := startAPI(t)
	a.must(201, "PUT", "/queues/%2F/dlq", map[string]any{})
	a.must(201, "PUT", "/queues/%2F/q", map[string]any{"arguments": map[string]any{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}})
	_, ch := a.Channel(t)
	pubs := []amqp091.Publishing{
		{Body: []byte("hello"), ContentType: "text/plain", Headers: amqp091.Table{"n": int32(1), "t": amqp091.Table{"k": "v"}}, DeliveryMode: 2, MessageId: "m1"},
		{Body: []byte{0xff, 0x00, 0xfe}},
		{Body: []byte("third message")},
	}
	for _, p := range pubs {
		if err := ch.Publish("", "q", false, false, p); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, func() bool { return a.must(200, "GET", "/queues/%2F/q", nil).object(t)["messages"] == 3.0 })

	// ack_requeue_true: all come back, redelivered, in order.
	got := a.must(200, "POST", "/queues/%2F/q/get", map[string]any{"count": 2, "ackmode": "ack_requeue_true", "encoding": "auto"}).list(t)
	if len(got) != 2 {
		t.Fatalf("got %d messages, want 2", len(got))
	}
	m := got[0]
	props := m["properties"].(map[string]any)
	if m["payload"] != "hello" || m["payload_encoding"] != "string" || m["payload_bytes"] != 5.0 || m["redelivered"] != false ||
		m["routing_key"] != "q" || m["exchange"] != "" || m["message_count"] != 2.0 ||
		props["content_type"] != "text/plain" || props["delivery_mode"] != 2.0 || props["message_id"] != "m1" {
		t.Errorf("first message %v", m)
	}
	if h := props["headers"].(map[string]any); h["n"] != 1.0 || h["t"].(map[string]any)["k"] != "v" {
		t.Errorf("headers %v", h)
	}
	if got[1]["payload"] != "/wD+" || got[1]["payload_encoding"] != "base64" {
		t.Errorf("binary body: %v %v", got[1]["payload"], got[1]["payload_encoding"])
	}
	again := a.must(200, "POST", "/queues/%2F/q/get", map[string]any{"count": 1, "ackmode": "ack_requeue_true", "encoding": "base64", "truncate": 2}).list(t)
	if len(again) != 1 || again[0]["redelivered"] != true || again[0]["payload"] != "aGU=" || again[0]["payload_bytes"] != 5.0 {
		t.Errorf("requeued message %v", again)
	}
	// ack_requeue_false removes; reject_requeue_false dead-letters.
	a.must(200, "POST", "/queues/%2F/q/get", map[string]any{"count": 1, "ackmode": "ack_requeue_false", "encoding": "auto"})
	a.must(200, "POST", "/queues/%2F/q/get", map[string]any{"count": 1, "ackmode": "reject_requeue_false", "encoding": "auto"})
	waitFor(t, func() bool { return a.must(200, "GET", "/queues/%2F/dlq", nil).object(t)["messages"] == 1.0 })
	dl := a.must(200, "POST", "/queues/%2F/dlq/get", map[string]any{"count": 10, "ackmode": "ack_requeue_true", "encoding": "auto"}).list(t)
	if len(dl) != 1 || dl[0]["payload_encoding"] != "base64" {
		t.Fatalf("dead letters %v", dl)
	}
	xdeath := dl[0]["properties"].(map[string]any)["headers"].(map[string]any)["x-death"].([]any)[0].(map[string]any)
	if xdeath["reason"] != "rejected" || xdeath["queue"] != "q" {
		t.Errorf("x-death %v", xdeath)
	}
	if q := a.must(200, "GET", "/queues/%2F/q", nil).object(t); q["messages"] != 1.0 {
		t.Errorf("q has %v messages, want 1", q["messages"])
	}
	wantError(t, a.do("POST", "/queues/%2F/q/get", map[string]any{"count": 1, "ackmode": "bogus", "encoding": "auto"}), 400, "bad_request", "Unsupported ackmode bogus")
	wantError(t, a.do("POST", "/queues/%2F/q/get", map[string]any{"count": 1, "ackmode": "ack_requeue_true", "encoding": "hex"}), 400, "bad_request", "Unsupported encoding. Please use auto or base64.")
	wantError(t, a.do("POST", "/queues/%2F/q/get", map[string]any{}), 400, "bad_request", "[{key_missing,ackmode},{key_missing,count},{key_missing,encoding}]")
	wantError(t, a.do("POST", "/queues/%2F/absent/get", map[string]any{"count": "1", "ackmode": "ack_requeue_true", "encoding": "auto"}), 404, "not_found", "NOT_FOUND - no queue 'absent'")
}

func TestExchangesAndBindings(t *testing.T) {
	a := startAPI(t)
	a.must(201, "PUT", "/exchanges/%2F/orders", map[string]any{"type": "topic", "durable": true})
	a.must(201, "PUT", "/exchanges/%2F/audit", map[string]any{"type": "fanout", "arguments": map[string]any{"alternate-exchange": "ae"}})
	wantError(t, a.do("PUT", "/exchanges/%2F/orders", map[string]any{"type": "direct"}), 400, "bad_request", "inequivalent arg 'type' for exchange 'orders' in vhost '/': received 'direct' but current is 'topic'")
	a.must(201, "PUT", "/queues/%2F/eu", map[string]any{})
	a.must(201, "PUT", "/queues/%2F/all", map[string]any{})

	r := a.must(201, "POST", "/bindings/%2F/e/orders/q/eu", map[string]any{"routing_key": "order.eu.*"})
	if loc := r.header.Get("Location"); loc != "eu/order.eu.%252A" {
		t.Errorf("Location %q", loc)
	}
	a.must(201, "POST", "/bindings/%2F/e/orders/e/audit", map[string]any{"routing_key": "#"})
	a.must(201, "POST", "/bindings/%2F/e/audit/q/all", map[string]any{})
	wantError(t, a.do("POST", "/bindings/%2F/e/orders/q/absent", map[string]any{}), 404, "not_found", "no queue 'absent' in vhost '/'")

	// Routing works through what the API made.
	_, ch := a.Channel(t)
	if err := ch.Publish("orders", "order.eu.1", false, false, amqp091.Publishing{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		return a.must(200, "GET", "/queues/%2F/eu", nil).object(t)["messages"] == 1.0 &&
			a.must(200, "GET", "/queues/%2F/all", nil).object(t)["messages"] == 1.0
	})

	bs := a.must(200, "GET", "/bindings/%2F/e/orders/q/eu", nil).list(t)
	if len(bs) != 1 || bs[0]["properties_key"] != "order.eu.%2A" || bs[0]["destination_type"] != "queue" {
		t.Fatalf("bindings %v", bs)
	}
	if src := a.must(200, "GET", "/exchanges/%2F/orders/bindings/source", nil).list(t); len(src) != 2 {
		t.Errorf("source bindings %v", src)
	}
	if qb := a.must(200, "GET", "/queues/%2F/eu/bindings", nil).list(t); len(qb) != 2 || qb[0]["source"] != "" {
		t.Errorf("queue bindings (default first) %v", qb)
	}
	a.must(200, "GET", "/bindings/%2F/e/orders/q/eu/order.eu.%2A", nil)
	a.must(204, "DELETE", "/bindings/%2F/e/orders/q/eu/order.eu.%2A", nil)
	a.must(404, "GET", "/bindings/%2F/e/orders/q/eu/order.eu.%2A", nil)
	a.must(204, "DELETE", "/bindings/%2F/e/orders/e/audit/%23", nil)

	x := a.must(200, "GET", "/exchanges/%2F/audit", nil).object(t)
	if x["type"] != "fanout" || x["arguments"].(map[string]any)["alternate-exchange"] != "ae" {
		t.Errorf("exchange %v", x)
	}
	if d := a.must(200, "GET", "/exchanges/%2F/amq.default", nil).object(t); d["name"] != "" || d["type"] != "direct" {
		t.Errorf("default exchange %v", d)
	}
	wantError(t, a.do("DELETE", "/exchanges/%2F/amq.direct", nil), 401, "not_authorised", "Access refused.")
	a.must(204, "DELETE", "/exchanges/%2F/orders", nil)
	a.must(404, "GET", "/exchanges/%2F/orders", nil)
}

func TestConnectionsAndChannels(t *testing.T) {
	a := startAPI(t)
	cfg := amqp091.Config{Properties: amqp091.Table{"connection_name": "billing-worker"}}
	conn, err := amqp091.DialConfig(a.URL, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	closed := conn.NotifyClose(make(chan *amqp091.Error, 1))

	cs := a.must(200, "GET", "/connections/", nil).list(t)
	if len(cs) != 1 {
		t.Fatalf("connections %v", cs)
	}
	c := cs[0]
	name := c["name"].(string)
	local := conn.LocalAddr().String()
	if name != local+" -> "+a.Addr || c["user"] != "guest" || c["vhost"] != "/" || c["user_provided_name"] != "billing-worker" ||
		c["client_properties"].(map[string]any)["connection_name"] != "billing-worker" || c["channels"] != 1.0 ||
		c["protocol"] != "AMQP 0-9-1" || c["auth_mechanism"] != "PLAIN" {
		t.Errorf("connection %v", c)
	}
	chs := a.must(200, "GET", "/channels", nil).list(t)
	if len(chs) != 1 || chs[0]["name"] != name+" (1)" || chs[0]["confirm"] != true || chs[0]["number"] != 1.0 {
		t.Errorf("channels %v", chs)
	}
	a.must(200, "GET", "/connections/"+pathEscape(name), nil)
	if l := a.must(200, "GET", "/vhosts/%2F/connections", nil).list(t); len(l) != 1 {
		t.Errorf("vhost connections %v", l)
	}
	if l := a.must(200, "GET", "/connections/"+pathEscape(name)+"/channels", nil).list(t); len(l) != 1 || l[0]["number"] != 1.0 {
		t.Errorf("connection channels %v", l)
	}
	if _, err := ch.QueueDeclare("cq", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.Consume("cq", "tag-1", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	c1 := a.must(200, "GET", "/channels/"+pathEscape(name+" (1)"), nil).object(t)
	if c1["consumer_count"] != 1.0 || c1["connection_details"].(map[string]any)["name"] != name {
		t.Errorf("channel %v", c1)
	}
	cons := a.must(200, "GET", "/consumers/%2F", nil).list(t)
	if len(cons) != 1 || cons[0]["consumer_tag"] != "tag-1" || cons[0]["queue"].(map[string]any)["name"] != "cq" || cons[0]["ack_required"] != true {
		t.Errorf("consumers %v", cons)
	}
	a.must(404, "GET", "/channels/"+pathEscape(name+" (9)"), nil)

	r := a.do("DELETE", "/connections/"+pathEscape(name), nil, "X-Reason", "maintenance window")
	if r.status != http.StatusNoContent {
		t.Fatalf("DELETE connection: %d %s", r.status, r.body)
	}
	e := <-closed
	if e == nil || e.Code != 320 || e.Reason != "CONNECTION_FORCED - maintenance window" {
		t.Fatalf("connection closed with %v, want 320 CONNECTION_FORCED - maintenance window", e)
	}
	waitFor(t, func() bool { return len(a.must(200, "GET", "/connections", nil).list(t)) == 0 })
	a.must(404, "DELETE", "/connections/"+pathEscape(name), nil)
}

func TestHealthAndAliveness(t *testing.T) {
	a := startAPI(t)
	if r := a.must(200, "GET", "/health/checks/alarms", nil).object(t); r["status"] != "ok" {
		t.Errorf("health %v", r)
	}
	if r := a.must(200, "GET", "/aliveness-test/%2F", nil).object(t); r["status"] != "ok" {
		t.Errorf("aliveness %v", r)
	}
	a.Broker.SetAlarm("memory", true)
	r := a.must(503, "GET", "/health/checks/alarms", nil).object(t)
	if r["status"] != "failed" || fmt.Sprint(r["alarms"]) == "[]" {
		t.Errorf("health with an alarm %v", r)
	}
	if r := a.must(503, "GET", "/aliveness-test/%2F", nil).object(t); r["status"] != "failed" {
		t.Errorf("aliveness with an alarm %v", r)
	}
	a.Broker.SetAlarm("memory", false)
	a.must(404, "GET", "/aliveness-test/nowhere", nil)
}

// A /get collects at most Options.MaxGetBytes of messages, however large
// its count: a count of 10^9 on a deep queue (or one being fed) would
// otherwise hold every message in the broker's memory, unacknowledged,
// and build a reply as large. What was not fetched stays in the queue,
// and what was fetched with ack_requeue_true goes back.
func TestGetMessagesBounded(t *testing.T) {
	a := startAPIWith(t, mgmt.Options{MaxGetBytes: 8 << 10})
	a.must(201, "PUT", "/queues/%2F/deep", nil)
	_, ch := a.Channel(t)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, 1000)
	for range 100 {
		c, err := ch.PublishWithDeferredConfirm("", "deep", false, false, amqp091.Publishing{Body: body})
		if err != nil {
			t.Fatal(err)
		}
		if !c.Wait() {
			t.Fatal("publish nacked")
		}
	}
	got := a.must(200, "POST", "/queues/%2F/deep/get", map[string]any{"count": 1000000000, "ackmode": "ack_requeue_true", "encoding": "auto"}).list(t)
	if len(got) == 0 || len(got) > 10 {
		t.Fatalf("count 10^9 with an 8 KiB bound: %d messages of 1000 bytes", len(got))
	}
	if q := a.must(200, "GET", "/queues/%2F/deep", nil).object(t); q["messages_ready"] != 100.0 || q["messages_unacknowledged"] != 0.0 {
		t.Errorf("after ack_requeue_true: %v ready, %v unacked, want 100, 0", q["messages_ready"], q["messages_unacknowledged"])
	}
	got = a.must(200, "POST", "/queues/%2F/deep/get", map[string]any{"count": 1000000000, "ackmode": "ack_requeue_false", "encoding": "auto"}).list(t)
	if q := a.must(200, "GET", "/queues/%2F/deep", nil).object(t); q["messages"] != float64(100-len(got)) {
		t.Errorf("after acking %d: %v messages", len(got), q["messages"])
	}
	// A message larger than the bound still comes back, alone.
	big := make([]byte, 16<<10)
	a.must(204, "DELETE", "/queues/%2F/deep/contents", nil)
	if c, err := ch.PublishWithDeferredConfirm("", "deep", false, false, amqp091.Publishing{Body: big}); err != nil || !c.Wait() {
		t.Fatal("publish of the big message failed", err)
	}
	if got := a.must(200, "POST", "/queues/%2F/deep/get", map[string]any{"count": 5, "ackmode": "ack_requeue_true", "encoding": "auto"}).list(t); len(got) != 1 || got[0]["payload_bytes"] != float64(16<<10) {
		t.Errorf("the big message: %d messages", len(got))
	}
}

// Purging an absent queue is RabbitMQ's 404 "Object Not Found" (its
// resource does not exist), not the channel's NOT_FOUND text.
func TestPurgeAbsentQueue(t *testing.T) {
	a := startAPI(t)
	r := a.do("DELETE", "/queues/%2F/absent/contents", nil)
	wantError(t, r, 404, "Object Not Found", "Not Found")
	if reason := r.object(t)["reason"]; reason != "Not Found" {
		t.Errorf("reason %q, want Not Found", reason)
	}
}

// Header values in a /get render as RabbitMQ 3.10's
// rabbit_mgmt_format:amqp_value does (post-get-ack-requeue-true.json):
// bytes that are not UTF-8 as "Not UTF-8, base64 is: ..." (76-character
// lines), void as "undefined", a decimal as its scale "." its value.
func TestGetHeaderValues(t *testing.T) {
	a := startAPI(t)
	a.must(201, "PUT", "/queues/%2F/h", nil)
	_, ch := a.Channel(t)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	long := make([]byte, 60)
	for i := range long {
		long[i] = 0xff
	}
	c, err := ch.PublishWithDeferredConfirm("", "h", false, false, amqp091.Publishing{Body: []byte("x"), Headers: amqp091.Table{
		"bytes": []byte{0, 1, 2, 255}, "utf8": []byte("abc"), "long": long, "void": nil,
		"decimal": amqp091.Decimal{Scale: 2, Value: 12345}, "table": amqp091.Table{"v": nil},
	}})
	if err != nil || !c.Wait() {
		t.Fatal("publish failed", err)
	}
	got := a.must(200, "POST", "/queues/%2F/h/get", map[string]any{"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"}).list(t)
	h := got[0]["properties"].(map[string]any)["headers"].(map[string]any)
	want := map[string]any{
		"bytes": "Not UTF-8, base64 is: AAEC/w==", "utf8": "abc", "void": "undefined", "decimal": 2.12345,
		"long": "Not UTF-8, base64 is: " + strings.Repeat("/", 76) + "\n" + strings.Repeat("/", 4), // 60 bytes 0xff
	}
	for k, v := range want {
		if h[k] != v {
			t.Errorf("header %s: %#v, want %#v", k, h[k], v)
		}
	}
	if v := h["table"].(map[string]any)["v"]; v != "undefined" {
		t.Errorf("void in a table: %#v", v)
	}
}

// The overview's message_stats count what clients did, under RabbitMQ's
// names: publishes, deliveries by how they were taken, acks, redeliveries,
// empty gets, and brokerd's dead_lettered.
func TestOverviewMessageStats(t *testing.T) {
	a := startAPI(t)
	_, ch := a.Channel(t)
	if _, err := ch.QueueDeclare("dlq", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("q", false, false, false, false, amqp091.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if err := ch.Publish("", "q", false, false, amqp091.Publishing{Body: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	// get with ack: 1 delivery, 1 ack; get then nack with requeue and get
	// again: 2 deliveries, 1 redelivered, then rejected to the DLQ.
	m, ok, err := ch.Get("q", false)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	if err := m.Ack(false); err != nil {
		t.Fatal(err)
	}
	if m, _, err = ch.Get("q", false); err != nil || m.Nack(false, true) != nil {
		t.Fatalf("get: %v", err)
	}
	if m, _, err = ch.Get("q", false); err != nil || !m.Redelivered || m.Reject(false) != nil {
		t.Fatalf("get again: redelivered %v, %v", m.Redelivered, err)
	}
	// A get without ack and a consumer without ack take the other two.
	if _, ok, err := ch.Get("q", true); err != nil || !ok {
		t.Fatalf("get no-ack: %v %v", ok, err)
	}
	dels, err := ch.Consume("q", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-dels
	if _, ok, err := ch.Get("q", true); err != nil || ok {
		t.Fatalf("get from the empty queue: %v %v", ok, err)
	}
	waitFor(t, func() bool { return a.must(200, "GET", "/queues/%2F/dlq", nil).object(t)["messages"] == 1.0 })
	got := a.must(200, "GET", "/overview", nil).object(t)["message_stats"].(map[string]any)
	want := map[string]float64{"publish": 4, "get": 3, "get_no_ack": 1, "deliver": 0, "deliver_no_ack": 1, "deliver_get": 5,
		"ack": 1, "redeliver": 1, "get_empty": 1, "dead_lettered": 1, "drop_unroutable": 0, "return_unroutable": 0, "confirm": 0}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("message_stats.%s = %v, want %v", k, got[k], v)
		}
	}
}

// A queue's message_stats count what clients did with that queue's
// messages, under RabbitMQ's names and grouped as RabbitMQ 3.10 reports
// them: publish alone on a queue only published to, the delivery counters
// together once any is non-zero, none at all on a queue without activity.
func TestQueueMessageStats(t *testing.T) {
	a := startAPI(t)
	conn, ch := a.Channel(t)
	for _, q := range []string{"q", "other", "idle"} {
		if _, err := ch.QueueDeclare(q, false, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	publish := func(q string, n int) {
		t.Helper()
		for i := range n {
			if err := ch.Publish("", q, false, false, amqp091.Publishing{Body: []byte(fmt.Sprint(i))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	queue := func(q string) map[string]any { return a.must(200, "GET", "/queues/%2F/"+q, nil).object(t) }
	publish("q", 6)
	publish("other", 2)
	waitFor(t, func() bool { return queue("q")["messages"] == 6.0 && queue("other")["messages"] == 2.0 })

	// get with ack; get without; get then nack with requeue.
	m, ok, err := ch.Get("q", false)
	if err != nil || !ok || m.Ack(false) != nil {
		t.Fatalf("get: %v %v", ok, err)
	}
	if _, ok, err := ch.Get("q", true); err != nil || !ok {
		t.Fatalf("get no-ack: %v %v", ok, err)
	}
	if m, ok, err = ch.Get("q", false); err != nil || !ok || m.Nack(false, true) != nil {
		t.Fatalf("get to nack: %v %v", ok, err)
	}
	// A manual-ack consumer takes the 4 left, the requeued one first
	// (redelivered), and acks them.
	ch2, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	dels, err := ch2.Consume("q", "manual", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		d := <-dels
		if d.Redelivered != (i == 0) {
			t.Errorf("delivery %d: redelivered %v", i, d.Redelivered)
		}
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
	}
	if err := ch2.Cancel("manual", false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { q := queue("q"); return q["messages"] == 0.0 && q["consumers"] == 0.0 })
	// An auto-ack consumer takes 2 more; then a get finds the queue empty.
	publish("q", 2)
	auto, err := ch2.Consume("q", "auto", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-auto
	<-auto
	if _, ok, err := ch.Get("q", true); err != nil || ok {
		t.Fatalf("get from the empty queue: %v %v", ok, err)
	}

	want := map[string]any{"publish": 8.0, "get": 2.0, "get_no_ack": 1.0, "deliver": 4.0, "deliver_no_ack": 2.0,
		"deliver_get": 9.0, "ack": 5.0, "redeliver": 1.0, "get_empty": 1.0}
	check := func(where string, q map[string]any, want map[string]any) {
		t.Helper()
		ms, _ := q["message_stats"].(map[string]any)
		if want == nil {
			if _, ok := q["message_stats"]; ok {
				t.Errorf("%s: message_stats %v on a queue without activity", where, q["message_stats"])
			}
			return
		}
		counts := 0
		for k := range ms {
			if !strings.HasSuffix(k, "_details") {
				counts++
			}
		}
		if counts != len(want) {
			t.Errorf("%s: message_stats %v, want %v", where, ms, want)
		}
		for k, v := range want {
			if ms[k] != v {
				t.Errorf("%s: message_stats.%s = %v, want %v", where, k, ms[k], v)
			}
			if _, ok := ms[k+"_details"].(map[string]any)["rate"]; !ok {
				t.Errorf("%s: message_stats.%s_details %v has no rate", where, k, ms[k+"_details"])
			}
		}
	}
	check("q", queue("q"), want)
	check("other", queue("other"), map[string]any{"publish": 2.0})
	check("idle", queue("idle"), nil)
	for _, q := range a.must(200, "GET", "/queues/%2F", nil).list(t) {
		switch q["name"] {
		case "q":
			check("listed q", q, want)
		case "idle":
			check("listed idle", q, nil)
		}
	}
}
