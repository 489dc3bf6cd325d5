package mgmt_test

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// Vhost limits, user limits and topic permissions against what RabbitMQ
// 3.10.8 answered (testdata/rabbitmq-3.10-tenancy.json, recorded from a
// private node: its "_comment" says how).

type tnFixture struct {
	APIDefinitions map[string]any `json:"api_definitions"`
	CtlDefinitions map[string]any `json:"ctl_definitions"`
	Calls          []struct {
		Method      string `json:"method"`
		Path        string `json:"path"`
		RequestBody any    `json:"request_body"`
		Status      int    `json:"status"`
		Body        any    `json:"body"`
	} `json:"calls"`
}

func tnLoad(t *testing.T) tnFixture {
	t.Helper()
	b, err := os.ReadFile("testdata/rabbitmq-3.10-tenancy.json")
	if err != nil {
		t.Fatal(err)
	}
	var f tnFixture
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	return f
}

// tnSetup makes on brokerd, through the API, what the fixture's node had:
// vhost tn, user tnu (with the node's password hash), their permissions,
// limits and topic permissions.
func tnSetup(a *api, f tnFixture) {
	var hash string
	for _, u := range f.CtlDefinitions["users"].([]any) {
		if u := u.(map[string]any); u["name"] == "tnu" {
			hash = u["password_hash"].(string)
		}
	}
	a.must(201, "PUT", "/vhosts/tn", nil)
	a.must(201, "PUT", "/users/tnu", map[string]any{"password_hash": hash, "tags": ""})
	a.must(201, "PUT", "/permissions/tn/tnu", map[string]any{"configure": ".*", "write": ".*", "read": ".*"})
	a.must(204, "PUT", "/vhost-limits/tn/max-connections", map[string]any{"value": 10})
	a.must(204, "PUT", "/vhost-limits/tn/max-queues", map[string]any{"value": 2})
	a.must(204, "PUT", "/user-limits/tnu/max-connections", map[string]any{"value": 5})
	a.must(204, "PUT", "/user-limits/tnu/max-channels", map[string]any{"value": 3})
	a.must(204, "PUT", "/topic-permissions/tn/tnu", map[string]any{"exchange": "amq.topic", "write": `^{username}\.`, "read": `^audit\..*`})
	a.must(204, "PUT", "/topic-permissions/tn/tnu", map[string]any{"exchange": "tn.events", "write": "", "read": ".*"})
}

// tnSame compares a brokerd reply with RabbitMQ's recorded one: the same
// status and the same JSON ("" for an empty body).
func tnSame(t *testing.T, what string, r resp, status int, body any) {
	t.Helper()
	var got any = ""
	if len(r.body) > 0 {
		if err := json.Unmarshal(r.body, &got); err != nil {
			t.Errorf("%s: reply %q is not JSON", what, r.body)
			return
		}
	}
	if r.status != status || !reflect.DeepEqual(got, body) {
		want, _ := json.Marshal(body)
		t.Errorf("%s:\n got  %d %s\n want %d %s", what, r.status, r.body, status, want)
	}
}

// Every call RabbitMQ answered, replayed on brokerd set up the same way,
// gets the same status and body: the lists, one object, the refusals of
// bad values and unknown limits, set and clear.
func TestTenancyAPIAsRabbitMQ(t *testing.T) {
	f := tnLoad(t)
	a := startAPI(t)
	tnSetup(a, f)
	for _, c := range f.Calls {
		var body any
		if c.RequestBody != nil {
			body = c.RequestBody
		}
		tnSame(t, c.Method+" "+c.Path, a.do(c.Method, strings.TrimPrefix(c.Path, "/api"), body), c.Status, c.Body)
	}
}

// tnState is what the API shows of the fixture's limits and topic
// permissions: the first calls of the fixture, made before any change.
func tnState(t *testing.T, a *api, f tnFixture) {
	t.Helper()
	for _, c := range f.Calls {
		if c.Method != "GET" {
			break
		}
		if c.Path == "/api/users/tnu" {
			continue // the user's object: the import test checks the user
		}
		tnSame(t, "after import: GET "+c.Path, a.do("GET", strings.TrimPrefix(c.Path, "/api"), nil), c.Status, c.Body)
	}
}

// tnPart returns the part of a definitions file that holds limits and
// topic permissions: each user's limits, each vhost's "limits", the
// vhost-limits parameters and the topic permissions.
func tnPart(d map[string]any) map[string]any {
	users := map[string]any{}
	for _, u := range d["users"].([]any) {
		u := u.(map[string]any)
		users[u["name"].(string)] = u["limits"]
	}
	vhosts := map[string]any{}
	for _, v := range d["vhosts"].([]any) {
		v := v.(map[string]any)
		vhosts[v["name"].(string)] = v["limits"]
	}
	var params []any
	for _, p := range d["parameters"].([]any) {
		if p.(map[string]any)["component"] == "vhost-limits" {
			params = append(params, p)
		}
	}
	return map[string]any{"users": users, "vhosts": vhosts, "parameters": params, "topic_permissions": d["topic_permissions"]}
}

// Definitions round-trip between RabbitMQ 3.10 and brokerd: each of
// RabbitMQ's exports (GET /api/definitions, rabbitmqctl
// export_definitions) imports into brokerd with its limits and topic
// permissions, which the API then shows as RabbitMQ did; brokerd's export
// holds them as rabbitmqctl export_definitions wrote them; and that
// export imports into a fresh brokerd with the same result. The imported
// limits are enforced.
func TestTenancyDefinitionsRoundTrip(t *testing.T) {
	f := tnLoad(t)
	for _, name := range []string{"api_definitions", "ctl_definitions"} {
		file := f.APIDefinitions
		if name == "ctl_definitions" {
			file = f.CtlDefinitions
		}
		a := startAPI(t)
		a.must(204, "POST", "/definitions", file)
		tnState(t, a, f)
		export := a.must(200, "GET", "/definitions", nil).object(t)
		got, want := tnPart(export), tnPart(f.CtlDefinitions)
		if !reflect.DeepEqual(got, want) {
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(want)
			t.Errorf("%s: brokerd's export of the limits and topic permissions\n got  %s\n want %s", name, g, w)
		}
		b := startAPI(t)
		b.must(204, "POST", "/definitions", export)
		tnState(t, b, f)
	}

	// Enforced after an import: tn takes 2 queues (the file has one, qa),
	// over the API and in a file, with RabbitMQ's texts.
	a := startAPI(t)
	a.must(204, "POST", "/definitions", f.CtlDefinitions)
	a.must(201, "PUT", "/queues/tn/q1", nil)
	r := a.do("PUT", "/queues/tn/q3", nil)
	if r.status != 400 || !strings.Contains(string(r.body), "cannot declare queue 'q3': queue limit in vhost 'tn' (2) is reached") {
		t.Fatalf("PUT a third queue: %d %s", r.status, r.body)
	}
	wantError(t, a.do("POST", "/definitions", map[string]any{"queues": []any{
		map[string]any{"name": "q1", "vhost": "tn", "durable": true}, // exists: not counted
		map[string]any{"name": "q4", "vhost": "tn", "durable": true},
	}}), 400, "bad_request", "Adding 1 queue(s) to virtual host \"tn\" would exceed the limit of 2 queue(s).\n\nThis virtual host currently has 2 queue(s) defined.\n\nImport aborted!")
	// The imported user limit: 3 channels.
	conn, err := amqp091.Dial("amqp://tnu:pw@" + a.Addr + "/tn")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for range 3 {
		if _, err := conn.Channel(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.Channel(); err == nil || !strings.Contains(err.Error(), "NOT_ALLOWED - number of channels opened for user 'tnu' has reached the maximum allowed user limit of (3)") {
		t.Fatalf("fourth channel: %v", err)
	}
}

// Who may read and change them, as in RabbitMQ 3.10: vhost and user
// limits are read by any management user (vhost limits of the vhosts it
// sees), changed by administrators; topic permissions are
// administrators' only. /api/users shows each user's limits.
func TestTenancyAPIAuthorisation(t *testing.T) {
	f := tnLoad(t)
	a := startAPI(t)
	tnSetup(a, f)
	a.must(201, "PUT", "/users/m", map[string]any{"password": "pw", "tags": "management"})
	a.must(201, "PUT", "/vhosts/mine", nil)
	a.must(201, "PUT", "/permissions/mine/m", map[string]any{"configure": ".*", "write": ".*", "read": ".*"})
	a.must(204, "PUT", "/vhost-limits/mine/max-queues", map[string]any{"value": 9})
	r := a.as("m", "pw", "GET", "/vhost-limits", nil)
	if got := string(r.body); r.status != 200 || got != `[{"value":{"max-queues":9},"vhost":"mine"}]` {
		t.Fatalf("management user's vhost limits: %d %s", r.status, got)
	}
	wantError(t, a.as("m", "pw", "GET", "/vhost-limits/tn", nil), 401, "not_authorised", "")
	if r := a.as("m", "pw", "GET", "/user-limits", nil); r.status != 200 {
		t.Fatalf("management user's user limits: %d %s", r.status, r.body)
	}
	wantError(t, a.as("m", "pw", "PUT", "/vhost-limits/mine/max-queues", map[string]any{"value": 1}), 401, "not_authorised", "Not administrator user")
	wantError(t, a.as("m", "pw", "PUT", "/user-limits/m/max-channels", map[string]any{"value": 1}), 401, "not_authorised", "Not administrator user")
	wantError(t, a.as("m", "pw", "GET", "/topic-permissions", nil), 401, "not_authorised", "Not administrator user")
	wantError(t, a.as("m", "pw", "PUT", "/topic-permissions/mine/m", map[string]any{"exchange": "x", "write": "", "read": ""}), 401, "not_authorised", "Not administrator user")
	var users []map[string]any
	if err := json.Unmarshal(a.must(200, "GET", "/users", nil).body, &users); err != nil {
		t.Fatal(err)
	}
	for _, u := range users {
		want := map[string]any{}
		if u["name"] == "tnu" {
			want = map[string]any{"max-connections": 5.0, "max-channels": 3.0}
		}
		if !reflect.DeepEqual(u["limits"], want) {
			t.Errorf("/api/users: %s's limits %v, want %v", u["name"], u["limits"], want)
		}
	}
	// Deleting the user or the vhost takes its limits and topic
	// permissions with it.
	a.must(204, "DELETE", "/users/tnu", nil)
	tnSame(t, "user limits after the user's deletion", a.do("GET", "/user-limits", nil), 200, []any{})
	tnSame(t, "topic permissions after the user's deletion", a.do("GET", "/topic-permissions", nil), 200, []any{})
	a.must(204, "DELETE", "/vhosts/tn", nil)
	a.must(201, "PUT", "/vhosts/tn", nil)
	tnSame(t, "limits of a vhost deleted and made again", a.do("GET", "/vhost-limits/tn", nil), 200, []any{})
}
