// Tests of a dead letter's headers: x-death, x-first-death-*, x-last-death-*, CC and BCC.

package broker_test

// Tests of the headers of a dead letter (SPEC §2): x-death entries, their
// counts, order, reasons and exact wire layout, x-first-death-* and
// x-last-death-*, and CC/BCC as the dead letter carries them.

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/brokertest"
)

func dsHeaders(e *dsEnv) {
	e.setup(nil)
	e.Publish("", "src", amqp091.Publishing{Body: []byte("p1"), Headers: amqp091.Table{"user": "kept"}})
	e.nack(e.Expect("src", "p1")[0], false, false)
	d := e.Expect("dlq", "p1")[0]
	dsWantRoute(e.t, d, "dlx", "dlq")
	e.wantDeaths(d.Headers, dsDeath{queue: "src", reason: "rejected", exchange: "", count: 1, keys: []string{"src"}})
	dsWantFirstLast(e.t, d.Headers, [3]string{"rejected", "src", ""}, [3]string{"rejected", "src", ""})
	dsWantStr(e.t, d.Headers, "user", "kept")
	dsWantAbsent(e.t, d.Headers, "CC", "BCC")
	if len(d.Headers) != 8 {
		e.t.Fatalf("headers %v, want user, x-death and six x-*-death-*", d.Headers)
	}
	if d.DeliveryMode != amqp091.Persistent {
		e.t.Fatalf("delivery mode %d, want it kept (2)", d.DeliveryMode)
	}
}

func dsHeadersReasonMaxLen(e *dsEnv) {
	e.setup(amqp091.Table{"x-max-length": int64(1)})
	e.PublishBodies("src", "p1", "p2")
	d := e.Expect("dlq", "p1")[0]
	e.wantDeaths(d.Headers, dsDeath{queue: "src", reason: "maxlen", exchange: "", count: 1, keys: []string{"src"}})
	dsWantFirstLast(e.t, d.Headers, [3]string{"maxlen", "src", ""}, [3]string{"maxlen", "src", ""})
}

func dsHeadersBCC(e *dsEnv) {
	e.DeclareExchange("dlx", "direct", nil, brokertest.Durable)
	e.queue("src", amqp091.Table{"x-dead-letter-exchange": "dlx"})
	e.Declare("dlq", nil, brokertest.Durable)
	e.Bind("dlq", "dlq", "dlx", nil)
	e.Publish("", "src", amqp091.Publishing{Body: []byte("p1"), Headers: amqp091.Table{
		"CC":  []interface{}{"cc 1", "cc 2"},
		"BCC": []interface{}{"dlq", "bcc 2"},
	}})
	e.waitFor("src", 1, 1, 0)
	e.waitFor("dlq", 1, 1, 0)
	d := e.Expect("src", "p1")[0]
	direct := e.Expect("dlq", "p1")[0]
	dsWantAbsent(e.t, direct.Headers, "BCC")
	e.nack(d, false, false)
	e.waitFor("dlq", 2, 1, 1)
	e.WantEmpty("src")
	d = e.Expect("dlq", "p1")[0]
	dsWantAbsent(e.t, d.Headers, "BCC")
	dsWantArray(e.t, d.Headers, "CC", "cc 1", "cc 2")
	// The publish key, then CC; BCC excluded (it still routed).
	e.wantDeaths(d.Headers, dsDeath{queue: "src", reason: "rejected", exchange: "", count: 1, keys: []string{"src", "cc 1", "cc 2"}})
}

func dsHeadersCC(e *dsEnv) {
	e.DeclareExchange("dlx", "direct", nil, brokertest.Durable)
	e.queue("src", amqp091.Table{"x-dead-letter-exchange": "dlx"})
	e.Declare("dlq", nil, brokertest.Durable)
	e.Bind("dlq", "dlq", "dlx", nil)
	e.Publish("", "src", amqp091.Publishing{Body: []byte("p1"), Headers: amqp091.Table{"CC": []interface{}{"dlq"}}})
	e.waitFor("dlq", 1, 1, 0)
	d := e.Expect("src", "p1")[0]
	direct := e.Expect("dlq", "p1")[0]
	e.nack(d, false, false)
	dead := e.Expect("dlq", "p1")[0]
	dsWantArray(e.t, direct.Headers, "CC", "dlq")
	dsWantAbsent(e.t, direct.Headers, "x-death")
	dsWantArray(e.t, dead.Headers, "CC", "dlq")
	e.wantDeaths(dead.Headers, dsDeath{queue: "src", reason: "rejected", exchange: "", count: 1, keys: []string{"src", "dlq"}})
}

// dsHeadersCCWithRoutingKey: brokerd removes CC when a dead-letter routing
// key is set (SPEC §2; RabbitMQ 3.13+ keeps it). x-death still records
// the CC key.
func dsHeadersCCWithRoutingKey(e *dsEnv) {
	e.setup(nil)
	e.Publish("", "src", amqp091.Publishing{Body: []byte("p1"), Headers: amqp091.Table{"CC": []interface{}{"dlq"}, "user": "kept"}})
	e.waitFor("dlq", 1, 1, 0)
	d := e.Expect("src", "p1")[0]
	direct := e.Expect("dlq", "p1")[0]
	e.nack(d, false, false)
	dead := e.Expect("dlq", "p1")[0]
	dsWantArray(e.t, direct.Headers, "CC", "dlq")
	dsWantAbsent(e.t, dead.Headers, "CC")
	dsWantStr(e.t, dead.Headers, "user", "kept")
	dsWantRoute(e.t, dead, "dlx", "dlq")
	e.wantDeaths(dead.Headers, dsDeath{queue: "src", reason: "rejected", exchange: "", count: 1, keys: []string{"src", "dlq"}})
}

// dsHeadersFirstDeath: src --rejected--> dlq --rejected--> src; the
// first-death headers keep the first death, the last-death ones follow.
func dsHeadersFirstDeath(e *dsEnv) {
	e.DeclareExchange("dlx", "direct", nil, brokertest.Durable)
	e.queue("src", amqp091.Table{"x-dead-letter-exchange": "dlx"})
	e.queue("dlq", amqp091.Table{"x-dead-letter-exchange": "amq.direct"})
	e.Bind("dlq", "src", "dlx", nil)
	e.Bind("src", "src", "amq.direct", nil)
	e.Publish("amq.direct", "src", amqp091.Publishing{Body: []byte("p1")})
	e.nack(e.Expect("src", "p1")[0], false, false)
	d := e.Expect("dlq", "p1")[0]
	dsWantFirstLast(e.t, d.Headers, [3]string{"rejected", "src", "amq.direct"}, [3]string{"rejected", "src", "amq.direct"})
	e.nack(d, false, false)
	d = e.Expect("src", "p1")[0]
	dsWantRoute(e.t, d, "amq.direct", "src")
	dsWantFirstLast(e.t, d.Headers, [3]string{"rejected", "src", "amq.direct"}, [3]string{"rejected", "dlq", "dlx"})
	e.wantDeaths(d.Headers,
		dsDeath{queue: "dlq", reason: "rejected", exchange: "dlx", count: 1, keys: []string{"src"}},
		dsDeath{queue: "src", reason: "rejected", exchange: "amq.direct", count: 1, keys: []string{"src"}})
}

// dsHeadersFirstDeathRoute: a headers DLX routes on x-first-death-* with
// all-with-x and any-with-x.
func dsHeadersFirstDeathRoute(e *dsEnv) {
	e.DeclareExchange("dlx", "headers", nil, brokertest.Durable)
	e.queue("q1", amqp091.Table{"x-dead-letter-exchange": "dlx"})
	e.queue("q2", amqp091.Table{"x-dead-letter-exchange": "dlx"})
	e.Declare("dlx_expired", nil, brokertest.Durable)
	e.Declare("dlx_rejected", nil, brokertest.Durable)
	e.Bind("dlx_expired", "", "dlx", amqp091.Table{"x-match": "all-with-x", "x-first-death-reason": "expired", "x-first-death-queue": "q1"})
	e.Bind("dlx_rejected", "", "dlx", amqp091.Table{"x-match": "any-with-x", "x-first-death-reason": "rejected"})

	e.Publish("", "q1", amqp091.Publishing{Body: []byte("p1"), Expiration: "0"})
	e.waitFor("dlx_expired", 1, 1, 0)
	e.Expect("dlx_expired", "p1")
	e.WantEmpty("dlx_expired")
	e.waitFor("q1", 0, 0, 0)

	// Expired from q2: neither binding matches.
	e.Publish("", "q2", amqp091.Publishing{Body: []byte("p2"), Expiration: "0"})
	if e.g.atLeastOnce {
		e.waitFor("q2", 1, 0, 0)
	} else {
		e.wantCounters(map[string]uint64{"dead_lettered.expired": 1, "discarded.expired": 1, "dropped.unroutable": 1})
		e.waitFor("q2", 0, 0, 0)
	}
	e.WantEmpty("dlx_expired")
	e.WantEmpty("dlx_rejected")

	e.PublishBodies("q2", "p3")
	e.reject(e.Expect("q2", "p3")[0], false)
	e.Expect("dlx_rejected", "p3")
	e.WantEmpty("dlx_rejected")
	e.WantEmpty("dlx_expired")
	if e.g.atLeastOnce {
		e.wantCounters(map[string]uint64{"dead_lettered.expired": 1, "dead_lettered.rejected": 1, "backlogged": 1})
	} else {
		e.wantCounters(map[string]uint64{"dead_lettered.expired": 1, "dead_lettered.rejected": 1, "discarded.expired": 1, "dropped.unroutable": 1})
	}
}

func dsHeadersAppendedForEachEvent(e *dsEnv) {
	e.queue("src", amqp091.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlx1"})
	e.queue("dlx1", amqp091.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlx2"})
	e.Declare("dlx2", nil, brokertest.Durable)
	e.PublishBodies("src", "p")
	e.reject(e.Expect("src", "p")[0], false)
	e.reject(e.Expect("dlx1", "p")[0], false)
	d := e.Expect("dlx2", "p")[0]
	e.wantDeaths(d.Headers,
		dsDeath{queue: "dlx1", reason: "rejected", exchange: "", count: 1, keys: []string{"dlx1"}},
		dsDeath{queue: "src", reason: "rejected", exchange: "", count: 1, keys: []string{"src"}})
	dsWantFirstLast(e.t, d.Headers, [3]string{"rejected", "src", ""}, [3]string{"rejected", "dlx1", ""})
}

// dsHeadersRepublish: brokerd keeps counting from a well-formed x-death a
// client republishes (SPEC §2; RabbitMQ 4.x starts again), and replaces a
// malformed one, resetting the first-death headers.
func dsHeadersRepublish(e *dsEnv) {
	e.setup(nil)
	e.queue("ttl", amqp091.Table{"x-message-ttl": int64(10), "x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "dlq"})
	e.PublishBodies("src", "p")
	e.reject(e.Expect("src", "p")[0], false)
	d := e.Expect("dlq", "p")[0]
	t1 := e.wantDeaths(d.Headers, dsDeath{queue: "src", reason: "rejected", exchange: "", count: 1, keys: []string{"src"}})
	if err := d.Ack(false); err != nil {
		e.t.Fatal(err)
	}

	// Republished as received into a TTL queue: a second entry.
	e.Publish("", "ttl", amqp091.Publishing{Body: d.Body, Headers: d.Headers})
	e.waitFor("dlq", 1, 1, 0)
	d2 := e.Expect("dlq", "p")[0]
	e.wantDeaths(d2.Headers,
		dsDeath{queue: "ttl", reason: "expired", exchange: "", count: 1, keys: []string{"ttl"}},
		dsDeath{queue: "src", reason: "rejected", exchange: "", count: 1, keys: []string{"src"}})
	dsWantFirstLast(e.t, d2.Headers, [3]string{"rejected", "src", ""}, [3]string{"expired", "ttl", ""})
	if err := d2.Ack(false); err != nil {
		e.t.Fatal(err)
	}

	// Republished into the queue it died in: the count goes on, the
	// entry keeps its time.
	e.Publish("", "src", amqp091.Publishing{Body: d.Body, Headers: d.Headers})
	e.reject(e.Expect("src", "p")[0], false)
	d3 := e.Expect("dlq", "p")[0]
	t3 := e.wantDeaths(d3.Headers, dsDeath{queue: "src", reason: "rejected", exchange: "", count: 2, keys: []string{"src"}})
	if !t3[0].Equal(t1[0]) {
		e.t.Fatalf("time %v, want the first death's %v", t3[0], t1[0])
	}
	if err := d3.Ack(false); err != nil {
		e.t.Fatal(err)
	}

	// A malformed x-death (not an array of tables) is replaced, and the
	// first-death headers the client sent are reset.
	for i, bad := range []any{"garbage", []interface{}{"not a table"}} {
		h := maps.Clone(d.Headers)
		h["x-death"] = bad
		h["x-first-death-reason"] = "bogus"
		e.Publish("", "ttl", amqp091.Publishing{Body: []byte(fmt.Sprint("bad", i)), Headers: h})
		e.waitFor("dlq", 1, 1, 0)
		d4 := e.Expect("dlq", fmt.Sprint("bad", i))[0]
		e.wantDeaths(d4.Headers, dsDeath{queue: "ttl", reason: "expired", exchange: "", count: 1, keys: []string{"ttl"}})
		dsWantFirstLast(e.t, d4.Headers, [3]string{"expired", "ttl", ""}, [3]string{"expired", "ttl", ""})
		if err := d4.Ack(false); err != nil {
			e.t.Fatal(err)
		}
	}
}

func dsHeadersReasonExpired(e *dsEnv) {
	e.setup(amqp091.Table{"x-message-ttl": int64(1)})
	e.PublishBodies("src", "p1")
	e.waitFor("dlq", 1, 1, 0)
	d := e.Expect("dlq", "p1")[0]
	e.wantDeaths(d.Headers, dsDeath{queue: "src", reason: "expired", exchange: "", count: 1, keys: []string{"src"}})
	if d.Expiration != "" {
		e.t.Fatalf("expiration %q, want none", d.Expiration)
	}
}

// dsHeadersReasonExpiredPerMessage: the per-message expiration is kept in
// original-expiration and removed from the properties. The message expires
// behind a 10-minute one (brokerd expires anywhere, not only at the head).
func dsHeadersReasonExpiredPerMessage(e *dsEnv) {
	e.setup(nil)
	e.Publish("", "src", amqp091.Publishing{Body: []byte("p0"), Expiration: "600000"})
	e.Publish("", "src", amqp091.Publishing{Body: []byte("p1"), Expiration: "1"})
	e.waitFor("dlq", 1, 1, 0)
	e.waitFor("src", 1, 1, 0)
	d := e.Expect("dlq", "p1")[0]
	e.wantDeaths(d.Headers, dsDeath{queue: "src", reason: "expired", exchange: "", count: 1, keys: []string{"src"}, origExp: "1"})
	if d.Expiration != "" {
		e.t.Fatalf("expiration %q, want it removed", d.Expiration)
	}
	e.Expect("src", "p0")
}

// TestDLXWireXDeathLayout reads a twice dead-lettered message with a raw
// client: the x-death entries' field order and exact types ('l', 'S', 'T',
// 'A'), and every other property and user header as sent.
func TestDLXWireXDeathLayout(t *testing.T) {
	e := dsStart(t, dsGroups[0], brokertest.Config{})
	e.queue("src", amqp091.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "mid"})
	e.queue("mid", amqp091.Table{"x-message-ttl": int64(10), "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"})
	e.Declare("dlq", nil, brokertest.Durable)

	w := dvDialWire(t, e.b.Addr, 0)
	sent := amqp.Properties{
		Flags: amqp.FlagContentType | amqp.FlagHeaders | amqp.FlagDeliveryMode | amqp.FlagCorrelationID |
			amqp.FlagExpiration | amqp.FlagMessageID | amqp.FlagTimestamp | amqp.FlagAppID,
		ContentType: "text/plain",
		Headers: amqp.Table{
			{Key: "z-user", Value: "first"},
			{Key: "CC", Value: []any{"cc"}},
			{Key: "a-user", Value: int32(7)},
			{Key: "b-user", Value: amqp.Table{{Key: "k", Value: []byte{0, 1}}}},
		},
		DeliveryMode: 2, CorrelationID: "corr", Expiration: "60000", MessageID: "id-1", Timestamp: 1700000000, AppID: "app",
	}
	w.publish(1, &amqp.BasicPublish{RoutingKey: "src"}, dvEncodeProps(t, sent), []byte("body"))
	w.send(1, &amqp.BasicGet{Queue: "src"})
	m, _, _ := w.content(1)
	got, ok := m.(*amqp.BasicGetOk)
	if !ok {
		t.Fatalf("got %s, want basic.get-ok", m.Name())
	}
	w.send(1, &amqp.BasicReject{DeliveryTag: got.DeliveryTag})
	e.waitFor("dlq", 1, 1, 0)
	w.send(1, &amqp.BasicGet{Queue: "dlq", NoAck: true})
	m, raw, body := w.content(1)
	got, ok = m.(*amqp.BasicGetOk)
	if !ok || got.Exchange != "" || got.RoutingKey != "dlq" || string(body) != "body" {
		t.Fatalf("got %+v body %q, want basic.get-ok from \"\" with key dlq", m, body)
	}
	p, err := amqp.DecodeProperties(raw)
	if err != nil {
		t.Fatal(err)
	}

	// Every property but expiration (removed) and headers as sent.
	want := sent
	want.Flags &^= amqp.FlagExpiration
	want.Expiration = ""
	want.Headers = nil
	p2 := p
	p2.Headers = nil
	if fmt.Sprintf("%#v", p2) != fmt.Sprintf("%#v", want) {
		t.Fatalf("properties %+v\nwant %+v", p2, want)
	}

	// user headers in their order with their types; CC removed (a
	// dead-letter routing key was set); the x- headers after them.
	var user amqp.Table
	xs := map[string]any{}
	for _, f := range p.Headers {
		if strings.HasPrefix(f.Key, "x-") {
			xs[f.Key] = f.Value
		} else {
			user = append(user, f)
		}
	}
	wantUser := amqp.Table{sent.Headers[0], sent.Headers[2], sent.Headers[3]}
	if fmt.Sprintf("%#v", user) != fmt.Sprintf("%#v", wantUser) {
		t.Fatalf("user headers %#v\nwant %#v", user, wantUser)
	}
	wantX := []string{"x-death", "x-first-death-exchange", "x-first-death-queue", "x-first-death-reason",
		"x-last-death-exchange", "x-last-death-queue", "x-last-death-reason"}
	if keys := slices.Sorted(maps.Keys(xs)); !slices.Equal(keys, wantX) {
		t.Fatalf("x- headers %q, want %q", keys, wantX)
	}
	for k, v := range map[string]string{
		"x-first-death-reason": "rejected", "x-first-death-queue": "src", "x-first-death-exchange": "",
		"x-last-death-reason": "expired", "x-last-death-queue": "mid", "x-last-death-exchange": "",
	} {
		if s, ok := xs[k].(string); !ok || s != v {
			t.Fatalf("%s = %#v (%T), want longstr %q", k, xs[k], xs[k], v)
		}
	}

	deaths, ok := xs["x-death"].([]any)
	if !ok || len(deaths) != 2 {
		t.Fatalf("x-death = %#v, want an array of two tables", xs["x-death"])
	}
	type field struct {
		key string
		val any
	}
	check := func(i int, want []field) amqp.Timestamp {
		t.Helper()
		d, ok := deaths[i].(amqp.Table)
		if !ok {
			t.Fatalf("x-death[%d] is %T, want a table", i, deaths[i])
		}
		if len(d) != len(want) {
			t.Fatalf("x-death[%d] = %#v, want fields %v", i, d, want)
		}
		var ts amqp.Timestamp
		for j, f := range want {
			if d[j].Key != f.key {
				t.Fatalf("x-death[%d] field %d is %q, want %q (order %v)", i, j, d[j].Key, f.key, d)
			}
			if f.key == "time" {
				var ok bool
				if ts, ok = d[j].Value.(amqp.Timestamp); !ok {
					t.Fatalf("x-death[%d].time is %T, want amqp.Timestamp", i, d[j].Value)
				}
				continue
			}
			if fmt.Sprintf("%#v", d[j].Value) != fmt.Sprintf("%#v", f.val) {
				t.Fatalf("x-death[%d].%s = %#v, want %#v", i, f.key, d[j].Value, f.val)
			}
		}
		return ts
	}
	t0 := check(0, []field{{"count", int64(1)}, {"reason", "expired"}, {"queue", "mid"}, {"time", nil},
		{"exchange", ""}, {"routing-keys", []any{"mid"}}})
	t1 := check(1, []field{{"original-expiration", "60000"}, {"count", int64(1)}, {"reason", "rejected"},
		{"queue", "src"}, {"time", nil}, {"exchange", ""}, {"routing-keys", []any{"src", "cc"}}})
	now := amqp.Timestamp(time.Now().Unix())
	if t1 > t0 || t0 > now || uint64(t1) < uint64(e.start.Unix()) {
		t.Fatalf("times %d (mid), %d (src), want src ≤ mid ≤ now %d", t0, t1, now)
	}
}

// dsHeadersBatch: dead letters settled together (one multiple nack) each
// get their own x-death and keep their own headers, whether consecutive
// ones were published alike (they share one rewrite: dlMemo) or differ in
// a header, the expiration, CC, or exchange and routing key.
func dsHeadersBatch(e *dsEnv) {
	e.setup(nil)
	e.Bind("src", "k2", "amq.direct", nil)
	type pub struct {
		x, key string
		p      amqp091.Publishing
		death  dsDeath
	}
	rejected := func(x string, keys ...string) dsDeath {
		return dsDeath{queue: "src", reason: "rejected", exchange: x, count: 1, keys: keys}
	}
	expiring := rejected("", "src")
	expiring.origExp = "60000"
	pubs := []pub{
		{"", "src", amqp091.Publishing{Headers: amqp091.Table{"user": "a"}}, rejected("", "src")},
		{"", "src", amqp091.Publishing{Headers: amqp091.Table{"user": "a"}}, rejected("", "src")},
		{"", "src", amqp091.Publishing{Headers: amqp091.Table{"user": "b"}}, rejected("", "src")},
		{"", "src", amqp091.Publishing{Headers: amqp091.Table{"user": "b"}, Expiration: "60000"}, expiring},
		{"", "src", amqp091.Publishing{Headers: amqp091.Table{"user": "b", "CC": []interface{}{"cc"}}}, rejected("", "src", "cc")},
		{"amq.direct", "k2", amqp091.Publishing{Headers: amqp091.Table{"user": "b"}}, rejected("amq.direct", "k2")},
		{"", "src", amqp091.Publishing{Headers: amqp091.Table{"user": "a"}}, rejected("", "src")},
	}
	bodies := make([]string, len(pubs))
	for i, p := range pubs {
		bodies[i] = fmt.Sprintf("p%d", i+1)
		p.p.Body = []byte(bodies[i])
		e.Publish(p.x, p.key, p.p)
	}
	e.waitFor("src", len(pubs), len(pubs), 0)
	ds := e.Expect("src", bodies...)
	e.nack(ds[len(ds)-1], true, false)
	for i, d := range e.Expect("dlq", bodies...) {
		dsWantStr(e.t, d.Headers, "user", pubs[i].p.Headers["user"].(string))
		e.wantDeaths(d.Headers, pubs[i].death)
		dsWantFirstLast(e.t, d.Headers, [3]string{"rejected", "src", pubs[i].x}, [3]string{"rejected", "src", pubs[i].x})
		dsWantAbsent(e.t, d.Headers, "CC")
		if d.Expiration != "" {
			e.t.Fatalf("%s: expiration %q, want none", d.Body, d.Expiration)
		}
	}
	e.WantEmpty("dlq")
}
