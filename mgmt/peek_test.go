package mgmt_test

import (
	"fmt"
	"slices"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

func TestPeekMessages(t *testing.T) {
	a := startAPI(t)
	a.must(201, "PUT", "/queues/%2F/pk", map[string]any{"durable": true})
	_, ch := a.Channel(t)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, 32))
	for i := range 20 {
		body := []byte(fmt.Sprintf("m%d", i))
		if i == 0 {
			body = []byte{0xff, 0x00}
		}
		if err := ch.Publish("", "pk", false, false, amqp091.Publishing{Body: body, DeliveryMode: 2}); err != nil {
			t.Fatal(err)
		}
		if c := <-confirms; !c.Ack {
			t.Fatal("nacked")
		}
	}
	var got []any
	path := "/queues/%2F/pk/peek?count=5"
	for range 10 {
		r := a.must(200, "GET", path, nil).object(t)
		got = append(got, r["messages"].([]any)...)
		if r["next"] == 0.0 {
			break
		}
		path = fmt.Sprintf("/queues/%%2F/pk/peek?count=5&from=%d", uint64(r["next"].(float64)))
	}
	if len(got) != 20 {
		t.Fatalf("peeked %d messages, want 20", len(got))
	}
	if m := got[0].(map[string]any); m["payload"] != "/wA=" || m["payload_encoding"] != "base64" || m["redelivered"] != false {
		t.Errorf("first: %v", m)
	}
	for i := 1; i < 20; i++ {
		if m := got[i].(map[string]any); m["payload"] != fmt.Sprintf("m%d", i) {
			t.Fatalf("message %d: %v", i, m)
		}
	}
	if q := a.must(200, "GET", "/queues/%2F/pk", nil).object(t); q["messages"] != 20.0 {
		t.Errorf("after peeks: %v messages", q["messages"])
	}
	a.must(404, "GET", "/queues/%2F/nope/peek", nil)
	a.must(201, "PUT", "/users/ann", map[string]any{"password": "ann-pw", "tags": "management"})
	a.must(201, "PUT", "/permissions/%2F/ann", map[string]any{"configure": ".*", "write": ".*", "read": "^$"})
	wantError(t, a.as("ann", "ann-pw", "GET", "/queues/%2F/pk/peek", nil), 401, "not_authorised", "Access refused.")
}

// A dead letter's x-death shows on peek as a list of tables, and the
// dead letter stays where it is.
func TestPeekShowsXDeath(t *testing.T) {
	a := startAPI(t)
	a.must(201, "PUT", "/queues/%2F/dlq", map[string]any{"durable": true})
	a.must(201, "PUT", "/queues/%2F/work", map[string]any{"durable": true,
		"arguments": map[string]any{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}})
	a.must(200, "POST", "/exchanges/%2F/amq.default/publish", map[string]any{
		"properties": map[string]any{"delivery_mode": 2}, "routing_key": "work", "payload": "order 7", "payload_encoding": "string"})
	a.must(200, "POST", "/queues/%2F/work/get", map[string]any{"count": 1, "ackmode": "reject_requeue_false", "encoding": "auto"})
	waitFor(t, func() bool { return a.must(200, "GET", "/queues/%2F/dlq", nil).object(t)["messages"] == 1.0 })
	p := a.must(200, "GET", "/queues/%2F/dlq/peek?count=5", nil).object(t)
	msgs := p["messages"].([]any)
	if len(msgs) != 1 {
		t.Fatalf("peek: %v", p)
	}
	m := msgs[0].(map[string]any)
	deaths := m["properties"].(map[string]any)["headers"].(map[string]any)["x-death"].([]any)
	d := deaths[0].(map[string]any)
	if m["payload"] != "order 7" || m["redelivered"] != false || d["reason"] != "rejected" || d["queue"] != "work" || d["count"] != 1.0 {
		t.Errorf("peeked dead letter %v", m)
	}
	if q := a.must(200, "GET", "/queues/%2F/dlq", nil).object(t); q["messages"] != 1.0 {
		t.Errorf("dlq after peek: %v messages", q["messages"])
	}
}

// A priority queue's pages follow delivery order when each starts at the
// previous one's next and next_priority.
func TestPeekPriorityPagesHTTP(t *testing.T) {
	a := startAPI(t)
	a.must(201, "PUT", "/queues/%2F/pp", map[string]any{"durable": true, "arguments": map[string]any{"x-max-priority": 2}})
	var want [3][]string
	for i := range 9 {
		p := i % 3
		body := fmt.Sprintf("p%d-%d", p, i)
		want[2-p] = append(want[2-p], body)
		a.must(200, "POST", "/exchanges/%2F/amq.default/publish", map[string]any{
			"properties": map[string]any{"priority": p}, "routing_key": "pp", "payload": body, "payload_encoding": "string"})
	}
	var got []string
	path := "/queues/%2F/pp/peek?count=2&priority=2"
	for range 10 {
		r := a.must(200, "GET", path, nil).object(t)
		for _, m := range r["messages"].([]any) {
			got = append(got, m.(map[string]any)["payload"].(string))
		}
		if r["next"] == 0.0 {
			break
		}
		path = fmt.Sprintf("/queues/%%2F/pp/peek?count=2&from=%v&priority=%v", r["next"], r["next_priority"])
	}
	if w := append(append(want[0], want[1]...), want[2]...); !slices.Equal(got, w) {
		t.Fatalf("pages: %v, want %v", got, w)
	}
	a.must(400, "GET", "/queues/%2F/pp/peek?priority=256", nil)
}
