package ctl

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
	"github.com/brokerd/brokerd/mgmt"
)

// shovelEngine stands in for brokerd's shovel engine (package shovel,
// wired by cmd/brokerd): a shovel runs while its parameter is set; its
// validator refuses a value without a source as RabbitMQ's does.
type shovelEngine struct {
	mu       sync.Mutex
	running  map[[2]string]bool
	restarts []string
}

func (f *shovelEngine) component() broker.Component {
	return broker.Component{
		Validate: func(vhost, name string, v json.RawMessage) error {
			var m map[string]any
			if json.Unmarshal(v, &m) != nil || (m["src-queue"] == nil && m["src-exchange"] == nil) {
				return errors.New("Must specify 'src-exchange' or 'src-queue'")
			}
			return nil
		},
		Notify: func(vhost, name string, v json.RawMessage) {
			f.mu.Lock()
			f.running[[2]string{vhost, name}] = true
			f.mu.Unlock()
		},
		NotifyClear: func(vhost, name string) {
			f.mu.Lock()
			delete(f.running, [2]string{vhost, name})
			f.mu.Unlock()
		},
	}
}

func (f *shovelEngine) Status() []mgmt.ShovelStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []mgmt.ShovelStatus
	for k := range f.running {
		out = append(out, mgmt.ShovelStatus{VHost: k[0], Name: k[1], Row: map[string]any{
			"node": "n1", "timestamp": "2026-11-28 17:36:51", "name": k[1], "vhost": k[0], "type": "dynamic", "state": "running",
			"src_uri": "amqp://127.0.0.1:5697/%2Fmigrate", "src_protocol": "amqp091", "dest_protocol": "amqp091",
			"dest_uri": "amqp://", "src_queue": "orders", "dest_queue": "orders.moved"}})
	}
	slices.SortFunc(out, func(a, b mgmt.ShovelStatus) int { return strings.Compare(a.VHost+"\x00"+a.Name, b.VHost+"\x00"+b.Name) })
	return out
}

func (f *shovelEngine) Restart(vhost, name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.running[[2]string{vhost, name}] {
		return false
	}
	f.restarts = append(f.restarts, vhost+"/"+name)
	return true
}

// withShovels runs f against a brokerd with the shovel component: the
// external server if BROKERCTL_TEST_URL names one (a RabbitMQ with the
// shovel plugin takes these tests too), else a broker and its
// management API in this process (on the store BROKERD_TEST_STORE
// selects), whose shovel engine is a stand-in (nil for an external one).
func withShovels(t *testing.T, f func(t *testing.T, e *env, engine *shovelEngine)) {
	if os.Getenv(envTestURL) != "" {
		f(t, newEnv(t, servers(t)[0]), nil)
		return
	}
	engine := &shovelEngine{running: map[[2]string]bool{}}
	i := brokertest.Start(t, brokertest.Config{Broker: broker.Options{Components: map[string]broker.Component{"shovel": engine.component()}}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	api := mgmt.New(mgmt.Options{Broker: i.Broker, Version: "test", Shovels: engine})
	done := make(chan struct{})
	go func() { defer close(done); api.Serve(ln) }()
	t.Cleanup(func() {
		http.DefaultClient.CloseIdleConnections()
		api.Shutdown(t.Context())
		<-done
	})
	f(t, newEnv(t, &server{name: "in-process", api: "http://" + ln.Addr().String(), amqp: i.URL}), engine)
}

func TestParameterVerbs(t *testing.T) {
	withShovels(t, func(t *testing.T, e *env, engine *shovelEngine) {
		value := `{"src-uri":"amqp://","src-queue":"orders","dest-uri":"amqp://","dest-queue":"moved"}`
		out := e.ok("set_parameter", "-p", e.vhost, "shovel", "s1", value)
		if want := `Setting runtime parameter "s1" for component "shovel" to "` + value + `" in vhost "` + e.vhost + `" ...` + "\n"; out != want {
			t.Errorf("set_parameter printed %q, want %q", out, want)
		}
		var got struct {
			Value map[string]any `json:"value"`
		}
		e.getJSON(apiPath("parameters", "shovel", e.vhost, "s1"), &got)
		if got.Value["src-queue"] != "orders" {
			t.Errorf("the server holds %+v", got)
		}
		// The value as rabbitmqctl prints it: JSON, keys sorted.
		out = e.ok("list_parameters", "-p", e.vhost)
		want := `Listing runtime parameters for vhost "` + e.vhost + `" ...` + "\ncomponent\tname\tvalue\n" +
			"shovel\ts1\t" + `{"dest-queue":"moved","dest-uri":"amqp://","src-queue":"orders","src-uri":"amqp://"}` + "\n"
		if out != want {
			t.Errorf("list_parameters printed\n%s\nwant\n%s", out, want)
		}
		var rows []map[string]any
		if err := json.Unmarshal([]byte(e.ok("list_parameters", "-p", e.vhost, "--formatter", "json")), &rows); err != nil {
			t.Fatal(err)
		}
		if len(rows) != 1 || rows[0]["component"] != "shovel" || rows[0]["value"] != `{"dest-queue":"moved","dest-uri":"amqp://","src-queue":"orders","src-uri":"amqp://"}` {
			t.Errorf("list_parameters --formatter json: %v", rows)
		}

		// rabbitmqctl's refusals and codes.
		e.fails(ExitUnavailable, []string{"Error:\nValidation failed\n\nMust specify 'src-exchange' or 'src-queue'\n"},
			"set_parameter", "-p", e.vhost, "shovel", "bad", `{"src-uri":"amqp://","dest-uri":"amqp://"}`)
		e.fails(ExitUnavailable, []string{"Validation failed\n\ncomponent federation-upstream not found"},
			"set_parameter", "-p", e.vhost, "federation-upstream", "u", `{"uri":"amqp://"}`)
		e.fails(ExitUnavailable, []string{"JSON decoding error. Reason: badarg"}, "set_parameter", "-p", e.vhost, "shovel", "s3", "notjson")
		e.fails(ExitDataErr, []string{"Virtual host '/h-ctl-nope' does not exist"}, "set_parameter", "-p", "/h-ctl-nope", "shovel", "s", value)
		e.fails(ExitDataErr, []string{"Virtual host '/h-ctl-nope' does not exist"}, "list_parameters", "-p", "/h-ctl-nope")
		e.fails(ExitUsage, []string{"not enough arguments"}, "set_parameter", "-p", e.vhost, "shovel", "s")

		out = e.ok("clear_parameter", "-p", e.vhost, "shovel", "s1")
		if want := `Clearing runtime parameter "s1" for component "shovel" on vhost "` + e.vhost + `" ...` + "\n"; out != want {
			t.Errorf("clear_parameter printed %q, want %q", out, want)
		}
		if st, _ := e.api("GET", apiPath("parameters", "shovel", e.vhost, "s1"), nil); st != http.StatusNotFound {
			t.Errorf("after clear_parameter: GET %d", st)
		}
		e.fails(ExitUnavailable, []string{"Error:\nParameter does not exist"}, "clear_parameter", "-p", e.vhost, "shovel", "s1")
		if out := e.ok("-s", "list_parameters", "-p", e.vhost); out != "" {
			t.Errorf("list_parameters of none printed %q", out)
		}
	})
}

func TestGlobalParameterVerbs(t *testing.T) {
	withShovels(t, func(t *testing.T, e *env, _ *shovelEngine) {
		name := "h-ctl-zone"
		t.Cleanup(func() { e.api("DELETE", apiPath("global-parameters", name), nil) })
		out := e.ok("set_global_parameter", name, `{"region": "eu"}`)
		if want := `Setting global runtime parameter "` + name + `" to "{"region": "eu"}" ...` + "\n"; out != want {
			t.Errorf("set_global_parameter printed %q, want %q", out, want)
		}
		out = e.ok("list_global_parameters")
		if !strings.HasPrefix(out, "Listing global runtime parameters ...\nname\tvalue\n") || !hasLine(out, name+"\t{\"region\":\"eu\"}") {
			t.Errorf("list_global_parameters printed\n%s", out)
		}
		e.fails(ExitUnavailable, []string{"JSON decoding error. Reason: badarg"}, "set_global_parameter", name, "x")
		out = e.ok("clear_global_parameter", name)
		if want := `Clearing global runtime parameter "` + name + `" ...` + "\n"; out != want {
			t.Errorf("clear_global_parameter printed %q, want %q", out, want)
		}
		e.fails(ExitUnavailable, []string{"Error:\nParameter does not exist"}, "clear_global_parameter", name)
	})
}

func TestShovelVerbs(t *testing.T) {
	withShovels(t, func(t *testing.T, e *env, engine *shovelEngine) {
		var ov overview
		e.getJSON(apiPath("overview"), &ov)
		if out := e.ok("shovel_status"); out != "Shovel status on node "+ov.Node+"\n" && engine != nil {
			t.Errorf("shovel_status of none printed %q", out)
		}
		e.ok("set_parameter", "-p", e.vhost, "shovel", "orders-move",
			`{"src-uri":"amqp://","src-queue":"orders","dest-uri":"amqp://","dest-queue":"orders.moved"}`)
		if engine != nil {
			// RabbitMQ 3.10's columns and line for the same shovel.
			out := e.ok("shovel_status")
			want := "Shovel status on node " + ov.Node + "\n" +
				"destination\tdestination_protocol\tdestination_queue\tlast_changed\tname\tsource\tsource_protocol\tsource_queue\tstate\ttermination_reason\ttype\tvhost\n" +
				"amqp://\tamqp091\torders.moved\t2026-11-28 17:36:51\torders-move\tamqp://127.0.0.1:5697/%2Fmigrate\tamqp091\torders\trunning\t\tdynamic\t" + e.vhost + "\n"
			if out != want {
				t.Errorf("shovel_status printed\n%q\nwant\n%q", out, want)
			}
			if out2 := e.ok("list_shovels"); out2 != out {
				t.Errorf("list_shovels printed\n%s", out2)
			}
			var rows []map[string]any
			if err := json.Unmarshal([]byte(e.ok("shovel_status", "--formatter", "json")), &rows); err != nil {
				t.Fatal(err)
			}
			if len(rows) != 1 || rows[0]["termination_reason"] != "" || rows[0]["source_queue"] != "orders" {
				t.Errorf("shovel_status --formatter json: %v", rows)
			}
		}
		out := e.ok("restart_shovel", "-p", e.vhost, "orders-move")
		if want := "Restarting dynamic Shovel orders-move in virtual host " + e.vhost + " on node " + ov.Node + "\n"; out != want {
			t.Errorf("restart_shovel printed %q, want %q", out, want)
		}
		if engine != nil && !slices.Equal(engine.restarts, []string{e.vhost + "/orders-move"}) {
			t.Errorf("restarts %q", engine.restarts)
		}
		missing := "Shovel with the given name was not found on the target node '" + ov.Node + "' and / or virtual host '" + e.vhost + "'"
		e.fails(ExitUnavailable, []string{missing}, "restart_shovel", "-p", e.vhost, "nope")
		out = e.ok("delete_shovel", "-p", e.vhost, "orders-move")
		if want := "Deleting shovel orders-move in vhost " + e.vhost + "\n"; out != want {
			t.Errorf("delete_shovel printed %q, want %q", out, want)
		}
		if st, _ := e.api("GET", apiPath("parameters", "shovel", e.vhost, "orders-move"), nil); st != http.StatusNotFound {
			t.Errorf("after delete_shovel the parameter is there: GET %d", st)
		}
		e.fails(ExitUnavailable, []string{missing}, "delete_shovel", "-p", e.vhost, "orders-move")
	})
}
