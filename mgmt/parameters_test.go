package mgmt_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
	"github.com/brokerd/brokerd/mgmt"
)

// fakeShovels stands in for the shovel engine (the engine's own tests are
// package shovel's): a shovel runs while its parameter is set, as
// cmd/brokerd wires the engine to the "shovel" component, and restarts
// are counted.
type fakeShovels struct {
	mu       sync.Mutex
	running  map[[2]string]string // vhost, name → value
	restarts []string
}

func (f *fakeShovels) component() broker.Component {
	return broker.Component{
		Validate: func(vhost, name string, v json.RawMessage) error {
			var m map[string]any
			if err := json.Unmarshal(v, &m); err != nil {
				return errors.New("shovel value must be an object")
			}
			switch {
			case m["src-queue"] != nil || m["src-exchange"] != nil:
			case m["src-uri"] != nil: // RabbitMQ's text (err-parameter-shovel-invalid)
				return errors.New("Must specify 'src-exchange' or 'src-queue'")
			default: // one to escape
				return errors.New("Key \"src-queue\" not found in <value>")
			}
			return nil
		},
		Notify: func(vhost, name string, v json.RawMessage) {
			f.mu.Lock()
			f.running[[2]string{vhost, name}] = string(v)
			f.mu.Unlock()
		},
		NotifyClear: func(vhost, name string) {
			f.mu.Lock()
			delete(f.running, [2]string{vhost, name})
			f.mu.Unlock()
		},
	}
}

func (f *fakeShovels) Status() []mgmt.ShovelStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []mgmt.ShovelStatus
	for k := range f.running {
		out = append(out, mgmt.ShovelStatus{VHost: k[0], Name: k[1],
			Row: map[string]any{"vhost": k[0], "name": k[1], "type": "dynamic", "state": "running"}})
	}
	slices.SortFunc(out, func(a, b mgmt.ShovelStatus) int { return strings.Compare(a.VHost+"\x00"+a.Name, b.VHost+"\x00"+b.Name) })
	return out
}

func (f *fakeShovels) Restart(vhost, name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.running[[2]string{vhost, name}]; !ok {
		return false
	}
	f.restarts = append(f.restarts, vhost+"/"+name)
	return true
}

func (f *fakeShovels) runningNames() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for k := range f.running {
		out = append(out, k[0]+"/"+k[1])
	}
	slices.Sort(out)
	return out
}

func startShovelAPI(t *testing.T) (*api, *fakeShovels) {
	t.Helper()
	f := &fakeShovels{running: map[[2]string]string{}}
	a := startBrokerAPI(t, brokertest.Config{Broker: broker.Options{Components: map[string]broker.Component{"shovel": f.component()}}},
		mgmt.Options{Shovels: f})
	return a, f
}

var shovelValue = map[string]any{"src-uri": "amqp://", "src-queue": "a", "dest-uri": "amqp://", "dest-queue": "b"}

// The shovel parameter's life through /api/parameters: RabbitMQ's codes,
// shapes and refusals, and durable across a restart.
func TestParametersAPI(t *testing.T) {
	a, f := startShovelAPI(t)
	a.must(201, "PUT", "/parameters/shovel/%2F/s1", map[string]any{"value": shovelValue, "component": "shovel", "vhost": "/", "name": "s1"})
	a.must(204, "PUT", "/parameters/shovel/%2F/s1", map[string]any{"value": shovelValue})
	got := a.must(200, "GET", "/parameters/shovel/%2F/s1", nil).object(t)
	if got["component"] != "shovel" || got["vhost"] != "/" || got["name"] != "s1" || got["value"].(map[string]any)["src-queue"] != "a" {
		t.Fatalf("GET the parameter: %v", got)
	}
	for _, path := range []string{"/parameters", "/parameters/shovel", "/parameters/shovel/%2F"} {
		if l := a.must(200, "GET", path, nil).list(t); len(l) != 1 || l[0]["name"] != "s1" {
			t.Fatalf("GET %s: %v", path, l)
		}
	}
	if l := a.must(200, "GET", "/parameters/federation-upstream", nil).list(t); len(l) != 0 {
		t.Fatalf("another component's list: %v", l)
	}
	wantError(t, a.do("PUT", "/parameters/shovel/%2F/bad", map[string]any{"value": map[string]any{"dest-queue": "b"}}),
		400, "bad_request", "Validation failed\n\nKey \"src-queue\" not found in &lt;value&gt;\n")
	wantError(t, a.do("PUT", "/parameters/federation-upstream/%2F/u", map[string]any{"value": map[string]any{"uri": "amqp://"}}),
		400, "bad_request", "Validation failed\n\ncomponent federation-upstream not found\n")
	wantError(t, a.do("PUT", "/parameters/shovel/%2F/novalue", map[string]any{"component": "shovel"}), 400, "bad_request", "key_missing,value")
	wantError(t, a.do("PUT", "/parameters/shovel/nowhere/s", map[string]any{"value": shovelValue}), 404, "not_found", "vhost_not_found")
	wantError(t, a.do("GET", "/parameters/shovel/%2F/bad", nil), 404, "Object Not Found", "")
	if got := f.runningNames(); !slices.Equal(got, []string{"//s1"}) {
		t.Fatalf("shovels running: %q", got)
	}

	a.restart()
	if got := a.must(200, "GET", "/parameters/shovel/%2F/s1", nil).object(t); got["value"].(map[string]any)["dest-queue"] != "b" {
		t.Fatalf("after a restart: %v", got)
	}
	a.must(204, "DELETE", "/parameters/shovel/%2F/s1", nil)
	wantError(t, a.do("DELETE", "/parameters/shovel/%2F/s1", nil), 404, "Object Not Found", "")
	a.restart()
	if l := a.must(200, "GET", "/parameters", nil).list(t); len(l) != 0 {
		t.Fatalf("deleted parameter back after a restart: %v", l)
	}
}

// Parameters need policymaker with access to the vhost; global parameters
// administrator; shovels monitoring.
func TestParametersAuthorisation(t *testing.T) {
	a, _ := startShovelAPI(t)
	a.must(201, "PUT", "/vhosts/other", nil)
	a.must(201, "PUT", "/parameters/shovel/other/s", map[string]any{"value": shovelValue})
	for _, u := range []struct{ name, tags string }{{"pm", "policymaker"}, {"mg", "management"}, {"mon", "monitoring"}} {
		a.must(201, "PUT", "/users/"+u.name, map[string]any{"password": "pw", "tags": u.tags})
		a.must(201, "PUT", "/permissions/%2F/"+u.name, map[string]any{"configure": ".*", "write": ".*", "read": ".*"})
	}
	r := a.as("pm", "pw", "PUT", "/parameters/shovel/%2F/mine", map[string]any{"value": shovelValue})
	if r.status != 201 {
		t.Fatalf("policymaker PUT in its vhost: %d %s", r.status, r.body)
	}
	if l := a.as("pm", "pw", "GET", "/parameters", nil).list(t); len(l) != 1 || l[0]["name"] != "mine" {
		t.Fatalf("policymaker lists only its vhosts' parameters: %v", l)
	}
	wantError(t, a.as("pm", "pw", "PUT", "/parameters/shovel/other/x", map[string]any{"value": shovelValue}), 401, "not_authorised", "User not authorised to access object")
	wantError(t, a.as("pm", "pw", "DELETE", "/parameters/shovel/other/s", nil), 401, "not_authorised", "User not authorised to access object")
	wantError(t, a.as("mg", "pw", "GET", "/parameters", nil), 401, "not_authorised", "User not authorised to access object")
	wantError(t, a.as("mg", "pw", "PUT", "/parameters/shovel/%2F/x", map[string]any{"value": shovelValue}), 401, "not_authorised", "User not authorised to access object")
	wantError(t, a.as("pm", "pw", "GET", "/global-parameters", nil), 401, "not_authorised", "Not administrator user")
	wantError(t, a.as("pm", "pw", "PUT", "/global-parameters/x", map[string]any{"value": 1}), 401, "not_authorised", "Not administrator user")
	wantError(t, a.as("mg", "pw", "GET", "/shovels", nil), 401, "not_authorised", "Not monitor")
	if l := a.as("mon", "pw", "GET", "/shovels", nil).list(t); len(l) != 1 || l[0]["name"] != "mine" {
		t.Fatalf("a monitoring user sees its vhosts' shovels only: %v", l)
	}
	if _, ok := a.Broker.LookupParameter("other", "shovel", "s"); !ok {
		t.Fatal("a refused DELETE removed the parameter")
	}
}

// Global parameters: any JSON, durable; cluster_name is not one a single
// node has (RabbitMQ lists it once set), and it is not set through them.
func TestGlobalParametersAPI(t *testing.T) {
	a, _ := startShovelAPI(t)
	a.must(201, "PUT", "/global-parameters/zone", map[string]any{"value": map[string]any{"region": "eu", "n": 3}})
	a.must(204, "PUT", "/global-parameters/zone", map[string]any{"value": map[string]any{"region": "us"}})
	a.must(201, "PUT", "/global-parameters/a_flag", map[string]any{"value": true, "name": "a_flag"})
	wantError(t, a.do("PUT", "/global-parameters/cluster_name", map[string]any{"value": "x"}), 400, "bad_request", "configuration")
	wantError(t, a.do("PUT", "/global-parameters/zone", map[string]any{}), 400, "bad_request", "key_missing,value")
	a.restart()
	l := a.must(200, "GET", "/global-parameters", nil).list(t)
	if len(l) != 2 || l[0]["name"] != "a_flag" || l[0]["value"] != true || l[1]["name"] != "zone" || l[1]["value"].(map[string]any)["region"] != "us" {
		t.Fatalf("global parameters after a restart: %v", l)
	}
	if g := a.must(200, "GET", "/global-parameters/zone", nil).object(t); g["name"] != "zone" || g["value"].(map[string]any)["region"] != "us" {
		t.Fatalf("GET zone: %v", g)
	}
	wantError(t, a.do("GET", "/global-parameters/cluster_name", nil), 404, "Object Not Found", "")
	a.must(204, "DELETE", "/global-parameters/zone", nil)
	wantError(t, a.do("GET", "/global-parameters/zone", nil), 404, "Object Not Found", "")
	wantError(t, a.do("DELETE", "/global-parameters/zone", nil), 404, "Object Not Found", "")
}

// /api/shovels lists the engine's shovels; DELETE deletes one (its
// parameter goes, which stops it), .../restart restarts it.
func TestShovelsAPI(t *testing.T) {
	a, f := startShovelAPI(t)
	if l := a.must(200, "GET", "/shovels", nil).list(t); len(l) != 0 {
		t.Fatalf("no shovels: %v", l)
	}
	a.must(201, "PUT", "/vhosts/v2", nil)
	a.must(201, "PUT", "/parameters/shovel/%2F/s1", map[string]any{"value": shovelValue})
	a.must(201, "PUT", "/parameters/shovel/v2/s2", map[string]any{"value": shovelValue})
	if l := a.must(200, "GET", "/shovels", nil).list(t); len(l) != 2 || l[0]["name"] != "s1" || l[1]["name"] != "s2" || l[0]["state"] != "running" {
		t.Fatalf("GET /shovels: %v", l)
	}
	if l := a.must(200, "GET", "/shovels/v2", nil).list(t); len(l) != 1 || l[0]["name"] != "s2" {
		t.Fatalf("GET /shovels/v2: %v", l)
	}
	if l := a.must(200, "GET", "/shovels/vhost/%2F/s1", nil).list(t); len(l) != 1 || l[0]["vhost"] != "/" {
		t.Fatalf("GET /shovels/vhost/%%2F/s1: %v", l)
	}
	a.must(204, "DELETE", "/shovels/vhost/v2/s2/restart", nil)
	if !slices.Equal(f.restarts, []string{"v2/s2"}) {
		t.Fatalf("restarts %q", f.restarts)
	}
	wantError(t, a.do("DELETE", "/shovels/vhost/v2/nope/restart", nil), 404, "Object Not Found", "")
	wantError(t, a.do("DELETE", "/shovels/vhost/nowhere/s2", nil), 404, "Object Not Found", "")
	a.must(204, "DELETE", "/shovels/vhost/v2/s2", nil)
	if got := f.runningNames(); !slices.Equal(got, []string{"//s1"}) {
		t.Fatalf("running after the delete: %q", got)
	}
	if _, ok := a.Broker.LookupParameter("v2", "shovel", "s2"); ok {
		t.Fatal("the deleted shovel's parameter is still set")
	}
	wantError(t, a.do("DELETE", "/shovels/vhost/v2/s2", nil), 404, "Object Not Found", "")
	// Its vhost's deletion stops a shovel too.
	a.must(201, "PUT", "/parameters/shovel/v2/s3", map[string]any{"value": shovelValue})
	a.must(204, "DELETE", "/vhosts/v2", nil)
	if got := f.runningNames(); !slices.Equal(got, []string{"//s1"}) {
		t.Fatalf("running after the vhost's deletion: %q", got)
	}
}

// On a cluster node cluster_name is a global parameter: the cluster's
// name, as /api/overview reports it, in name order with the rest.
func TestGlobalParametersClusterName(t *testing.T) {
	a := startAPIWith(t, mgmt.Options{Cluster: leaderStatus, Node: mgmt.NodeOptions{DataDir: t.TempDir()}})
	a.must(201, "PUT", "/global-parameters/zone", map[string]any{"value": "eu"})
	a.must(201, "PUT", "/global-parameters/a_flag", map[string]any{"value": true})
	name := a.must(200, "GET", "/overview", nil).object(t)["cluster_name"]
	l := a.must(200, "GET", "/global-parameters", nil).list(t)
	if name != "brokerd" || len(l) != 3 || l[1]["name"] != "cluster_name" || l[1]["value"] != name || l[2]["name"] != "zone" {
		t.Fatalf("global parameters %v, overview's cluster_name %v", l, name)
	}
	if g := a.must(200, "GET", "/global-parameters/cluster_name", nil).object(t); g["value"] != name {
		t.Fatalf("GET cluster_name: %v", g)
	}
	wantError(t, a.do("DELETE", "/global-parameters/cluster_name", nil), 400, "bad_request", "configuration")
}

// A RabbitMQ 3.10 export holding a shovel and a global parameter
// (testdata/rabbitmq-3.10-shovel-definitions.json, recorded from 3.10.8)
// imports: the shovel's parameter is checked by the component and started,
// the global parameter stored, internal_cluster_id skipped. brokerd's
// export gives them back in RabbitMQ's form, value for value, and that
// export imports into another brokerd, which exports the same again.
func TestDefinitionsRoundTripShovelParameters(t *testing.T) {
	file, err := os.ReadFile("testdata/rabbitmq-3.10-shovel-definitions.json")
	if err != nil {
		t.Fatal(err)
	}
	var rabbit map[string]any
	if err := json.Unmarshal(file, &rabbit); err != nil {
		t.Fatal(err)
	}
	a, f := startShovelAPI(t)
	a.must(204, "POST", "/definitions", string(file))
	if got := f.runningNames(); !slices.Equal(got, []string{"/migrate/orders-move"}) {
		t.Fatalf("shovels started by the import: %q", got)
	}
	a.restart()
	exported := a.must(200, "GET", "/definitions", nil)
	ours := exported.object(t)
	if !reflect.DeepEqual(ours["parameters"], rabbit["parameters"]) {
		t.Fatalf("parameters exported %v, RabbitMQ's %v", ours["parameters"], rabbit["parameters"])
	}
	var rabbitGlobals []any
	for _, g := range rabbit["global_parameters"].([]any) {
		if g.(map[string]any)["name"] != "internal_cluster_id" {
			rabbitGlobals = append(rabbitGlobals, g)
		}
	}
	if !reflect.DeepEqual(ours["global_parameters"], rabbitGlobals) {
		t.Fatalf("global parameters exported %v, RabbitMQ's %v", ours["global_parameters"], rabbitGlobals)
	}
	b, g := startShovelAPI(t)
	b.must(204, "POST", "/definitions", string(exported.body))
	if got := g.runningNames(); !slices.Equal(got, []string{"/migrate/orders-move"}) {
		t.Fatalf("shovels started by the second import: %q", got)
	}
	again := b.must(200, "GET", "/definitions", nil).object(t)
	for _, k := range []string{"parameters", "global_parameters"} {
		if !reflect.DeepEqual(again[k], ours[k]) {
			t.Fatalf("%s exported again %v, first %v", k, again[k], ours[k])
		}
	}
	// A vhost's export holds its parameters, and imports into a vhost.
	vh := a.must(200, "GET", "/definitions/%2Fmigrate", nil)
	if l := vh.object(t)["parameters"].([]any); len(l) != 1 || l[0].(map[string]any)["name"] != "orders-move" {
		t.Fatalf("vhost export parameters: %v", l)
	}
	b.must(201, "PUT", "/vhosts/copy", nil)
	b.must(204, "POST", "/definitions/copy", string(vh.body))
	if _, ok := b.Broker.LookupParameter("copy", "shovel", "orders-move"); !ok {
		t.Fatal("a vhost import did not set the shovel parameter in the vhost imported into")
	}
}

// The parameter endpoints answer as RabbitMQ 3.10 answered the same calls
// (testdata/rabbitmq-3.10/*parameter*.json, replayed in the order they
// were recorded): status and body, the shovel's validation text being the
// component's.
func TestParametersAsRabbitMQ(t *testing.T) {
	a, _ := startShovelAPI(t)
	a.must(201, "PUT", "/vhosts/%2Fmigrate", nil)
	a.must(201, "PUT", "/parameters/shovel/%2Fmigrate/orders-move", map[string]any{"value": map[string]any{"src-queue": "x"}})
	for _, name := range []string{"put-parameter-shovel-existing", "put-parameter-shovel-created", "get-parameter-shovel",
		"get-parameters", "get-parameters-shovel-vhost", "err-parameter-shovel-invalid", "err-parameter-unknown-component",
		"err-parameter-missing-value", "err-parameter-absent", "err-delete-parameter-absent",
		"put-global-parameter-created", "put-global-parameter-existing", "get-global-parameter", "err-global-parameter-absent"} {
		b, err := os.ReadFile("testdata/rabbitmq-3.10/" + name + ".json")
		if err != nil {
			t.Fatal(err)
		}
		var f struct {
			Method, Path string
			RequestBody  any `json:"request_body"`
			Status       int
			Body         any
		}
		if err := json.Unmarshal(b, &f); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var body any
		if f.RequestBody != nil {
			body = f.RequestBody
		}
		r := a.do(f.Method, strings.TrimPrefix(f.Path, "/api"), body)
		if r.status != f.Status {
			t.Fatalf("%s: %s %s: %d %s, RabbitMQ %d", name, f.Method, f.Path, r.status, r.body, f.Status)
		}
		if f.Body == "" {
			continue
		}
		if got := r.json(t); !reflect.DeepEqual(got, f.Body) {
			t.Errorf("%s: %s %s answered\n%s\nRabbitMQ\n%v", name, f.Method, f.Path, r.body, f.Body)
		}
	}
	// The list of every global parameter: RabbitMQ's has its
	// internal_cluster_id besides.
	want := []any{map[string]any{"name": "zone", "value": map[string]any{"region": "us"}}}
	if got := a.must(200, "GET", "/global-parameters", nil).json(t); !reflect.DeepEqual(got, want) {
		t.Errorf("global parameters %v, want %v", got, want)
	}
}

// A vhost's limits are its vhost-limits parameter named limits, as
// RabbitMQ keeps them: listed and read with the other parameters, set and
// cleared through them by an administrator only, the same limits as
// /api/vhost-limits.
func TestParametersVHostLimits(t *testing.T) {
	a := startAPI(t)
	a.must(201, "PUT", "/parameters/vhost-limits/%2F/limits", map[string]any{"value": map[string]any{"max-queues": 1}})
	lim := a.must(200, "GET", "/vhost-limits/%2F", nil).list(t)
	if len(lim) != 1 || fmt.Sprint(lim[0]["value"]) != "map[max-queues:1]" {
		t.Fatalf("/api/vhost-limits/%%2F: %v", lim)
	}
	ps := a.must(200, "GET", "/parameters", nil).list(t)
	if len(ps) != 1 || ps[0]["component"] != "vhost-limits" || ps[0]["name"] != "limits" || ps[0]["vhost"] != "/" {
		t.Fatalf("/api/parameters: %v", ps)
	}
	a.must(200, "GET", "/parameters/vhost-limits/%2F/limits", nil)
	a.must(201, "PUT", "/queues/%2F/first", map[string]any{"durable": true})
	if r := a.do("PUT", "/queues/%2F/second", map[string]any{"durable": true}); r.status < 400 {
		t.Fatalf("a second queue over max-queues 1: %d %s", r.status, r.body)
	}
	a.must(204, "PUT", "/parameters/vhost-limits/%2F/limits", map[string]any{"value": map[string]any{"max-queues": 5}})
	a.must(201, "PUT", "/users/pm", map[string]any{"password": "pw", "tags": "policymaker"})
	a.must(201, "PUT", "/permissions/%2F/pm", map[string]any{"configure": ".*", "write": ".*", "read": ".*"})
	wantError(t, a.as("pm", "pw", "PUT", "/parameters/vhost-limits/%2F/limits", map[string]any{"value": map[string]any{"max-queues": -1}}), 401, "not_authorised", "Not administrator user")
	wantError(t, a.as("pm", "pw", "DELETE", "/parameters/vhost-limits/%2F/limits", nil), 401, "not_authorised", "Not administrator user")
	a.must(204, "DELETE", "/parameters/vhost-limits/%2F/limits", nil)
	wantError(t, a.do("GET", "/parameters/vhost-limits/%2F/limits", nil), 404, "Object Not Found", "")
	a.must(201, "PUT", "/queues/%2F/second", map[string]any{"durable": true})
}
