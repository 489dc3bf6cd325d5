package mgmt_test

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// The objects the API returns have RabbitMQ 3.10's field names: each is
// compared with the answer RabbitMQ gave to the same request
// (testdata/rabbitmq-3.10, recorded by testdata/make-fixtures.sh). A field
// RabbitMQ has and brokerd does not must be one of the runtime statistics
// listed in omitted (Erlang process state, figures brokerd does not
// keep); a field brokerd adds must be listed in added.
func TestFieldsAsRabbitMQ(t *testing.T) {
	// message_stats is there once an object has had traffic.
	omitted := strings.Fields(`backing_queue_status consumer_capacity consumer_utilisation deliveries
		garbage_collection idle_since incoming memory message_bytes_paged_out message_bytes_persistent
		message_bytes_ram message_stats messages_paged_out messages_persistent messages_ram
		messages_ready_ram messages_unacknowledged_ram
		recoverable_slaves reductions reductions_details outgoing peer_cert_issuer peer_cert_subject
		peer_cert_validity send_pend
		ssl_cipher ssl_hash ssl_key_exchange ssl_protocol messages_unconfirmed pending_raft_commands publishes
		churn_rates disable_stats enable_queue_totals erlang_full_version erlang_version
		release_series_support_status statistics_db_event_queue`)
	// messages_delayed: a queue's messages waiting out a retry delay,
	// RabbitMQ 4.3's quorum queue stat (the fixtures are 3.10's).
	added := strings.Fields(`dead_letter_backlog dead_lettered messages_damaged dead_letter_stats product_name product_version
		messages_delayed`)

	a := startAPI(t)
	a.must(201, "PUT", "/vhosts/fixtures", map[string]any{"description": "d", "tags": "t"})
	a.must(201, "PUT", "/users/fx", map[string]any{"password": "pw", "tags": "management"})
	a.must(201, "PUT", "/permissions/fixtures/fx", map[string]any{"configure": "^$", "write": ".*", "read": ".*"})
	a.must(201, "PUT", "/exchanges/fixtures/fx.direct", map[string]any{"type": "direct"})
	a.must(201, "PUT", "/queues/fixtures/fx.work", map[string]any{"arguments": map[string]any{"x-message-ttl": 600000}})
	a.must(201, "POST", "/bindings/fixtures/e/fx.direct/q/fx.work", map[string]any{"routing_key": "work"})
	a.must(201, "PUT", "/policies/fixtures/fx-dlx", map[string]any{"pattern": "^fx", "apply-to": "queues", "definition": map[string]any{"max-length": 50}})
	a.must(201, "PUT", "/operator-policies/fixtures/fx-op", map[string]any{"pattern": "^fx", "definition": map[string]any{"expires": 86400000}})
	conn, err := amqp091.DialConfig("amqp://guest:guest@"+a.Addr+"/fixtures",
		amqp091.Config{Properties: amqp091.Table{"connection_name": "fx-conn"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.Consume("fx.work", "fx-consumer", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	cname := a.must(200, "GET", "/connections", nil).list(t)[0]["name"].(string)

	for _, c := range []struct{ fixture, path string }{
		{"get-overview", "/overview"},
		{"get-whoami", "/whoami"},
		{"get-vhost", "/vhosts/fixtures"},
		{"get-user", "/users/fx"},
		{"get-permission", "/permissions/fixtures/fx"},
		{"get-policy", "/policies/fixtures/fx-dlx"},
		{"get-operator-policy", "/operator-policies/fixtures/fx-op"},
		{"get-exchange", "/exchanges/fixtures/fx.direct"},
		{"get-queue", "/queues/fixtures/fx.work"},
		{"get-bindings-vhost", "/bindings/fixtures"},
		{"get-connection", "/connections/" + pathEscape(cname)},
		{"get-channel", "/channels/" + pathEscape(cname+" (1)")},
		{"get-consumers", "/consumers/fixtures"},
	} {
		want := fixtureKeys(t, c.fixture)
		got := a.must(200, "GET", c.path, nil).json(t)
		if l, ok := got.([]any); ok {
			got = l[0]
		}
		have := keys(got.(map[string]any))
		for _, k := range want {
			if !slices.Contains(have, k) && !slices.Contains(omitted, k) {
				t.Errorf("%s: RabbitMQ's field %q is missing", c.path, k)
			}
		}
		for _, k := range have {
			if !slices.Contains(want, k) && !slices.Contains(added, k) {
				t.Errorf("%s: field %q is not RabbitMQ's", c.path, k)
			}
		}
	}
}

// fixtureKeys returns the fields of the object (or first list element)
// RabbitMQ answered in a fixture.
func fixtureKeys(t *testing.T, name string) []string {
	t.Helper()
	b, err := os.ReadFile("testdata/rabbitmq-3.10/" + name + ".json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct{ Body any }
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	body := f.Body
	if l, ok := body.([]any); ok {
		body = l[0]
	}
	return keys(body.(map[string]any))
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
