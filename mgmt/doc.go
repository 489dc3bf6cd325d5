// Package mgmt is brokerd's management HTTP API: the part of RabbitMQ's
// management API (rabbitmq_management) that existing scripts, tools and
// client test suites use, with the same paths, JSON field names, status
// codes and error bodies, so they work against brokerd unchanged.
//
// # Authentication and authorisation
//
// Every request to /api carries HTTP basic credentials of a broker user, checked as
// an AMQP login is (loopback-only users from loopback addresses only).
// Tags decide what a user may do, as in RabbitMQ: a user needs one of
// management, policymaker, monitoring or administrator to use the API at
// all (401 otherwise); reading, setting or clearing one policy needs
// policymaker (listing them does not); users, vhosts, permissions, one
// operator policy and definitions need administrator (401 "Not
// administrator user", as RabbitMQ 3.10 answers a missing tag). A
// management user sees the vhosts it has permissions in and its own
// connections; a monitoring user sees every vhost, connection and
// channel, but the objects (queues, exchanges, bindings, policies) only
// of vhosts it has permissions in; an administrator sees everything.
// Declarations, deletions, purges and gets run as
// the AMQP methods would for the user (broker.Direct), so permissions are
// enforced exactly as over AMQP.
//
// A refused login is answered Options.LoginFailureDelay after the request
// arrived, whatever the reason, and logged as an aggregated warning; every
// login spends the per-source budget of failed logins that AMQP logins
// spend too (Broker.Login, package internal/loginlimit).
//
// # Hostile clients
//
// Everything about a request that can be checked from its headers is
// checked before its body is read (guard.go): the Host (loopback names, IP
// addresses, the machine's name, Options.AllowedHosts: DNS rebinding), a
// browser's cross-origin state-changing request (CSRF), credentials, tags,
// the vhost and the permission the route needs on the resource in its
// path, a JSON Content-Type, and the body's size. Bodies are bounded
// (Options.MaxBody, Options.MaxDefinitionsBody, 64 KiB while the memory
// alarm is raised) and timed (Options.BodyTimeout, Options.MinBodyRate);
// connections are bounded (Options.MaxConnections). What is stored is
// bounded as an AMQP declaration is, by frame_max (limits.go).
//
// # Errors
//
// Errors are JSON {"error": word, "reason": text}: 400 bad_request for a
// body that is not JSON ("not_json"), over its size limit ("Exceeded HTTP
// request body size limit", as RabbitMQ), with a field of the wrong form
// (the reason names the field: "durable: expected a boolean ...") or
// holding a refused value (the reason is RabbitMQ's text, e.g. a policy
// validation message), 401 not_authorized,
// 403 for a missing tag, 403 forbidden for a Host not allowed or a
// cross-origin request, 404 "Object Not Found", 405 for a method a path
// does not take, 408 request_timeout for a body too slow, 415
// unsupported_media_type for a body that is not sent as application/json,
// 503 service_unavailable for a body over 64 KiB while the memory alarm is
// raised.
//
// # Endpoints
//
//	GET    /metrics                              Prometheus metrics, no authentication (Options.Metrics;
//	                                             package metrics; the table is in README.md, "Metrics")
//	GET    /api/overview, /api/whoami         overview: node_status (pid, uptime, data dir, memory, disk) for monitoring users
//	GET    /api/environment                     the configuration in force, brokerd's own (administrator)
//	GET    /api/health/checks/alarms            200 ok, 503 with alarms (also local-alarms)
//	GET    /api/health/checks/port-listener/{port}      a listener on the port (Options.Listeners); 400 "Invalid port"
//	GET    /api/health/checks/protocol-listener/{proto} a listener of the protocol: amqp, amqp/ssl, http, https,
//	                                             http/prometheus, or one of RabbitMQ's aliases (amqp091, amqps, ...)
//	GET    /api/health/checks/virtual-hosts     always ok: a vhost runs as long as the broker does
//	GET    /api/health/checks/certificate-expiration/{n}/{unit}  503 when a TLS listener's cert or CA file
//	                                             holds a certificate expiring within n days|weeks|months|years
//	GET    /api/health/checks/is-in-service, /ready-to-accept-clients  no authentication: ok while the
//	                                             AMQP server accepts connections, 503 once a shutdown began
//	GET    /api/health/checks/below-node-connection-limit  no authentication: AMQP connections below
//	                                             limits.max_connections ("limit": "infinity" without one)
//	GET    /api/aliveness-test/{vhost}
//	GET    /api/vhosts[/{vhost}]                 PUT, DELETE /api/vhosts/{vhost}
//	GET    /api/users[/{name}]                   PUT, DELETE /api/users/{name}
//	GET    /api/permissions[/{vhost}/{user}]     PUT, DELETE /api/permissions/{vhost}/{user}
//	GET    /api/policies[/{vhost}[/{name}]]      PUT, DELETE /api/policies/{vhost}/{name}
//	GET    /api/operator-policies[/{vhost}[/{name}]]  PUT, DELETE
//	GET    /api/exchanges[/{vhost}[/{name}]]     PUT, DELETE /api/exchanges/{vhost}/{name}
//	POST   /api/exchanges/{vhost}/{name}/publish  {"routed": bool}
//	GET    /api/exchanges/{vhost}/{name}/scheduled?count=N&after=CURSOR  a delayed exchange's held messages
//	                                             in due-time order: {"messages": [...], "next": CURSOR} (scheduled.go)
//	DELETE /api/exchanges/{vhost}/{name}/scheduled/{id}  cancels one: {"cancelled": 1}, 404 if not held
//	POST   /api/exchanges/{vhost}/{name}/scheduled/cancel  {"ids": [...]} or filters {"routing_key",
//	                                             "headers", "due_before", "due_after"} or {"all": true}: {"cancelled": N}
//	GET    /api/queues[/{vhost}[/{name}]]        PUT, DELETE /api/queues/{vhost}/{name}
//	DELETE /api/queues/{vhost}/{name}/contents  (purge)
//	POST   /api/queues/{vhost}/{name}/get
//	GET    /api/queues/{vhost}/{name}/peek?count=N&from=SEQ  {"messages": [...], "next": SEQ} (nothing consumed)
//	POST   /api/queues/{vhost}/{name}/redrive  {"to": "origin"|"exchange", "rate", "max", ...}  201, the task, Location
//	GET    /api/redrives[/{id}]                 tasks: state, moved, failed, remaining, failures (redrive.go)
//	DELETE /api/redrives/{id}[?forget=true]     cancels a running task; forget also removes it
//	GET    /api/redrives/{id}/failures?from=SEQ&count=N   every failure, {"failures": [...], "next": SEQ}
//	GET    /api/bindings[/{vhost}]
//	GET    /api/bindings/{vhost}/e/{x}/q/{q}, .../e/{x}/e/{y}   POST creates (201, Location)
//	GET    /api/bindings/{vhost}/e/{x}/q/{q}/{props}            DELETE removes
//	GET    /api/connections[/{name}], /api/channels[/{name}], /api/consumers
//	DELETE /api/connections/{name}              320 CONNECTION_FORCED, X-Reason header as text
//	GET    /api/definitions[/{vhost}]            POST imports
//	GET    /api/nodes[/{node}]                   the one node, measured (nodes.go); monitoring;
//	                                             on a cluster node every member (cluster.go)
//	GET    /api/nodes/{node}/memory              the answering node's memory breakdown in RabbitMQ's shape,
//	                                             from the Go runtime's classes (nodememory.go); monitoring
//	GET    /api/federation-links[/{vhost}]       [] (brokerd has no federation; federation.go)
//	GET    /api/cluster                         brokerd's own, cluster node only: the Raft group as the
//	                                             leader sees it (brokerctl cluster_status); monitoring
//	GET    /api/cluster-name                    cluster node only: {"name": [cluster] name}
//	GET    /api/parameters[/{component}[/{vhost}[/{name}]]]  PUT, DELETE /api/parameters/{component}/{vhost}/{name}
//	                                             (the shovel component; parameters.go)
//	GET    /api/global-parameters[/{name}]       PUT, DELETE /api/global-parameters/{name}
//	GET    /api/shovels[/{vhost}], /api/shovels/vhost/{vhost}/{name}   DELETE deletes, .../restart restarts
//	                                             (shovels.go)
//	GET    /api/vhost-limits[/{vhost}], /api/user-limits[/{user}]   PUT, DELETE .../{name} (tenancy.go)
//	GET    /api/topic-permissions[/{vhost}/{user}], /api/vhosts/{vhost}/topic-permissions,
//	       /api/users/{user}/topic-permissions   PUT, DELETE /api/topic-permissions/{vhost}/{user}
//
// Queues, exchanges, vhosts, connections, channels, the overview and the
// node carry RabbitMQ's message rates (message_stats.*_details.rate,
// messages_details.rate, recv_oct_details.rate, ...), computed from
// samples of the broker's counters a goroutine takes every
// Options.SampleInterval, kept per object as RabbitMQ's default sample
// retention policies keep them, and answered for ranges
// (msg_rates_age/msg_rates_incr, lengths_*, data_rates_*, node_stats_*)
// as RabbitMQ answers (rates.go, ratesjson.go).
//
// Bodies take booleans and integers in RabbitMQ's forms as well as
// JSON's (scalars.go): "durable": "true", "count": "1", as rabbitmqadmin
// sends them.
//
// The default exchange is named amq.default in paths; vhost "/" is %2F.
// Lists take RabbitMQ's columns (dotted for nested fields, as
// rabbitmqadmin's rate columns ask), sort, sort_reverse, name, use_regex,
// page and page_size parameters (listing.go).
package mgmt
