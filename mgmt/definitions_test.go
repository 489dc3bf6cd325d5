package mgmt_test

import (
	"encoding/json"
	"reflect"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// A broker's export imports into a fresh broker, which then exports the
// same definitions; transient and exclusive objects are not exported.
func TestDefinitionsRoundTrip(t *testing.T) {
	a := startAPI(t)
	a.must(201, "PUT", "/vhosts/shop", map[string]any{"description": "the shop", "tags": "prod"})
	a.must(201, "PUT", "/users/app", map[string]any{"password": "app-pw", "tags": "management"})
	a.must(201, "PUT", "/permissions/shop/app", map[string]any{"configure": "^app\\.", "write": ".*", "read": ".*"})
	a.must(201, "PUT", "/exchanges/shop/orders", map[string]any{"type": "topic", "durable": true, "arguments": map[string]any{"alternate-exchange": "unrouted"}})
	a.must(201, "PUT", "/exchanges/shop/unrouted", map[string]any{"type": "fanout", "durable": true})
	a.must(201, "PUT", "/exchanges/shop/tmp", map[string]any{"type": "fanout", "durable": false})
	a.must(201, "PUT", "/queues/shop/app.orders", map[string]any{"durable": true, "arguments": map[string]any{"x-dead-letter-exchange": "dlx", "x-max-length": 10, "x-overflow": "reject-publish-dlx"}})
	a.must(201, "PUT", "/queues/shop/app.lost", map[string]any{"durable": true})
	a.must(201, "PUT", "/queues/shop/transient", map[string]any{"durable": false})
	a.must(201, "POST", "/bindings/shop/e/orders/q/app.orders", map[string]any{"routing_key": "order.#"})
	a.must(201, "POST", "/bindings/shop/e/unrouted/q/app.lost", map[string]any{})
	a.must(201, "POST", "/bindings/shop/e/orders/e/tmp", map[string]any{"routing_key": "x"})
	a.must(201, "POST", "/bindings/shop/e/orders/q/transient", map[string]any{"routing_key": "y"})
	a.must(201, "PUT", "/policies/shop/ttl", map[string]any{"pattern": "^app\\.", "apply-to": "queues", "priority": 3, "definition": map[string]any{"message-ttl": 60000}})
	a.must(201, "PUT", "/operator-policies/shop/cap", map[string]any{"pattern": ".*", "definition": map[string]any{"max-length-bytes": 1 << 20}})

	export := a.must(200, "GET", "/definitions", nil).object(t)
	counts := map[string]int{"users": 2, "vhosts": 2, "permissions": 3, "parameters": 1, "policies": 1, "queues": 2, "exchanges": 2, "bindings": 2}
	for k, n := range counts {
		if got := len(export[k].([]any)); got != n {
			t.Errorf("export has %d %s, want %d: %v", got, k, n, export[k])
		}
	}
	vexport := a.must(200, "GET", "/definitions/shop", nil).object(t)
	if _, ok := vexport["users"]; ok || len(vexport["queues"].([]any)) != 2 || vexport["queues"].([]any)[0].(map[string]any)["vhost"] != nil {
		t.Errorf("vhost export %v", vexport)
	}

	b := startAPI(t)
	b.must(204, "POST", "/definitions", export)
	again := b.must(200, "GET", "/definitions", nil).object(t)
	for _, k := range []string{"users", "vhosts", "permissions", "parameters", "policies", "queues", "exchanges", "bindings"} {
		if !reflect.DeepEqual(norm(export[k]), norm(again[k])) {
			t.Errorf("%s after re-import:\n got %v\nwant %v", k, again[k], export[k])
		}
	}
	// The imported user logs in with the password it had, and the
	// topology routes: an unroutable message goes to the alternate
	// exchange's queue.
	conn, err := amqp091.Dial("amqp://app:app-pw@" + b.Addr + "/shop")
	if err != nil {
		t.Fatalf("imported user: %v", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Publish("orders", "nothing.matches", false, false, amqp091.Publishing{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return b.must(200, "GET", "/queues/shop/app.lost", nil).object(t)["messages"] == 1.0 })

	// A vhost's export imports into another vhost.
	b.must(201, "PUT", "/vhosts/shop2", map[string]any{})
	b.must(204, "POST", "/definitions/shop2", vexport)
	if q := b.must(200, "GET", "/queues/shop2/app.orders", nil).object(t); q["policy"] != "ttl" || q["operator_policy"] != "cap" {
		t.Errorf("shop2 queue %v", q)
	}

	// Refusals name the object and leave the rest.
	bad := map[string]any{"queues": []any{map[string]any{"name": "q", "vhost": "shop", "durable": true, "arguments": map[string]any{"x-max-length": "many"}}}}
	wantError(t, b.do("POST", "/definitions", bad), 400, "bad_request", "queue 'q' in vhost 'shop': PRECONDITION_FAILED - invalid arg 'x-max-length'")
	wantError(t, b.do("POST", "/definitions", "[1,2"), 400, "bad_request", "failed_to_parse_json")
	wantError(t, b.as("app", "app-pw", "GET", "/definitions", nil), 401, "not_authorised", "Not administrator user")
}

// norm makes JSON values comparable whatever their order in lists.
func norm(v any) map[string]bool {
	out := map[string]bool{}
	for _, e := range v.([]any) {
		j, _ := json.Marshal(e)
		out[string(j)] = true
	}
	return out
}

// A definitions file that is not JSON is RabbitMQ's 400
// "failed_to_parse_json" (other endpoints say "not_json").
func TestImportDefinitionsNotJSON(t *testing.T) {
	a := startAPI(t)
	for _, path := range []string{"/definitions", "/definitions/%2F"} {
		r := a.do("POST", path, `{"users":[`)
		wantError(t, r, 400, "bad_request", "failed_to_parse_json")
	}
}
