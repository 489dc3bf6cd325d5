package mgmt_test

import (
	"fmt"
	"testing"
)

// redriveAndWait starts a redrive task on queue and waits until it ends.
func (a *api) redriveAndWait(queue string, body map[string]any) map[string]any {
	a.t.Helper()
	r := a.must(201, "POST", "/queues/%2F/"+queue+"/redrive", body)
	task := r.object(a.t)
	loc := r.header.Get("Location")
	if loc != "/api/redrives/"+fmt.Sprint(task["id"]) {
		a.t.Fatalf("redrive: Location %q for task %v", loc, task["id"])
	}
	waitFor(a.t, func() bool {
		task = a.must(200, "GET", "/redrives/"+fmt.Sprint(task["id"]), nil).object(a.t)
		return task["state"] != "running"
	})
	return task
}

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

	r := a.redriveAndWait("dlq", map[string]any{"to": "origin", "max": 2, "reason": "rejected"})
	if r["state"] != "finished" || r["moved"] != 2.0 || r["failed"] != 0.0 || r["remaining"] != 1.0 || r["user"] != "guest" || r["to"] != "origin" {
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

	r = a.redriveAndWait("dlq", map[string]any{"to": "exchange", "exchange": "amq.default", "routing_key": "other"})
	if r["state"] != "finished" || r["moved"] != 1.0 || r["remaining"] != 0.0 || r["exchange"] != "amq.default" || r["routing_key"] != "other" {
		t.Fatalf("redrive to exchange: %v", r)
	}
	waitFor(t, func() bool { return a.must(200, "GET", "/queues/%2F/other", nil).object(t)["messages"] == 1.0 })

	a.must(400, "POST", "/queues/%2F/dlq/redrive", map[string]any{"to": "elsewhere"})
	a.must(404, "POST", "/queues/%2F/nope/redrive", map[string]any{})
	a.must(201, "PUT", "/users/ann", map[string]any{"password": "ann-pw", "tags": "management"})
	a.must(201, "PUT", "/permissions/%2F/ann", map[string]any{"configure": ".*", "write": ".*", "read": "^$"})
	wantError(t, a.as("ann", "ann-pw", "POST", "/queues/%2F/dlq/redrive", map[string]any{}), 401, "not_authorised", "Access refused.")
}

// Tasks are listed to the users of their vhost; another user cannot
// cancel one; its owner cancels a paced task mid-way (the counts add up:
// moved in the origin, the rest left) and then forgets it; failures are
// listed with their reasons.
func TestRedriveTasksHTTP(t *testing.T) {
	a := startAPI(t)
	a.must(201, "PUT", "/queues/%2F/dlq", map[string]any{"durable": true})
	a.must(201, "PUT", "/queues/%2F/work", map[string]any{"durable": true,
		"arguments": map[string]any{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}})
	const n = 40
	for i := range n {
		a.must(200, "POST", "/exchanges/%2F/amq.default/publish", map[string]any{
			"properties": map[string]any{}, "routing_key": "work", "payload": fmt.Sprint(i), "payload_encoding": "string"})
	}
	a.must(200, "POST", "/queues/%2F/work/get", map[string]any{"count": n, "ackmode": "reject_requeue_false", "encoding": "auto"})
	waitFor(t, func() bool { return a.must(200, "GET", "/queues/%2F/dlq", nil).object(t)["messages"] == float64(n) })

	// 2 a second: the task is still running when it is cancelled.
	task := a.must(201, "POST", "/queues/%2F/dlq/redrive", map[string]any{"rate": 2}).object(t)
	id := fmt.Sprint(task["id"])
	if task["state"] != "running" || task["rate"] != 2.0 {
		t.Fatalf("started task: %v", task)
	}
	list := a.must(200, "GET", "/redrives", nil).list(t)
	if len(list) != 1 || list[0]["id"] != id {
		t.Fatalf("tasks: %v", list)
	}
	a.must(201, "PUT", "/users/bob", map[string]any{"password": "bob-pw", "tags": "management"})
	if r := a.as("bob", "bob-pw", "GET", "/redrives", nil); r.status != 200 || len(r.list(t)) != 0 {
		t.Fatalf("bob, without permissions in /, sees %d %s", r.status, r.body)
	}
	a.must(201, "PUT", "/permissions/%2F/bob", map[string]any{"configure": ".*", "write": ".*", "read": ".*"})
	if r := a.as("bob", "bob-pw", "GET", "/redrives/"+id, nil); r.status != 200 {
		t.Fatalf("bob reads the task: %d %s", r.status, r.body)
	}
	wantError(t, a.as("bob", "bob-pw", "DELETE", "/redrives/"+id, nil), 401, "not_authorised", "User not authorised to access object")

	a.must(204, "DELETE", "/redrives/"+id, nil)
	task = a.must(200, "GET", "/redrives/"+id, nil).object(t)
	moved := task["moved"].(float64)
	if task["state"] != "cancelled" || moved >= n || task["ended_at"] == nil {
		t.Fatalf("cancelled task: %v", task)
	}
	waitFor(t, func() bool { return a.must(200, "GET", "/queues/%2F/work", nil).object(t)["messages"] == moved })
	if q := a.must(200, "GET", "/queues/%2F/dlq", nil).object(t); q["messages"] != n-moved {
		t.Fatalf("dlq after the cancel: %v messages, want %v", q["messages"], n-moved)
	}
	a.must(204, "DELETE", "/redrives/"+id, nil) // an ended task stays
	if again := a.must(200, "GET", "/redrives/"+id, nil).object(t); again["state"] != "cancelled" || again["moved"] != moved {
		t.Fatalf("a second DELETE changed the task: %v", again)
	}
	a.must(400, "DELETE", "/redrives/"+id+"?forget=maybe", nil)
	a.must(204, "DELETE", "/redrives/"+id+"?forget=true", nil)
	a.must(404, "GET", "/redrives/"+id, nil)
	a.must(404, "DELETE", "/redrives/"+id, nil)

	// The origin is gone: every message fails, with the reason, and stays.
	a.must(204, "DELETE", "/queues/%2F/work", nil)
	task = a.redriveAndWait("dlq", map[string]any{})
	reasons := task["failure_reasons"].(map[string]any)
	failures := task["failures"].([]any)
	if task["state"] != "finished" || task["moved"] != 0.0 || task["failed"] != n-moved ||
		reasons["no queue 'work'"] != n-moved || len(failures) != int(n-moved) || task["remaining"] != n-moved {
		t.Fatalf("redrive to a deleted origin: %v", task)
	}
	// Every failure, page by page.
	var all []any
	path := "/redrives/" + fmt.Sprint(task["id"]) + "/failures?count=7"
	for range 20 {
		p := a.must(200, "GET", path, nil).object(t)
		all = append(all, p["failures"].([]any)...)
		if p["next"] == 0.0 {
			break
		}
		path = fmt.Sprintf("/redrives/%v/failures?count=7&from=%v", task["id"], p["next"])
	}
	if len(all) != int(n-moved) {
		t.Fatalf("%d failures paged, want %v", len(all), n-moved)
	}
	for i, f := range all {
		m := f.(map[string]any)
		if m["reason"] != "no queue 'work'" || i > 0 && m["seq"].(float64) <= all[i-1].(map[string]any)["seq"].(float64) {
			t.Fatalf("failure %d: %v", i, m)
		}
	}
	a.must(400, "GET", "/redrives/"+fmt.Sprint(task["id"])+"/failures?count=0", nil)
	a.must(404, "GET", "/redrives/nope/failures", nil)
	a.must(400, "POST", "/queues/%2F/dlq/redrive", map[string]any{"rate": -1})
}
