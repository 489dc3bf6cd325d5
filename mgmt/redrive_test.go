package mgmt_test

import "testing"

// Dead letters are redriven to their origin queue (max 2), then the rest
// through the default exchange to another queue; bad bodies are 400, a
// missing queue 404, a user without read permission 401.
func TestRedriveHTTP(t *testing.T) {
	a := startAPI(t)
	a.must(201, "PUT", "/queues/%2F/dlq", map[string]any{"durable": true})
	a.must(201, "PUT", "/queues/%2F/other", map[string]any{"durable": true})
	a.must(201, "PUT", "/queues/%2F/work", map[string]any{"durable": true,
		"arguments": map[string]any{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}})
	for _, body := range []string{"a", "b", "c"} {
		a.must(200, "POST", "/exchanges/%2F/amq.default/publish", map[string]any{
			"properties": map[string]any{"delivery_mode": 2}, "routing_key": "work", "payload": body, "payload_encoding": "string"})
	}
	a.must(200, "POST", "/queues/%2F/work/get", map[string]any{"count": 3, "ackmode": "reject_requeue_false", "encoding": "auto"})
	waitFor(t, func() bool { return a.must(200, "GET", "/queues/%2F/dlq", nil).object(t)["messages"] == 3.0 })

	r := a.must(200, "POST", "/queues/%2F/dlq/redrive", map[string]any{"to": "origin", "max": 2, "reason": "rejected"}).object(t)
	if r["moved"] != 2.0 || r["failed"] != 0.0 || r["remaining"] != 1.0 {
		t.Fatalf("redrive to origin: %v", r)
	}
	waitFor(t, func() bool { return a.must(200, "GET", "/queues/%2F/work", nil).object(t)["messages"] == 2.0 })
	got := a.must(200, "POST", "/queues/%2F/work/get", map[string]any{"count": 2, "ackmode": "ack_requeue_false", "encoding": "auto"}).list(t)
	for i, want := range []string{"a", "b"} {
		m := got[i]
		h := m["properties"].(map[string]any)["headers"].(map[string]any)
		if m["payload"] != want || h["x-redriven-count"] != 1.0 || h["x-death"] == nil {
			t.Fatalf("redriven %d: %v", i, m)
		}
	}

	r = a.must(200, "POST", "/queues/%2F/dlq/redrive", map[string]any{"to": "exchange", "exchange": "amq.default", "routing_key": "other"}).object(t)
	if r["moved"] != 1.0 || r["remaining"] != 0.0 {
		t.Fatalf("redrive to exchange: %v", r)
	}
	waitFor(t, func() bool { return a.must(200, "GET", "/queues/%2F/other", nil).object(t)["messages"] == 1.0 })

	a.must(400, "POST", "/queues/%2F/dlq/redrive", map[string]any{"to": "elsewhere"})
	a.must(404, "POST", "/queues/%2F/nope/redrive", map[string]any{})
	a.must(201, "PUT", "/users/ann", map[string]any{"password": "ann-pw", "tags": "management"})
	a.must(201, "PUT", "/permissions/%2F/ann", map[string]any{"configure": ".*", "write": ".*", "read": "^$"})
	wantError(t, a.as("ann", "ann-pw", "POST", "/queues/%2F/dlq/redrive", map[string]any{}), 401, "not_authorised", "Access refused.")
}
