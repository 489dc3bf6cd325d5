package ctl

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ping: the management API answers and takes the credentials. rabbitmqctl
// ping checks that the node's OS process runs (Erlang distribution); over
// HTTP the question is whether the API answers.
func ping(r *run, args []string) error {
	r.out.info("Will ping %s. This only checks that its management API answers. Timeout: %d ms.",
		r.c.base.String(), r.opts.timeout.Milliseconds())
	if _, err := r.c.do(r.ctx, request{method: http.MethodGet, path: apiPath("whoami")}); err != nil {
		return err
	}
	r.out.write("Ping succeeded\n")
	return nil
}

// AwaitStartupTimeout is await_startup's timeout without -t, rabbitmqctl's.
const AwaitStartupTimeout = 300 * time.Second

// awaitRetry is how often await_startup asks again.
const awaitRetry = 200 * time.Millisecond

// awaitStartup: wait until the management API answers. brokerd opens it
// once recovery is over and the broker serves, so an answer means the
// broker has started. A server that cannot be reached yet, or answers 503,
// is asked again; a refusal of the credentials ends the wait at once (the
// broker runs). Prints nothing, as rabbitmqctl.
func awaitStartup(r *run, args []string) error {
	for {
		_, err := r.c.do(r.ctx, request{method: http.MethodGet, path: apiPath("whoami")})
		var te *transportError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &te) && !te.timeout, isAPIStatus(err, http.StatusServiceUnavailable):
		default:
			if r.ctx.Err() != nil {
				return awaitTimedOut(r, err)
			}
			return err
		}
		select {
		case <-r.ctx.Done():
			return awaitTimedOut(r, err)
		case <-time.After(awaitRetry):
		}
	}
}

func awaitTimedOut(r *run, last error) error {
	return failf(ExitTempFail, "%s did not start within %s (last: %v)", r.c.base.String(), r.opts.timeout, last)
}

// environment: the configuration the server runs with (brokerd's
// /api/environment), one "key = value" line per setting in TOML syntax,
// sorted; --formatter json prints the object. rabbitmqctl environment
// prints RabbitMQ's application environment, which its HTTP API does
// not serve: against RabbitMQ this is an error.
func environment(r *run, args []string) error {
	var ov overview
	if err := r.c.get(r.ctx, apiPath("overview"), &ov); err != nil {
		return err
	}
	var env map[string]any
	if err := r.c.get(r.ctx, apiPath("environment"), &env); err != nil {
		if isAPIStatus(err, http.StatusNotFound) {
			return failf(ExitUnavailable, "the server (%s %s) has no /api/environment, brokerd's own; for RabbitMQ use rabbitmqctl environment", ov.ProductName, ov.ProductVersion)
		}
		return err
	}
	if r.out.json {
		r.out.write(jsonText(env) + "\n")
		return nil
	}
	r.out.info("Application environment of node %s ...", ov.Node)
	var b strings.Builder
	for _, k := range sortedKeys(env) {
		fmt.Fprintf(&b, "%s = %s\n", k, tomlValue(env[k]))
	}
	r.out.write(b.String())
	return nil
}

// tomlValue renders a JSON value in TOML syntax: strings quoted, arrays
// in brackets, objects as inline tables (keys sorted).
func tomlValue(v any) string {
	switch v := v.(type) {
	case nil:
		return `""`
	case string:
		return tomlString(v)
	case json.Number:
		return v.String()
	case bool:
		return strconv.FormatBool(v)
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = tomlValue(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case map[string]any:
		keys := sortedKeys(v)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = tomlKey(k) + " = " + tomlValue(v[k])
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	return tomlString(fmt.Sprint(v))
}

// tomlString is s as a TOML basic string.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, c := range s {
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteRune(c)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\t':
			b.WriteString(`\t`)
		case c < 0x20 || c == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, c)
		default:
			b.WriteRune(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// tomlKey is k bare when TOML allows it, else quoted.
func tomlKey(k string) string {
	if k == "" {
		return `""`
	}
	for _, c := range k {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return tomlString(k)
		}
	}
	return k
}

// reportVerb: report. Status, environment, connections and channels,
// then every virtual host's queues, exchanges, bindings, permissions and
// policies, each after an empty line with its informational line and all
// of its columns, as rabbitmqctl report concatenates them (its cluster
// status, command line, OS environment and parameters have no counterpart
// here). Only the table output: as rabbitmqctl, report refuses
// --formatter json.
func reportVerb(r *run, args []string) error {
	if r.opts.json {
		return usagef(r.opts.verb, "Only report formatter is supported")
	}
	var vhosts []struct {
		Name string `json:"name"`
	}
	if err := r.c.get(r.ctx, apiPath("vhosts"), &vhosts); err != nil {
		return err
	}
	var ov overview
	if err := r.c.get(r.ctx, apiPath("overview"), &ov); err != nil {
		return err
	}
	r.out.info("Reporting server status of node %s ...", ov.Node)
	type part struct {
		f    func(*run, []string) error
		verb string
		cols *listing // nil: the verb takes no columns
	}
	// section runs p as its own verb would, in vhost if not "".
	section := func(p part, vhost string) error {
		r.out.write("\n")
		o := *r.opts
		o.verb = p.verb
		if vhost != "" {
			o.vhost = vhost
		}
		sub := *r
		sub.opts = &o
		var args []string
		if p.cols != nil {
			for _, c := range p.cols.all {
				args = append(args, c.name)
			}
		}
		return p.f(&sub, args)
	}
	if err := section(part{status, "status", nil}, ""); err != nil {
		return err
	}
	if err := section(part{environment, "environment", nil}, ""); err != nil {
		// RabbitMQ has no /api/environment: the rest is still worth
		// reporting.
		var ce *cliError
		if !errors.As(err, &ce) || ce.code != ExitUnavailable {
			return err
		}
		r.out.write("(" + ce.msg + ")\n")
	}
	for _, p := range []part{
		{listConnections, "list_connections", &connectionColumns},
		{listChannels, "list_channels", &channelColumns},
	} {
		if err := section(p, ""); err != nil {
			return err
		}
	}
	for _, v := range vhosts {
		for _, p := range []part{
			{listQueues, "list_queues", &queueColumns},
			{listExchanges, "list_exchanges", &exchangeColumns},
			{listBindings, "list_bindings", &bindingColumns},
			{listPermissions, "list_permissions", nil},
			{listPolicies(policyKind), "list_policies", nil},
		} {
			if err := section(p, v.Name); err != nil {
				return err
			}
		}
	}
	return nil
}
