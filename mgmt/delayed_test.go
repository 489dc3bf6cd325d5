package mgmt_test

import (
	"reflect"
	"slices"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker/brokertest"
	"github.com/brokerd/brokerd/mgmt"
)

// A delayed exchange through the API: declared by PUT (refused with the
// plugin's text without x-delayed-type), messages_delayed on it (the
// plugin's field) in the list and on its own, on no other exchange; its
// holding queue in no queue listing or lookup; x-delayed-message among
// the exchange types.
func TestDelayedExchangeAPI(t *testing.T) {
	clk := brokertest.NewClock()
	a := startBrokerAPI(t, brokertest.Config{Clock: clk}, mgmt.Options{})
	wantError(t, a.do("PUT", "/exchanges/%2F/bad", map[string]any{"type": "x-delayed-message"}), 400, "bad_request",
		"Invalid argument, 'x-delayed-type' must be an existing exchange type")
	a.must(201, "PUT", "/exchanges/%2F/dx", map[string]any{"type": "x-delayed-message", "durable": true, "arguments": map[string]any{"x-delayed-type": "direct"}})
	a.must(201, "PUT", "/queues/%2F/q", map[string]any{"durable": true})
	a.must(201, "POST", "/bindings/%2F/e/dx/q/q", map[string]any{"routing_key": "k"})

	ch := a.Session(t)
	for i := range 3 {
		ch.Publish("dx", "k", amqp091.Publishing{Body: []byte{byte('a' + i)}, Headers: amqp091.Table{"x-delay": int64(1000)}})
	}
	x := a.must(200, "GET", "/exchanges/%2F/dx", nil).object(t)
	if x["messages_delayed"] != 3.0 || x["type"] != "x-delayed-message" || !reflect.DeepEqual(x["arguments"], map[string]any{"x-delayed-type": "direct"}) {
		t.Fatalf("GET exchange: %v, want type x-delayed-message, messages_delayed 3", x)
	}
	for _, e := range a.must(200, "GET", "/exchanges/%2F", nil).list(t) {
		switch e["name"] {
		case "dx":
			if e["messages_delayed"] != 3.0 {
				t.Fatalf("listed dx: %v, want messages_delayed 3", e)
			}
		default:
			if _, ok := e["messages_delayed"]; ok {
				t.Fatalf("exchange %q (%v) has messages_delayed", e["name"], e["type"])
			}
		}
	}
	for _, q := range a.must(200, "GET", "/queues", nil).list(t) {
		if q["name"] != "q" {
			t.Fatalf("queue %q listed, want q alone", q["name"])
		}
	}
	wantError(t, a.do("GET", "/queues/%2F/"+pathEscape("amq.delayed/dx"), nil), 404, "Object Not Found", "")
	var types []any
	for _, xt := range a.must(200, "GET", "/overview", nil).object(t)["exchange_types"].([]any) {
		types = append(types, xt.(map[string]any)["name"])
	}
	if !slices.Contains(types, any("x-delayed-message")) {
		t.Fatalf("exchange_types %v, want x-delayed-message among them", types)
	}

	clk.Advance(time.Second)
	waitFor(t, func() bool { return a.must(200, "GET", "/queues/%2F/q", nil).object(t)["messages"] == 3.0 })
	if x := a.must(200, "GET", "/exchanges/%2F/dx", nil).object(t); x["messages_delayed"] != 0.0 {
		t.Fatalf("messages_delayed %v after release, want 0", x["messages_delayed"])
	}
}

// A delayed exchange exports as x-delayed-message with its arguments (its
// holding queue is no queue of the export) and imports back the same,
// delaying again; LavinMQ's export type x-delayed-exchange imports as
// x-delayed-message; an invalid one is refused, naming it.
func TestDelayedDefinitions(t *testing.T) {
	a := startAPI(t)
	a.must(201, "PUT", "/exchanges/%2F/later", map[string]any{"type": "x-delayed-message", "durable": true,
		"arguments": map[string]any{"x-delayed-type": "topic", "alternate-exchange": "amq.fanout"}})
	a.must(201, "PUT", "/queues/%2F/q", map[string]any{"durable": true})
	a.must(201, "POST", "/bindings/%2F/e/later/q/q", map[string]any{"routing_key": "a.#"})
	ch := a.Session(t, brokertest.Persistent)
	ch.Publish("later", "a.b", amqp091.Publishing{Body: []byte("held"), Headers: amqp091.Table{"x-delay": int64(600_000)}})

	export := a.must(200, "GET", "/definitions", nil).object(t)
	var got map[string]any
	for _, x := range export["exchanges"].([]any) {
		if x := x.(map[string]any); x["name"] == "later" {
			got = x
		}
	}
	want := map[string]any{"name": "later", "vhost": "/", "type": "x-delayed-message", "durable": true, "auto_delete": false,
		"internal": false, "arguments": map[string]any{"x-delayed-type": "topic", "alternate-exchange": "amq.fanout"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("exported %v, want %v", got, want)
	}
	if qs := export["queues"].([]any); len(qs) != 1 || qs[0].(map[string]any)["name"] != "q" {
		t.Fatalf("exported queues %v, want q alone", qs)
	}

	b := startAPI(t)
	b.must(204, "POST", "/definitions", export)
	again := b.must(200, "GET", "/definitions", nil).object(t)
	for _, k := range []string{"queues", "exchanges", "bindings"} {
		if !reflect.DeepEqual(norm(export[k]), norm(again[k])) {
			t.Errorf("%s after re-import:\n got %v\nwant %v", k, again[k], export[k])
		}
	}
	bch := b.Session(t, brokertest.Persistent)
	bch.Publish("later", "a.b", amqp091.Publishing{Body: []byte("held"), Headers: amqp091.Table{"x-delay": int64(600_000)}})
	if x := b.must(200, "GET", "/exchanges/%2F/later", nil).object(t); x["messages_delayed"] != 1.0 {
		t.Fatalf("imported exchange holds %v, want 1", x["messages_delayed"])
	}
	b.restart()
	if x := b.must(200, "GET", "/exchanges/%2F/later", nil).object(t); x["messages_delayed"] != 1.0 {
		t.Fatalf("imported exchange holds %v after a restart, want 1", x["messages_delayed"])
	}

	lavin := map[string]any{"exchanges": []any{map[string]any{"name": "lx", "vhost": "/", "type": "x-delayed-exchange",
		"durable": true, "auto_delete": false, "internal": false, "arguments": map[string]any{"x-delayed-type": "fanout"}}}}
	b.must(204, "POST", "/definitions", lavin)
	if x := b.must(200, "GET", "/exchanges/%2F/lx", nil).object(t); x["type"] != "x-delayed-message" || x["messages_delayed"] != 0.0 ||
		!reflect.DeepEqual(x["arguments"], map[string]any{"x-delayed-type": "fanout"}) {
		t.Fatalf("LavinMQ's delayed exchange imported as %v", x)
	}
	bad := map[string]any{"exchanges": []any{map[string]any{"name": "nx", "vhost": "/", "type": "x-delayed-message", "durable": true,
		"arguments": map[string]any{"x-delayed-type": "x-delayed-message"}}}}
	wantError(t, b.do("POST", "/definitions", bad), 400, "bad_request",
		"exchange 'nx' in vhost '/': PRECONDITION_FAILED - Invalid argument, 'x-delayed-message' can't be used for 'x-delayed-type'")
}
