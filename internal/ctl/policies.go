package ctl

import (
	"bytes"
	"encoding/json"
	"net/http"
)

// policyType is what differs between policies and operator policies.
type policyType struct {
	resource string // API collection
	setting  string // info line of set_*
	clearing string // info line of clear_*
	listing  string // info line of list_*
	noun     string // in "... does not exist"
}

var (
	policyKind = policyType{
		resource: "policies", setting: "Setting policy", clearing: "Clearing policy",
		listing: "Listing policies", noun: "Policy",
	}
	operatorPolicyKind = policyType{
		resource: "operator-policies", setting: "Setting operator policy override",
		clearing: "Clearing operator policy", listing: "Listing operator policy overrides", noun: "Operator policy",
	}
)

// policyBody is the API's policy object.
type policyBody struct {
	Pattern    string          `json:"pattern"`
	Definition json.RawMessage `json:"definition"`
	Priority   int             `json:"priority"`
	ApplyTo    string          `json:"apply-to"`
}

// setPolicy: set_policy NAME PATTERN DEFINITION. The definition must be
// JSON; whether it is a valid policy is the server's to say (its reason is
// printed).
func setPolicy(k policyType) func(r *run, args []string) error {
	return func(r *run, args []string) error {
		name, pattern, def := args[0], args[1], args[2]
		r.out.info("%s \"%s\" for pattern \"%s\" to \"%s\" with priority \"%d\" for vhost \"%s\" ...",
			k.setting, name, pattern, def, r.opts.priority, r.vhost())
		applyTo := r.opts.applyTo
		if applyTo == "" {
			applyTo = "all"
		}
		// rabbitmqctl's message and code for a definition that is not JSON.
		var compact bytes.Buffer
		if err := json.Compact(&compact, []byte(def)); err != nil {
			return failf(ExitUnavailable, "JSON decoding error. Reason: %v", err)
		}
		body := policyBody{Pattern: pattern, Definition: compact.Bytes(), Priority: r.opts.priority, ApplyTo: applyTo}
		err := r.c.send(r.ctx, http.MethodPut, apiPath(k.resource, r.vhost(), name), body)
		return r.explain(err, r.vhost(), "", nil)
	}
}

// clearPolicy: clear_policy NAME.
func clearPolicy(k policyType) func(r *run, args []string) error {
	return func(r *run, args []string) error {
		name := args[0]
		r.out.info("%s \"%s\" on vhost \"%s\" ...", k.clearing, name, r.vhost())
		err := r.c.send(r.ctx, http.MethodDelete, apiPath(k.resource, r.vhost(), name), nil)
		return r.explain(err, r.vhost(), "",
			failf(ExitUnavailable, "%s '%s' in vhost '%s' does not exist", k.noun, name, r.vhost()))
	}
}

// listPolicies: list_policies.
func listPolicies(k policyType) func(r *run, args []string) error {
	return func(r *run, args []string) error {
		cols, err := policyColumns.pick(r.opts.verb, nil)
		if err != nil {
			return err
		}
		r.out.info("%s for vhost \"%s\" ...", k.listing, r.vhost())
		return r.list(apiPath(k.resource, r.vhost()), cols, r.vhost(), "")
	}
}
