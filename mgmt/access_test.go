package mgmt_test

import (
	"fmt"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

func TestUsersVHostsPermissions(t *testing.T) {
	a := startAPI(t)
	a.must(201, "PUT", "/vhosts/orders", map[string]any{"description": "order flow", "tags": "prod,eu"})
	a.must(204, "PUT", "/vhosts/orders", map[string]any{"description": "order flow v2", "tags": []string{"prod"}})
	v := a.must(200, "GET", "/vhosts/orders", nil).object(t)
	if v["description"] != "order flow v2" || fmt.Sprint(v["tags"]) != "[prod]" {
		t.Errorf("vhost %v", v)
	}
	wantError(t, a.do("PUT", "/users/ann", map[string]any{"password": "s3cret"}), 400, "bad_request", "tags_not_present")
	a.must(201, "PUT", "/users/ann", map[string]any{"password": "s3cret", "tags": "management"})
	a.must(201, "PUT", "/users/bob", map[string]any{"password": "pw", "tags": ""})
	u := a.must(200, "GET", "/users/ann", nil).object(t)
	if u["hashing_algorithm"] != "rabbit_password_hashing_sha256" || u["password_hash"] == "" || fmt.Sprint(u["tags"]) != "[management]" {
		t.Errorf("user %v", u)
	}
	// A RabbitMQ SHA-512 hash imports and logs in (the hash of "fx-mgmt-pw",
	// made by RabbitMQ 3.10).
	a.must(201, "PUT", "/users/fx", map[string]any{
		"password_hash":     "Pw6ewfvDAmAxPlBFC5piPtYydQv5I71EqzHJ17zSh/IFJXk1AR1Sx4PmF8EsEkSde4Cw/3W0QUmAQTgSQhvvpYpZFDw=",
		"hashing_algorithm": "rabbit_password_hashing_sha512", "tags": "management"})

	// Permissions: missing fields, unknown user or vhost.
	wantError(t, a.do("PUT", "/permissions/orders/ann", map[string]any{"configure": ".*"}), 400, "bad_request", "[{key_missing,write},{key_missing,read}]")
	wantError(t, a.do("PUT", "/permissions/orders/nobody", map[string]any{"configure": "", "write": "", "read": ""}), 400, "bad_request", "vhost_or_user_not_found")
	wantError(t, a.do("PUT", "/permissions/nowhere/ann", map[string]any{"configure": "", "write": "", "read": ""}), 400, "bad_request", "vhost_or_user_not_found")
	a.must(201, "PUT", "/permissions/orders/ann", map[string]any{"configure": "^ann\\.", "write": ".*", "read": ".*"})
	a.must(201, "PUT", "/permissions/orders/fx", map[string]any{"configure": "", "write": "", "read": ""})
	if p := a.must(200, "GET", "/permissions/orders/ann", nil).object(t); p["configure"] != "^ann\\." {
		t.Errorf("permission %v", p)
	}
	if l := a.must(200, "GET", "/vhosts/orders/permissions", nil).list(t); len(l) != 3 { // ann, fx, and guest who made it
		t.Errorf("vhost permissions %v", l)
	}

	// ann (management) sees only her vhost, may not manage users, and
	// declares only what her configure pattern allows.
	if l := a.as("ann", "s3cret", "GET", "/vhosts", nil).list(t); len(l) != 1 || l[0]["name"] != "orders" {
		t.Errorf("ann's vhosts %v", l)
	}
	wantError(t, a.as("ann", "s3cret", "GET", "/users", nil), 401, "not_authorised", "Not administrator user")
	wantError(t, a.as("ann", "s3cret", "GET", "/queues/%2F", nil), 401, "not_authorised", "User not authorised to access virtual host")
	wantError(t, a.as("ann", "s3cret", "PUT", "/policies/orders/p", map[string]any{"pattern": ".", "definition": map[string]any{"max-length": 1}}),
		401, "not_authorised", "User not authorised to access object")
	r := a.as("ann", "s3cret", "PUT", "/queues/orders/bob.q", map[string]any{})
	wantError(t, r, 401, "not_authorised", "Access refused.") // RabbitMQ's words for any refused declaration
	if r := a.as("ann", "s3cret", "PUT", "/queues/orders/ann.q", map[string]any{"durable": true}); r.status != 201 {
		t.Errorf("ann declares ann.q: %d %s", r.status, r.body)
	}
	wantError(t, a.as("bob", "pw", "GET", "/overview", nil), 401, "not_authorised", "Not management user")
	if w := a.as("fx", "fx-mgmt-pw", "GET", "/whoami", nil).object(t); w["name"] != "fx" {
		t.Errorf("fx whoami %v", w)
	}

	// The users log in over AMQP with their passwords, into their vhosts.
	conn, err := amqp091.Dial("amqp://ann:s3cret@" + a.Addr + "/orders")
	if err != nil {
		t.Fatalf("ann over AMQP: %v", err)
	}
	conn.Close()
	if _, err := amqp091.Dial("amqp://ann:s3cret@" + a.Addr + "/"); err == nil {
		t.Error("ann connected to / without permissions there")
	}

	// Everything survives a restart (on the disk store: the memory store
	// keeps what a restart would keep).
	a.restart()
	if w := a.as("ann", "s3cret", "GET", "/whoami", nil).object(t); w["name"] != "ann" {
		t.Errorf("after restart: %v", w)
	}
	if p := a.must(200, "GET", "/permissions/orders/ann", nil).object(t); p["configure"] != "^ann\\." {
		t.Errorf("permission after restart %v", p)
	}
	a.must(200, "GET", "/queues/orders/ann.q", nil)

	// Deleting the user closes its connections and refuses its logins.
	conn, err = amqp091.Dial("amqp://ann:s3cret@" + a.Addr + "/orders")
	if err != nil {
		t.Fatal(err)
	}
	closed := conn.NotifyClose(make(chan *amqp091.Error, 1))
	a.must(204, "DELETE", "/permissions/orders/ann", nil)
	a.must(404, "DELETE", "/permissions/orders/ann", nil)
	a.must(204, "DELETE", "/users/ann", nil)
	a.must(404, "DELETE", "/users/ann", nil)
	if e := <-closed; e == nil || e.Code != 320 {
		t.Errorf("ann's connection closed with %v, want 320", e)
	}
	wantError(t, a.as("ann", "s3cret", "GET", "/whoami", nil), 401, "not_authorized", "Login failed")

	// Deleting the vhost removes its queues.
	a.must(204, "DELETE", "/vhosts/orders", nil)
	a.must(404, "GET", "/vhosts/orders", nil)
	a.must(404, "DELETE", "/vhosts/orders", nil)
	a.must(404, "GET", "/queues/orders/ann.q", nil)
	a.restart()
	a.must(404, "GET", "/vhosts/orders", nil)
}

// The policy scenarios of RabbitMQ's dead_lettering_SUITE through the HTTP
// API: a DLX set by policy applies to an existing queue at once, a queue
// argument overrides it, clearing it stops dead-lettering; an operator
// policy caps a user policy; both survive a restart.
func TestPoliciesThroughAPI(t *testing.T) {
	a := startAPI(t)
	a.must(201, "PUT", "/queues/%2F/dlq", map[string]any{"durable": true})
	a.must(201, "PUT", "/queues/%2F/dlq2", map[string]any{"durable": true})
	a.must(201, "PUT", "/queues/%2F/work", map[string]any{"durable": true})
	a.must(201, "PUT", "/queues/%2F/work.arg", map[string]any{"durable": true, "arguments": map[string]any{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq2"}})
	reject := func(queue string) {
		t.Helper()
		_, ch := a.Channel(t)
		if err := ch.Publish("", queue, false, false, amqp091.Publishing{Body: []byte("m"), DeliveryMode: amqp091.Persistent}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { return a.must(200, "GET", "/queues/%2F/"+queue, nil).object(t)["messages"] == 1.0 })
		a.must(200, "POST", "/queues/%2F/"+queue+"/get", map[string]any{"count": 1, "ackmode": "reject_requeue_false", "encoding": "auto"})
	}
	depth := func(queue string) float64 {
		return a.must(200, "GET", "/queues/%2F/"+queue, nil).object(t)["messages"].(float64)
	}
	reject("work") // dead_letter_policy: before the policy, dropped
	waitFor(t, func() bool { return depth("work") == 0 })
	r := a.do("PUT", "/policies/%2F/dl", map[string]any{"pattern": "^work", "definition": map[string]any{"message-ttl": "abc"}})
	wantError(t, r, 400, "bad_request", "Validation failed\n\n&lt;&lt;\"abc\"&gt;&gt; is not a valid message TTL\n")
	a.must(201, "PUT", "/policies/%2F/dl", map[string]any{"pattern": "^work", "apply-to": "queues", "priority": 1,
		"definition": map[string]any{"dead-letter-exchange": "", "dead-letter-routing-key": "dlq"}})
	a.must(204, "PUT", "/policies/%2F/dl", map[string]any{"pattern": "^work", "apply-to": "queues", "priority": "1",
		"definition": map[string]any{"dead-letter-exchange": "", "dead-letter-routing-key": "dlq"}})
	a.must(201, "PUT", "/operator-policies/%2F/cap", map[string]any{"pattern": ".*", "apply-to": "queues", "definition": map[string]any{"max-length": 100}})
	q := a.must(200, "GET", "/queues/%2F/work", nil).object(t)
	if q["policy"] != "dl" || q["operator_policy"] != "cap" || q["effective_policy_definition"].(map[string]any)["max-length"] != 100.0 {
		t.Errorf("work: policy %v operator %v effective %v", q["policy"], q["operator_policy"], q["effective_policy_definition"])
	}

	reject("work") // dead_letter_policy
	waitFor(t, func() bool { return depth("dlq") == 1 })
	reject("work.arg") // dead_letter_ignore_policy: declared before the policy, its arguments win
	waitFor(t, func() bool { return depth("dlq2") == 1 })
	// dead_letter_override_policy: declared after the policy, its arguments win too.
	a.must(201, "PUT", "/queues/%2F/work.arg2", map[string]any{"durable": true, "arguments": map[string]any{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq2"}})
	reject("work.arg2")
	waitFor(t, func() bool { return depth("dlq2") == 2 })
	if depth("dlq") != 1 {
		t.Errorf("override: dlq has %v", depth("dlq"))
	}

	// Retroactive: a length limit set by policy applies to the messages
	// already there, at once (drop-head).
	a.must(201, "PUT", "/queues/%2F/backlog", map[string]any{"durable": true})
	_, pch := a.Channel(t)
	for i := range 5 {
		if err := pch.Publish("", "backlog", false, false, amqp091.Publishing{Body: []byte{byte(i)}, DeliveryMode: amqp091.Persistent}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, func() bool { return depth("backlog") == 5 })
	a.must(201, "PUT", "/policies/%2F/short", map[string]any{"pattern": "^backlog$", "definition": map[string]any{"max-length": 2}})
	waitFor(t, func() bool { return depth("backlog") == 2 })
	if got := a.must(200, "POST", "/queues/%2F/backlog/get", map[string]any{"count": 5, "ackmode": "ack_requeue_true", "encoding": "base64"}).list(t); len(got) != 2 || got[0]["payload"] != "Aw==" {
		t.Errorf("after the limit: %v, want the last two", got)
	}
	a.must(204, "DELETE", "/policies/%2F/short", nil)

	a.restart()
	q = a.must(200, "GET", "/queues/%2F/work", nil).object(t)
	if q["policy"] != "dl" || q["operator_policy"] != "cap" {
		t.Errorf("after restart: policy %v operator %v", q["policy"], q["operator_policy"])
	}
	reject("work")
	waitFor(t, func() bool { return depth("dlq") == 2 })

	a.must(204, "DELETE", "/policies/%2F/dl", nil)
	a.must(404, "DELETE", "/policies/%2F/dl", nil)
	a.must(204, "DELETE", "/operator-policies/%2F/cap", nil)
	reject("work") // cleared: the message is dropped
	waitFor(t, func() bool { return depth("work") == 0 })
	if depth("dlq") != 2 {
		t.Errorf("after clearing, dlq has %v, want 2", depth("dlq"))
	}
	if l := a.must(200, "GET", "/policies", nil).list(t); len(l) != 0 {
		t.Errorf("policies left %v", l)
	}
	wantError(t, a.do("PUT", "/policies/nowhere/p", map[string]any{"pattern": ".", "definition": map[string]any{"max-length": 1}}), 404, "not_found", "vhost_not_found")
	wantError(t, a.do("PUT", "/policies/%2F/p", map[string]any{"definition": map[string]any{"max-length": 1}}), 400, "bad_request", "[{key_missing,pattern}]")
}
