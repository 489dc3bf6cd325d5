package ctl

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

func TestSetListClearPolicy(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		def := `{"dead-letter-exchange":"dlx","message-ttl":60000}`
		// Options before and after the verb, as rabbitmqctl takes them.
		out := e.ok("-p", e.vhost, "set_policy", "--priority", "3", "dlx", `^dl\.`, def, "--apply-to", "queues")
		want := `Setting policy "dlx" for pattern "^dl\." to "` + def + `" with priority "3" for vhost "` + e.vhost + `" ...` + "\n"
		if out != want {
			t.Errorf("set_policy printed %q, want %q", out, want)
		}
		var pol struct {
			Pattern    string         `json:"pattern"`
			ApplyTo    string         `json:"apply-to"`
			Priority   int            `json:"priority"`
			Definition map[string]any `json:"definition"`
		}
		e.getJSON(apiPath("policies", e.vhost, "dlx"), &pol)
		if pol.Pattern != `^dl\.` || pol.ApplyTo != "queues" || pol.Priority != 3 ||
			pol.Definition["dead-letter-exchange"] != "dlx" || pol.Definition["message-ttl"] != float64(60000) {
			t.Errorf("the server holds %+v", pol)
		}
		// Default apply-to and priority.
		e.ok("set_policy", "--vhost="+e.vhost, "ml", "^ml$", `{"max-length": 5}`)
		e.getJSON(apiPath("policies", e.vhost, "ml"), &pol)
		if pol.ApplyTo != "all" || pol.Priority != 0 {
			t.Errorf("defaults: the server holds %+v", pol)
		}

		out = e.ok("list_policies", "-p", e.vhost)
		if !strings.HasPrefix(out, `Listing policies for vhost "`+e.vhost+`" ...`+"\nvhost\tname\tpattern\tapply-to\tdefinition\tpriority\n") {
			t.Errorf("list_policies printed:\n%s", out)
		}
		for _, line := range []string{
			e.vhost + "\tdlx\t^dl\\.\tqueues\t" + def + "\t3",
			e.vhost + "\tml\t^ml$\tall\t{\"max-length\":5}\t0",
		} {
			if !hasLine(out, line) {
				t.Errorf("list_policies lacks %q:\n%s", line, out)
			}
		}
		if out := e.ok("-q", "list_policies", "-p", e.vhost); !strings.HasPrefix(out, "vhost\tname\t") {
			t.Errorf("-q printed:\n%s", out)
		}
		if out := e.ok("-s", "list_policies", "-p", e.vhost); strings.Contains(out, "vhost\tname") || !strings.HasPrefix(out, e.vhost+"\t") {
			t.Errorf("-s printed:\n%s", out)
		}
		var rows []map[string]any
		if err := json.Unmarshal([]byte(e.ok("list_policies", "-p", e.vhost, "--formatter", "json")), &rows); err != nil {
			t.Fatal(err)
		}
		found := false
		for _, r := range rows {
			if r["name"] == "dlx" {
				found = true
				if r["definition"] != def || r["apply-to"] != "queues" || r["priority"] != float64(3) || r["vhost"] != e.vhost {
					t.Errorf("json row %v", r)
				}
			}
		}
		if !found {
			t.Errorf("json rows %v lack dlx", rows)
		}

		// The policy applies to a queue at once.
		ch := e.channel()
		if _, err := ch.QueueDeclare("dl.q", true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		e.eventuallyOut([]string{"dl.q\tdlx\t" + def}, "-q", "list_queues", "-p", e.vhost, "name", "policy", "effective_policy_definition")

		out = e.ok("clear_policy", "-p", e.vhost, "dlx")
		if out != `Clearing policy "dlx" on vhost "`+e.vhost+`" ...`+"\n" {
			t.Errorf("clear_policy printed %q", out)
		}
		if st, body := e.api("GET", apiPath("policies", e.vhost, "dlx"), nil); st != http.StatusNotFound {
			t.Errorf("after clear_policy: GET %d %s", st, body)
		}
		// No policy: RabbitMQ gives the effective definition as {}; an
		// absent one prints as "".
		e.eventually(func() (bool, string) {
			r := e.ctl("-s", "list_queues", "-p", e.vhost, "name", "policy", "effective_policy_definition")
			cells := row(r.stdout, "dl.q")
			return len(cells) == 3 && cells[1] == "" && (cells[2] == "{}" || cells[2] == ""), r.String()
		}, "dl.q without its policy")
	})
}

func TestPolicyErrors(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		// The server's validation message, exit 69 as rabbitmqctl.
		e.fails(ExitUnavailable, []string{"is not a valid maximum length"},
			"set_policy", "-p", e.vhost, "bad", "^a", `{"max-length":-1}`)
		e.fails(ExitUnavailable, []string{"are not recognised policy settings"},
			"set_policy", "-p", e.vhost, "bad", "^a", `{"bogus-key":1}`)
		if st, _ := e.api("GET", apiPath("policies", e.vhost, "bad"), nil); st != http.StatusNotFound {
			t.Errorf("an invalid policy was stored: GET %d", st)
		}
		e.fails(ExitUnavailable, []string{"JSON decoding error"}, "set_policy", "-p", e.vhost, "bad", "^a", "notjson")
		r := e.fails(ExitUsage, []string{"Invalid options for this command", "--priority : x", "Usage"},
			"set_policy", "-p", e.vhost, "bad", "^a", `{"max-length":1}`, "--priority", "x")
		if r.stdout != "" {
			t.Errorf("a usage error printed on stdout: %q", r.stdout)
		}
		e.fails(ExitUsage, []string{"not enough arguments"}, "set_policy", "-p", e.vhost, "bad", "^a")
		e.fails(ExitUsage, []string{"Invalid options for this command", "--priority"},
			"clear_policy", "-p", e.vhost, "--priority", "1", "x")
		e.fails(ExitDataErr, []string{"Virtual host '/h-ctl-nope' does not exist"},
			"set_policy", "-p", "/h-ctl-nope", "p", "^a", `{"max-length":1}`)
		e.fails(ExitDataErr, []string{"Virtual host '/h-ctl-nope' does not exist"}, "list_policies", "-p", "/h-ctl-nope")
		e.fails(ExitDataErr, []string{"Virtual host '/h-ctl-nope' does not exist"}, "clear_policy", "-p", "/h-ctl-nope", "p")
		e.fails(ExitUnavailable, []string{"Policy 'nope'"}, "clear_policy", "-p", e.vhost, "nope")
	})
}

func TestOperatorPolicy(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		out := e.ok("set_operator_policy", "-p", e.vhost, "--apply-to", "queues", "--priority", "1", "cap", "^q", `{"max-length":5,"message-ttl":9000}`)
		if !strings.HasPrefix(out, `Setting operator policy override "cap" for pattern "^q" to `) {
			t.Errorf("set_operator_policy printed %q", out)
		}
		var pol struct {
			Definition map[string]any `json:"definition"`
			ApplyTo    string         `json:"apply-to"`
			Priority   int            `json:"priority"`
		}
		e.getJSON(apiPath("operator-policies", e.vhost, "cap"), &pol)
		if pol.Definition["max-length"] != float64(5) || pol.ApplyTo != "queues" || pol.Priority != 1 {
			t.Errorf("the server holds %+v", pol)
		}
		out = e.ok("list_operator_policies", "-p", e.vhost)
		if !strings.HasPrefix(out, `Listing operator policy overrides for vhost "`+e.vhost+`" ...`) ||
			!hasLine(out, e.vhost+"\tcap\t^q\tqueues\t{\"max-length\":5,\"message-ttl\":9000}\t1") {
			t.Errorf("list_operator_policies printed:\n%s", out)
		}
		// Merged with a user policy: the lower limit wins (reference P4).
		e.ok("set_policy", "-p", e.vhost, "user", "^q", `{"max-length":10,"message-ttl":5000}`)
		ch := e.channel()
		if _, err := ch.QueueDeclare("q1", true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		e.eventuallyOut([]string{"q1\tuser\tcap\t{\"max-length\":5,\"message-ttl\":5000}"},
			"-s", "list_queues", "-p", e.vhost, "name", "policy", "operator_policy", "effective_policy_definition")

		e.fails(ExitUnavailable, []string{"are not recognised policy settings"},
			"set_operator_policy", "-p", e.vhost, "bad", "^q", `{"dead-letter-exchange":"x"}`)
		out = e.ok("clear_operator_policy", "-p", e.vhost, "cap")
		if out != `Clearing operator policy "cap" on vhost "`+e.vhost+`" ...`+"\n" {
			t.Errorf("clear_operator_policy printed %q", out)
		}
		if st, _ := e.api("GET", apiPath("operator-policies", e.vhost, "cap"), nil); st != http.StatusNotFound {
			t.Errorf("after clear_operator_policy: GET %d", st)
		}
		e.fails(ExitUnavailable, []string{"Operator policy 'cap'"}, "clear_operator_policy", "-p", e.vhost, "cap")
	})
}
