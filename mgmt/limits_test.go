package mgmt_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// What the API stores is bounded as AMQP bounds a declaration: by the
// frame a client could send it in (frame_max, 131072 bytes here) and
// short strings for names. Each refusal is a 400 with RabbitMQ's error
// body, and nothing of it is stored.
func TestDefinitionsBoundedAsAMQP(t *testing.T) {
	a := startAPI(t)
	big := strings.Repeat("x", 200<<10)  // over a frame
	fits := strings.Repeat("x", 100<<10) // within one
	huge := strings.Repeat("x", 20<<20)  // the 20 MiB

	// A 20 MiB argument is over the body limit, from the headers.
	wantError(t, a.doHuge("PUT", "/queues/%2F/q", fmt.Sprintf(`{"arguments": {"x-big": %q}}`, huge)), 400, "bad_request", "Exceeded HTTP request body size limit")
	// 200 KiB fits the body limit, not a frame.
	wantError(t, a.do("PUT", "/queues/%2F/q", map[string]any{"arguments": map[string]any{"x-big": big}}), 400, "bad_request",
		"over frame_max (131072 bytes)")
	wantError(t, a.do("PUT", "/exchanges/%2F/x", map[string]any{"arguments": map[string]any{"x-big": big}}), 400, "bad_request", "over frame_max")
	a.must(201, "PUT", "/queues/%2F/ok", map[string]any{"arguments": map[string]any{"x-fits": fits}})
	a.must(201, "PUT", "/exchanges/%2F/ok", nil)
	wantError(t, a.do("POST", "/bindings/%2F/e/ok/q/ok", map[string]any{"arguments": map[string]any{"x-big": big}}), 400, "bad_request", "over frame_max")
	wantError(t, a.do("POST", "/bindings/%2F/e/ok/q/ok", map[string]any{"routing_key": strings.Repeat("k", 256)}), 400, "bad_request",
		"routing key is 256 bytes, over the 255 of an AMQP short string")
	wantError(t, a.do("PUT", "/queues/%2F/"+strings.Repeat("q", 256), nil), 400, "bad_request", "queue name is 256 bytes")
	wantError(t, a.do("PUT", "/queues/%2F/q", map[string]any{"arguments": map[string]any{strings.Repeat("k", 256): 1}}), 400, "bad_request",
		"arguments: cannot encode field table")
	wantError(t, a.do("PUT", "/policies/%2F/p", map[string]any{"pattern": "^q$", "definition": map[string]any{"x-big": big}}), 400, "bad_request",
		"over the 131072 a definition may take")
	wantError(t, a.do("PUT", "/operator-policies/%2F/p", map[string]any{"pattern": "^q$", "definition": map[string]any{"x-big": big}}), 400, "bad_request",
		"over the 131072 a definition may take")
	wantError(t, a.do("PUT", "/users/u", map[string]any{"password": "pw", "tags": big}), 400, "bad_request", "over the 131072 a definition may take")
	wantError(t, a.do("PUT", "/vhosts/v", map[string]any{"description": big}), 400, "bad_request", "over the 131072 a definition may take")
	wantError(t, a.do("PUT", "/vhosts/"+strings.Repeat("v", 256), nil), 400, "bad_request", "vhost name is 256 bytes")
	wantError(t, a.do("PUT", "/permissions/%2F/guest", map[string]any{"configure": big, "write": "", "read": ""}), 400, "bad_request",
		"over the 131072 a definition may take")
	wantError(t, a.do("POST", "/queues/%2F/ok/redrive", map[string]any{"to": "exchange", "exchange": "ok", "routing_key": strings.Repeat("k", 256)}), 400,
		"bad_request", "routing_key is 256 bytes")

	// A definitions import: the same bounds, per object, before anything
	// of the file is imported when an object is too large to hold.
	defs := func(q map[string]any) map[string]any {
		return map[string]any{"users": []any{map[string]any{"name": "imported", "password_hash": "", "tags": "management"}},
			"queues": []any{q}}
	}
	hugeDefs, err := json.Marshal(defs(map[string]any{"name": "q", "vhost": "/", "durable": true, "arguments": map[string]any{"x-big": huge}}))
	if err != nil {
		t.Fatal(err)
	}
	wantError(t, a.doHuge("POST", "/definitions", string(hugeDefs)), 400, "bad_request", "definitions: queues[0] is over 1048576 bytes")
	if _, ok := a.Broker.User("imported"); ok {
		t.Error("an import refused for a 20 MiB argument imported its users")
	}
	wantError(t, a.do("POST", "/definitions", defs(map[string]any{"name": "q", "vhost": "/", "durable": true, "arguments": map[string]any{"x-big": big}})),
		400, "bad_request", "queue 'q' in vhost '/': arguments take")
	wantError(t, a.do("POST", "/definitions", map[string]any{"users": []any{map[string]any{"name": "u", "password_hash": "", "tags": big}}}),
		400, "bad_request", "user 'u': the user's name, password and tags take")
	wantError(t, a.do("POST", "/definitions", map[string]any{"policies": []any{map[string]any{"vhost": "/", "name": "p", "pattern": ".*", "definition": map[string]any{"x": big}}}}),
		400, "bad_request", "policy 'p' in vhost '/'")

	for _, path := range []string{"/queues/%2F/q", "/exchanges/%2F/x", "/policies/%2F/p", "/operator-policies/%2F/p", "/users/u", "/vhosts/v"} {
		a.must(404, "GET", path, nil)
	}
	if n := len(a.must(200, "GET", "/bindings/%2F/e/ok/q/ok", nil).list(t)); n != 0 {
		t.Errorf("%d bindings stored", n)
	}
	if perms := a.must(200, "GET", "/permissions/%2F/guest", nil).object(t); perms["configure"] != ".*" {
		t.Errorf("guest's permissions changed: %v", perms)
	}
}

// Over AMQP a client cannot declare more: a queue.declare with 200 KiB of
// arguments is a frame over frame_max, and the connection is closed with
// 501 FRAME_ERROR; nothing is declared.
func TestAMQPDeclareBoundedByFrame(t *testing.T) {
	a := startAPI(t)
	conn, err := amqp091.Dial("amqp://guest:guest@" + a.Addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	_, err = ch.QueueDeclare("q", true, false, false, false, amqp091.Table{"x-big": strings.Repeat("x", 200<<10)})
	var e *amqp091.Error
	if !errors.As(err, &e) || e.Code != amqp091.FrameError {
		t.Fatalf("declare with 200 KiB of arguments: %v, want 501 FRAME_ERROR", err)
	}
	a.must(404, "GET", "/queues/%2F/q", nil)
}
