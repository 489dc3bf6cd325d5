package mgmt_test

import (
	"testing"
)

// Bodies take booleans and integers in the forms RabbitMQ's
// rabbit_misc:parse_bool and parse_int take (rabbitmqadmin sends
// "durable": "true" and "count": "1"), and a value in no such form is a
// 400 that names the field.
func TestStringScalarsAsRabbitMQ(t *testing.T) {
	a := startAPI(t)
	a.must(201, "PUT", "/queues/%2F/strq", `{"durable":"true","auto_delete":"false","vhost":"/","name":"strq"}`)
	if o := a.must(200, "GET", "/queues/%2F/strq", nil).object(t); o["durable"] != true || o["auto_delete"] != false {
		t.Errorf("queue declared with string booleans: durable %v auto_delete %v, want true, false", o["durable"], o["auto_delete"])
	}
	a.must(201, "PUT", "/queues/%2F/strq2", `{"durable":"false","auto_delete":"true"}`)
	if o := a.must(200, "GET", "/queues/%2F/strq2", nil).object(t); o["durable"] != false || o["auto_delete"] != true {
		t.Errorf("queue strq2: durable %v auto_delete %v, want false, true", o["durable"], o["auto_delete"])
	}
	a.must(201, "PUT", "/exchanges/%2F/strx", `{"type":"topic","durable":"true","auto_delete":"false","internal":"true"}`)
	if o := a.must(200, "GET", "/exchanges/%2F/strx", nil).object(t); o["durable"] != true || o["internal"] != true || o["auto_delete"] != false {
		t.Errorf("exchange declared with string booleans: %v", o)
	}
	// The same declaration with JSON booleans is the same exchange.
	a.must(204, "PUT", "/exchanges/%2F/strx", map[string]any{"type": "topic", "durable": true, "internal": true})

	for _, c := range []struct{ method, path, body, reason string }{
		{"PUT", "/queues/%2F/bad", `{"durable":"yes"}`, `durable: expected a boolean (true, false, "true" or "false"), got "yes"`},
		{"PUT", "/queues/%2F/bad", `{"durable":1}`, `durable: expected a boolean`},
		{"PUT", "/queues/%2F/bad", `{"auto_delete":"True"}`, `auto_delete: expected a boolean`},
		{"PUT", "/queues/%2F/bad", `{"arguments":[1]}`, `arguments: expected an object, got a list`},
		{"PUT", "/exchanges/%2F/bad", `{"type":"direct","internal":"no"}`, `internal: expected a boolean`},
		{"PUT", "/exchanges/%2F/bad", `{"type":5}`, `type: expected a string, got a number`},
		{"PUT", "/permissions/%2F/guest", `{"configure":".*","write":".*","read":false}`, `read: expected a string, got a boolean`},
		{"PUT", "/vhosts/v", `{"tracing":"maybe"}`, `tracing: expected a boolean`},
		{"PUT", "/vhosts/v", `{"tracing":true}`, `tracing: brokerd has no message tracing`},
		{"PUT", "/vhosts/v", `{"tags":5}`, `tags: expected a string or a list of strings`},
		{"POST", "/queues/%2F/strq/get", `{"count":"two","ackmode":"ack_requeue_true","encoding":"auto"}`, `count: expected an integer (a number, or a string of digits), got "two"`},
		{"POST", "/exchanges/%2F/amq.default/publish", `{"properties":{},"routing_key":1,"payload":"x","payload_encoding":"string"}`, `routing_key: expected a string, got a number`},
		{"POST", "/queues/%2F/strq/redrive", `{"to":"origin","max":"ten"}`, `max: expected an integer, got a string`},
	} {
		r := a.do(c.method, c.path, c.body)
		wantError(t, r, 400, "bad_request", c.reason)
	}
	a.must(201, "PUT", "/vhosts/v", `{"tracing":"false"}`)

	// count and truncate as strings of digits, as rabbitmqadmin sends them;
	// a count with a fraction is truncated (parse_int).
	a.must(200, "POST", "/exchanges/%2F/amq.default/publish", map[string]any{"properties": map[string]any{}, "routing_key": "strq", "payload": "hello", "payload_encoding": "string"})
	a.must(200, "POST", "/exchanges/%2F/amq.default/publish", map[string]any{"properties": map[string]any{}, "routing_key": "strq", "payload": "world", "payload_encoding": "string"})
	got := a.must(200, "POST", "/queues/%2F/strq/get", `{"count":"5","ackmode":"ack_requeue_true","encoding":"auto","truncate":"3"}`).list(t)
	if len(got) != 2 || got[0]["payload"] != "hel" || got[1]["payload"] != "wor" {
		t.Errorf("get with count \"5\" and truncate \"3\": %v", got)
	}
	if got := a.must(200, "POST", "/queues/%2F/strq/get", `{"count":1.9,"ackmode":"ack_requeue_true","encoding":"auto"}`).list(t); len(got) != 1 {
		t.Errorf("get with count 1.9: %d messages, want 1", len(got))
	}
}
