package defs

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/brokerd/brokerd/store"
)

// Parameter is a runtime parameter's record (RabbitMQ's vhost-scoped
// runtime parameters: a component, such as "shovel", a name and a JSON
// value). Value is compact JSON, kept as given: a component's own code
// gives it meaning.
type Parameter struct {
	VHost, Component, Name string
	Value                  json.RawMessage
}

// GlobalParameter is a global parameter's record (RabbitMQ's global
// runtime parameters: a name and a JSON value).
type GlobalParameter struct {
	Name  string
	Value json.RawMessage
}

// ParameterKey is the key of the runtime parameter component/name in
// vhost. The vhost is the first part, so the parameters go with their
// vhost (VHostPrefixes).
func ParameterKey(vhost, component, name string) string {
	return Key(PrefixParameter, vhost, component, name)
}

// GlobalParameterKey is the key of global parameter name.
func GlobalParameterKey(name string) string { return Key(PrefixGlobalParameter, name) }

// EncodeParameter returns the record of d: the version, then the value's
// JSON compacted. It panics if d.Value is not JSON (the broker checks it
// first).
func EncodeParameter(d Parameter) store.MetaOp {
	return store.MetaOp{Key: ParameterKey(d.VHost, d.Component, d.Name), Value: encodeJSONValue("parameter", d.Name, d.Value)}
}

// DecodeParameter decodes a record EncodeParameter wrote.
func DecodeParameter(key string, v []byte) (Parameter, error) {
	p, err := Parts(key, PrefixParameter, 3)
	if err != nil {
		return Parameter{}, err
	}
	val, err := decodeJSONValue("parameter", v)
	if err != nil {
		return Parameter{}, err
	}
	return Parameter{VHost: p[0], Component: p[1], Name: p[2], Value: val}, nil
}

// EncodeGlobalParameter returns the record of d, as EncodeParameter.
func EncodeGlobalParameter(d GlobalParameter) store.MetaOp {
	return store.MetaOp{Key: GlobalParameterKey(d.Name), Value: encodeJSONValue("global parameter", d.Name, d.Value)}
}

// DecodeGlobalParameter decodes a record EncodeGlobalParameter wrote.
func DecodeGlobalParameter(key string, v []byte) (GlobalParameter, error) {
	p, err := Parts(key, PrefixGlobalParameter, 1)
	if err != nil {
		return GlobalParameter{}, err
	}
	val, err := decodeJSONValue("global parameter", v)
	if err != nil {
		return GlobalParameter{}, err
	}
	return GlobalParameter{Name: p[0], Value: val}, nil
}

func encodeJSONValue(what, name string, value json.RawMessage) []byte {
	out := bytes.NewBuffer([]byte{Version})
	if err := json.Compact(out, value); err != nil {
		panic(fmt.Sprintf("encode %s %q: %v", what, name, err))
	}
	return out.Bytes()
}

func decodeJSONValue(what string, v []byte) (json.RawMessage, error) {
	r := newRecReader(v)
	doc := r.rest()
	if r.err != nil {
		return nil, r.err
	}
	var out bytes.Buffer
	if err := json.Compact(&out, doc); err != nil || out.Len() == 0 {
		return nil, fmt.Errorf("%w: %s value is not JSON", ErrCorrupt, what)
	}
	return json.RawMessage(out.Bytes()), nil
}
