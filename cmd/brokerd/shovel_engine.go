package main

import (
	"encoding/json"

	"github.com/brokerd/brokerd/mgmt"
	"github.com/brokerd/brokerd/shovel"
)

// newShovelManager makes the engine: a *shovel.Manager.
func newShovelManager(o shovelOptions) shovelEngine {
	return shovelManager{shovel.NewManager(shovel.Options{Local: o.Local, Deleted: o.Deleted, Logger: o.Logger, Node: o.Node})}
}

// shovelManager adapts *shovel.Manager to shovelEngine.
type shovelManager struct{ m *shovel.Manager }

func (shovelManager) Validate(vhost, name string, value json.RawMessage) error {
	_, err := shovel.ParseDefinition(value)
	return err
}

// Start starts the shovel of a value Validate accepted (the broker stores
// none other).
func (s shovelManager) Start(vhost, name string, value json.RawMessage) {
	d, err := shovel.ParseDefinition(value)
	if err != nil {
		return
	}
	s.m.Start(vhost, name, d)
}

func (s shovelManager) Stop(vhost, name string)         { s.m.Stop(vhost, name) }
func (s shovelManager) Restart(vhost, name string) bool { return s.m.Restart(vhost, name) }
func (s shovelManager) Close()                          { s.m.Close() }

func (s shovelManager) Status() []mgmt.ShovelStatus {
	var out []mgmt.ShovelStatus
	for _, st := range s.m.Status() {
		out = append(out, mgmt.ShovelStatus{VHost: st.Vhost, Name: st.Name, Row: st})
	}
	return out
}
