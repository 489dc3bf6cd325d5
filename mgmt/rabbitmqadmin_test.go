package mgmt_test

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// rabbitmqadmin is RabbitMQ's own command-line client of the management
// API (a Python script; Debian's rabbitmq-server package installs it as
// /usr/bin/rabbitmqadmin, and .ci/run installs that package without
// starting the server). It runs against the API as a user would.
type rabbitmqadmin struct {
	t    *testing.T
	path string
	args []string // connection options
	home string
}

func findRabbitmqadmin(t *testing.T, a *api) *rabbitmqadmin {
	t.Helper()
	path, err := exec.LookPath("rabbitmqadmin")
	if err != nil {
		for _, p := range []string{"/usr/bin/rabbitmqadmin", "/usr/sbin/rabbitmqadmin"} {
			if _, err := os.Stat(p); err == nil {
				path = p
				break
			}
		}
	}
	if path == "" {
		t.Skip("rabbitmqadmin not found: it comes with Debian's rabbitmq-server package (/usr/bin/rabbitmqadmin; .ci/run installs it)")
	}
	host, port, err := net.SplitHostPort(a.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return &rabbitmqadmin{t: t, path: path, home: t.TempDir(),
		args: []string{"-H", host, "-P", port, "-u", "guest", "-p", "guest"}}
}

// run runs a command and returns its output; a failure (rabbitmqadmin
// exits 1 on any 4xx, printing the reason) fails the test.
func (r *rabbitmqadmin) run(args ...string) string {
	r.t.Helper()
	out, err := r.try(args...)
	if err != nil {
		r.t.Fatalf("rabbitmqadmin %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func (r *rabbitmqadmin) try(args ...string) (string, error) {
	r.t.Helper()
	cmd := exec.CommandContext(r.t.Context(), r.path, append(slices.Clone(r.args), args...)...)
	// No ~/.rabbitmqadmin.conf of the machine's.
	cmd.Env = append(os.Environ(), "HOME="+r.home)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// list runs "list WHAT" with -f raw_json and decodes it.
func (r *rabbitmqadmin) list(what string, columns ...string) []map[string]any {
	r.t.Helper()
	out := r.run(append([]string{"-f", "raw_json", "list", what}, columns...)...)
	var l []map[string]any
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		r.t.Fatalf("rabbitmqadmin list %s: not a JSON list: %v\n%s", what, err, out)
	}
	return l
}

func names(l []map[string]any) []string {
	var out []string
	for _, m := range l {
		if n, ok := m["name"].(string); ok {
			out = append(out, n)
		}
	}
	return out
}

// RabbitMQ's rabbitmqadmin drives brokerd's API through its list,
// declare, delete, publish, get, export and import commands, as it drives
// RabbitMQ's: declarations carry its string booleans ("durable": "true"),
// a get its string count, an import RabbitMQ's definitions format.
func TestRabbitmqadmin(t *testing.T) {
	a := startAPI(t)
	adm := findRabbitmqadmin(t, a)

	if out := adm.run("declare", "exchange", "name=adm.x", "type=topic"); !strings.Contains(out, "exchange declared") {
		t.Errorf("declare exchange: %q", out)
	}
	adm.run("declare", "queue", "name=adm.q", "durable=true")
	adm.run("declare", "queue", "name=adm.tmp", "durable=false", "auto_delete=false", `arguments={"x-max-length": 10}`)
	adm.run("declare", "binding", "source=adm.x", "destination=adm.q", "routing_key=orders.#")
	adm.run("declare", "vhost", "name=adm.vhost")
	adm.run("declare", "user", "name=adm.user", "password=secret", "tags=monitoring")
	adm.run("declare", "permission", "vhost=adm.vhost", "user=adm.user", "configure=.*", "write=.*", "read=.*")
	adm.run("declare", "policy", "name=adm.limit", "pattern=^adm\\.", `definition={"max-length": 1000}`, "apply-to=queues")

	q := a.must(200, "GET", "/queues/%2F/adm.q", nil).object(t)
	if q["durable"] != true || q["auto_delete"] != false {
		t.Errorf("adm.q: durable %v auto_delete %v, want true, false", q["durable"], q["auto_delete"])
	}
	if tmp := a.must(200, "GET", "/queues/%2F/adm.tmp", nil).object(t); tmp["durable"] != false || tmp["arguments"].(map[string]any)["x-max-length"] != 10.0 {
		t.Errorf("adm.tmp: %v", tmp)
	}
	if x := a.must(200, "GET", "/exchanges/%2F/adm.x", nil).object(t); x["type"] != "topic" || x["durable"] != true {
		t.Errorf("adm.x: %v", x)
	}

	if got := names(adm.list("queues")); !slices.Contains(got, "adm.q") || !slices.Contains(got, "adm.tmp") {
		t.Errorf("list queues: %v", got)
	}
	if got := names(adm.list("exchanges")); !slices.Contains(got, "adm.x") {
		t.Errorf("list exchanges: %v", got)
	}
	if got := adm.list("bindings"); !slices.ContainsFunc(got, func(m map[string]any) bool {
		return m["source"] == "adm.x" && m["destination"] == "adm.q" && m["routing_key"] == "orders.#"
	}) {
		t.Errorf("list bindings: %v", got)
	}
	for _, what := range []string{"vhosts", "users", "permissions", "policies", "connections", "channels", "consumers",
		"parameters", "vhost_limits", "operator_policies"} {
		adm.list(what)
	}
	nodes := adm.list("nodes")
	if len(nodes) != 1 || nodes[0]["name"] != a.must(200, "GET", "/overview", nil).object(t)["node"] || nodes[0]["mem_used"] == nil {
		t.Errorf("list nodes: %v", nodes)
	}
	// The default table format, with the command's own columns.
	if out := adm.run("list", "queues"); !strings.Contains(out, "adm.q") || !strings.Contains(out, "messages") {
		t.Errorf("list queues (table): %q", out)
	}

	if out := adm.run("publish", "exchange=adm.x", "routing_key=orders.new", "payload=first order"); !strings.Contains(out, "Message published") || strings.Contains(out, "NOT routed") {
		t.Errorf("publish: %q", out)
	}
	adm.run("publish", "exchange=adm.x", "routing_key=orders.new", "payload=second order")
	if out := adm.run("publish", "exchange=adm.x", "routing_key=nowhere", "payload=lost"); !strings.Contains(out, "NOT routed") {
		t.Errorf("publish unroutable: %q", out)
	}
	got := adm.run("-f", "raw_json", "get", "queue=adm.q", "count=2", "ackmode=ack_requeue_false")
	var msgs []map[string]any
	if err := json.Unmarshal([]byte(got), &msgs); err != nil {
		t.Fatalf("get: %v\n%s", err, got)
	}
	if len(msgs) != 2 || msgs[0]["payload"] != "first order" || msgs[1]["payload"] != "second order" || msgs[0]["routing_key"] != "orders.new" {
		t.Errorf("get: %v", msgs)
	}
	if n := a.must(200, "GET", "/queues/%2F/adm.q", nil).object(t)["messages"]; n != 0.0 {
		t.Errorf("adm.q holds %v messages after get with ack_requeue_false, want 0", n)
	}

	file := filepath.Join(t.TempDir(), "defs.json")
	adm.run("export", file)
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var defs map[string]any
	if err := json.Unmarshal(raw, &defs); err != nil {
		t.Fatalf("export wrote no JSON: %v", err)
	}
	if !slices.ContainsFunc(defs["queues"].([]any), func(q any) bool { return q.(map[string]any)["name"] == "adm.q" }) {
		t.Errorf("export has no queue adm.q: %s", raw)
	}

	adm.run("delete", "queue", "name=adm.q")
	adm.run("delete", "queue", "name=adm.tmp")
	adm.run("delete", "exchange", "name=adm.x")
	adm.run("delete", "policy", "name=adm.limit")
	adm.run("delete", "user", "name=adm.user")
	adm.run("delete", "vhost", "name=adm.vhost")
	wantError(t, a.do("GET", "/queues/%2F/adm.q", nil), 404, "Object Not Found", "")
	if out, err := adm.try("delete", "queue", "name=adm.q"); err == nil || !strings.Contains(out, "Not found") {
		t.Errorf("delete of a deleted queue: %v %q", err, out)
	}

	// Import puts back what the export held: the durable queue (not the
	// transient one), the exchange, the binding, the vhost, the user
	// with its permissions and the policy.
	adm.run("import", file)
	if q := a.must(200, "GET", "/queues/%2F/adm.q", nil).object(t); q["durable"] != true {
		t.Errorf("imported adm.q: %v", q)
	}
	wantError(t, a.do("GET", "/queues/%2F/adm.tmp", nil), 404, "Object Not Found", "")
	a.must(200, "GET", "/exchanges/%2F/adm.x", nil)
	a.must(200, "GET", "/bindings/%2F/e/adm.x/q/adm.q/orders.%23", nil)
	a.must(200, "GET", "/users/adm.user", nil)
	a.must(200, "GET", "/permissions/adm.vhost/adm.user", nil)
	a.must(200, "GET", "/policies/%2F/adm.limit", nil)
	if out := adm.run("publish", "exchange=adm.x", "routing_key=orders.again", "payload=after import"); strings.Contains(out, "NOT routed") {
		t.Errorf("publish after import: %q", out)
	}
}

// rabbitmqadmin's show overview, its lists of live connections, channels
// and consumers (and close connection), its get with each ackmode
// (requeueing by default), a publish with properties and a base64
// payload, purge, delete binding, and the import of RabbitMQ 3.10's own
// definitions file.
func TestRabbitmqadminCoverage(t *testing.T) {
	a := startAPI(t)
	adm := findRabbitmqadmin(t, a)

	// show overview: its own columns, in its table and as JSON.
	if out := adm.run("show", "overview"); !strings.Contains(out, "rabbitmq_version") || !strings.Contains(out, "queue_totals.messages") {
		t.Errorf("show overview: %q", out)
	}
	var shown []map[string]any
	if err := json.Unmarshal([]byte(adm.run("-f", "raw_json", "show", "overview")), &shown); err != nil || len(shown) != 1 ||
		shown[0]["node"] != a.must(200, "GET", "/overview", nil).object(t)["node"] || shown[0]["object_totals"] == nil {
		t.Errorf("show overview raw_json: %v %v", shown, err)
	}

	// A client with a consumer: its connection, channel and consumer
	// are listed, and close connection ends it.
	conn, err := amqp091.DialConfig("amqp://guest:guest@"+a.Addr+"/", amqp091.Config{
		Properties: amqp091.Table{"connection_name": "adm-client"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	adm.run("declare", "queue", "name=adm.consumed", "durable=false")
	if _, err := ch.Consume("adm.consumed", "adm-tag", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	conns := adm.list("connections")
	if len(conns) != 1 || conns[0]["user"] != "guest" || conns[0]["channels"] != 1.0 {
		t.Fatalf("list connections: %v", conns)
	}
	connName := conns[0]["name"].(string)
	if chans := adm.list("channels"); len(chans) != 1 || chans[0]["user"] != "guest" || chans[0]["consumer_count"] != 1.0 ||
		!strings.HasPrefix(chans[0]["name"].(string), connName) {
		t.Errorf("list channels: %v", chans)
	}
	if cons := adm.list("consumers"); len(cons) != 1 || cons[0]["consumer_tag"] != "adm-tag" ||
		cons[0]["queue"].(map[string]any)["name"] != "adm.consumed" {
		t.Errorf("list consumers: %v", cons)
	}
	if out := adm.run("list", "connections"); !strings.Contains(out, connName) {
		t.Errorf("list connections (table): %q", out)
	}
	closed := conn.NotifyClose(make(chan *amqp091.Error, 1))
	adm.run("close", "connection", "name="+connName)
	if e := <-closed; e == nil || e.Code != 320 {
		t.Errorf("close connection: the client saw %v, want 320 CONNECTION_FORCED", e)
	}
	waitFor(t, func() bool { return len(adm.list("connections")) == 0 })

	// get: rabbitmqadmin's default ackmode requeues (and the message
	// comes back redelivered), as do reject_requeue_true and
	// ack_requeue_true; ack_requeue_false takes it. Properties and a
	// base64 payload go through publish and come back.
	adm.run("declare", "queue", "name=adm.get", "durable=true")
	adm.run("publish", "routing_key=adm.get", "payload=aGVsbG8=", "payload_encoding=base64",
		`properties={"content_type": "text/plain", "delivery_mode": 2, "priority": 3, "headers": {"h": "v"}}`)
	get := func(args ...string) map[string]any {
		t.Helper()
		out := adm.run(append([]string{"-f", "raw_json", "get", "queue=adm.get"}, args...)...)
		var msgs []map[string]any
		if err := json.Unmarshal([]byte(out), &msgs); err != nil || len(msgs) != 1 {
			t.Fatalf("get %v: %v\n%s", args, err, out)
		}
		return msgs[0]
	}
	m := get()
	props, _ := m["properties"].(map[string]any)
	if m["payload"] != "hello" || m["redelivered"] != false || m["message_count"] != 0.0 || props["content_type"] != "text/plain" ||
		props["delivery_mode"] != 2.0 || props["priority"] != 3.0 || props["headers"].(map[string]any)["h"] != "v" {
		t.Errorf("get: %v", m)
	}
	for _, mode := range []string{"ackmode=ack_requeue_true", "ackmode=reject_requeue_true"} {
		if m := get(mode); m["payload"] != "hello" || m["redelivered"] != true {
			t.Errorf("get %s: %v", mode, m)
		}
	}
	if m := get("ackmode=reject_requeue_false"); m["payload"] != "hello" {
		t.Errorf("get reject_requeue_false: %v", m)
	}
	if n := a.must(200, "GET", "/queues/%2F/adm.get", nil).object(t)["messages"]; n != 0.0 {
		t.Errorf("adm.get holds %v messages after reject_requeue_false, want 0", n)
	}
	if out := adm.run("get", "queue=adm.get"); !strings.Contains(out, "No items") {
		t.Errorf("get of an empty queue: %q", out)
	}

	// purge and delete binding.
	adm.run("publish", "routing_key=adm.get", "payload=x")
	if out := adm.run("purge", "queue", "name=adm.get"); !strings.Contains(out, "queue purged") {
		t.Errorf("purge: %q", out)
	}
	if n := a.must(200, "GET", "/queues/%2F/adm.get", nil).object(t)["messages"]; n != 0.0 {
		t.Errorf("adm.get holds %v messages after purge", n)
	}
	adm.run("declare", "binding", "source=amq.direct", "destination=adm.get", "routing_key=k")
	a.must(200, "GET", "/bindings/%2F/e/amq.direct/q/adm.get/k", nil)
	adm.run("delete", "binding", "source=amq.direct", "destination_type=queue", "destination=adm.get", "properties_key=k")
	wantError(t, a.do("GET", "/bindings/%2F/e/amq.direct/q/adm.get/k", nil), 404, "Object Not Found", "")

	// The lists without objects of theirs answer an empty list.
	for _, what := range []string{"parameters", "vhost_limits", "operator_policies", "policies"} {
		if l := adm.list(what); len(l) != 0 {
			t.Errorf("list %s: %v, want none", what, l)
		}
	}
	if out := adm.run("list", "parameters"); !strings.Contains(out, "No items") {
		t.Errorf("list parameters (table): %q", out)
	}
	// A vhost limit declared and listed through rabbitmqadmin, then the
	// vhost's limits as its parameter.
	adm.run("declare", "vhost_limit", "vhost=/", "name=max-queues", "value=100")
	if l := adm.list("vhost_limits"); len(l) != 1 || fmt.Sprint(l[0]["value"]) != "map[max-queues:100]" {
		t.Errorf("list vhost_limits: %v", l)
	}
	if p := adm.list("parameters"); len(p) != 1 || p[0]["component"] != "vhost-limits" {
		t.Errorf("list parameters with a vhost limit: %v", p)
	}
	adm.run("delete", "vhost_limit", "vhost=/", "name=max-queues")
	if l := adm.list("vhost_limits"); len(l) != 0 {
		t.Errorf("list vhost_limits after delete: %v", l)
	}
	if p := adm.list("permissions"); len(p) != 1 || p[0]["user"] != "guest" || p[0]["vhost"] != "/" || p[0]["configure"] != ".*" {
		t.Errorf("list permissions: %v", p)
	}
	if u := adm.list("users"); len(u) != 1 || u[0]["name"] != "guest" {
		t.Errorf("list users: %v", u)
	}

	// RabbitMQ 3.10's own export (testdata) imports through rabbitmqadmin.
	adm.run("import", filepath.Join("testdata", "rabbitmq-3.10-definitions.json"))
	var defs struct {
		Queues []struct {
			Name  string `json:"name"`
			Vhost string `json:"vhost"`
		} `json:"queues"`
		Users []struct {
			Name string `json:"name"`
		} `json:"users"`
	}
	raw, err := os.ReadFile(filepath.Join("testdata", "rabbitmq-3.10-definitions.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &defs); err != nil || len(defs.Queues) == 0 {
		t.Fatalf("the fixture: %v", err)
	}
	for _, q := range defs.Queues {
		a.must(200, "GET", "/queues/"+pathEscape(q.Vhost)+"/"+pathEscape(q.Name), nil)
	}
	got := names(adm.list("users"))
	for _, u := range defs.Users {
		if !slices.Contains(got, u.Name) {
			t.Errorf("list users after the import: %v lacks %s", got, u.Name)
		}
	}
}
