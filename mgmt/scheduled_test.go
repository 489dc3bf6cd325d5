package mgmt_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker/brokertest"
	"github.com/brokerd/brokerd/mgmt"
)

// scListAPI lists everything delayed exchange dx of "/" holds through the
// API, count per page, following next.
func scListAPI(t *testing.T, a *api, count int) []map[string]any {
	t.Helper()
	var all []map[string]any
	after := ""
	for range 1000 {
		p := a.must(200, "GET", fmt.Sprintf("/exchanges/%%2F/dx/scheduled?count=%d&after=%s", count, after), nil).object(t)
		ms := p["messages"].([]any)
		if len(ms) > count {
			t.Fatalf("a page of %d, asked for %d", len(ms), count)
		}
		for _, m := range ms {
			all = append(all, m.(map[string]any))
		}
		after = p["next"].(string)
		if after == "" {
			return all
		}
	}
	t.Fatal("no end to the pages")
	return nil
}

func scPayloads(ms []map[string]any) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m["payload"].(string)
	}
	return out
}

// The API over a delayed exchange's held messages: listed in due-time
// order in pages (next), each with its id, due time (RFC 3339 with ms,
// Unix ms, ms from now), routing key, properties and payload (peek's
// encodings); cancelled one by id (404 once gone), by a list of ids, by
// routing key, by header and due time; an empty filter refused. A
// cancelled message stays gone after a crash (the disk store:
// BROKERD_TEST_STORE=disk) and is never routed; the rest are at their due
// time. Permissions: listing needs read on the exchange, cancelling read
// and write, and the management tag.
func TestScheduledAPI(t *testing.T) {
	clk := brokertest.NewClock()
	a := startBrokerAPI(t, brokertest.Config{Clock: clk}, mgmt.Options{})
	a.must(201, "PUT", "/exchanges/%2F/dx", map[string]any{"type": "x-delayed-message", "durable": true, "arguments": map[string]any{"x-delayed-type": "direct"}})
	a.must(201, "PUT", "/queues/%2F/q", map[string]any{"durable": true})
	a.must(201, "POST", "/bindings/%2F/e/dx/q/q", map[string]any{"routing_key": "k"})
	a.must(201, "POST", "/bindings/%2F/e/dx/q/q", map[string]any{"routing_key": "j"})
	ch := a.Session(t, brokertest.Persistent)
	start := clk.Now().UnixMilli()
	delays := []int64{9000, 3000, 7000, 1000, 5000, 3000, 8000, 2000, 6000, 4000}
	type held struct {
		body string
		due  int64
	}
	var hs []held
	for i, d := range delays {
		key := "k"
		if i%3 == 0 {
			key = "j"
		}
		body := fmt.Sprintf("m%d", i)
		ch.Publish("dx", key, amqp091.Publishing{Body: []byte(body), ContentType: "text/plain",
			Headers: amqp091.Table{"x-delay": d, "tenant": fmt.Sprintf("t%d", i%2)}})
		hs = append(hs, held{body, start + d})
	}
	slices.SortStableFunc(hs, func(a, b held) int { return int(a.due - b.due) })
	var want []string
	for _, h := range hs {
		want = append(want, h.body)
	}
	for _, count := range []int{1, 3, 20} {
		if got := scPayloads(scListAPI(t, a, count)); !slices.Equal(got, want) {
			t.Fatalf("pages of %d: %q, want %q", count, got, want)
		}
	}
	p := a.must(200, "GET", "/exchanges/%2F/dx/scheduled?count=2", nil).object(t)
	if p["messages_delayed"] != 10.0 {
		t.Fatalf("messages_delayed %v, want 10", p["messages_delayed"])
	}
	first := p["messages"].([]any)[0].(map[string]any)
	wantDue := time.UnixMilli(start + 1000).UTC().Format("2006-01-02T15:04:05.000Z07:00")
	props := first["properties"].(map[string]any)
	if first["payload"] != "m3" || first["due"] != wantDue || first["due_ms"] != float64(start+1000) || first["due_in_ms"] != 1000.0 ||
		first["routing_key"] != "j" || first["exchange"] != "dx" || first["payload_bytes"] != 2.0 || first["payload_encoding"] != "string" ||
		props["content_type"] != "text/plain" || props["headers"].(map[string]any)["tenant"] != "t1" {
		t.Fatalf("first: %v; want m3 due %s (in 1000 ms), key j, text/plain, tenant t1", first, wantDue)
	}
	if _, ok := first["id"].(float64); !ok {
		t.Fatalf("first: id %v, want a number", first["id"])
	}
	b64 := a.must(200, "GET", "/exchanges/%2F/dx/scheduled?count=1&encoding=base64&truncate=1", nil).object(t)["messages"].([]any)[0].(map[string]any)
	if b64["payload"] != "bQ==" || b64["payload_encoding"] != "base64" || b64["payload_bytes"] != 2.0 {
		t.Fatalf("base64, truncated to 1: %v", b64)
	}

	// Errors: a bad cursor, not a delayed exchange, no such exchange.
	wantError(t, a.do("GET", "/exchanges/%2F/dx/scheduled?after=x", nil), 400, "bad_request", "after must be")
	wantError(t, a.do("GET", "/exchanges/%2F/amq.direct/scheduled", nil), 400, "bad_request", "not a delayed exchange")
	a.must(404, "GET", "/exchanges/%2F/nope/scheduled", nil)
	wantError(t, a.do("POST", "/exchanges/%2F/dx/scheduled/cancel", map[string]any{}), 400, "bad_request", "needs a filter")
	wantError(t, a.do("POST", "/exchanges/%2F/dx/scheduled/cancel", map[string]any{"due_before": "soon"}), 400, "bad_request", "due_before must be")

	// Permissions.
	a.must(201, "PUT", "/users/ro", map[string]any{"password": "ro-pw", "tags": "management"})
	a.must(201, "PUT", "/permissions/%2F/ro", map[string]any{"configure": "", "write": "", "read": ".*"})
	a.must(201, "PUT", "/users/wo", map[string]any{"password": "wo-pw", "tags": "management"})
	a.must(201, "PUT", "/permissions/%2F/wo", map[string]any{"configure": "", "write": ".*", "read": ""})
	a.must(201, "PUT", "/users/plain", map[string]any{"password": "plain-pw", "tags": ""})
	a.must(201, "PUT", "/permissions/%2F/plain", map[string]any{"configure": ".*", "write": ".*", "read": ".*"})
	id := fmt.Sprint(int64(first["id"].(float64)))
	if r := a.as("ro", "ro-pw", "GET", "/exchanges/%2F/dx/scheduled", nil); r.status != 200 {
		t.Fatalf("list with read: %d %s", r.status, r.body)
	}
	wantError(t, a.as("wo", "wo-pw", "GET", "/exchanges/%2F/dx/scheduled", nil), 401, "not_authorised", "Access refused.")
	wantError(t, a.as("ro", "ro-pw", "DELETE", "/exchanges/%2F/dx/scheduled/"+id, nil), 401, "not_authorised", "Access refused.")
	wantError(t, a.as("ro", "ro-pw", "POST", "/exchanges/%2F/dx/scheduled/cancel", map[string]any{"all": true}), 401, "not_authorised", "Access refused.")
	wantError(t, a.as("wo", "wo-pw", "POST", "/exchanges/%2F/dx/scheduled/cancel", map[string]any{"all": true}), 401, "not_authorised", "Access refused.")
	if r := a.as("plain", "plain-pw", "GET", "/exchanges/%2F/dx/scheduled", nil); r.status != 401 {
		t.Fatalf("list without the management tag: %d %s, want 401", r.status, r.body)
	}
	if got := scPayloads(scListAPI(t, a, 20)); !slices.Equal(got, want) {
		t.Fatalf("after refused cancels: %q, want %q", got, want)
	}

	// Cancel one by id (m3), then again: 404.
	if c := a.must(200, "DELETE", "/exchanges/%2F/dx/scheduled/"+id, nil).object(t); c["cancelled"] != 1.0 {
		t.Fatalf("cancel %s: %v", id, c)
	}
	wantError(t, a.do("DELETE", "/exchanges/%2F/dx/scheduled/"+id, nil), 404, "not_found", "no scheduled message")
	want = slices.DeleteFunc(want, func(s string) bool { return s == "m3" })
	// By ids: m7 (2 s) and m1 (3 s), with one gone.
	ms := scListAPI(t, a, 20)
	ids := []any{ms[0]["id"], ms[1]["id"], first["id"]}
	if c := a.must(200, "POST", "/exchanges/%2F/dx/scheduled/cancel", map[string]any{"ids": ids}).object(t); c["cancelled"] != 2.0 {
		t.Fatalf("cancel ids %v: %v, want 2", ids, c)
	}
	want = slices.DeleteFunc(want, func(s string) bool { return s == "m7" || s == "m1" })
	// By routing key j: m0 m6 m9.
	if c := a.must(200, "POST", "/exchanges/%2F/dx/scheduled/cancel", map[string]any{"routing_key": "j"}).object(t); c["cancelled"] != 3.0 {
		t.Fatalf("cancel key j: %v, want 3", c)
	}
	want = slices.DeleteFunc(want, func(s string) bool { return s == "m0" || s == "m6" || s == "m9" })
	// By header and due time: tenant t0 due before 6 s: m4 (5 s); m2
	// and m8 are due at 7 s and 6 s.
	before := time.UnixMilli(start + 6000).UTC().Format(time.RFC3339Nano)
	if c := a.must(200, "POST", "/exchanges/%2F/dx/scheduled/cancel", map[string]any{"headers": map[string]string{"tenant": "t0"}, "due_before": before}).object(t); c["cancelled"] != 1.0 {
		t.Fatalf("cancel tenant t0 before %s: %v, want 1", before, c)
	}
	want = slices.DeleteFunc(want, func(s string) bool { return s == "m4" })
	if got := scPayloads(scListAPI(t, a, 2)); !slices.Equal(got, want) {
		t.Fatalf("after cancels: %q, want %q", got, want)
	}

	a.stopAPI()
	a.Crash()
	a.serve()
	if got := scPayloads(scListAPI(t, a, 2)); !slices.Equal(got, want) {
		t.Fatalf("after a crash: %q, want %q", got, want)
	}
	if x := a.must(200, "GET", "/exchanges/%2F/dx", nil).object(t); x["messages_delayed"] != float64(len(want)) {
		t.Fatalf("messages_delayed %v, want %d", x["messages_delayed"], len(want))
	}
	clk.Advance(10 * time.Second)
	waitFor(t, func() bool {
		return a.must(200, "GET", "/queues/%2F/q", nil).object(t)["messages"] == float64(len(want))
	})
	got := a.must(200, "POST", "/queues/%2F/q/get", map[string]any{"count": 100, "ackmode": "ack_requeue_false", "encoding": "auto"}).list(t)
	var bodies []string
	for _, m := range got {
		bodies = append(bodies, m["payload"].(string))
	}
	slices.Sort(bodies)
	if w := slices.Sorted(slices.Values(want)); !slices.Equal(bodies, w) {
		t.Fatalf("released %q, want %q", bodies, w)
	}
	if l := scListAPI(t, a, 5); len(l) != 0 {
		t.Fatalf("listed %q after every release", scPayloads(l))
	}
}
