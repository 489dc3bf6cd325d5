// Package ctl is brokerctl: rabbitmqctl's verbs, spoken over the RabbitMQ
// management HTTP API that brokerd serves (and RabbitMQ too, so the same
// command works against either). It never touches a data directory.
//
// # Usage
//
//	brokerctl [options] <verb> [verb options] [arguments]
//
// Options may come before or after the verb, as with rabbitmqctl:
// "brokerctl -p /x list_queues" and "brokerctl list_queues -p /x" are the
// same. An option's value is the next argument ("--vhost /x") or follows
// "=" ("--vhost=/x"); "--" ends the options, so that a name starting with
// "-" can be given. A lone "-" is an argument (standard input or output).
//
// Connection and output options (every verb):
//
//	--url URL             management API base, e.g. https://h:15671/prefix
//	                      (default $BROKERCTL_URL, else http://127.0.0.1:15672)
//	-n, --node HOST[:PORT] same as --url http://HOST:PORT (port 15672 by
//	                      default); rabbitmqctl's "rabbit@HOST" is accepted
//	                      and the part before "@" ignored
//	--username USER       (default $BROKERCTL_USERNAME, else the URL's
//	                      user info, else guest); -u USER also, except
//	                      after delete_queue where -u is --if-unused
//	--password PASS       (default $BROKERCTL_PASSWORD, else the URL's,
//	                      else guest)
//	-p, --vhost VHOST     virtual host of vhost-scoped verbs (default /)
//	-q, --quiet           no informational line ("Listing queues ...")
//	-s, --silent          as -q, and no header line
//	--no-table-headers    no header line
//	--formatter json|table  json: list verbs print a JSON array of objects
//	-t, --timeout SECONDS whole-request timeout (default 60)
//	-?, --help            the verb's usage
//	-version, --version   print "brokerctl VERSION" and exit 0, with or
//	                      without a verb, contacting no broker
//
// Flags win over the environment. The credentials in a --url or
// $BROKERCTL_URL ("http://user:pass@host:15672") are used when no
// --username / --password flag is given; the environment's credentials
// come after them.
//
// # Verbs
//
// Arguments are in rabbitmqctl's order; see "brokerctl help VERB".
//
//	set_policy [-p V] [--priority N] [--apply-to X] NAME PATTERN DEFINITION
//	clear_policy [-p V] NAME
//	list_policies [-p V]
//	set_operator_policy [-p V] [--priority N] [--apply-to X] NAME PATTERN DEFINITION
//	clear_operator_policy [-p V] NAME
//	list_operator_policies [-p V]
//	set_parameter [-p V] COMPONENT NAME VALUE
//	clear_parameter [-p V] COMPONENT NAME
//	list_parameters [-p V]
//	set_global_parameter NAME VALUE
//	clear_global_parameter NAME
//	list_global_parameters
//	shovel_status (also list_shovels)
//	delete_shovel [-p V] NAME
//	restart_shovel [-p V] NAME
//	list_queues [-p V] [COLUMN ...]
//	list_exchanges [-p V] [COLUMN ...]
//	list_bindings [-p V] [COLUMN ...]
//	list_connections [COLUMN ...]
//	list_channels [COLUMN ...]
//	list_consumers [-p V] [COLUMN ...]
//	close_connection NAME REASON
//	close_all_connections [-p V --limit N] [--global] [--per-connection-delay MS] REASON
//	hash_password PASSWORD   (local: asks the broker nothing)
//	add_user NAME PASSWORD
//	delete_user NAME
//	change_password NAME PASSWORD
//	set_user_tags NAME [TAG ...]
//	list_users
//	add_vhost VHOST [--description D] [--tags T1,T2] [--default-queue-type T]
//	delete_vhost VHOST
//	list_vhosts [COLUMN ...]
//	set_permissions [-p V] USER CONF WRITE READ
//	clear_permissions [-p V] USER
//	list_permissions [-p V]
//	list_user_permissions USER
//	set_vhost_limits [-p V] JSON, clear_vhost_limits [-p V], list_vhost_limits [-p V] [--global]
//	set_user_limits USER JSON, clear_user_limits USER NAME|all, list_user_limits [--user U] [--global]
//	set_topic_permissions [-p V] USER EXCHANGE WRITE READ, clear_topic_permissions [-p V] USER [EXCHANGE]
//	list_topic_permissions [-p V], list_user_topic_permissions USER   (tenancy.go)
//	export_definitions FILE|-          (with -p: that vhost's definitions only)
//	import_definitions [FILE|-]        (stdin if omitted; with -p: into that vhost)
//	purge_queue [-p V] QUEUE
//	peek [-p V] [--count N] [--from SEQ [--priority P]] QUEUE   (brokerd's own: ready messages, not consumed)
//	redrive [-p V] QUEUE [--to-origin | --exchange X --routing-key K] [--rate N] [--max N] [--reason R] [--source-queue Q] [--min-age D] [--detach]
//	list_redrives [column ...], cancel_redrive ID, forget_redrive ID   (brokerd's own: redrive tasks)
//	list_scheduled [-p V] [--count N] EXCHANGE [column ...]   (brokerd's own: a delayed exchange's held messages, due-time order)
//	cancel_scheduled [-p V] EXCHANGE [--id ID ...] | [--routing-key K] [--header N=V ...] [--due-before T] [--due-after T] | --all
//	delete_queue [-p V] QUEUE [--if-empty|-e] [--if-unused|-u]
//	status [--unit bytes|kb|mb|gb|tb]
//	cluster_status
//	ping
//	await_startup                      (-t: default 300 seconds, as rabbitmqctl)
//	environment
//	report
//	authenticate_user USER [PASSWORD]   (PASSWORD from stdin's first line if omitted)
//	help [VERB]
//
// rabbitmq-diagnostics' health checks, after the word "diagnostics"
// (rabbitmqctl has none of them; checks.go):
//
//	diagnostics check_running | is_running          (/api/health/checks/is-in-service)
//	diagnostics check_alarms | check_local_alarms   (alarms, local-alarms)
//	diagnostics check_port_listener PORT | check_protocol_listener PROTOCOL
//	diagnostics check_port_connectivity             (a TCP connection to each listener's port)
//	diagnostics check_virtual_hosts
//	diagnostics check_certificate_expiration [--within N] [--unit days|weeks|months|years]
//
// They print rabbitmq-diagnostics 3.10's texts and exit 0 when the check
// passes, 69 when it fails (the text, or with --formatter json the
// object, on standard error); "brokerctl diagnostics status" and the
// other verbs both tools have are the same as without the word.
// check_if_node_is_quorum_critical is not there: see checks.go.
//
// authenticate_user asks GET /api/whoami as the user: a 200, or the
// refusal of a user the API does not serve ("Not management user", which
// comes only after the password was accepted), is "Success"; a refused
// login exits 65 with rabbitmqctl's "failed to authenticate user". The
// server's failed-login delay and per-source budget apply.
//
// Columns are rabbitmqctl's names, mapped onto the API's fields (see
// columns.go); list_queues also takes operator_policy and
// effective_policy_definition, which rabbitmqctl 3.10 lacks. Each list
// verb's default columns are rabbitmqctl's (list_queues: name messages).
//
// # Output
//
// As rabbitmqctl 3.10: an informational line first ("Listing queues for
// vhost / ..."), unless -q, -s or --formatter json; then, if there is at
// least one row, a header line of column names (unless -s or
// --no-table-headers) and one tab-separated line per row. Values are
// printed as rabbitmqctl prints them: true/false, numbers as integers,
// null as the empty string, argument tables as [{"x-key","value"},{...}],
// tag lists as [administrator, monitoring], policy definitions as JSON.
//
// With --formatter json a list verb prints "[", one object per line with
// the columns in order (the first line bare, the others led by ","), and
// "]", as rabbitmqctl does; argument tables are JSON objects (the API does
// not carry AMQP field types, which rabbitmqctl prints), null is "", and a
// policy definition is a string holding JSON, as rabbitmqctl has it.
// status and environment print one JSON object; report refuses JSON, as
// rabbitmqctl's does.
//
// status prints rabbitmqctl status's sections in its words: Runtime (OS
// PID, uptime, versions, node name), Data directory, Config files, Alarms,
// Memory (used, and the high watermark), Free Disk Space (free, and the
// low watermark), Totals, and brokerd's Messages and Listeners; sizes in
// --unit (gb by default, 1 gb = 10^9 bytes, four decimals). The process's
// figures come from the overview's node_status (brokerd's own) or else
// /api/nodes/{node} (RabbitMQ's); both need the monitoring or
// administrator tag, and without them status leaves those lines out. brokerd's AMQP
// listener is "AMQP 0-9-1" (RabbitMQ's is "AMQP 0-9-1 and AMQP 1.0").
//
// cluster_status prints rabbitmqctl cluster_status's sections in its
// words: Basics (cluster name), Disk Nodes, Running Nodes, Versions,
// Maintenance status, Alarms, Network Partitions and Listeners, then, on a
// brokerd cluster, brokerd's Raft section: the leader, the term, the
// commit and last index, and each node's role, whether the leader reaches
// it, its match index and lag in entries, and its last contact. It reads
// brokerd's /api/cluster (a cluster node's, answered by the leader), else
// /api/nodes (a single brokerd, RabbitMQ). The management API tells the
// version, listeners and alarms of the node answering only: another
// node's version is printed as unknown, and the alarms section says whose
// alarms are not known. With --formatter json it prints rabbitmqctl's keys
// (cluster_name, disk_nodes, running_nodes, ...), brokerd's
// alarms_unknown and, on a cluster, raft.
//
// ping asks the API who the user is: it proves the API answers and takes
// the credentials. await_startup asks the same until it answers (retrying
// while nothing listens, the connection fails, or the answer is 503) and
// prints nothing. environment prints brokerd's /api/environment, the
// configuration in force (without secrets), one "key = value" line per
// setting in TOML syntax; RabbitMQ's HTTP API has no such resource.
// report prints status, environment, list_connections and list_channels,
// then each vhost's list_queues, list_exchanges, list_bindings,
// list_permissions and list_policies, every column, each after an empty
// line and its informational line.
//
// Rows come in the API's order. export_definitions writes the API's body
// unchanged.
//
// # Errors and exit codes
//
// An error is printed on standard error as "Error:" and a line saying
// what went wrong, with the API's reason when it gave one (the policy
// validation message, for instance); a usage error as "Error (argument
// validation): ..." followed by the verb's usage. Exit codes are
// rabbitmqctl's (sysexits):
//
//	 0  success
//	64  usage: unknown verb or option, wrong argument count, bad column,
//	    bad --priority / --timeout / --formatter / --url
//	65  data error: the virtual host does not exist; a local file to
//	    import is missing or not JSON; the directory to export into is missing
//	67  the user does not exist
//	69  the server refused the operation (invalid policy or permission
//	    pattern, the queue / policy / connection does not exist, queue not
//	    empty or in use, import refused), or could not be reached
//	70  add_user of an existing user (as rabbitmqctl); the server failed
//	    (HTTP 5xx) or answered something that is not the management API
//	75  the request timed out
//	77  the API refused the credentials (401) or the user lacks the tag
//	    or vhost access the operation needs (401/403); rabbitmqctl has no
//	    such case, this is sysexits' EX_NOPERM
//
// Where rabbitmqctl 3.10 itself is inconsistent brokerctl is regular:
// rabbitmqctl exits 64 when delete_queue finds no queue and 69 when
// purge_queue does not (brokerctl: 69 for both); it exits 0 with no output
// for list_queues, list_exchanges and list_bindings in a missing vhost
// (brokerctl: 65, as its list_policies and list_permissions do).
//
// Because the management API answers 404 without saying what was missing,
// brokerctl asks, after a 404, whether the vhost (and the user) exist, to
// tell "Virtual host '/x' does not exist" (65) and "User "u" does not exist"
// (67) from a missing queue or policy (69).
//
// # Differences from rabbitmqctl forced by the HTTP API
//
//   - close_connection takes the connection's name (the name column of
//     list_connections, e.g. "127.0.0.1:50000 -> 127.0.0.1:5672"), not an
//     Erlang pid.
//   - add_user first asks whether the user exists (the API's PUT would
//     overwrite it); set_user_tags and change_password read the user and
//     write it back whole (a PUT without a password clears it), so a
//     concurrent change of the same user between the two requests is lost;
//     set_user_tags refuses (70) if the server does not show the hash.
//   - delete_queue does not report the number of messages deleted: the API
//     does not return it.
//   - import_definitions is synchronous: it returns when the server has
//     applied the file.
//   - list_channels' pid and list_consumers' channel_pid are the channel's
//     name ("127.0.0.1:50000 -> 127.0.0.1:5672 (1)"), not an Erlang pid.
//   - ping checks the management API, not the Erlang distribution.
//
// # Concurrency
//
// Main is safe to call from several goroutines at once (the tests do):
// a run's state lives in its own values and it touches no globals.
package ctl
