package ctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// rabbitmq-diagnostics' health checks, as "brokerctl diagnostics VERB":
// each asks the matching /api/health/checks endpoint and prints
// rabbitmq-diagnostics 3.10's texts (RabbitMQ.CLI.Diagnostics.Commands.*),
// with its exit codes: 0 when the check passes, 69 when it fails. Where
// rabbitmq-diagnostics prints a failure as a check failure the text goes
// to standard error without the "Error:" line; where it prints it as an
// error, after "Error:"; with --formatter json a failure is a JSON object
// on standard error. -s (--silent) prints nothing for the checks whose
// rabbitmq-diagnostics command honours it (check_alarms,
// check_local_alarms, check_virtual_hosts).

// check_if_node_is_quorum_critical is not here yet. It would mean
// something on a brokerd cluster, whose queues all live in one Raft group:
// a node is critical when stopping it leaves fewer members than a
// majority that the leader reaches (/api/cluster tells which), and then
// every durable queue loses its quorum at once; a single brokerd is
// RabbitMQ's "single node cluster, the check does not apply". But a
// follower forwards its API connections to the leader, so the API always
// answers as the leader and brokerctl cannot name the node the question
// is about (rabbitmq-diagnostics' -n): that needs the API to say which
// node a connection reached, or a node parameter on /api/cluster.

// diagnosticsPrefix is the word that makes the next one a
// rabbitmq-diagnostics verb.
const diagnosticsPrefix = "diagnostics"

// diagnosticsVerbs are rabbitmq-diagnostics' verbs that rabbitmqctl
// lacks: brokerctl takes them after "diagnostics" only, as RabbitMQ's
// tools do.
var diagnosticsVerbs = []*verb{
	{name: "check_running", run: checkRunning,
		args: "", desc: "Health check that exits with a non-zero code if the broker on the target node is not running (its AMQP listener does not accept connections)."},
	{name: "is_running", run: isRunning,
		args: "", desc: "Checks if the broker is fully booted and running on the target node (exits 0 either way)."},
	{name: "check_local_alarms", run: checkAlarms(true),
		args: "", desc: "Health check that exits with a non-zero code if the target node reports any local alarms"},
	{name: "check_alarms", run: checkAlarms(false),
		args: "", desc: "Health check that exits with a non-zero code if the target node reports any alarms, local or cluster-wide."},
	{name: "check_port_connectivity", run: checkPortConnectivity,
		args: "", desc: "Basic TCP connectivity health check for each listener's port on the target node"},
	{name: "check_port_listener", min: 1, max: 1, run: checkPortListener,
		args: "<port>", desc: "Health check that exits with a non-zero code if target node does not have an active listener for given port"},
	{name: "check_protocol_listener", min: 1, max: 1, run: checkProtocolListener,
		args: "<protocol>", desc: "Health check that exits with a non-zero code if target node does not have an active listener for given protocol"},
	{name: "check_virtual_hosts", run: checkVirtualHosts,
		args: "", desc: "Health check that checks if all vhosts are running in the target node"},
	{name: "check_certificate_expiration", run: checkCertificateExpiration,
		args: "[--within <period>] [--unit <unit>]", desc: "Checks the expiration date on the certificates for every listener configured to use TLS"},
}

// diagnosticsShared are rabbitmqctl's verbs that rabbitmq-diagnostics
// has too: "brokerctl diagnostics status" is "brokerctl status".
var diagnosticsShared = []string{"status", "cluster_status", "ping", "environment", "report", "await_startup",
	"list_channels", "list_connections", "list_consumers", "list_queues", "list_exchanges", "list_bindings"}

// commandVerb is the verb o runs, or nil with the text saying why not.
func commandVerb(o *options) (*verb, string) {
	v := lookupVerb(o.verb)
	isDiag := slices.Contains(diagnosticsVerbs, v)
	switch {
	case v == nil:
		return nil, fmt.Sprintf("\nCommand '%s' not found. \n\n%s", o.verb, generalUsage())
	case isDiag && !o.diagnostics:
		return nil, fmt.Sprintf("\nCommand '%s' not found. \nIt is a rabbitmq-diagnostics command: 'brokerctl diagnostics %s'\n", o.verb, o.verb)
	case o.diagnostics && !isDiag && !slices.Contains(diagnosticsShared, v.name):
		return nil, fmt.Sprintf("\nCommand '%s' not found. \nIt is not a rabbitmq-diagnostics command: 'brokerctl %s'\n", o.verb, o.verb)
	}
	return v, ""
}

// checkFailed is a failed check's output: text on standard error,
// after an "Error:" line if errorLine, and exit code 69. An empty text
// prints nothing (--silent).
type checkFailed struct {
	text      string
	errorLine bool
}

func (e *checkFailed) Error() string { return e.text }

// failedCheck is rabbitmq-diagnostics' {:error, :check_failed, text}.
func failedCheck(r *run, text string) error {
	if r.opts.silent {
		text = ""
	}
	return &checkFailed{text: text}
}

// failedCheckJSON is a failure with --formatter json: the object, on
// standard error.
func failedCheckJSON(v any) error { return &checkFailed{text: jsonText(v)} }

// failedError is rabbitmq-diagnostics' {:error, text}: "Error:" first.
func failedError(text string) error { return &checkFailed{text: text, errorLine: true} }

// passed prints a passing check's text, or its JSON object.
func passed(r *run, text string, obj map[string]any) {
	if r.opts.json {
		if obj == nil {
			obj = map[string]any{"message": text}
		}
		r.out.write(jsonText(obj) + "\n")
		return
	}
	r.out.write(text + "\n")
}

// check asks a health check: ok when it passes (200), else the 503's body
// decoded into body. Any other answer is an error.
func (r *run) check(body any, segs ...string) (ok bool, err error) {
	path := apiPath(append([]string{"health", "checks"}, segs...)...)
	data, err := r.c.do(r.ctx, request{method: http.MethodGet, path: path})
	var ae *apiError
	switch {
	case err == nil:
		ok = true
	case errors.As(err, &ae) && ae.status == http.StatusServiceUnavailable:
		data = ae.body
	default:
		return false, err
	}
	if body != nil {
		if err := decodeJSON(data, path, body); err != nil {
			return false, err
		}
	}
	return ok, nil
}

// overviewOf reads the overview: the node's name for the texts, its
// listeners. It also proves the credentials.
func (r *run) overviewOf() (overview, error) {
	var ov overview
	err := r.c.get(r.ctx, apiPath("overview"), &ov)
	return ov, err
}

// banner prints rabbitmq-diagnostics' informational line.
func (r *run) banner(format string, args ...any) { r.out.info(format, args...) }

// inService asks is-in-service: the broker runs when its AMQP listener
// accepts connections, not while it starts (the API opens after
// recovery) nor once a shutdown began. A server without that check
// (RabbitMQ before 3.13) runs if its API answered the overview.
func (r *run) inService() (bool, error) {
	ok, err := r.check(nil, "is-in-service")
	if isAPIStatus(err, http.StatusNotFound) {
		return true, nil
	}
	return ok, err
}

// checkRunning: check_running (inService).
func checkRunning(r *run, args []string) error {
	ov, err := r.overviewOf()
	if err != nil {
		return err
	}
	r.banner("Checking if RabbitMQ is running on node %s ...", ov.Node)
	ok, err := r.inService()
	if err != nil {
		return err
	}
	if !ok {
		return failedError(fmt.Sprintf("RabbitMQ on node %s is not running or has not fully booted yet (check with is_booting)", ov.Node))
	}
	passed(r, fmt.Sprintf("RabbitMQ on node %s is fully booted and running", ov.Node), nil)
	return nil
}

// isRunning: is_running, check_running's question answered with exit 0
// either way.
func isRunning(r *run, args []string) error {
	ov, err := r.overviewOf()
	if err != nil {
		return err
	}
	r.banner("Asking node %s for its status ...", ov.Node)
	ok, err := r.inService()
	if err != nil {
		return err
	}
	text := fmt.Sprintf("RabbitMQ on node %s is fully booted and running", ov.Node)
	if !ok {
		text = fmt.Sprintf("RabbitMQ on node %s is not running or has not fully booted yet (check with is_booting)", ov.Node)
	}
	passed(r, text, map[string]any{"result": ok, "message": text})
	return nil
}

// alarmLine is rabbitmq-diagnostics' line for an alarm
// (RabbitMQ.CLI.Core.Alarms.alarm_lines); brokerd's store alarms are
// named after what they say.
func alarmLine(a alarm) string {
	what := map[string]string{
		"memory": "Memory", "disk": "Free disk space", "file_descriptors": "File descriptor limit",
		"checkpoint": "Store checkpoint", "wal": "Store write-ahead log", "store": "Store failure",
	}[a.Resource]
	if what == "" {
		what = a.Resource
	}
	return fmt.Sprintf("%s alarm on node %s", what, a.Node)
}

func alarmLines(alarms []alarm) []string {
	lines := []string{}
	for _, a := range alarms {
		lines = append(lines, alarmLine(a))
	}
	return lines
}

// checkAlarms: check_local_alarms (local) and check_alarms. An alarm is
// local when it is the answering node's.
func checkAlarms(local bool) func(r *run, args []string) error {
	return func(r *run, args []string) error {
		ov, err := r.overviewOf()
		if err != nil {
			return err
		}
		r.banner("Asking node %s to report any local resource alarms ...", ov.Node)
		endpoint := "alarms"
		if local {
			endpoint = "local-alarms"
		}
		var body struct {
			Alarms []alarm `json:"alarms"`
		}
		if _, err := r.check(&body, endpoint); err != nil {
			return err
		}
		var mine, others []alarm
		for _, a := range body.Alarms {
			if a.Node == ov.Node || a.Node == "" {
				a.Node = ov.Node
				mine = append(mine, a)
			} else {
				others = append(others, a)
			}
		}
		all := append(slices.Clone(mine), others...)
		if local {
			all = mine
		}
		if len(all) == 0 {
			switch {
			case r.opts.json:
				r.out.write(`{"result":"ok"}` + "\n")
			case r.opts.silent:
			case local:
				r.out.write(fmt.Sprintf("Node %s reported no local alarms\n", ov.Node))
			default:
				r.out.write(fmt.Sprintf("Node %s reported no alarms, local or clusterwide\n", ov.Node))
			}
			return nil
		}
		switch {
		case r.opts.json && local:
			return failedCheckJSON(map[string]any{"result": "error", "local": alarmLines(mine),
				"message": fmt.Sprintf("Node %s reported local alarms", ov.Node)})
		case r.opts.json:
			return failedCheckJSON(map[string]any{"result": "error", "local": alarmLines(mine), "global": alarmLines(others),
				"message": fmt.Sprintf("Node %s reported alarms", ov.Node)})
		case r.opts.silent:
			return failedCheck(r, "")
		case local:
			// rabbitmq-diagnostics prints these as an error, the others
			// as a failed check.
			return failedError(strings.Join(alarmLines(all), "\n"))
		}
		return failedCheck(r, strings.Join(alarmLines(all), "\n"))
	}
}

// listeners are the overview's listeners as rabbitmq-diagnostics
// describes them (node, protocol, interface, port, purpose).
func listenersOf(ov overview) []statusListener {
	out := []statusListener{}
	for _, l := range ov.Listeners {
		iface := l.IPAddress
		if strings.Contains(iface, ":") {
			iface = "[" + iface + "]"
		}
		out = append(out, statusListener{Node: l.Node, Protocol: l.Protocol, Interface: iface, Port: l.Port,
			Purpose: purpose(ov.ProductName, l.Protocol)})
	}
	return out
}

func listenerLine(l statusListener) string {
	return fmt.Sprintf("Interface: %s, port: %s, protocol: %s, purpose: %s", l.Interface, l.Port, l.Protocol, l.Purpose)
}

// portConnectivityTimeout is check_port_connectivity's timeout without
// -t, rabbitmq-diagnostics'.
const portConnectivityTimeout = 30 * time.Second

// checkPortConnectivity: check_port_connectivity opens a TCP connection
// to each listener of the node and closes it. It dials the API's host
// (where brokerctl reaches the node) on each listener's port, as
// rabbitmq-diagnostics dials the node's host name, each within the
// timeout shared out among the listeners.
func checkPortConnectivity(r *run, args []string) error {
	ov, err := r.overviewOf()
	if err != nil {
		return err
	}
	r.banner("Testing TCP connections to all active listeners on node %s ...", ov.Node)
	var local []statusListener
	for _, l := range listenersOf(ov) {
		if l.Node == ov.Node || l.Node == "" {
			local = append(local, l)
		}
	}
	timeout := r.opts.timeout
	if !r.opts.timeoutSet {
		timeout = portConnectivityTimeout
	}
	each := timeout / time.Duration(len(local)+1)
	host := r.c.base.Hostname()
	var failures []statusListener
	for _, l := range local {
		ctx, cancel := context.WithTimeout(r.ctx, each)
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", net.JoinHostPort(host, l.Port.String()))
		cancel()
		if err != nil {
			failures = append(failures, l)
			continue
		}
		c.Close()
	}
	if len(failures) > 0 {
		if r.opts.json {
			return &checkFailed{text: jsonText(map[string]any{"result": "error", "node": ov.Node, "failures": failures})}
		}
		lines := []string{fmt.Sprintf("Connection to ports of the following listeners on node %s failed: ", ov.Node)}
		for _, l := range failures {
			lines = append(lines, listenerLine(l))
		}
		return failedError(strings.Join(lines, "\n"))
	}
	if r.opts.json {
		r.out.write(jsonText(map[string]any{"result": "ok", "node": ov.Node, "listeners": local}) + "\n")
		return nil
	}
	var ports []int
	for _, l := range local {
		p, _ := strconv.Atoi(l.Port.String())
		ports = append(ports, p)
	}
	sort.Ints(ports)
	r.out.write(fmt.Sprintf("Successfully connected to ports %s on node %s.\n", joinInts(ports), ov.Node))
	return nil
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ", ")
}

// checkPortListener: check_port_listener PORT.
func checkPortListener(r *run, args []string) error {
	port, err := strconv.Atoi(args[0])
	if err != nil || port < 1 {
		return failf(ExitDataErr, "Argument must be a positive integer")
	}
	ov, err := r.overviewOf()
	if err != nil {
		return err
	}
	r.banner("Asking node %s if there's an active listener on port %d ...", ov.Node, port)
	var body struct {
		Ports []int `json:"ports"`
	}
	ok, err := r.check(&body, "port-listener", strconv.Itoa(port))
	if err != nil {
		return err
	}
	if ok {
		passed(r, fmt.Sprintf("A listener for port %d is running on node %s.", port, ov.Node),
			map[string]any{"result": "ok", "node": ov.Node, "port": port})
		return nil
	}
	if r.opts.json {
		return failedCheckJSON(map[string]any{"result": "error", "missing": port, "ports": nonNil(body.Ports), "listeners": listenersOf(ov)})
	}
	sort.Ints(body.Ports)
	return &checkFailed{text: fmt.Sprintf("No listener for port %d is active on node %s. Found listeners that use the following ports: %s",
		port, ov.Node, joinInts(body.Ports))}
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// checkProtocolListener: check_protocol_listener PROTOCOL. The API
// normalises the name as rabbitmq-diagnostics does (amqp091 is amqp).
func checkProtocolListener(r *run, args []string) error {
	ov, err := r.overviewOf()
	if err != nil {
		return err
	}
	r.banner("Asking node %s if there's an active listener for protocol %s ...", ov.Node, args[0])
	var body struct {
		Protocol  string   `json:"protocol"`
		Missing   string   `json:"missing"`
		Protocols []string `json:"protocols"`
	}
	ok, err := r.check(&body, "protocol-listener", args[0])
	if err != nil {
		return err
	}
	if ok {
		passed(r, fmt.Sprintf("A listener for protocol %s is running on node %s.", body.Protocol, ov.Node),
			map[string]any{"result": "ok", "node": ov.Node, "protocol": body.Protocol})
		return nil
	}
	if r.opts.json {
		return failedCheckJSON(map[string]any{"result": "error", "missing": body.Missing, "protocols": nonNil(body.Protocols), "listeners": listenersOf(ov)})
	}
	sort.Strings(body.Protocols)
	return failedError(fmt.Sprintf("No listener for protocol %s is active on node %s. Found listeners for the following protocols: %s",
		body.Missing, ov.Node, strings.Join(body.Protocols, ", ")))
}

// checkVirtualHosts: check_virtual_hosts.
func checkVirtualHosts(r *run, args []string) error {
	ov, err := r.overviewOf()
	if err != nil {
		return err
	}
	r.banner("Checking if all vhosts are running on node %s ...", ov.Node)
	var body struct {
		Down []string `json:"virtual-hosts"`
	}
	ok, err := r.check(&body, "virtual-hosts")
	if err != nil {
		return err
	}
	switch {
	case ok && r.opts.json:
		r.out.write(`{"result":"ok"}` + "\n")
	case ok && r.opts.silent:
	case ok:
		r.out.write(fmt.Sprintf("Node %s reported all vhosts as running\n", ov.Node))
	case r.opts.json:
		return failedCheckJSON(map[string]any{"result": "error", "down_vhosts": nonNil(body.Down)})
	case r.opts.silent:
		return failedCheck(r, "")
	default:
		return failedError(fmt.Sprintf("Some virtual hosts on node %s are down:\n%s", ov.Node, strings.Join(body.Down, "\n")))
	}
	return nil
}

// expiredListener is one entry of certificate-expiration's "expired",
// in rabbitmq-diagnostics' keys.
type expiredListener struct {
	Node                string   `json:"node"`
	Protocol            string   `json:"protocol"`
	Interface           string   `json:"interface"`
	Port                int      `json:"port"`
	Purpose             string   `json:"purpose"`
	CertFile            string   `json:"certfile"`
	CACertFile          string   `json:"cacertfile"`
	CertFileExpiresOn   []string `json:"certfile_expires_on"`
	CACertFileExpiresOn []string `json:"cacertfile_expires_on"`
}

// checkCertificateExpiration: check_certificate_expiration [--within N]
// [--unit U], 4 weeks by default.
func checkCertificateExpiration(r *run, args []string) error {
	within, unit := 4, "weeks"
	if r.opts.within != nil {
		within = *r.opts.within
	}
	if r.opts.unit != "" {
		unit = r.opts.unit
	}
	if !slices.Contains([]string{"days", "weeks", "months", "years"}, unit) {
		return usagef(r.opts.verb, "unit '%s' is not supported. Please use one of: days, weeks, months, years", unit)
	}
	ov, err := r.overviewOf()
	if err != nil {
		return err
	}
	r.banner("Checking certificate expiration on node %s ...", ov.Node)
	var body struct {
		Expired []expiredListener `json:"expired"`
	}
	ok, err := r.check(&body, "certificate-expiration", strconv.Itoa(within), unit)
	if err != nil {
		return err
	}
	if ok {
		label := unit
		if within == 1 {
			label = strings.TrimSuffix(unit, "s")
		}
		passed(r, fmt.Sprintf("No certificates are expiring within %d %s.", within, label), map[string]any{"result": "ok"})
		return nil
	}
	for i := range body.Expired {
		e := &body.Expired[i]
		e.Purpose = purpose(ov.ProductName, e.Protocol)
		e.CertFileExpiresOn, e.CACertFileExpiresOn = nonNil(e.CertFileExpiresOn), nonNil(e.CACertFileExpiresOn)
	}
	if r.opts.json {
		return failedCheckJSON(map[string]any{"result": "error", "expired": nonNil(body.Expired)})
	}
	// rabbitmq-diagnostics prints each listener as an Elixir map.
	lines := make([]string, len(body.Expired))
	for i, e := range body.Expired {
		lines[i] = fmt.Sprintf("%%{cacertfile: %s, cacertfile_expires_on: %s, certfile: %s, certfile_expires_on: %s, interface: %s, node: %s, port: %d, protocol: %s, purpose: %s}",
			elixirString(e.CACertFile), elixirList(e.CACertFileExpiresOn), elixirString(e.CertFile), elixirList(e.CertFileExpiresOn),
			elixirString(e.Interface), e.Node, e.Port, elixirString(e.Protocol), elixirString(e.Purpose))
	}
	return failedCheck(r, strings.Join(lines, "\n"))
}

func elixirString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func elixirList(l []string) string {
	s := make([]string, len(l))
	for i, e := range l {
		s[i] = elixirString(e)
	}
	return "[" + strings.Join(s, ", ") + "]"
}

// diagnosticsUsage lists the verbs "brokerctl diagnostics" takes.
func diagnosticsUsage() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage\n\n%s %s <command> [<command options>]\n\nAvailable commands:\n\n", usagePrefix, diagnosticsPrefix)
	for _, v := range diagnosticsVerbs {
		fmt.Fprintf(&b, "   %-30s %s\n", v.name, v.desc)
	}
	for _, name := range diagnosticsShared {
		fmt.Fprintf(&b, "   %-30s %s\n", name, lookupVerb(name).desc)
	}
	b.WriteString("\nUse 'brokerctl help <command>' to learn more about a specific command\n")
	return b.String()
}
