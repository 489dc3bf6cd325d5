package ctl

import (
	"bytes"
	"encoding/json"
	"html"
	"net/http"
	"slices"
	"strings"
)

// Runtime parameters, global parameters and shovels, as rabbitmqctl 3.10
// (with the rabbitmq_shovel plugin's verbs) prints and refuses them.

// parameterColumns are list_parameters' (rabbitmqctl's: component, name,
// value; the value as JSON text, keys sorted) and globalParameterColumns
// list_global_parameters'.
var (
	parameterColumns = listing{
		defaults: []string{"component", "name", "value"},
		all:      []column{field("component"), field("name"), definition("value")},
	}
	globalParameterColumns = listing{
		defaults: []string{"name", "value"},
		all:      []column{field("name"), definition("value")},
	}
)

// jsonArg checks that a verb's argument is JSON, with rabbitmqctl's
// refusal (exit 69).
func jsonArg(s string) (json.RawMessage, error) {
	var compact bytes.Buffer
	if err := json.Compact(&compact, []byte(s)); err != nil {
		return nil, failf(ExitUnavailable, "JSON decoding error. Reason: badarg")
	}
	return compact.Bytes(), nil
}

// validation returns the server's refusal of a value as rabbitmqctl
// prints it: the API escapes the validator's "<" and ">" for HTML.
func validation(err error) error {
	if ae, ok := err.(*apiError); ok && ae.status == http.StatusBadRequest && strings.HasPrefix(ae.reason, "Validation failed") {
		return failf(ExitUnavailable, "%s", strings.TrimSuffix(html.UnescapeString(ae.reason), "\n"))
	}
	return err
}

// setParameter: set_parameter COMPONENT NAME VALUE.
func setParameter(r *run, args []string) error {
	component, name, value := args[0], args[1], args[2]
	r.out.info("Setting runtime parameter \"%s\" for component \"%s\" to \"%s\" in vhost \"%s\" ...", name, component, value, r.vhost())
	v, err := jsonArg(value)
	if err != nil {
		return err
	}
	body := map[string]any{"component": component, "vhost": r.vhost(), "name": name, "value": v}
	err = r.c.send(r.ctx, http.MethodPut, apiPath("parameters", component, r.vhost(), name), body)
	return validation(r.explain(err, r.vhost(), "", err))
}

// clearParameter: clear_parameter COMPONENT NAME.
func clearParameter(r *run, args []string) error {
	component, name := args[0], args[1]
	r.out.info("Clearing runtime parameter \"%s\" for component \"%s\" on vhost \"%s\" ...", name, component, r.vhost())
	err := r.c.send(r.ctx, http.MethodDelete, apiPath("parameters", component, r.vhost(), name), nil)
	return r.explain(err, r.vhost(), "", failf(ExitUnavailable, "Parameter does not exist"))
}

// listParameters: list_parameters, the vhost's parameters of every
// component (the API lists them by component; this takes every one and
// keeps the vhost's).
func listParameters(r *run, args []string) error {
	cols, err := parameterColumns.pick(r.opts.verb, nil)
	if err != nil {
		return err
	}
	r.out.info("Listing runtime parameters for vhost \"%s\" ...", r.vhost())
	var all []map[string]any
	if err := r.c.get(r.ctx, apiPath("parameters"), &all); err != nil {
		return err
	}
	var objs []map[string]any
	for _, o := range all {
		if o["vhost"] == r.vhost() {
			objs = append(objs, o)
		}
	}
	if len(objs) == 0 {
		if ok, err := r.c.exists(r.ctx, apiPath("vhosts", r.vhost())); err == nil && !ok {
			return vhostMissing(r.vhost())
		}
	}
	r.out.rows(cols, rowsOf(objs, cols))
	return nil
}

// setGlobalParameter: set_global_parameter NAME VALUE.
func setGlobalParameter(r *run, args []string) error {
	name, value := args[0], args[1]
	r.out.info("Setting global runtime parameter \"%s\" to \"%s\" ...", name, value)
	v, err := jsonArg(value)
	if err != nil {
		return err
	}
	return validation(r.c.send(r.ctx, http.MethodPut, apiPath("global-parameters", name), map[string]any{"name": name, "value": v}))
}

// clearGlobalParameter: clear_global_parameter NAME.
func clearGlobalParameter(r *run, args []string) error {
	name := args[0]
	r.out.info("Clearing global runtime parameter \"%s\" ...", name)
	err := r.c.send(r.ctx, http.MethodDelete, apiPath("global-parameters", name), nil)
	if isMissing(err) {
		return failf(ExitUnavailable, "Parameter does not exist")
	}
	return err
}

// listGlobalParameters: list_global_parameters.
func listGlobalParameters(r *run, args []string) error {
	cols, err := globalParameterColumns.pick(r.opts.verb, nil)
	if err != nil {
		return err
	}
	r.out.info("Listing global runtime parameters ...")
	return r.list(apiPath("global-parameters"), cols, "", "")
}

// shovelFields are shovel_status's columns (rabbitmqctl prints the keys
// of each shovel's status, sorted) and the /api/shovels fields they come
// from. A column shows when a shovel has it; the queue and exchange ones
// only where the shovel uses them.
var shovelFields = []struct{ name, api string }{
	{"destination", "dest_uri"},
	{"destination_exchange", "dest_exchange"},
	{"destination_exchange_key", "dest_exchange_key"},
	{"destination_protocol", "dest_protocol"},
	{"destination_queue", "dest_queue"},
	{"last_changed", "timestamp"},
	{"name", "name"},
	{"source", "src_uri"},
	{"source_exchange", "src_exchange"},
	{"source_exchange_key", "src_exchange_key"},
	{"source_protocol", "src_protocol"},
	{"source_queue", "src_queue"},
	{"state", "state"},
	{"termination_reason", "reason"},
	{"type", "type"},
	{"vhost", "vhost"},
}

// alwaysShovelColumns are shown whatever the shovels hold.
var alwaysShovelColumns = []string{"destination", "destination_protocol", "last_changed", "name", "source",
	"source_protocol", "state", "termination_reason", "type", "vhost"}

// nodeName is the broker's node name (the overview's).
func (r *run) nodeName() (string, error) {
	var ov overview
	if err := r.c.get(r.ctx, apiPath("overview"), &ov); err != nil {
		return "", err
	}
	return ov.Node, nil
}

// shovelStatus: shovel_status (list_shovels), every shovel of the node.
func shovelStatus(r *run, args []string) error {
	node, err := r.nodeName()
	if err != nil {
		return err
	}
	var objs []map[string]any
	if err := r.c.get(r.ctx, apiPath("shovels"), &objs); err != nil {
		return err
	}
	var cols []column
	for _, f := range shovelFields {
		used := slices.Contains(alwaysShovelColumns, f.name)
		for _, o := range objs {
			used = used || o[f.api] != nil
		}
		if !used {
			continue
		}
		c := fieldAs(f.name, f.api)
		if f.name == "termination_reason" { // "" while running, as rabbitmqctl
			c = c.withJSON(func(v any) any {
				if v == nil {
					return ""
				}
				return v
			})
		}
		cols = append(cols, c)
	}
	r.out.info("Shovel status on node %s", node)
	r.out.rows(cols, rowsOf(objs, cols))
	return nil
}

// shovelMissing is rabbitmqctl's refusal of a shovel that is not running.
func shovelMissing(node, vhost string) error {
	return failf(ExitUnavailable, "Shovel with the given name was not found on the target node '%s' and / or virtual host '%s'", node, vhost)
}

// deleteShovel: delete_shovel [-p V] NAME: its parameter is cleared,
// which stops it.
func deleteShovel(r *run, args []string) error {
	name := args[0]
	r.out.info("Deleting shovel %s in vhost %s", name, r.vhost())
	err := r.c.send(r.ctx, http.MethodDelete, apiPath("shovels", "vhost", r.vhost(), name), nil)
	if isMissing(err) {
		node, nerr := r.nodeName()
		if nerr != nil {
			return err
		}
		return shovelMissing(node, r.vhost())
	}
	return err
}

// restartShovel: restart_shovel [-p V] NAME.
func restartShovel(r *run, args []string) error {
	name := args[0]
	node, err := r.nodeName()
	if err != nil {
		return err
	}
	r.out.info("Restarting dynamic Shovel %s in virtual host %s on node %s", name, r.vhost(), node)
	err = r.c.send(r.ctx, http.MethodDelete, apiPath("shovels", "vhost", r.vhost(), name, "restart"), nil)
	if isMissing(err) {
		return shovelMissing(node, r.vhost())
	}
	return err
}
