// Package config defines brokerd's configuration: a TOML file, its defaults,
// the flags that override it, and its validation. This comment is the
// operator's reference; brokerd.example.toml in this directory holds every
// key at its default (a test keeps the two in step with Default).
// ../dist/brokerd.toml, the file a service install uses, is generated from
// Config's keys, Default() and the example's comments by "go generate
// ./config" (TestDistConfig fails while it is out of date).
//
// # Sources and precedence
//
// Default supplies every value, so brokerd starts without a file. Load reads
// one file over the defaults: keys the file leaves out keep their defaults,
// except that giving any [[users]] or [[vhosts]] replaces that whole list.
// Then cmd/brokerd applies its flags (Overrides) and calls Validate again:
//
//	-config FILE      the file for Load
//	-listen ADDR      amqp.listen
//	-mgmt-listen ADDR mgmt.listen ("off" disables)
//	-data DIR         storage.data_dir
//
// # Errors
//
// Invalid TOML is a *SyntaxError, "file:line:col: message". Otherwise Load
// reports every problem at once in a *ValidationError, one per line:
//
//	brokerd.toml:3: amqp.frame_max: must be between 4096 and 16777216 (16MiB) bytes, got 1024
//	brokerd.toml:12: storage.synk: unknown key (did you mean "sync"?)
//	amqp.tls.cert_file: required when amqp.tls.listen is set
//
// Unknown keys, values of the wrong TOML type and invalid values are all
// problems. The line is that of the key, or of the table header for problems
// with a whole [[users]] entry; it is left out when the offending value came
// from a default or a flag. Array elements are named with their index from
// 0: users[1].password.
//
// # Value types
//
// Durations are strings in Go syntax: "60s", "1m30s", "250ms". Sizes are an
// integer number of bytes or a string with a unit, "50MB", "1GiB", "512 KiB":
// kB, MB, GB, TB are powers of 1000 and KiB, MiB, GiB, TiB powers of 1024,
// matched without regard to case; fractions are refused. Listen addresses are
// host:port with a numeric port ("0.0.0.0:5672", "[::1]:5672", ":5672"); port
// 0 picks a free port; "" or "off" disables that listener. No two enabled
// listeners may use the same port on overlapping hosts.
//
// # Keys
//
// [amqp] — AMQP 0-9-1 and what the server proposes in connection.tune.
//
//	amqp.listen              "0.0.0.0:5672"  Plain AMQP listener. If off, amqp.tls.listen must be on.
//	amqp.heartbeat           "60s"           Heartbeat interval proposed; whole seconds, 0s..65535s; "0s" proposes none.
//	amqp.frame_max           131072          Largest frame accepted, bytes, 4096..16777216 (16MiB).
//	                                         AMQP allows up to 2^32-1, but every connection may
//	                                         buffer a whole frame, so brokerd caps it; RabbitMQ
//	                                         clients never need more than the default.
//	amqp.channel_max         2047            Channels per connection, 1..65535 (RabbitMQ's default).
//	amqp.max_message_size    128MiB          Largest message body, 1 byte..512MiB (RabbitMQ's limit).
//	                                         Larger publishes close the channel with 406 PRECONDITION_FAILED.
//	amqp.handshake_timeout   "10s"           Time from TCP accept to connection.open-ok; must be positive.
//	amqp.consumer_timeout    "30m"           A delivery unacknowledged longer closes its channel with
//	                                         406 PRECONDITION_FAILED and is requeued (RabbitMQ's
//	                                         consumer_timeout); queues set their own with
//	                                         x-consumer-timeout or policy consumer-timeout. "0s": off.
//	amqp.consumer_timeout_cancel false       true: cancel only the consumer (basic.cancel) for a
//	                                         client with consumer_cancel_notify, returning its
//	                                         overdue deliveries, as RabbitMQ 4.3.
//	amqp.unfinished_content_limit 256MiB     Message body bytes being received at once, over every
//	                                         connection, 64KiB..1024GiB: a content header reserves
//	                                         its body's size; a connection whose body does not fit
//	                                         is not read until others complete (one larger than the
//	                                         limit is received alone). At most a quarter of the
//	                                         memory watermark applies: the memory alarm stops a
//	                                         publisher at its next content frame, holding what it
//	                                         sent, and that must not keep the alarm raised.
//	                                         SIGHUP applies a change.
//
// [amqp.tls] — the amqps listener.
//
//	amqp.tls.listen          ""              amqps listener, e.g. "0.0.0.0:5671"; "" or "off" disables.
//	amqp.tls.cert_file       ""              PEM certificate chain; required when listen is on.
//	amqp.tls.key_file        ""              PEM private key; required when listen is on.
//	amqp.tls.ca_file         ""              PEM CAs for client certificates; required when verify_peer.
//	amqp.tls.verify_peer     false           Verify client certificates against ca_file.
//	amqp.tls.fail_if_no_peer_cert true       With verify_peer, refuse a client without a certificate.
//
// The files are read when the listener starts, not by Validate, and again
// at each SIGHUP: new handshakes use the new certificate.
//
// [mgmt] — HTTP management API (RabbitMQ-compatible subset) and /metrics.
//
//	mgmt.listen              "127.0.0.1:15672"  "" or "off" disables.
//	mgmt.max_connections     0               Most HTTP connections open at once over both listeners;
//	                                         more wait in the kernel's accept queue. 0: a sixteenth
//	                                         of the descriptor limit (ulimit -n), 8 to 1024.
//	mgmt.allowed_hosts       []              Host names a request's Host may name besides localhost,
//	                                         *.localhost, IP addresses, the machine's host name and
//	                                         the listen addresses' host names; others get 403 (DNS
//	                                         rebinding). "*" allows any.
//	mgmt.max_body_size       "1MiB"          Largest request body but a definitions import's,
//	                                         64KiB..1GiB; larger is refused (400) unread.
//	mgmt.max_definitions_size "64MiB"        Largest definitions import, 64KiB..4GiB.
//	mgmt.body_timeout        "10s"           A body must arrive within this, 100ms..1h, plus a second
//	mgmt.min_body_rate       "64KiB"         per min_body_rate bytes received (at least 1KiB); a
//	                                         slower one is refused (408) and its connection closed.
//	mgmt.rates_mode          "basic"         "basic": message rates (*_details.rate) from samples of
//	                                         every object's counters; "none": counts only.
//	mgmt.sample_interval     "5s"            How often the rates' samples are taken, 5s..1m
//	                                         (RabbitMQ's collect_statistics_interval).
//
// [mgmt.tls] — HTTPS for the same API; the keys mean what they mean in
// [amqp.tls].
//
//	mgmt.tls.listen          ""              HTTPS listener, e.g. "0.0.0.0:15671"; "" or "off" disables.
//	mgmt.tls.cert_file       ""              PEM certificate chain; required when listen is on.
//	mgmt.tls.key_file        ""              PEM private key; required when listen is on.
//	mgmt.tls.ca_file         ""              PEM CAs for client certificates; required when verify_peer.
//	mgmt.tls.verify_peer     false           Verify client certificates against ca_file.
//	mgmt.tls.fail_if_no_peer_cert true       With verify_peer, refuse a client without a certificate.
//
// [storage] — the message store (package store/diskstore: WAL, compressed
// segments, Pebble index).
//
//	storage.data_dir             "./data"   All broker state. Relative to the working directory.
//	storage.engine               "disk"     "disk" (durable) or "memory" (nothing survives a restart).
//	storage.sync                 "fsync"    SyncPolicy: when the WAL is fsynced and confirms sent.
//	                                        "fsync":    group commit, one fsync per group of
//	                                                    records; confirms after that fsync.
//	                                        "interval": confirms after the write; fsync every
//	                                                    sync_interval (a machine crash may
//	                                                    lose that interval).
//	                                        "none":     never fsync; confirms after write. For
//	                                                    benchmarks.
//	storage.sync_interval        "10ms"     fsync period under "interval", 1ms..1m.
//	storage.checkpoint_bytes     "32MiB"    Checkpoint once this much awaits one, 1MiB..16GiB.
//	storage.checkpoint_interval  "30s"      ... or this long after the last, 1s..1h.
//	storage.segment_cache        "32MiB"    Block cache of decompressed message bodies.
//	storage.index_cache          "32MiB"    Pebble's block cache.
//	storage.page_window          2048       Ready messages per priority level of a queue
//	                                        kept in memory at its head (and tail), 0..1048576; the
//	                                        rest of a deeper queue stays on disk. 0: all in memory.
//	storage.page_window_bytes    "4MiB"     ... and at most this many bytes of them, bodies and
//	                                        properties, 64KiB..16GiB (a larger message fits alone).
//	storage.delivered_mark_chunk 2048       How far ahead of its deliveries a durable queue
//	                                        records them, 1..1048576: after a crash at most
//	                                        1.5x this many never-delivered messages per
//	                                        priority level come back redelivered=true.
//
// [limits] — resource alarms and bounds. While an alarm is raised, publishing
// connections get connection.blocked and are not read from; nothing is
// dropped.
//
//	limits.memory_high_watermark        0.4     Memory alarm at this fraction of RAM, 0..1 exclusive.
//	limits.memory_high_watermark_bytes  0       If above 0, the alarm is at this many bytes instead.
//	limits.disk_free_limit              "50MB"  Disk alarm when free space on data_dir's disk drops
//	                                            below this; 0 disables it.
//	limits.max_connections              0       Most open AMQP connections, over all listeners
//	                                            (RabbitMQ's connection_max). A connection beyond it
//	                                            is closed at once, without a handshake. 0: derived
//	                                            from the file descriptor limit (ulimit -n) less the
//	                                            store's reserve and the HTTP listener's share: 672
//	                                            at 1,024, 56,288 at 65,536. A value above that is
//	                                            used, with a warning: the store may run out of
//	                                            descriptors (checkpoints then wait for them).
//
// [log] — slog to stderr.
//
//	log.level                "info"          debug, info, warn or error.
//	log.format               "text"          text or json.
//
// [deprecated_features.permit] — what RabbitMQ 4.x deprecates, permitted
// (true) or refused (false), as RabbitMQ's deprecated_features.permit.NAME.
//
//	deprecated_features.permit.transient_nonexcl_queues true  A queue neither durable nor
//	                                         exclusive; false refuses it (541), as RabbitMQ 4.3.
//
// [daemon] — the process's life cycle.
//
//	daemon.shutdown_timeout  "30s"           Bound on a graceful shutdown (SIGTERM), 1s..1h; past it,
//	                                         or at a second SIGTERM, brokerd exits at once without
//	                                         losing a confirmed message.
//
// [metrics] — what /metrics exports (see package mgmt's metric table), and where.
//
//	metrics.listen           "off"           An address serving GET /metrics alone (plain HTTP),
//	                                         with this node's own metrics: never forwarded to a
//	                                         cluster's leader (RabbitMQ's plugin: 15692).
//	metrics.per_queue_limit  1000            Queues exported with their own label set (vhost,
//	                                         queue); beyond it, and at 0, queue metrics are
//	                                         aggregates over every queue only. Delayed
//	                                         exchanges' messages_delayed likewise.
//
// [auth]
//
//	auth.loopback_users      ["guest"]       Users that may connect only from a loopback address,
//	                                         by name: also users created later through the API.
//	auth.login_failure_delay "1s"            A refused login (AMQP or HTTP) is answered this long
//	                                         after it arrived, 0s..1m.
//	auth.failed_login_burst  10              Failed logins a source (IPv4 address, IPv6 /64) may make
//	auth.failed_login_interval "1s"          in a row over AMQP and HTTP together, then one per
//	                                         interval (1ms..1h); past that a login is refused
//	                                         unchecked. 0: no limit.
//	auth.mechanisms          ["PLAIN","AMQPLAIN"] SASL mechanisms offered, in order: PLAIN, AMQPLAIN,
//	                                         EXTERNAL (login by TLS client certificate, amqps only;
//	                                         needs amqp.tls.verify_peer).
//	auth.ssl_cert_login_from "distinguished_name" EXTERNAL's user name: distinguished_name,
//	                                         common_name, subject_alternative_name (subject_alt_name).
//	auth.ssl_cert_login_san_type "dns"       The SAN type taken: dns, ip, email, uri.
//	auth.ssl_cert_login_san_index 0          Which SAN of that type, from 0.
//
// [cluster] — a cluster of nodes (replica, replica/transport). Absent, or
// with node_name and peers empty (Cluster.Enabled false), brokerd is a
// single node and the rest of the table is unused; cluster.listen alone is
// an error.
//
//	cluster.node_name        ""              This node, one of peers: A-Z a-z 0-9 . _ - (at most 255).
//	cluster.listen           ""              host:port of Raft and every inter-node connection (proxied
//	                                         clients too); required in a cluster.
//	cluster.peers            []              Every node, this one included, "name=host:port", names
//	                                         unique; the same list on every node.
//	cluster.name             "brokerd"       The cluster's name; a node configured with another is
//	                                         refused at the handshake.
//	cluster.tick             "100ms"         Raft's tick, above 0s and at most 10s.
//	cluster.election_ticks   10              Election timeout in ticks (randomised up to 2x); more
//	                                         than heartbeat_ticks.
//	cluster.heartbeat_ticks  1               A leader's heartbeat interval in ticks, at least 1.
//	cluster.log_keep_bytes   "256MiB"        Raft log kept behind the applied entry (above 0); a
//	                                         node further behind gets a snapshot of the store.
//
// [cluster.tls] — mutual TLS between nodes; off while cert_file is empty.
//
//	cluster.tls.cert_file    ""              PEM certificate, presented as server and as client.
//	cluster.tls.key_file     ""              PEM private key; required with cert_file.
//	cluster.tls.ca_file      ""              PEM CAs signing every node's certificate; required
//	                                         with cert_file.
//
// [[users]] — users created on a fresh data dir, with full permissions on the
// [[vhosts]], as RabbitMQ's default_user; later starts leave users as they
// are (a deleted user stays deleted). Default: one user guest, password
// guest, tag administrator.
//
//	users.name               (required)      Unique, non-empty.
//	users.password           ""              Plain-text password, hashed before it is stored.
//	users.password_hash      ""              RabbitMQ SHA-256 hash: base64 of a 4-byte salt then
//	                                         SHA-256(salt ‖ password), as rabbitmqctl hash_password
//	                                         prints. Exactly one of password and password_hash.
//	users.tags               []              administrator, monitoring, policymaker, management,
//	                                         impersonator, as in RabbitMQ.
//
// [[vhosts]] — virtual hosts created on a fresh data dir, as RabbitMQ's
// default_vhost. Default: "/".
//
//	vhosts.name              (required)      Unique, non-empty.
package config
