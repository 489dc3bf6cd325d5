package mgmt_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/brokerd/brokerd/broker/brokertest"
	"github.com/brokerd/brokerd/mgmt"
	"github.com/brokerd/brokerd/store"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// goodDefs is a definitions file brokerd applies whole: a new vhost with
// a user and its permissions, policies, an operator policy, exchanges
// (one bound to the other), queues and bindings, objects of the new vhost
// and of "/".
func goodDefs() map[string]any {
	return map[string]any{
		"rabbit_version": "3.10.8",
		"users": []any{map[string]any{"name": "shop-app", "password_hash": "yMuUvYRjJc6hN9gNUMfDGvRPMw38zEo79+MoZsZqeIkXp8Ul",
			"hashing_algorithm": "rabbit_password_hashing_sha256", "tags": []any{"management"}, "limits": map[string]any{}}},
		"vhosts":            []any{map[string]any{"name": "shop", "limits": []any{}, "metadata": map[string]any{"description": "the shop", "tags": []any{"prod"}}}},
		"permissions":       []any{map[string]any{"user": "shop-app", "vhost": "shop", "configure": "^shop\\.", "write": ".*", "read": ".*"}},
		"topic_permissions": []any{},
		"global_parameters": []any{map[string]any{"name": "internal_cluster_id", "value": "rabbitmq-cluster-id-x"}},
		"parameters": []any{map[string]any{"vhost": "shop", "component": "operator_policy", "name": "cap",
			"value": map[string]any{"pattern": ".*", "definition": map[string]any{"max-length": 1000}, "priority": 0, "apply-to": "queues"}}},
		"policies": []any{map[string]any{"vhost": "shop", "name": "dlx", "pattern": "^shop\\.orders$", "apply-to": "queues", "priority": 1,
			"definition": map[string]any{"dead-letter-exchange": "shop.dlx"}}},
		"exchanges": []any{
			map[string]any{"name": "shop.in", "vhost": "shop", "type": "topic", "durable": true, "auto_delete": false, "internal": false, "arguments": map[string]any{}},
			map[string]any{"name": "shop.orders.x", "vhost": "shop", "type": "direct", "durable": true, "auto_delete": false, "internal": false, "arguments": map[string]any{}},
			map[string]any{"name": "shop.dlx", "vhost": "shop", "type": "fanout", "durable": true, "auto_delete": false, "internal": false, "arguments": map[string]any{}},
			map[string]any{"name": "root.x", "vhost": "/", "type": "fanout", "durable": true, "auto_delete": false, "internal": false, "arguments": map[string]any{}},
		},
		"queues": []any{
			map[string]any{"name": "shop.orders", "vhost": "shop", "durable": true, "auto_delete": false, "arguments": map[string]any{"x-message-ttl": 60000}},
			map[string]any{"name": "shop.dead", "vhost": "shop", "durable": true, "auto_delete": false, "arguments": map[string]any{}},
			map[string]any{"name": "root.q", "vhost": "/", "durable": true, "auto_delete": false, "arguments": map[string]any{}},
		},
		"bindings": []any{
			map[string]any{"source": "shop.in", "vhost": "shop", "destination": "shop.orders.x", "destination_type": "exchange", "routing_key": "order.#", "arguments": map[string]any{}},
			map[string]any{"source": "shop.orders.x", "vhost": "shop", "destination": "shop.orders", "destination_type": "queue", "routing_key": "order.new", "arguments": map[string]any{}},
			map[string]any{"source": "shop.dlx", "vhost": "shop", "destination": "shop.dead", "destination_type": "queue", "routing_key": "", "arguments": map[string]any{}},
			map[string]any{"source": "root.x", "vhost": "/", "destination": "root.q", "destination_type": "queue", "routing_key": "", "arguments": map[string]any{}},
		},
	}
}

// nothingImported checks that none of goodDefs' objects exists.
func nothingImported(t *testing.T, a *api) {
	t.Helper()
	for _, path := range []string{"/users/shop-app", "/vhosts/shop", "/queues/%2F/root.q", "/exchanges/%2F/root.x"} {
		if r := a.do("GET", path, nil); r.status != 404 {
			t.Errorf("GET %s after a refused import: %d %s, want 404", path, r.status, r.body)
		}
	}
	for _, b := range a.must(200, "GET", "/bindings/%2F", nil).list(t) {
		if b["source"] != "" { // the default exchange's, to queue "existing"
			t.Errorf("binding in / after a refused import: %v", b)
		}
	}
}

// A file with parts brokerd cannot apply is refused whole, with a 400
// that lists each of them, and nothing of it is imported — not even what
// came before the refused parts, on either store, nor after a restart.
func TestImportWithUnsupportedPartsChangesNothing(t *testing.T) {
	a := startAPI(t)
	a.must(201, "PUT", "/queues/%2F/existing", map[string]any{"durable": true})
	cases := []struct {
		name   string
		edit   func(d map[string]any)
		reason []string
	}{
		{"topic permissions of nobody", func(d map[string]any) {
			d["topic_permissions"] = []any{map[string]any{"user": "nobody", "vhost": "shop", "exchange": "shop.in", "write": "^order\\.", "read": ".*"}}
		}, []string{"topic permissions of user 'nobody' in vhost 'shop' on exchange 'shop.in': no user 'nobody'"}},
		{"user limits unknown", func(d map[string]any) {
			d["users"].([]any)[0].(map[string]any)["limits"] = map[string]any{"max-queues": 10}
		}, []string{"limits of user 'shop-app': Unrecognised terms [{<<\"max-queues\">>,10}] in user-limits"}},
		{"vhost limits not a number", func(d map[string]any) {
			d["parameters"] = append(d["parameters"].([]any), map[string]any{"vhost": "shop", "component": "vhost-limits", "name": "limits", "value": map[string]any{"max-queues": "5"}})
		}, []string{"parameter 'limits' of component 'vhost-limits' in vhost 'shop': max-queues should be a number, actually was <<\"5\">>"}},
		{"shovel and federation", func(d map[string]any) {
			d["parameters"] = append(d["parameters"].([]any),
				map[string]any{"vhost": "shop", "component": "shovel", "name": "move", "value": map[string]any{"src-uri": "amqp://"}},
				map[string]any{"vhost": "/", "component": "federation-upstream", "name": "up", "value": map[string]any{"uri": "amqp://other"}})
		}, []string{"parameter 'move' of component 'shovel' in vhost 'shop': component shovel not found",
			"parameter 'up' of component 'federation-upstream' in vhost '/': component federation-upstream not found"}},
		{"global parameter without a value", func(d map[string]any) {
			d["global_parameters"] = append(d["global_parameters"].([]any), map[string]any{"name": "mqtt_port_to_vhost_mapping"})
		}, []string{"global parameter 'mqtt_port_to_vhost_mapping': no value"}},
		// The policy comes after the users, vhosts and permissions in the
		// file, and before the queues: RabbitMQ would have kept the former.
		{"unknown policy key", func(d map[string]any) {
			d["policies"].([]any)[0].(map[string]any)["definition"] = map[string]any{"dead-letter-exchange": "shop.dlx", "federation-upstream-set": "all"}
		}, []string{"policy 'dlx' in vhost 'shop': [{<<\"federation-upstream-set\">>,<<\"all\">>}] are not recognised policy settings"}},
		{"field of the wrong form", func(d map[string]any) {
			d["queues"].([]any)[2].(map[string]any)["durable"] = "yes"
		}, []string{`queues[2]: durable: expected a boolean`}},
		{"inequivalent redeclaration", func(d map[string]any) {
			d["queues"] = append(d["queues"].([]any), map[string]any{"name": "existing", "vhost": "/", "durable": false})
		}, []string{"queue 'existing' in vhost '/': PRECONDITION_FAILED - inequivalent arg 'durable'"}},
		{"binding to nothing", func(d map[string]any) {
			d["bindings"] = append(d["bindings"].([]any), map[string]any{"source": "root.x", "vhost": "/", "destination": "nowhere", "destination_type": "queue", "routing_key": ""})
		}, []string{"binding from 'root.x' to queue 'nowhere' in vhost '/': no queue 'nowhere'"}},
		{"permissions of nobody", func(d map[string]any) {
			d["permissions"] = append(d["permissions"].([]any), map[string]any{"user": "nobody", "vhost": "shop", "configure": "", "write": "", "read": ""})
		}, []string{"permissions of user 'nobody' in vhost 'shop': no user 'nobody'"}},
	}
	all := goodDefs()
	for _, c := range cases {
		d := goodDefs()
		c.edit(d)
		c.edit(all)
		r := a.do("POST", "/definitions", d)
		if r.status != 400 {
			t.Fatalf("%s: %d %s, want 400", c.name, r.status, r.body)
		}
		for _, reason := range c.reason {
			wantError(t, r, 400, "bad_request", reason)
		}
		if t.Failed() {
			t.Fatalf("%s: %s", c.name, r.body)
		}
		nothingImported(t, a)
	}
	// Every problem of a file is listed, not only the first.
	r := a.do("POST", "/definitions", all)
	for _, c := range cases {
		for _, reason := range c.reason {
			wantError(t, r, 400, "bad_request", reason)
		}
	}
	if !strings.Contains(string(r.body), "nothing imported") {
		t.Errorf("refusal %s does not say that nothing was imported", r.body)
	}
	a.restart()
	nothingImported(t, a)
	a.must(200, "GET", "/queues/%2F/existing", nil)
}

// A file brokerd can apply is applied whole: every object is there and
// works (the user logs in, messages route through the exchange binding,
// the policy and the operator policy apply), and all of it is there again
// after a restart.
func TestImportAppliesEverythingAndSurvivesRestart(t *testing.T) {
	a := startAPI(t)
	a.must(204, "POST", "/definitions", goodDefs())
	check := func(when string) {
		t.Helper()
		if v := a.must(200, "GET", "/vhosts/shop", nil).object(t); v["description"] != "the shop" {
			t.Errorf("%s: vhost shop %v", when, v)
		}
		a.must(200, "GET", "/users/shop-app", nil)
		a.must(200, "GET", "/permissions/shop/shop-app", nil)
		a.must(200, "GET", "/exchanges/%2F/root.x", nil)
		a.must(200, "GET", "/bindings/%2F/e/root.x/q/root.q/~", nil)
		a.must(200, "GET", "/bindings/shop/e/shop.in/e/shop.orders.x/order.%23", nil)
		q := a.must(200, "GET", "/queues/shop/shop.orders", nil).object(t)
		if q["policy"] != "dlx" || q["operator_policy"] != "cap" || q["durable"] != true {
			t.Errorf("%s: shop.orders %v", when, q)
		}
		// guest/guest is the user's password: the hash in goodDefs.
		conn, err := amqp091.Dial("amqp://shop-app:guest@" + a.Addr + "/shop")
		if err != nil {
			t.Fatalf("%s: imported user: %v", when, err)
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if err := ch.Confirm(false); err != nil {
			t.Fatal(err)
		}
		confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, 1))
		if err := ch.Publish("shop.in", "order.new", true, false, amqp091.Publishing{Body: []byte(when)}); err != nil {
			t.Fatal(err)
		}
		if c := <-confirms; !c.Ack {
			t.Fatalf("%s: publish nacked", when)
		}
		m, ok, err := ch.Get("shop.orders", true)
		if err != nil || !ok || string(m.Body) != when {
			t.Fatalf("%s: get from shop.orders: %v %v %q", when, ok, err, m.Body)
		}
	}
	check("after the import")
	a.restart()
	check("after a restart")
	// The same file again changes nothing and is taken.
	a.must(204, "POST", "/definitions", goodDefs())
}

// recordingStore records the definitions batches the broker hands its
// store while on.
type recordingStore struct {
	store.Store
	mu      sync.Mutex
	on      bool
	batches [][]string // meta keys of each batch
}

func (r *recordingStore) Apply(b *store.Batch, done func(error)) {
	r.mu.Lock()
	if r.on && len(b.Meta) > 0 {
		var keys []string
		for _, op := range b.Meta {
			keys = append(keys, op.Key)
		}
		r.batches = append(r.batches, keys)
	}
	r.mu.Unlock()
	r.Store.Apply(b, done)
}

// The whole import reaches the store as one batch (besides the mark of
// the queue ids it took): a crash leaves all of it or none of it.
func TestImportIsOneStoreBatch(t *testing.T) {
	var rec *recordingStore
	a := startBrokerAPI(t, brokertest.Config{WrapStore: func(s store.Store) store.Store {
		rec = &recordingStore{Store: s}
		return rec
	}}, mgmt.Options{})
	rec.mu.Lock()
	rec.on = true
	rec.mu.Unlock()
	a.must(204, "POST", "/definitions", goodDefs())
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var defs [][]string
	for _, keys := range rec.batches {
		if len(keys) == 1 && keys[0] == "n/queue-id" {
			continue // the high-water mark of queue ids: harmless alone
		}
		defs = append(defs, keys)
	}
	// vhost, user, permission, operator policy, policy, 4 exchanges, 3
	// queues, 4 bindings.
	if len(defs) != 1 || len(defs[0]) != 16 {
		t.Fatalf("the import reached the store as %d batches %q, want one of 16 definitions", len(defs), defs)
	}
}
