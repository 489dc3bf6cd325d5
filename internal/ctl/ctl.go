package ctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/brokerd/brokerd/internal/version"
)

// Env is what a run of brokerctl sees of its process. A nil Getenv reads
// nothing from the environment.
type Env struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	Getenv func(string) string
}

// Main runs brokerctl with args (without the program name) and returns
// its exit code (see doc.go). ctx bounds the run in addition to
// --timeout. Main is safe for concurrent use.
func Main(ctx context.Context, args []string, env Env) int {
	if env.Getenv == nil {
		env.Getenv = func(string) string { return "" }
	}
	if env.Stdin == nil {
		env.Stdin = strings.NewReader("")
	}
	o, err := parseArgs(args)
	if err != nil {
		return report(env.Stderr, err, args, "")
	}
	switch {
	case o.version:
		fmt.Fprintf(env.Stdout, "brokerctl %s\n", version.String())
		return ExitOK
	case o.verb == "" && o.diagnostics:
		fmt.Fprint(env.Stderr, diagnosticsUsage())
		return ExitUsage
	case o.verb == "":
		fmt.Fprint(env.Stderr, generalUsage())
		return ExitUsage
	case o.verb == "help":
		return help(env, o)
	}
	v, notFound := commandVerb(o)
	if v == nil {
		fmt.Fprint(env.Stderr, notFound)
		return ExitUsage
	}
	if o.help {
		fmt.Fprint(env.Stdout, verbUsage(v))
		return ExitOK
	}
	if err := v.checkArgs(o.args); err != nil {
		return report(env.Stderr, err, args, "")
	}
	base, user, pass, err := o.endpoint(env.Getenv)
	if err != nil {
		return report(env.Stderr, err, args, "")
	}
	if v.name == "await_startup" && !o.timeoutSet {
		o.timeout = AwaitStartupTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	r := &run{
		ctx:  ctx,
		opts: o,
		env:  env,
		c:    newClient(base, user, pass),
		out:  &printer{w: env.Stdout, quiet: o.quiet || o.silent, noHeaders: o.silent || o.noHeaders, json: o.json},
	}
	err = v.run(r, o.args)
	if err == nil && r.out.err != nil {
		err = failf(ExitSoftware, "write output: %v", r.out.err)
	}
	if err != nil {
		return report(env.Stderr, err, args, user)
	}
	return ExitOK
}

// report prints err and returns its exit code; user is the user the API
// was asked as, for a refusal of the credentials.
func report(w io.Writer, err error, args []string, user string) int {
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(w, "Error (argument validation): %s\nArguments given:\n\t%s\n\n", ue.msg, strings.Join(args, " "))
		if v := lookupVerb(ue.verb); v != nil {
			fmt.Fprintf(w, "Usage\n\n%s\n", usageLine(v))
		} else {
			fmt.Fprint(w, generalUsage())
		}
		return ExitUsage
	}
	var cf *checkFailed
	if errors.As(err, &cf) {
		switch {
		case cf.text == "":
		case cf.errorLine:
			fmt.Fprintf(w, "Error:\n%s\n", cf.text)
		default:
			fmt.Fprintf(w, "%s\n", cf.text)
		}
		return ExitUnavailable
	}
	code, msg := exitCode(err, user)
	fmt.Fprintf(w, "Error:\n%s\n", msg)
	return code
}

// run is the state of one verb's execution. Not safe for concurrent use.
type run struct {
	ctx  context.Context
	opts *options
	env  Env
	c    *client
	out  *printer
}

// vhost is the -p virtual host.
func (r *run) vhost() string { return r.opts.vhost }

// verb describes one brokerctl verb.
type verb struct {
	name    string
	args    string // usage after the verb, rabbitmqctl's
	desc    string
	min     int
	max     int // -1: any number
	columns *listing
	run     func(r *run, args []string) error
}

func (v *verb) checkArgs(args []string) error {
	switch {
	case len(args) < v.min:
		return usagef(v.name, "not enough arguments.")
	case v.max >= 0 && len(args) > v.max:
		return usagef(v.name, "too many arguments.")
	}
	return nil
}

// verbs is the verb table, in the order help lists them.
var verbs = []*verb{
	{name: "set_policy", min: 3, max: 3, run: setPolicy(policyKind),
		args: "[--vhost <vhost>] [--priority <priority>] [--apply-to <apply-to>] <name> <pattern> <definition>",
		desc: "Sets or updates a policy."},
	{name: "clear_policy", min: 1, max: 1, run: clearPolicy(policyKind),
		args: "[--vhost <vhost>] <name>", desc: "Clears (removes) a policy."},
	{name: "list_policies", run: listPolicies(policyKind), columns: &policyColumns,
		args: "[--vhost <vhost>] [--no-table-headers]", desc: "Lists all policies in a virtual host."},
	{name: "set_operator_policy", min: 3, max: 3, run: setPolicy(operatorPolicyKind),
		args: "[--vhost <vhost>] [--priority <priority>] [--apply-to <apply-to>] <name> <pattern> <definition>",
		desc: "Sets an operator policy that overrides a subset of arguments in user policies."},
	{name: "clear_operator_policy", min: 1, max: 1, run: clearPolicy(operatorPolicyKind),
		args: "[--vhost <vhost>] <name>", desc: "Clears an operator policy."},
	{name: "list_operator_policies", run: listPolicies(operatorPolicyKind), columns: &policyColumns,
		args: "[--vhost <vhost>] [--no-table-headers]", desc: "Lists operator policy overrides for a virtual host."},
	{name: "set_parameter", min: 3, max: 3, run: setParameter,
		args: "[--vhost <vhost>] <component_name> <name> <value>", desc: "Sets a runtime parameter."},
	{name: "clear_parameter", min: 2, max: 2, run: clearParameter,
		args: "[--vhost <vhost>] <component_name> <name>", desc: "Clears a runtime parameter."},
	{name: "list_parameters", run: listParameters, columns: &parameterColumns,
		args: "[--vhost <vhost>] [--no-table-headers]", desc: "Lists runtime parameters for a virtual host."},
	{name: "set_global_parameter", min: 2, max: 2, run: setGlobalParameter,
		args: "<name> <value>", desc: "Sets a global runtime parameter."},
	{name: "clear_global_parameter", min: 1, max: 1, run: clearGlobalParameter,
		args: "<name>", desc: "Clears a global runtime parameter."},
	{name: "list_global_parameters", run: listGlobalParameters, columns: &globalParameterColumns,
		args: "[--no-table-headers]", desc: "Lists global runtime parameters."},
	{name: "shovel_status", run: shovelStatus, args: "", desc: "Displays status of Shovel on a node."},
	{name: "list_shovels", run: shovelStatus, args: "", desc: "Displays status of Shovel on a node (shovel_status)."},
	{name: "delete_shovel", min: 1, max: 1, run: deleteShovel,
		args: "[--vhost <vhost>] <name>", desc: "Deletes a Shovel."},
	{name: "restart_shovel", min: 1, max: 1, run: restartShovel,
		args: "[--vhost <vhost>] <name>", desc: "Restarts a dynamic Shovel."},
	{name: "list_queues", max: -1, run: listQueues, columns: &queueColumns,
		args: "[--vhost <vhost>] [--no-table-headers] [<column> ...]", desc: "Lists queues and their properties."},
	{name: "list_exchanges", max: -1, run: listExchanges, columns: &exchangeColumns,
		args: "[--vhost <vhost>] [--no-table-headers] [<column> ...]", desc: "Lists exchanges."},
	{name: "list_bindings", max: -1, run: listBindings, columns: &bindingColumns,
		args: "[--vhost <vhost>] [--no-table-headers] [<column> ...]", desc: "Lists all bindings on a vhost."},
	{name: "list_connections", max: -1, run: listConnections, columns: &connectionColumns,
		args: "[--no-table-headers] [<column> ...]", desc: "Lists AMQP 0.9.1 connections."},
	{name: "list_channels", max: -1, run: listChannels, columns: &channelColumns,
		args: "[--no-table-headers] [<column> ...]", desc: "Lists all channels in the node."},
	{name: "list_consumers", max: -1, run: listConsumers, columns: &consumerColumns,
		args: "[--vhost <vhost>] [--no-table-headers] [<column> ...]", desc: "Lists all consumers for a vhost."},
	{name: "close_connection", min: 2, max: 2, run: closeConnection,
		args: "<connection name> <explanation>",
		desc: "Closes a connection (320 CONNECTION_FORCED with the explanation). The name is list_connections' name column."},
	{name: "close_all_connections", min: 1, max: 1, run: closeAllConnections,
		args: "[--vhost <vhost> --limit <limit>] [--global] [--per-connection-delay <ms>] <explanation>",
		desc: "Closes the connections of a virtual host (of every virtual host with --global), at most --limit of them, with the explanation."},
	{name: "hash_password", min: 1, max: 1, run: hashPassword,
		args: "<password>", desc: "Hashes a plaintext password as RabbitMQ does (salted SHA-256, base64), for definitions files; asks the broker nothing."},
	{name: "add_user", min: 2, max: 2, run: addUser,
		args: "<username> <password>", desc: "Creates a new user. This user will have no permissions for any virtual hosts by default."},
	{name: "delete_user", min: 1, max: 1, run: deleteUser,
		args: "<username>", desc: "Removes a user."},
	{name: "change_password", min: 2, max: 2, run: changePassword,
		args: "<username> <password>", desc: "Changes the user password."},
	{name: "set_user_tags", min: 1, max: -1, run: setUserTags,
		args: "<username> <tag> [...]", desc: "Sets user tags (none: clears them)."},
	{name: "list_users", run: listUsers, columns: &userColumns,
		args: "[--no-table-headers]", desc: "List user names and tags."},
	{name: "add_vhost", min: 1, max: 1, run: addVhost,
		args: "<vhost> [--description <description> --tags \"<tag1>,<tag2>,<...>\" --default-queue-type <quorum|classic|stream>]",
		desc: "Creates a virtual host."},
	{name: "delete_vhost", min: 1, max: 1, run: deleteVhost,
		args: "<vhost>", desc: "Deletes a virtual host, with its queues, exchanges, bindings, policies and permissions."},
	{name: "list_vhosts", max: -1, run: listVhosts, columns: &vhostColumns,
		args: "[--no-table-headers] [<column> ...]", desc: "Lists virtual hosts."},
	{name: "set_permissions", min: 4, max: 4, run: setPermissions,
		args: "[--vhost <vhost>] <username> <conf> <write> <read>", desc: "Sets user permissions for a vhost."},
	{name: "clear_permissions", min: 1, max: 1, run: clearPermissions,
		args: "[--vhost <vhost>] <username>", desc: "Revokes user permissions for a vhost."},
	{name: "list_permissions", run: listPermissions, columns: &permissionColumns,
		args: "[--vhost <vhost>] [--no-table-headers]", desc: "Lists user permissions in a virtual host."},
	{name: "list_user_permissions", min: 1, max: 1, run: listUserPermissions, columns: &userPermissionColumns,
		args: "[--no-table-headers] <username>", desc: "Lists permissions of a user across all virtual hosts."},
	{name: "set_vhost_limits", min: 1, max: 1, run: setVhostLimits,
		args: "[--vhost <vhost>] <definition>", desc: "Sets virtual host limits."},
	{name: "clear_vhost_limits", run: clearVhostLimits,
		args: "[--vhost <vhost>]", desc: "Clears virtual host limits."},
	{name: "list_vhost_limits", run: listVhostLimits,
		args: "[--vhost <vhost>] [--global] [--no-table-headers]", desc: "Displays configured virtual host limits."},
	{name: "set_user_limits", min: 2, max: 2, run: setUserLimits,
		args: "<username> <definition>", desc: "Sets user limits."},
	{name: "clear_user_limits", min: 2, max: 2, run: clearUserLimits,
		args: "<username> <limit_type> | all", desc: "Clears user connection/channel limits."},
	{name: "list_user_limits", run: listUserLimits,
		args: "[--user <username>] [--global]", desc: "Displays configured user limits."},
	{name: "set_topic_permissions", min: 4, max: 4, run: setTopicPermissions,
		args: "[--vhost <vhost>] <username> <exchange> <write> <read>", desc: "Sets user topic permissions for an exchange."},
	{name: "clear_topic_permissions", min: 1, max: 2, run: clearTopicPermissions,
		args: "[--vhost <vhost>] <username> [<exchange>]", desc: "Clears user topic permissions for a vhost or exchange."},
	{name: "list_topic_permissions", run: listTopicPermissions, columns: &topicPermissionColumns,
		args: "[--vhost <vhost>] [--no-table-headers]", desc: "Lists topic permissions in a virtual host."},
	{name: "list_user_topic_permissions", min: 1, max: 1, run: listUserTopicPermissions, columns: &userTopicPermissionColumns,
		args: "[--no-table-headers] <username>", desc: "Lists user topic permissions."},
	{name: "export_definitions", min: 1, max: 1, run: exportDefinitions,
		args: "<file_path | \"-\"> [--vhost <vhost>]",
		desc: "Exports definitions in JSON, of the whole broker or, with --vhost, of one virtual host."},
	{name: "import_definitions", max: 1, run: importDefinitions,
		args: "[<file_path | \"-\">] [--vhost <vhost>]",
		desc: "Imports definitions in JSON (from standard input if no file is given), into the whole broker or, with --vhost, into one virtual host."},
	{name: "purge_queue", min: 1, max: 1, run: purgeQueue,
		args: "[--vhost <vhost>] <queue>", desc: "Purges a queue (removes all messages in it)."},
	{name: "delete_queue", min: 1, max: 1, run: deleteQueue,
		args: "[--vhost <vhost>] <queue_name> [--if-empty|-e] [--if-unused|-u]", desc: "Deletes a queue."},
	{name: "peek", min: 1, max: 1, run: peek, columns: &peekColumns,
		args: "[--vhost <vhost>] [--count <n>] [--from <seq> [--priority <level>]] <queue>",
		desc: "Shows ready messages of a queue from its head (or from a sequence number) without consuming them."},
	{name: "redrive", min: 1, max: 1, run: redrive,
		args: "[--vhost <vhost>] <queue> [--to-origin | --exchange <exchange> --routing-key <key>] [--rate <n>] [--max <n>] [--reason <reason>] [--source-queue <queue>] [--min-age <duration>] [--detach]",
		desc: "Starts a task moving ready messages (dead letters) of a queue back to the queue each was dead-lettered from, or through an exchange, and watches it to its end."},
	{name: "list_redrives", max: -1, run: listRedrives, columns: &redriveTaskColumns,
		args: "[--no-table-headers] [<column> ...]", desc: "Lists redrive tasks, running and ended, with their progress."},
	{name: "cancel_redrive", min: 1, max: 1, run: cancelRedrive,
		args: "<id>", desc: "Cancels a running redrive task; the moves it made stay."},
	{name: "forget_redrive", min: 1, max: 1, run: forgetRedrive,
		args: "<id>", desc: "Removes a redrive task from the list, cancelling it if it runs."},
	{name: "list_scheduled", min: 1, max: -1, run: listScheduled, columns: &scheduledColumns,
		args: "[--vhost <vhost>] [--no-table-headers] [--count <n>] <exchange> [<column> ...]",
		desc: "Lists the messages a delayed exchange (x-delayed-message) holds, in due-time order (all, or the first n)."},
	{name: "cancel_scheduled", min: 1, max: 1, run: cancelScheduled,
		args: "[--vhost <vhost>] <exchange> [--id <id> ...] | [--routing-key <key>] [--header <name>=<value> ...] [--due-before <time>] [--due-after <time>] | --all",
		desc: "Cancels messages a delayed exchange holds: by id (list_scheduled's id), or those that pass every filter given (a time is RFC 3339, Unix ms or a duration from now), or --all; prints how many."},
	{name: "status", run: status,
		args: "[--unit <bytes | kb | mb | gb | tb>]",
		desc: "Displays status of the broker: version, process, data directory, memory and disk use against their limits, alarms, object and message totals, listeners."},
	{name: "cluster_status", run: clusterStatus,
		args: "", desc: "Displays all the nodes in the cluster: those running, who leads and how far each follower lags (brokerd), alarms, versions and listeners of the node answering."},
	{name: "ping", run: ping,
		args: "", desc: "Checks that the broker's management API answers and takes the credentials."},
	{name: "await_startup", run: awaitStartup,
		args: "", desc: "Waits until the broker has started (its management API answers), for up to --timeout seconds (default 300)."},
	{name: "environment", run: environment,
		args: "", desc: "Displays the configuration the broker runs with (file, flags and defaults), as TOML lines."},
	{name: "authenticate_user", min: 1, max: 2, run: authenticateUser,
		args: "<username> [<password>]", desc: "Attempts to authenticate a user (the password from standard input if not given). Exits with a non-zero code if authentication fails."},
	{name: "report", run: reportVerb,
		args: "", desc: "Generates a report: status, environment, connections, channels, and every virtual host's queues, exchanges, bindings, permissions and policies."},
}

func lookupVerb(name string) *verb {
	for _, v := range verbs {
		if v.name == name {
			return v
		}
	}
	for _, v := range diagnosticsVerbs {
		if v.name == name {
			return v
		}
	}
	return nil
}

const usagePrefix = "brokerctl [--url <url> | --node <host[:port]>] [--username <user>] [--password <password>] [--quiet] [--formatter json] [--timeout <seconds>]"

func usageLine(v *verb) string {
	name := v.name
	if slices.Contains(diagnosticsVerbs, v) {
		name = diagnosticsPrefix + " " + name
	}
	return strings.TrimSpace(usagePrefix + " " + name + " " + v.args)
}

func generalUsage() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage\n\n%s <command> [<command options>]\n\nAvailable commands:\n\n", usagePrefix)
	for _, v := range verbs {
		fmt.Fprintf(&b, "   %-24s %s\n", v.name, v.desc)
	}
	fmt.Fprintf(&b, "   %-24s %s\n", "help", "Displays usage information for a command")
	fmt.Fprintf(&b, "   %-24s %s\n", diagnosticsPrefix+" <command>", "rabbitmq-diagnostics' health checks: 'brokerctl diagnostics' lists them")
	b.WriteString("\nUse 'brokerctl help <command>' to learn more about a specific command\n")
	return b.String()
}

func verbUsage(v *verb) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage\n\n%s\n\n%s\n", usageLine(v), v.desc)
	if v.columns != nil && v.max != 0 {
		fmt.Fprintf(&b, "\n<column>\n\tmust be one of %s\n\tdefault: %s\n",
			strings.Join(v.columns.names(), ", "), strings.Join(v.columns.defaults, " "))
	}
	b.WriteString(generalOptions)
	return b.String()
}

const generalOptions = `
General Options

--url <url>                management API base URL (default $BROKERCTL_URL, else http://127.0.0.1:15672)
-n, --node <host[:port]>   connect to http://host:port (port 15672 by default)
--username <user>          (default $BROKERCTL_USERNAME, else guest)
--password <password>      (default $BROKERCTL_PASSWORD, else guest)
-p, --vhost <vhost>        virtual host of vhost-scoped commands (default /)
-q, --quiet                suppress informational messages
-s, --silent               suppress informational messages and the table header row
--no-table-headers         suppress the table header row
--formatter <json|table>   json: a JSON array of objects
-t, --timeout <seconds>    request timeout (default 60)
-?, --help                 displays command help
--version                  print brokerctl's version and exit
`

// help runs "help" and "help VERB".
func help(env Env, o *options) int {
	switch len(o.args) {
	case 0:
		fmt.Fprint(env.Stdout, generalUsage())
		return ExitOK
	case 1:
		if v := lookupVerb(o.args[0]); v != nil {
			fmt.Fprint(env.Stdout, verbUsage(v))
			return ExitOK
		}
		if o.args[0] == "help" {
			fmt.Fprint(env.Stdout, "Usage\n\nbrokerctl help [<command>]\n\nDisplays usage information for a command.\n")
			return ExitOK
		}
		fmt.Fprintf(env.Stderr, "\nCommand '%s' not found. \n\n%s", o.args[0], generalUsage())
		return ExitUsage
	}
	return report(env.Stderr, usagef("", "too many arguments."), o.args, "")
}

// OSEnv is the process's standard streams and environment.
func OSEnv() Env {
	return Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}
}
