package mgmt_test

import (
	"encoding/json"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/brokerd/brokerd/mgmt"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// rateClock is the rates' clock in a test: it moves when the test says.
type rateClock struct{ ms atomic.Int64 }

func (c *rateClock) now() time.Time { return time.UnixMilli(c.ms.Load()) }

// t0 is a sample time on the 5 s grid.
const t0 = 1_800_000_000_000

// rateAPI starts an API whose samples the test takes (at: the clock
// moves there and a sample is taken) on its own clock.
func rateAPI(t *testing.T) (*api, func(ms int64), *rateClock) {
	t.Helper()
	clock := &rateClock{}
	clock.ms.Store(t0)
	a := startAPIWith(t, mgmt.Options{Clock: clock.now})
	at := func(ms int64) {
		clock.ms.Store(ms)
		mgmt.SampleRates(a.srv, time.UnixMilli(ms))
	}
	return a, at, clock
}

// publishConfirmed publishes n messages and waits for their confirms, so
// the counters have counted them.
func publishConfirmed(t *testing.T, ch *amqp091.Channel, exchange, key string, n int) {
	t.Helper()
	for range n {
		dc, err := ch.PublishWithDeferredConfirm(exchange, key, false, false, amqp091.Publishing{Body: []byte("0123456789")})
		if err != nil {
			t.Fatal(err)
		}
		if !dc.Wait() {
			t.Fatal("publish nacked")
		}
	}
}

// rate reads path.to.x_details.rate in an object.
func rate(t *testing.T, m map[string]any, path string) float64 {
	t.Helper()
	var v any = m
	for _, k := range strings.Split(path, ".") {
		o, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("no %s in %v", path, m)
		}
		v = o[k]
	}
	f, ok := v.(float64)
	if !ok {
		t.Fatalf("%s is %T %v, want a number", path, v, v)
	}
	return f
}

func wantRate(t *testing.T, where string, m map[string]any, path string, want float64) {
	t.Helper()
	if got := rate(t, m, path); math.Abs(got-want) > 1e-9 {
		t.Errorf("%s: %s = %v, want %v", where, path, got, want)
	}
}

// Rates are the change between the last two samples per second, on every
// object RabbitMQ gives them: queues, exchanges, vhosts, the overview,
// channels and connections.
func TestMessageRates(t *testing.T) {
	a, at, clock := rateAPI(t)
	a.must(201, "PUT", "/exchanges/%2F/rx", map[string]any{"type": "direct"})
	a.must(201, "PUT", "/queues/%2F/rq", map[string]any{})
	a.must(201, "POST", "/bindings/%2F/e/rx/q/rq", map[string]any{"routing_key": "k"})
	conn := a.Dial(t)
	pub, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Confirm(false); err != nil {
		t.Fatal(err)
	}
	getter, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}

	publishConfirmed(t, pub, "rx", "k", 10)
	at(t0)
	// Before a second sample there is no rate.
	q := a.must(200, "GET", "/queues/%2F/rq", nil).object(t)
	wantRate(t, "one sample", q, "message_stats.publish_details.rate", 0)
	wantRate(t, "one sample", q, "messages_details.rate", 0)

	// In the next 5 s: 20 publishes, 5 gets without ack.
	publishConfirmed(t, pub, "rx", "k", 20)
	for range 5 {
		if _, ok, err := getter.Get("rq", true); err != nil || !ok {
			t.Fatalf("get: %v %v", ok, err)
		}
	}
	at(t0 + 5000)

	q = a.must(200, "GET", "/queues/%2F/rq", nil).object(t)
	wantRate(t, "queue", q, "message_stats.publish_details.rate", 4)
	wantRate(t, "queue", q, "message_stats.get_no_ack_details.rate", 1)
	wantRate(t, "queue", q, "message_stats.deliver_get_details.rate", 1)
	wantRate(t, "queue", q, "message_stats.ack_details.rate", 0)
	wantRate(t, "queue", q, "messages_details.rate", 3) // 10 -> 25
	wantRate(t, "queue", q, "messages_ready_details.rate", 3)
	wantRate(t, "queue", q, "messages_unacknowledged_details.rate", 0)

	x := a.must(200, "GET", "/exchanges/%2F/rx", nil).object(t)
	if ms := x["message_stats"].(map[string]any); ms["publish_in"] != 30.0 || ms["publish_out"] != 30.0 {
		t.Errorf("exchange message_stats %v", ms)
	}
	wantRate(t, "exchange", x, "message_stats.publish_in_details.rate", 4)
	wantRate(t, "exchange", x, "message_stats.publish_out_details.rate", 4)
	if _, ok := a.must(200, "GET", "/exchanges/%2F/amq.fanout", nil).object(t)["message_stats"]; ok {
		t.Error("an exchange nothing was published to has message_stats")
	}

	v := a.must(200, "GET", "/vhosts/%2F", nil).object(t)
	if ms := v["message_stats"].(map[string]any); ms["publish"] != 30.0 || ms["get_no_ack"] != 5.0 || ms["confirm"] != 30.0 {
		t.Errorf("vhost message_stats %v", ms)
	}
	wantRate(t, "vhost", v, "message_stats.publish_details.rate", 4)
	wantRate(t, "vhost", v, "message_stats.confirm_details.rate", 4)
	wantRate(t, "vhost", v, "message_stats.get_no_ack_details.rate", 1)
	wantRate(t, "vhost", v, "messages_details.rate", 3)
	if rate(t, v, "recv_oct_details.rate") <= 0 || rate(t, v, "send_oct_details.rate") <= 0 {
		t.Errorf("vhost byte rates %v %v", v["recv_oct_details"], v["send_oct_details"])
	}

	o := a.must(200, "GET", "/overview", nil).object(t)
	wantRate(t, "overview", o, "message_stats.publish_details.rate", 4)
	wantRate(t, "overview", o, "message_stats.confirm_details.rate", 4)
	wantRate(t, "overview", o, "message_stats.get_no_ack_details.rate", 1)
	wantRate(t, "overview", o, "message_stats.deliver_get_details.rate", 1)
	wantRate(t, "overview", o, "queue_totals.messages_details.rate", 3)
	if o["rates_mode"] != "basic" || o["sample_retention_policies"] == nil {
		t.Errorf("overview rates_mode %v sample_retention_policies %v", o["rates_mode"], o["sample_retention_policies"])
	}

	for _, ch := range a.must(200, "GET", "/channels", nil).list(t) {
		switch ch["number"] {
		case 1.0:
			wantRate(t, "publishing channel", ch, "message_stats.publish_details.rate", 4)
			wantRate(t, "publishing channel", ch, "message_stats.confirm_details.rate", 4)
		case 2.0:
			wantRate(t, "getting channel", ch, "message_stats.deliver_get_details.rate", 1)
			wantRate(t, "getting channel", ch, "message_stats.get_no_ack_details.rate", 1)
			wantRate(t, "getting channel", ch, "message_stats.get_details.rate", 0)
			if ms := ch["message_stats"].(map[string]any); ms["get_no_ack"] != 5.0 || ms["deliver_get"] != 5.0 || ms["ack"] != 0.0 {
				t.Errorf("getting channel message_stats %v", ms)
			}
		}
	}
	c := a.must(200, "GET", "/connections", nil).list(t)[0]
	// The 20 publishes of the interval, bodies alone, came in.
	if r := rate(t, c, "recv_oct_details.rate"); r*5 < 20*10 {
		t.Errorf("connection recv_oct_details.rate %v: under the 200 body bytes of the interval", r)
	}
	if rate(t, c, "send_oct_details.rate") <= 0 || c["recv_cnt"].(float64) <= 0 || c["send_cnt"].(float64) <= 0 {
		t.Errorf("connection %v", c)
	}

	// A rate is live only while its last sample is at most an interval
	// old: 20 s later without a sample it reads 0, as RabbitMQ's.
	clock.ms.Store(t0 + 25000)
	q = a.must(200, "GET", "/queues/%2F/rq", nil).object(t)
	wantRate(t, "20 s without a sample", q, "message_stats.publish_details.rate", 0)
	// The next sample, with nothing new: 0.
	at(t0 + 25000)
	q = a.must(200, "GET", "/queues/%2F/rq", nil).object(t)
	wantRate(t, "a sample with nothing new", q, "message_stats.publish_details.rate", 0)
}

// msg_rates_age and msg_rates_incr (lengths_*, data_rates_* likewise) ask
// for the samples of a range, as RabbitMQ's: every incr seconds over the
// last age seconds, newest first, with avg_rate and avg; the rate is the
// change over the last incr. Points before the object existed count 0.
func TestRateRanges(t *testing.T) {
	a, at, _ := rateAPI(t)
	a.must(201, "PUT", "/queues/%2F/rr", map[string]any{})
	_, ch := a.Channel(t)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, ch, "", "rr", 10)
	at(t0)
	publishConfirmed(t, ch, "", "rr", 20)
	at(t0 + 5000)
	at(t0 + 10000) // nothing new
	q := a.must(200, "GET", "/queues/%2F/rr?msg_rates_age=15&msg_rates_incr=5&lengths_age=10&lengths_incr=5", nil).object(t)
	d := q["message_stats"].(map[string]any)["publish_details"].(map[string]any)
	var samples []struct{ Sample, Timestamp int64 }
	j, _ := json.Marshal(d["samples"])
	if err := json.Unmarshal(j, &samples); err != nil {
		t.Fatal(err)
	}
	want := []struct{ Sample, Timestamp int64 }{{30, t0 + 10000}, {30, t0 + 5000}, {10, t0}, {0, t0 - 5000}}
	if len(samples) != len(want) {
		t.Fatalf("publish samples %v, want %v", samples, want)
	}
	for i := range want {
		if samples[i] != want[i] {
			t.Errorf("publish sample %d: %v, want %v", i, samples[i], want[i])
		}
	}
	if d["rate"] != 0.0 || d["avg_rate"] != 2.0 || d["avg"] != 17.5 {
		t.Errorf("publish_details rate %v avg_rate %v avg %v, want 0, 2, 17.5", d["rate"], d["avg_rate"], d["avg"])
	}
	m := q["messages_details"].(map[string]any)
	if len(m["samples"].([]any)) != 3 || m["avg_rate"] != 2.0 {
		t.Errorf("messages_details %v", m)
	}
	// Asked between samples, the last point is the last sample on the
	// incr grid: the rate is the change over the last incr.
	q = a.must(200, "GET", "/queues/%2F/rr?msg_rates_age=10&msg_rates_incr=10", nil).object(t)
	if d := q["message_stats"].(map[string]any)["publish_details"].(map[string]any); d["rate"] != 2.0 {
		t.Errorf("publish rate over the last 10 s: %v, want 2", d["rate"])
	}

	for _, bad := range []string{"msg_rates_age=0&msg_rates_incr=5", "msg_rates_age=5000&msg_rates_incr=1", "lengths_age=60&lengths_incr=-5"} {
		wantError(t, a.do("GET", "/queues/%2F/rr?"+bad, nil), 400, "bad_request", "Invalid range parameters")
		wantError(t, a.do("GET", "/overview?"+bad, nil), 400, "bad_request", "Invalid range parameters")
	}
	// Not both integers: no range, as RabbitMQ.
	a.must(200, "GET", "/queues/%2F/rr?msg_rates_age=60", nil)
}

// kedaQueue is what KEDA's rabbitmq scaler (pkg/scalers/rabbitmq_scaler.go,
// protocol http) decodes of a queue: its modes QueueLength, MessageRate
// (publish_details.rate), DeliverGetRate and the ratios read these.
type kedaQueue struct {
	Messages               int    `json:"messages"`
	MessagesReady          int    `json:"messages_ready"`
	MessagesUnacknowledged int    `json:"messages_unacknowledged"`
	Name                   string `json:"name"`
	MessageStat            struct {
		PublishDetail    struct{ Rate float64 } `json:"publish_details"`
		DeliverGetDetail struct{ Rate float64 } `json:"deliver_get_details"`
	} `json:"message_stats"`
}

// ratesFixture publishes 10 messages to queue orders, samples, publishes
// 25 more and gets 5, and samples 5 s later: publish rate 5/s, deliver_get
// 1/s, 30 messages.
func ratesFixture(t *testing.T) *api {
	t.Helper()
	a, at, _ := rateAPI(t)
	a.must(201, "PUT", "/queues/%2F/orders", map[string]any{"durable": true})
	_, ch := a.Channel(t)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, ch, "", "orders", 10)
	at(t0)
	publishConfirmed(t, ch, "", "orders", 25)
	for range 5 {
		if _, ok, err := ch.Get("orders", true); err != nil || !ok {
			t.Fatalf("get: %v %v", ok, err)
		}
	}
	at(t0 + 5000)
	return a
}

// KEDA's rabbitmq scaler reads a queue's rates as RabbitMQ gives them,
// by name and through its regex listing.
func TestRatesAsKEDAReadsThem(t *testing.T) {
	a := ratesFixture(t)
	var q kedaQueue
	if err := json.Unmarshal(a.must(200, "GET", "/queues/%2F/orders", nil).body, &q); err != nil {
		t.Fatal(err)
	}
	if q.Messages != 30 || q.MessagesReady != 30 || q.MessageStat.PublishDetail.Rate != 5 || q.MessageStat.DeliverGetDetail.Rate != 1 {
		t.Errorf("KEDA reads %+v, want 30 messages, publish rate 5, deliver_get rate 1", q)
	}
	// useRegex: true, as KEDA asks it.
	var page struct {
		Queues     []kedaQueue `json:"items"`
		TotalPages int         `json:"page_count"`
	}
	r := a.must(200, "GET", "/queues/%2F?page=1&use_regex=true&pagination=false&name=%5Eord&page_size=100", nil)
	if err := json.Unmarshal(r.body, &page); err != nil {
		t.Fatal(err)
	}
	if page.TotalPages != 1 || len(page.Queues) != 1 || page.Queues[0].MessageStat.PublishDetail.Rate != 5 {
		t.Errorf("KEDA's regex listing reads %+v", page)
	}
}

// rabbitmqadmin's rate columns (list queues name message_stats.publish_details.rate,
// show overview ...) show the rates: a dotted column is a nested field.
func TestRabbitmqadminRateColumns(t *testing.T) {
	a := ratesFixture(t)
	adm := findRabbitmqadmin(t, a)
	l := adm.list("queues", "name", "message_stats.publish_details.rate", "message_stats.deliver_get_details.rate", "messages_details.rate")
	if len(l) != 1 || l[0]["name"] != "orders" || rate(t, l[0], "message_stats.publish_details.rate") != 5 ||
		rate(t, l[0], "message_stats.deliver_get_details.rate") != 1 || rate(t, l[0], "messages_details.rate") != 4 {
		t.Errorf("list queues with rate columns: %v", l)
	}
	if _, ok := l[0]["arguments"]; ok {
		t.Errorf("columns asked for name and rates, got %v", l[0])
	}
	out := adm.run("list", "queues", "name", "message_stats.publish_details.rate")
	if !strings.Contains(out, "message_stats.publish_details.rate") || !strings.Contains(out, "| orders | 5") {
		t.Errorf("list queues (table) with a rate column:\n%s", out)
	}
	out = adm.run("show", "overview", "message_stats.publish_details.rate", "queue_totals.messages_details.rate")
	if !strings.Contains(out, "| 5") || !strings.Contains(out, "| 4") {
		t.Errorf("show overview with rate columns:\n%s", out)
	}
	out = adm.run("list", "nodes", "name", "mem_used", "mem_used_details.rate", "fd_used")
	if !strings.Contains(out, "mem_used_details.rate") {
		t.Errorf("list nodes with a rate column:\n%s", out)
	}
}

// rates_mode none keeps no samples: counts without *_details, as
// RabbitMQ's.
func TestRatesModeNone(t *testing.T) {
	a := startAPIWith(t, mgmt.Options{RatesMode: "none"})
	a.must(201, "PUT", "/queues/%2F/n", map[string]any{})
	a.must(200, "POST", "/exchanges/%2F/amq.default/publish", map[string]any{"properties": map[string]any{}, "routing_key": "n", "payload": "x", "payload_encoding": "string"})
	q := a.must(200, "GET", "/queues/%2F/n", nil).object(t)
	if _, ok := q["messages_details"]; ok {
		t.Errorf("rates_mode none: queue has messages_details: %v", q)
	}
	if ms := q["message_stats"].(map[string]any); ms["publish"] != 1.0 || ms["publish_details"] != nil {
		t.Errorf("rates_mode none: message_stats %v, want the count alone", ms)
	}
	if o := a.must(200, "GET", "/overview", nil).object(t); o["rates_mode"] != "none" {
		t.Errorf("overview rates_mode %v", o["rates_mode"])
	}
}
