package broker_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
)

// fakeComponent is a runtime parameter component that records what it is
// told: "set VHOST NAME VALUE" and "clear VHOST NAME".
type fakeComponent struct {
	mu  sync.Mutex
	log []string
}

func (f *fakeComponent) component() broker.Component {
	return broker.Component{
		Validate: func(vhost, name string, v json.RawMessage) error {
			var m map[string]any
			if json.Unmarshal(v, &m) != nil || m["src-queue"] == nil {
				return errors.New("Validation failed: src-queue is missing")
			}
			return nil
		},
		Notify: func(vhost, name string, v json.RawMessage) {
			f.mu.Lock()
			f.log = append(f.log, fmt.Sprintf("set %s %s %s", vhost, name, v))
			f.mu.Unlock()
		},
		NotifyClear: func(vhost, name string) {
			f.mu.Lock()
			f.log = append(f.log, fmt.Sprintf("clear %s %s", vhost, name))
			f.mu.Unlock()
		},
	}
}

// take returns what was notified since the last take.
func (f *fakeComponent) take() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.log
	f.log = nil
	return l
}

func startWithComponent(t *testing.T) (*brokertest.Instance, *fakeComponent) {
	f := &fakeComponent{}
	b := brokertest.Start(t, brokertest.Config{Broker: broker.Options{Components: map[string]broker.Component{"shovel": f.component()}}})
	return b, f
}

func wantLog(t *testing.T, f *fakeComponent, want ...string) {
	t.Helper()
	if got := f.take(); !slices.Equal(got, want) {
		t.Fatalf("notified %q, want %q", got, want)
	}
}

// Runtime and global parameters are kept across restarts, their component
// validates them and is told of each change once, and refusals say why.
func TestParametersDurableAndNotified(t *testing.T) {
	i, f := startWithComponent(t)
	b := i.Broker
	if err := b.SetParameter("/", "shovel", "s1", json.RawMessage(`{ "src-queue": "a" }`)); err != nil {
		t.Fatal(err)
	}
	wantLog(t, f, `set / s1 {"src-queue":"a"}`)
	if err := b.SetParameter("/", "shovel", "s1", json.RawMessage(`{"src-queue":"a"}`)); err != nil {
		t.Fatal(err)
	}
	wantLog(t, f) // unchanged: not notified again
	if err := b.SetParameter("/", "shovel", "s1", json.RawMessage(`{"src-queue":"b"}`)); err != nil {
		t.Fatal(err)
	}
	wantLog(t, f, `set / s1 {"src-queue":"b"}`)

	var ie *broker.InvalidError
	err := b.SetParameter("/", "federation-upstream", "u", json.RawMessage(`{}`))
	if !errors.As(err, &ie) || ie.Msg != "component federation-upstream not found" {
		t.Fatalf("unknown component: %v", err)
	}
	err = b.SetParameter("/", "shovel", "bad", json.RawMessage(`{"dest-queue":"x"}`))
	if !errors.As(err, &ie) || ie.Msg != "Validation failed: src-queue is missing" {
		t.Fatalf("invalid value: %v", err)
	}
	if err := b.SetParameter("nowhere", "shovel", "s", json.RawMessage(`{"src-queue":"a"}`)); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("unknown vhost: %v", err)
	}
	if err := b.SetGlobalParameter("cluster_tags", json.RawMessage(`{"region": "eu"}`)); err != nil {
		t.Fatal(err)
	}
	if err := b.SetGlobalParameter("gone", json.RawMessage(`1`)); err != nil {
		t.Fatal(err)
	}
	if err := b.ClearGlobalParameter("gone"); err != nil {
		t.Fatal(err)
	}
	if err := b.ClearGlobalParameter("gone"); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("clear a missing global parameter: %v", err)
	}
	wantLog(t, f)

	i.Restart()
	b = i.Broker
	if got := b.Parameters("", ""); len(got) != 1 || got[0].VHost != "/" || got[0].Component != "shovel" || got[0].Name != "s1" || string(got[0].Value) != `{"src-queue":"b"}` {
		t.Fatalf("parameters after restart: %+v", got)
	}
	if got := b.GlobalParameters(); len(got) != 1 || got[0].Name != "cluster_tags" || string(got[0].Value) != `{"region":"eu"}` {
		t.Fatalf("global parameters after restart: %+v", got)
	}
	wantLog(t, f) // nothing until NotifyParameters
	b.NotifyParameters()
	wantLog(t, f, `set / s1 {"src-queue":"b"}`)
	if err := b.ClearParameter("/", "shovel", "s1"); err != nil {
		t.Fatal(err)
	}
	wantLog(t, f, "clear / s1")
	if err := b.ClearParameter("/", "shovel", "s1"); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("clear a missing parameter: %v", err)
	}
	i.Restart()
	if got := i.Broker.Parameters("", ""); len(got) != 0 {
		t.Fatalf("cleared parameter back after restart: %+v", got)
	}
}

// A vhost's parameters go with it: its component is told, and they do not
// come back after a restart, nor with a new vhost of that name.
func TestParametersGoWithTheirVHost(t *testing.T) {
	i, f := startWithComponent(t)
	b := i.Broker
	if err := b.PutVHost(broker.VHostInfo{Name: "v"}); err != nil {
		t.Fatal(err)
	}
	for _, vh := range []string{"/", "v"} {
		if err := b.SetParameter(vh, "shovel", "s", json.RawMessage(`{"src-queue":"a"}`)); err != nil {
			t.Fatal(err)
		}
	}
	f.take()
	if err := b.DeleteVHost("v"); err != nil {
		t.Fatal(err)
	}
	wantLog(t, f, "clear v s")
	i.Restart()
	if err := i.Broker.PutVHost(broker.VHostInfo{Name: "v"}); err != nil {
		t.Fatal(err)
	}
	if got := i.Broker.Parameters("", ""); len(got) != 1 || got[0].VHost != "/" {
		t.Fatalf("parameters after the vhost's deletion and a restart: %+v", got)
	}
}

// An import takes runtime and global parameters in its one batch, checked
// by their component; the component is told of the new ones.
func TestImportParameters(t *testing.T) {
	i, f := startWithComponent(t)
	b := i.Broker
	err := b.ImportDefinitions(&broker.Definitions{
		Parameters: []broker.Parameter{{VHost: "/", Component: "shovel", Name: "s", Value: json.RawMessage(`{"src-queue":"q"}`)},
			{VHost: "/", Component: "federation-upstream", Name: "u", Value: json.RawMessage(`{}`)},
			{VHost: "nowhere", Component: "shovel", Name: "s", Value: json.RawMessage(`{"src-queue":"q"}`)}},
	})
	var de *broker.DefinitionsError
	if !errors.As(err, &de) || len(de.Problems) != 2 ||
		!strings.Contains(de.Problems[0], "parameter 'u' of component 'federation-upstream' in vhost '/': component federation-upstream not found") ||
		!strings.Contains(de.Problems[1], "no vhost 'nowhere'") {
		t.Fatalf("import refusal: %v", err)
	}
	wantLog(t, f)
	if got := b.Parameters("", ""); len(got) != 0 {
		t.Fatalf("a refused import left parameters: %+v", got)
	}
	err = b.ImportDefinitions(&broker.Definitions{
		VHosts:           []broker.DefVHost{{Info: broker.VHostInfo{Name: "new"}}},
		Parameters:       []broker.Parameter{{VHost: "new", Component: "shovel", Name: "s", Value: json.RawMessage(`{"src-queue": "q"}`)}},
		GlobalParameters: []broker.GlobalParameter{{Name: "g", Value: json.RawMessage(`[1, 2]`)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	wantLog(t, f, `set new s {"src-queue":"q"}`)
	i.Restart()
	if got := i.Broker.Parameters("new", "shovel"); len(got) != 1 || string(got[0].Value) != `{"src-queue":"q"}` {
		t.Fatalf("imported parameter after restart: %+v", got)
	}
	if v, ok := i.Broker.LookupGlobalParameter("g"); !ok || string(v) != `[1,2]` {
		t.Fatalf("imported global parameter after restart: %s %v", v, ok)
	}
}
