package mgmt_test

import (
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
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
