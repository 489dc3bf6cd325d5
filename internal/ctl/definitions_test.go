package ctl

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// defs is the part of a definitions file the tests look at.
type defs struct {
	Queues []struct {
		Name      string         `json:"name"`
		Vhost     string         `json:"vhost"`
		Arguments map[string]any `json:"arguments"`
	} `json:"queues"`
	Exchanges []struct {
		Name string `json:"name"`
	} `json:"exchanges"`
	Policies []struct {
		Name string `json:"name"`
	} `json:"policies"`
	Vhosts []struct {
		Name string `json:"name"`
	} `json:"vhosts"`
}

func (d defs) hasQueue(name string) bool {
	for _, q := range d.Queues {
		if q.Name == name {
			return true
		}
	}
	return false
}

// rabbitSHA256 hashes a password as RabbitMQ's definitions carry it:
// base64(salt ++ sha256(salt ++ password)), a 4-byte salt.
func rabbitSHA256(password string) string {
	salt := []byte{0x90, 0x8d, 0xc6, 0x0a}
	sum := sha256.Sum256(append(slices.Clone(salt), password...))
	return base64.StdEncoding.EncodeToString(append(salt, sum[:]...))
}

func TestExportImportVhostDefinitions(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		ch := e.channel()
		if err := ch.ExchangeDeclare("dlx", "fanout", true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := ch.QueueDeclare("src", true, false, false, false, amqp091.Table{"x-dead-letter-exchange": "dlx"}); err != nil {
			t.Fatal(err)
		}
		e.ok("set_policy", "-p", e.vhost, "ttl", "^src$", `{"message-ttl":1000}`)

		file := filepath.Join(t.TempDir(), "defs.json")
		out := e.ok("export_definitions", "-p", e.vhost, file)
		if out != "Exporting definitions in JSON to a file at \""+file+"\" ...\n" {
			t.Errorf("export_definitions printed %q", out)
		}
		st, err := os.Stat(file)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("the file has mode %v, want 0600 (it may hold password hashes)", st.Mode().Perm())
		}
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var d defs
		if err := json.Unmarshal(data, &d); err != nil {
			t.Fatalf("export: %v\n%s", err, data)
		}
		if !d.hasQueue("src") || len(d.Policies) != 1 || d.Policies[0].Name != "ttl" {
			t.Errorf("the export lacks the queue or the policy:\n%s", data)
		}
		// "-" is standard output, with nothing else on it.
		var d2 defs
		if err := json.Unmarshal([]byte(e.ok("export_definitions", "-p", e.vhost, "-")), &d2); err != nil || !d2.hasQueue("src") {
			t.Errorf("export to stdout: %v %+v", err, d2)
		}

		// Delete what was exported, import it back.
		if _, err := ch.QueueDelete("src", false, false, false); err != nil {
			t.Fatal(err)
		}
		e.ok("clear_policy", "-p", e.vhost, "ttl")
		out = e.ok("import_definitions", "-p", e.vhost, file)
		if out != "Importing definitions in JSON from a file at \""+file+"\" ...\n" {
			t.Errorf("import_definitions printed %q", out)
		}
		var q struct {
			Arguments map[string]any `json:"arguments"`
		}
		e.getJSON(apiPath("queues", e.vhost, "src"), &q)
		if q.Arguments["x-dead-letter-exchange"] != "dlx" {
			t.Errorf("the imported queue has arguments %v", q.Arguments)
		}
		if st, _ := e.api("GET", apiPath("policies", e.vhost, "ttl"), nil); st != http.StatusOK {
			t.Errorf("the imported policy: GET %d", st)
		}

		// From standard input.
		in := `{"queues":[{"name":"from-stdin","durable":true,"auto_delete":false,"arguments":{}}]}`
		r := e.ctlIn(in, "import_definitions", "-p", e.vhost)
		if r.code != 0 || r.stdout != "Importing definitions in JSON from standard input ...\n" {
			t.Errorf("%v", r)
		}
		if st, _ := e.api("GET", apiPath("queues", e.vhost, "from-stdin"), nil); st != http.StatusOK {
			t.Errorf("the queue imported from stdin: GET %d", st)
		}
		r = e.ctlIn(in, "-q", "import_definitions", "-p", e.vhost, "-")
		if r.code != 0 || r.stdout != "" {
			t.Errorf("%v", r)
		}
	})
}

// TestExportImportBrokerDefinitions uses the whole-broker endpoints with a
// file that names only the test's vhost, so that a shared RabbitMQ keeps
// everything else.
func TestExportImportBrokerDefinitions(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		u := e.user("imported")
		in, err := json.Marshal(map[string]any{
			"users": []map[string]any{{
				"name": u, "tags": "", "hashing_algorithm": "rabbit_password_hashing_sha256",
				"password_hash": rabbitSHA256("secret"),
			}},
			"vhosts":      []map[string]any{{"name": e.vhost}},
			"permissions": []map[string]any{{"user": u, "vhost": e.vhost, "configure": ".*", "write": ".*", "read": ".*"}},
			"queues": []map[string]any{{
				"name": "imported", "vhost": e.vhost, "durable": true, "auto_delete": false,
				"arguments": map[string]any{"x-max-length": 7},
			}},
		})
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(t.TempDir(), "in.json")
		if err := os.WriteFile(file, in, 0o600); err != nil {
			t.Fatal(err)
		}
		e.ok("import_definitions", file)
		var q struct {
			Arguments map[string]any `json:"arguments"`
		}
		e.getJSON(apiPath("queues", e.vhost, "imported"), &q)
		if q.Arguments["x-max-length"] != float64(7) {
			t.Errorf("the imported queue has arguments %v", q.Arguments)
		}
		e.dial(u, "secret") // the imported user logs in with its password

		out := e.ok("export_definitions", "-")
		var d defs
		if err := json.Unmarshal([]byte(out), &d); err != nil {
			t.Fatalf("export: %v", err)
		}
		found := false
		for _, q := range d.Queues {
			found = found || (q.Name == "imported" && q.Vhost == e.vhost)
		}
		if !found {
			t.Errorf("the broker's export lacks the imported queue")
		}
	})
}

func TestDefinitionsErrors(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		dir := t.TempDir()
		missing := filepath.Join(dir, "missing.json")
		e.fails(ExitDataErr, []string{"File " + missing + " does not exist"}, "import_definitions", missing)
		bad := filepath.Join(dir, "bad.json")
		if err := os.WriteFile(bad, []byte("{bad"), 0o600); err != nil {
			t.Fatal(err)
		}
		e.fails(ExitDataErr, []string{"Failed to deserialise input (format: JSON)"}, "import_definitions", bad)
		nodir := filepath.Join(dir, "nodir", "x.json")
		e.fails(ExitDataErr, []string{"Directory " + filepath.Dir(nodir) + " does not exist"}, "export_definitions", nodir)
		e.fails(ExitUsage, []string{"not enough arguments"}, "export_definitions")
		e.fails(ExitDataErr, []string{"Virtual host '/h-ctl-nope' does not exist"}, "export_definitions", "-p", "/h-ctl-nope", "-")
		ok := filepath.Join(dir, "ok.json")
		if err := os.WriteFile(ok, []byte(`{"queues":[]}`), 0o600); err != nil {
			t.Fatal(err)
		}
		e.fails(ExitDataErr, []string{"Virtual host '/h-ctl-nope' does not exist"}, "import_definitions", "-p", "/h-ctl-nope", ok)
		// A definition the server refuses: its reason, exit 69.
		refused := filepath.Join(dir, "refused.json")
		if err := os.WriteFile(refused, []byte(`{"queues":[{"name":"x","vhost":"/h-ctl-nope","durable":true,"auto_delete":false,"arguments":{}}]}`), 0o600); err != nil {
			t.Fatal(err)
		}
		r := e.fails(ExitUnavailable, nil, "import_definitions", refused)
		if !strings.Contains(r.stderr, "/h-ctl-nope") {
			t.Errorf("the refusal does not name the vhost:\n%v", r)
		}
	})
}
