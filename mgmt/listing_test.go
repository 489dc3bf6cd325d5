package mgmt_test

import (
	"fmt"
	"testing"
)

func TestListColumnsSortFilterPages(t *testing.T) {
	a := startAPI(t)
	for i := range 7 {
		a.must(201, "PUT", fmt.Sprintf("/queues/%%2F/q%d", i), map[string]any{})
	}
	a.must(201, "PUT", "/queues/%2F/other", map[string]any{})
	for i := range 3 { // q2 holds the most
		a.must(200, "POST", "/exchanges/%2F/amq.default/publish", map[string]any{
			"properties": map[string]any{}, "routing_key": "q2", "payload": fmt.Sprint(i), "payload_encoding": "string"})
	}
	cols := a.must(200, "GET", "/queues/%2F?columns=name,messages", nil).list(t)
	if len(cols) != 8 || len(cols[0]) != 2 || cols[0]["name"] != "other" {
		t.Errorf("columns: %v", cols)
	}
	top := a.must(200, "GET", "/queues/%2F?sort=messages&sort_reverse=true&columns=name", nil).list(t)
	if top[0]["name"] != "q2" {
		t.Errorf("sorted by messages, reversed: %v", top)
	}
	p := a.must(200, "GET", "/queues/%2F?page=2&page_size=3&name=Q&sort=name", nil).object(t)
	items := p["items"].([]any)
	if p["filtered_count"] != 7.0 || p["total_count"] != 8.0 || p["page_count"] != 3.0 || p["item_count"] != 3.0 ||
		len(items) != 3 || items[0].(map[string]any)["name"] != "q3" {
		t.Errorf("page 2: %v", p)
	}
	re := a.must(200, "GET", "/queues/%2F?name=%5Eq%5B05%5D%24&use_regex=true", nil).list(t)
	if len(re) != 2 {
		t.Errorf("regex filter: %v", re)
	}
	wantError(t, a.do("GET", "/queues/%2F?page=1&page_size=501", nil), 400, "bad_request", "page_size must be between 1 and 500")
	wantError(t, a.do("GET", "/queues/%2F?page=9", nil), 400, "bad_request", "page_out_of_range")
}

func TestPublish(t *testing.T) {
	a := startAPI(t)
	a.must(201, "PUT", "/queues/%2F/q", map[string]any{})
	r := a.must(200, "POST", "/exchanges/%2F/amq.default/publish", map[string]any{
		"properties":  map[string]any{"delivery_mode": 2, "content_type": "text/plain", "headers": map[string]any{"h": "v", "n": 7}, "priority": 1},
		"routing_key": "q", "payload": "aGk=", "payload_encoding": "base64"}).object(t)
	if r["routed"] != true {
		t.Errorf("publish to q: %v", r)
	}
	got := a.must(200, "POST", "/queues/%2F/q/get", map[string]any{"count": 1, "ackmode": "ack_requeue_false", "encoding": "auto"}).list(t)
	props := got[0]["properties"].(map[string]any)
	if got[0]["payload"] != "hi" || props["delivery_mode"] != 2.0 || props["content_type"] != "text/plain" ||
		props["headers"].(map[string]any)["n"] != 7.0 || props["priority"] != 1.0 {
		t.Errorf("message %v", got[0])
	}
	r = a.must(200, "POST", "/exchanges/%2F/amq.direct/publish", map[string]any{
		"properties": map[string]any{}, "routing_key": "nowhere", "payload": "x", "payload_encoding": "string"}).object(t)
	if r["routed"] != false {
		t.Errorf("unroutable publish: %v", r)
	}
	wantError(t, a.do("POST", "/exchanges/%2F/amq.direct/publish", map[string]any{"payload": "x"}), 400, "bad_request",
		"[{key_missing,properties},{key_missing,routing_key},{key_missing,payload_encoding}]")
	wantError(t, a.do("POST", "/exchanges/%2F/absent/publish", map[string]any{
		"properties": map[string]any{}, "routing_key": "", "payload": "x", "payload_encoding": "string"}), 404, "not_found", "no exchange 'absent'")
	wantError(t, a.do("POST", "/exchanges/%2F/amq.direct/publish", map[string]any{
		"properties": map[string]any{"delivery_mode": "two"}, "routing_key": "", "payload": "x", "payload_encoding": "string"}), 400, "bad_request", "delivery_mode")
}
