package broker

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/brokerd/brokerd/broker/defs"
)

// Runtime parameters (RabbitMQ's rabbit_runtime_parameters): values a
// component, such as the shovel, keeps per vhost (component, name, a JSON
// value), and global parameters (a name and a JSON value). They are
// definitions: durable in the store, replicated with the rest in a cluster,
// deleted with their vhost, exported and imported.
//
// The broker gives them no meaning. A component is registered in
// Options.Components: its Validate decides what a value may be, its
// Notify and NotifyClear are told of every change once it is durable
// (and Notify, by NotifyParameters, of every stored value at start). A
// parameter of a component not registered is refused at set time
// ("component X not found", RabbitMQ's words) and kept when recovered.

// Parameter is a runtime parameter. Value is compact JSON.
type Parameter = defs.Parameter

// GlobalParameter is a global parameter. Value is compact JSON.
type GlobalParameter = defs.GlobalParameter

// Component is a kind of runtime parameter, as RabbitMQ's
// rabbit_runtime_parameter behaviour: validate, notify, notify_clear.
type Component struct {
	// Validate checks a value before it is stored; its error's text is
	// the refusal's reason (the API's 400). Required.
	Validate func(vhost, name string, value json.RawMessage) error
	// Notify, if set, is called once a new or changed value is durable
	// (set or imported; a value set again unchanged is not notified), and
	// by NotifyParameters for each stored value.
	Notify func(vhost, name string, value json.RawMessage)
	// NotifyClear, if set, is called once a parameter's removal is
	// durable: cleared, or its vhost deleted.
	NotifyClear func(vhost, name string)
}

// Notifications are called with paramMu held and no other lock of the
// broker's: they are called in the order the changes were made, and may
// block (a shovel's Stop waits for its connections to close) but must not
// change parameters themselves (a shovel done with src-delete-after
// clears its parameter from another goroutine).

// paramKey names a runtime parameter.
type paramKey struct{ vhost, component, name string }

// SetParameter sets runtime parameter component/name in vhost to value
// (JSON) once the component's Validate accepts it, and returns once it is
// durable and the component notified. A component not registered, a value
// that is not JSON or that Validate refuses is a *InvalidError (its Msg
// RabbitMQ's reason); an unknown vhost an error wrapping ErrNotFound.
// Safe for concurrent use.
func (b *Broker) SetParameter(vhost, component, name string, value json.RawMessage) error {
	c, v, err := b.checkParameter(vhost, component, name, value)
	if err != nil {
		return err
	}
	b.paramMu.Lock()
	defer b.paramMu.Unlock()
	k := paramKey{vhost, component, name}
	b.mu.Lock()
	if b.vhosts[vhost] == nil {
		b.mu.Unlock()
		return notFoundf("no vhost '%s'", vhost)
	}
	old, had := b.params[k]
	if had && bytes.Equal(old, v) {
		b.mu.Unlock()
		return nil // RabbitMQ notifies nothing either
	}
	b.params[k] = v
	var mb defs.Batch
	mb.Put(defs.EncodeParameter(Parameter{VHost: vhost, Component: component, Name: name, Value: v}))
	w := b.startMeta(&mb)
	b.mu.Unlock()
	if err := w.WaitErr(); err != nil {
		b.mu.Lock()
		if had {
			b.params[k] = old
		} else {
			delete(b.params, k)
		}
		b.mu.Unlock()
		return fmt.Errorf("set parameter '%s' of component '%s' in vhost '%s': %w", name, component, vhost, err)
	}
	if c.Notify != nil {
		c.Notify(vhost, name, v)
	}
	return nil
}

// checkParameter checks a parameter as SetParameter does, without the
// vhost's existence, and returns its component and compacted value.
func (b *Broker) checkParameter(vhost, component, name string, value json.RawMessage) (Component, json.RawMessage, error) {
	c, ok := b.opts.Components[component]
	if !ok || c.Validate == nil {
		return c, nil, invalidf("component %s not found", component)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, value); err != nil {
		return c, nil, invalidf("JSON decoding error. Reason: %s", err.Error())
	}
	v := json.RawMessage(compact.Bytes())
	if err := c.Validate(vhost, name, v); err != nil {
		return c, nil, invalidf("%s", err.Error())
	}
	return c, v, nil
}

// ClearParameter removes runtime parameter component/name of vhost and
// returns once its removal is durable and the component notified. A
// missing parameter is an error wrapping ErrNotFound.
func (b *Broker) ClearParameter(vhost, component, name string) error {
	b.paramMu.Lock()
	defer b.paramMu.Unlock()
	k := paramKey{vhost, component, name}
	b.mu.Lock()
	old, had := b.params[k]
	if !had {
		b.mu.Unlock()
		return notFoundf("Parameter does not exist")
	}
	delete(b.params, k)
	var mb defs.Batch
	mb.Delete(defs.ParameterKey(vhost, component, name))
	w := b.startMeta(&mb)
	b.mu.Unlock()
	if err := w.WaitErr(); err != nil {
		b.mu.Lock()
		b.params[k] = old
		b.mu.Unlock()
		return fmt.Errorf("clear parameter '%s' of component '%s' in vhost '%s': %w", name, component, vhost, err)
	}
	if c := b.opts.Components[component]; c.NotifyClear != nil {
		c.NotifyClear(vhost, name)
	}
	return nil
}

// Parameters lists the runtime parameters of vhost ("": every vhost) and
// component ("": every component), by vhost, component and name. The
// values are the caller's.
func (b *Broker) Parameters(vhost, component string) []Parameter {
	b.mu.RLock()
	var out []Parameter
	for k, v := range b.params {
		if (vhost == "" || k.vhost == vhost) && (component == "" || k.component == component) {
			out = append(out, Parameter{VHost: k.vhost, Component: k.component, Name: k.name, Value: slices.Clone(v)})
		}
	}
	b.mu.RUnlock()
	slices.SortFunc(out, func(a, c Parameter) int {
		return cmp.Or(cmp.Compare(a.VHost, c.VHost), cmp.Compare(a.Component, c.Component), cmp.Compare(a.Name, c.Name))
	})
	return out
}

// LookupParameter returns the value of a runtime parameter; false if
// there is none.
func (b *Broker) LookupParameter(vhost, component, name string) (json.RawMessage, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	v, ok := b.params[paramKey{vhost, component, name}]
	return slices.Clone(v), ok
}

// NotifyParameters calls each registered component's Notify for every
// stored parameter of it, in Parameters' order: how brokerd starts the
// shovels it stored once it can serve them. Changes wait meanwhile.
func (b *Broker) NotifyParameters() {
	b.paramMu.Lock()
	defer b.paramMu.Unlock()
	for _, p := range b.Parameters("", "") {
		if c := b.opts.Components[p.Component]; c.Notify != nil {
			c.Notify(p.VHost, p.Name, p.Value)
		}
	}
}

// SetGlobalParameter sets global parameter name to value (JSON, any; as
// RabbitMQ's, global parameters are not validated) and returns once it is
// durable. A value that is not JSON is a *InvalidError.
func (b *Broker) SetGlobalParameter(name string, value json.RawMessage) error {
	var compact bytes.Buffer
	if err := json.Compact(&compact, value); err != nil {
		return invalidf("JSON decoding error. Reason: %s", err.Error())
	}
	v := json.RawMessage(compact.Bytes())
	b.paramMu.Lock()
	defer b.paramMu.Unlock()
	b.mu.Lock()
	old, had := b.globals[name]
	b.globals[name] = v
	var mb defs.Batch
	mb.Put(defs.EncodeGlobalParameter(GlobalParameter{Name: name, Value: v}))
	w := b.startMeta(&mb)
	b.mu.Unlock()
	if err := w.WaitErr(); err != nil {
		b.mu.Lock()
		if had {
			b.globals[name] = old
		} else {
			delete(b.globals, name)
		}
		b.mu.Unlock()
		return fmt.Errorf("set global parameter '%s': %w", name, err)
	}
	return nil
}

// ClearGlobalParameter removes global parameter name once the removal is
// durable; a missing one is an error wrapping ErrNotFound.
func (b *Broker) ClearGlobalParameter(name string) error {
	b.paramMu.Lock()
	defer b.paramMu.Unlock()
	b.mu.Lock()
	old, had := b.globals[name]
	if !had {
		b.mu.Unlock()
		return notFoundf("Parameter does not exist")
	}
	delete(b.globals, name)
	var mb defs.Batch
	mb.Delete(defs.GlobalParameterKey(name))
	w := b.startMeta(&mb)
	b.mu.Unlock()
	if err := w.WaitErr(); err != nil {
		b.mu.Lock()
		b.globals[name] = old
		b.mu.Unlock()
		return fmt.Errorf("clear global parameter '%s': %w", name, err)
	}
	return nil
}

// GlobalParameters lists the global parameters by name.
func (b *Broker) GlobalParameters() []GlobalParameter {
	b.mu.RLock()
	out := make([]GlobalParameter, 0, len(b.globals))
	for _, name := range slices.Sorted(maps.Keys(b.globals)) {
		out = append(out, GlobalParameter{Name: name, Value: slices.Clone(b.globals[name])})
	}
	b.mu.RUnlock()
	return out
}

// LookupGlobalParameter returns the value of global parameter name; false
// if there is none.
func (b *Broker) LookupGlobalParameter(name string) (json.RawMessage, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	v, ok := b.globals[name]
	return slices.Clone(v), ok
}

// dropVHostParamsLocked removes the parameters of vhost from memory and
// adds their records' deletions to mb, returning them (for NotifyClear
// once the deletion is durable, and to restore them if it fails). Caller
// holds paramMu and mu.
func (b *Broker) dropVHostParamsLocked(vhost string, mb *defs.Batch) []Parameter {
	var gone []Parameter
	for k, v := range b.params {
		if k.vhost == vhost {
			gone = append(gone, Parameter{VHost: k.vhost, Component: k.component, Name: k.name, Value: v})
			delete(b.params, k)
			mb.Delete(defs.ParameterKey(k.vhost, k.component, k.name))
		}
	}
	return gone
}

// notifyCleared tells the components of parameters removed with their
// vhost. Caller holds paramMu.
func (b *Broker) notifyCleared(gone []Parameter) {
	for _, p := range gone {
		if c := b.opts.Components[p.Component]; c.NotifyClear != nil {
			c.NotifyClear(p.VHost, p.Name)
		}
	}
}

// recoverParameters loads the stored parameters; one in a vhost that is
// gone is dropped (dangling). Parameters of components not registered are
// kept: a later start may register them.
func (b *Broker) recoverParameters(scan func(prefix string, fn func(key string, v []byte) error), dangling func(key, what string, args ...any)) {
	scan(defs.PrefixParameter, func(k string, v []byte) error {
		d, err := defs.DecodeParameter(k, v)
		if err != nil {
			return err
		}
		if b.vhosts[d.VHost] == nil {
			dangling(k, "parameter in unknown vhost", "vhost", d.VHost, "component", d.Component, "name", d.Name)
			return nil
		}
		b.params[paramKey{d.VHost, d.Component, d.Name}] = d.Value
		return nil
	})
	scan(defs.PrefixGlobalParameter, func(k string, v []byte) error {
		d, err := defs.DecodeGlobalParameter(k, v)
		if err != nil {
			return err
		}
		b.globals[d.Name] = d.Value
		return nil
	})
}
