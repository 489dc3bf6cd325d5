package config

import (
	"maps"
	"net"
	"time"
)

// Config is brokerd's whole configuration. The zero value is not useful:
// start from Default or Load. A Config is a plain value; copies share only
// the provenance (which line each key came from), which Apply copies before
// changing.
type Config struct {
	AMQP    AMQP    `toml:"amqp"`
	Mgmt    Mgmt    `toml:"mgmt"`
	Storage Storage `toml:"storage"`
	Limits  Limits  `toml:"limits"`
	Log     Log     `toml:"log"`
	Metrics Metrics `toml:"metrics"`
	Auth    Auth    `toml:"auth"`
	Daemon  Daemon  `toml:"daemon"`
	Cluster Cluster `toml:"cluster"`
	Users   []User  `toml:"users"`
	Vhosts  []Vhost `toml:"vhosts"`

	// DeprecatedFeatures is the [deprecated_features] table.
	DeprecatedFeatures DeprecatedFeatures `toml:"deprecated_features"`

	// src records where values were loaded from; nil for Default.
	src *origin
}

// AMQP is the [amqp] table: the AMQP 0-9-1 listeners and what the server
// proposes in connection.tune.
type AMQP struct {
	Listen           string   `toml:"listen"` // "" or "off": no plain listener
	Heartbeat        Duration `toml:"heartbeat"`
	FrameMax         int      `toml:"frame_max"`
	ChannelMax       int      `toml:"channel_max"`
	MaxMessageSize   ByteSize `toml:"max_message_size"`
	HandshakeTimeout Duration `toml:"handshake_timeout"`
	// ConsumerTimeout closes a channel holding a delivery unacknowledged
	// for longer (RabbitMQ's consumer_timeout); queues may set their own.
	// 0 disables it.
	ConsumerTimeout Duration `toml:"consumer_timeout"`
	// ConsumerTimeoutCancel, for a client that announced the
	// consumer_cancel_notify capability, cancels only the consumer whose
	// delivery timed out (basic.cancel) and returns its overdue
	// deliveries, instead of closing the channel: RabbitMQ 4.3's
	// behaviour (for quorum queues). Default false: the channel is
	// closed, as RabbitMQ up to 4.2.
	ConsumerTimeoutCancel bool `toml:"consumer_timeout_cancel"`
	// UnfinishedContentLimit bounds the message body bytes being received
	// at once, over every connection: a body reserves its size when its
	// content header arrives, and a connection whose body does not fit
	// is not read until others have completed (a larger body is received
	// alone). At most a quarter of the memory watermark is used.
	UnfinishedContentLimit ByteSize `toml:"unfinished_content_limit"`
	TLS                    TLS      `toml:"tls"`
}

// TLS is the [amqp.tls] table, the amqps listener, and the [mgmt.tls]
// table, the HTTPS management listener. SIGHUP reloads the certificate,
// key and CA files; a changed listen address needs a restart.
type TLS struct {
	Listen     string `toml:"listen"` // "" or "off": no TLS listener
	CertFile   string `toml:"cert_file"`
	KeyFile    string `toml:"key_file"`
	CAFile     string `toml:"ca_file"`
	VerifyPeer bool   `toml:"verify_peer"`
	// FailIfNoPeerCert, with VerifyPeer, refuses at the TLS handshake a
	// client that presents no certificate (RabbitMQ's
	// ssl_options.fail_if_no_peer_cert); false lets it connect (and log
	// in by password), while a certificate presented must still verify.
	// Default true (Default and Load set it; a TLS built in code that
	// verifies peers must set it too, or certificates become optional).
	FailIfNoPeerCert bool `toml:"fail_if_no_peer_cert"`
}

// Mgmt is the [mgmt] table: the HTTP management API and /metrics.
type Mgmt struct {
	Listen string `toml:"listen"` // "" or "off": no HTTP listener
	// MaxConnections bounds the HTTP connections open at once over both
	// listeners; more wait in the kernel's queue. 0: a sixteenth of the
	// descriptor limit (RLIMIT_NOFILE), 8 to 1024 (internal/fdbudget).
	MaxConnections int `toml:"max_connections"`
	// AllowedHosts are the host names requests may name (Host) besides
	// localhost, *.localhost, IP addresses, the machine's host name and
	// the listeners' host names; "*" allows any.
	AllowedHosts []string `toml:"allowed_hosts"`
	// MaxBodySize bounds a request body, except a definitions import's
	// (MaxDefinitionsSize).
	MaxBodySize        ByteSize `toml:"max_body_size"`
	MaxDefinitionsSize ByteSize `toml:"max_definitions_size"`
	// BodyTimeout and MinBodyRate bound the time a request body may take:
	// BodyTimeout plus a second per MinBodyRate bytes received.
	BodyTimeout Duration `toml:"body_timeout"`
	MinBodyRate ByteSize `toml:"min_body_rate"`
	// RatesMode is RabbitMQ's management.rates_mode: "basic" samples
	// every object's counters every SampleInterval for the API's message
	// rates; "none" keeps no samples (counts only).
	RatesMode      string   `toml:"rates_mode"`
	SampleInterval Duration `toml:"sample_interval"`
	TLS            TLS      `toml:"tls"` // the HTTPS listener, as [amqp.tls]
}

// HostNames returns the host names the API accepts in a request's Host
// besides the ones it always does: AllowedHosts and the host parts of
// the listen addresses that are names.
func (m Mgmt) HostNames() []string {
	names := append([]string{}, m.AllowedHosts...)
	for _, addr := range []string{m.Listen, m.TLS.Listen} {
		if host, _, ok := splitListen(addr); ok && host != "" && net.ParseIP(host) == nil {
			names = append(names, host)
		}
	}
	return names
}

// DeprecatedFeatures is the [deprecated_features] table: behaviours
// RabbitMQ 4.x deprecates, permitted or denied as its
// deprecated_features.permit.NAME settings do.
type DeprecatedFeatures struct {
	Permit DeprecatedPermit `toml:"permit"`
}

// DeprecatedPermit is the [deprecated_features.permit] table.
type DeprecatedPermit struct {
	// TransientNonexclQueues permits declaring a queue that is neither
	// durable nor exclusive; false refuses it (541 INTERNAL_ERROR), as
	// RabbitMQ 4.3 does by default. Default true: brokerd's behaviour
	// before, and RabbitMQ's up to 4.2.
	TransientNonexclQueues bool `toml:"transient_nonexcl_queues"`
}

// Daemon is the [daemon] table: the process's life cycle.
type Daemon struct {
	// ShutdownTimeout bounds a graceful shutdown (SIGTERM): closing the
	// connections, the publisher confirms in flight and closing the
	// store. Past it, or at a second SIGTERM, brokerd exits at once;
	// confirmed messages are on disk already, and recovery replays the
	// rest of the log at the next start.
	ShutdownTimeout Duration `toml:"shutdown_timeout"`
}

// Metrics is the [metrics] table: what /metrics exports, and where
// besides the management listener.
type Metrics struct {
	// Listen is an address serving GET /metrics alone, in plain HTTP, with
	// this node's own metrics: on a cluster node it is never forwarded to
	// the leader (the management listener is), as Prometheus scrapes every
	// node (RabbitMQ's prometheus plugin listens on 15692). "" or "off":
	// none.
	Listen string `toml:"listen"`
	// PerQueueLimit is the most queues exported with their own label set
	// (vhost, queue); with more queues than that, and at 0, the queue
	// metrics are exported only as aggregates over every queue, so a
	// broker with many queues does not flood Prometheus with series. The
	// same bound applies to delayed exchanges.
	PerQueueLimit int `toml:"per_queue_limit"`
}

// Storage is the [storage] table.
type Storage struct {
	DataDir            string        `toml:"data_dir"`
	Engine             StorageEngine `toml:"engine"`
	Sync               SyncPolicy    `toml:"sync"`
	SyncInterval       Duration      `toml:"sync_interval"`
	CheckpointBytes    ByteSize      `toml:"checkpoint_bytes"`
	CheckpointInterval Duration      `toml:"checkpoint_interval"`
	SegmentCache       ByteSize      `toml:"segment_cache"`
	IndexCache         ByteSize      `toml:"index_cache"`
	// PageWindow is how many ready messages of each priority level of a
	// queue stay in memory at its head (and at its tail); the rest of a
	// deeper queue is read from the store as it is consumed (transient
	// messages too, from a part of the store a restart discards).
	// 0 keeps every message in memory.
	PageWindow int `toml:"page_window"`
	// PageWindowBytes bounds those windows by message bytes as well,
	// bodies and properties: a queue of large messages keeps fewer of
	// them in memory (one larger than it still fits alone).
	PageWindowBytes ByteSize `toml:"page_window_bytes"`
	// DeliveredMarkChunk is how far ahead of its deliveries a durable
	// queue records how far it has delivered: after a crash, at most one
	// and a half times this many never-delivered messages per priority
	// level come back with redelivered=true. Smaller means fewer false
	// redelivered flags after a crash and more writes while consuming.
	DeliveredMarkChunk int `toml:"delivered_mark_chunk"`
}

// Limits is the [limits] table: resource alarms that block publishers, and
// bounds on what clients may hold.
type Limits struct {
	// MemoryHighWatermark is a fraction of physical RAM, used when
	// MemoryHighWatermarkBytes is 0.
	MemoryHighWatermark      float64  `toml:"memory_high_watermark"`
	MemoryHighWatermarkBytes ByteSize `toml:"memory_high_watermark_bytes"`
	DiskFreeLimit            ByteSize `toml:"disk_free_limit"` // 0: no disk alarm
	// MaxConnections bounds the open AMQP connections, over all listeners
	// (RabbitMQ's connection_max); 0: derived from the process's file
	// descriptor limit, leaving the store and the HTTP listener their
	// reserve (internal/fdbudget).
	MaxConnections int `toml:"max_connections"`
}

// Log is the [log] table.
type Log struct {
	Level  LogLevel  `toml:"level"`
	Format LogFormat `toml:"format"`
}

// Auth is the [auth] table.
type Auth struct {
	// LoopbackUsers may connect only from a loopback address, by name:
	// a user created later through the HTTP API is covered too.
	LoopbackUsers []string `toml:"loopback_users"`
	// LoginFailureDelay is how long a refused login (AMQP or HTTP) waits
	// before its refusal.
	LoginFailureDelay Duration `toml:"login_failure_delay"`
	// FailedLoginBurst failed logins from one source (an IPv4 address,
	// an IPv6 /64) are checked in a row, then one per
	// FailedLoginInterval; logins past that are refused unchecked. 0: no
	// limit.
	FailedLoginBurst    int      `toml:"failed_login_burst"`
	FailedLoginInterval Duration `toml:"failed_login_interval"`
	// Mechanisms are the SASL mechanisms AMQP clients may log in with, in
	// the order offered (RabbitMQ's auth_mechanisms): PLAIN, AMQPLAIN and
	// EXTERNAL. EXTERNAL (RabbitMQ's rabbitmq_auth_mechanism_ssl) logs a
	// client in, without a password, as the existing user its verified
	// TLS certificate names (SSLCertLoginFrom); it is offered on the amqps
	// listener only, which must verify peers (amqp.tls.verify_peer).
	Mechanisms []string `toml:"mechanisms"`
	// SSLCertLoginFrom is where EXTERNAL takes the user name from:
	// "distinguished_name" (the subject as an RFC 4514 string, RabbitMQ's
	// form: "CN=alice,O=Example,C=SE"), "common_name" (the subject's CN;
	// several joined with ",") or "subject_alternative_name" (alias
	// "subject_alt_name": the SSLCertLoginSANIndex-th, from 0, subject
	// alternative name of type SSLCertLoginSANType: "dns", "ip", "email"
	// or "uri"). RabbitMQ's ssl_cert_login_* settings.
	SSLCertLoginFrom     string `toml:"ssl_cert_login_from"`
	SSLCertLoginSANType  string `toml:"ssl_cert_login_san_type"`
	SSLCertLoginSANIndex int    `toml:"ssl_cert_login_san_index"`
}

// SASL mechanisms (Auth.Mechanisms).
const (
	MechanismPLAIN    = "PLAIN"
	MechanismAMQPLAIN = "AMQPLAIN"
	MechanismEXTERNAL = "EXTERNAL"
)

// Mechanisms are the SASL mechanisms brokerd knows.
var Mechanisms = []string{MechanismPLAIN, MechanismAMQPLAIN, MechanismEXTERNAL}

// Where EXTERNAL takes a user name from (Auth.SSLCertLoginFrom), and the
// kinds of subject alternative name (Auth.SSLCertLoginSANType).
var (
	CertLoginFroms    = []string{"distinguished_name", "common_name", "subject_alternative_name", "subject_alt_name"}
	CertLoginSANTypes = []string{"dns", "ip", "email", "uri"}
)

// User is one [[users]] entry, created on a fresh data dir (the first start,
// as RabbitMQ's default_user); afterwards users are managed at run time and
// the entries are not applied again. Exactly one of
// Password and PasswordHash is set.
type User struct {
	Name         string   `toml:"name"`
	Password     string   `toml:"password"`
	PasswordHash string   `toml:"password_hash"`
	Tags         []string `toml:"tags"`
}

// Vhost is one [[vhosts]] entry, created on a fresh data dir (the first
// start, as RabbitMQ's default_vhost).
type Vhost struct {
	Name string `toml:"name"`
}

// Default returns the configuration brokerd runs with when given no file.
// Each call returns fresh slices.
func Default() Config {
	return Config{
		AMQP: AMQP{
			Listen:           "0.0.0.0:5672",
			Heartbeat:        Duration(60 * time.Second),
			FrameMax:         131072,
			ChannelMax:       2047,
			MaxMessageSize:   128 * MiB,
			HandshakeTimeout: Duration(10 * time.Second),
			ConsumerTimeout:  Duration(30 * time.Minute),
			// Room for two bodies of the largest size at the default
			// max_message_size.
			UnfinishedContentLimit: 256 * MiB,
			TLS:                    TLS{FailIfNoPeerCert: true},
		},
		Mgmt: Mgmt{
			Listen:             "127.0.0.1:15672",
			AllowedHosts:       []string{},
			MaxBodySize:        1 * MiB,
			MaxDefinitionsSize: 64 * MiB,
			BodyTimeout:        Duration(10 * time.Second),
			MinBodyRate:        64 * KiB,
			RatesMode:          "basic",
			SampleInterval:     Duration(5 * time.Second),
			TLS:                TLS{FailIfNoPeerCert: true},
		},
		Storage: Storage{
			DataDir:            "./data",
			Engine:             EngineDisk,
			Sync:               SyncFsync,
			SyncInterval:       Duration(10 * time.Millisecond),
			CheckpointBytes:    32 * MiB,
			CheckpointInterval: Duration(30 * time.Second),
			SegmentCache:       32 * MiB,
			IndexCache:         32 * MiB,
			PageWindow:         2048,
			PageWindowBytes:    4 * MiB,
			DeliveredMarkChunk: 2048,
		},
		Limits: Limits{
			MemoryHighWatermark: 0.4,
			DiskFreeLimit:       50 * MB,
		},
		Log:     Log{Level: LevelInfo, Format: FormatText},
		Metrics: Metrics{Listen: "off", PerQueueLimit: 1000},
		Auth: Auth{
			LoopbackUsers:       []string{"guest"},
			LoginFailureDelay:   Duration(time.Second),
			FailedLoginBurst:    10,
			FailedLoginInterval: Duration(time.Second),
			Mechanisms:          []string{MechanismPLAIN, MechanismAMQPLAIN},
			SSLCertLoginFrom:    "distinguished_name",
			SSLCertLoginSANType: "dns",
		},
		Daemon: Daemon{ShutdownTimeout: Duration(30 * time.Second)},
		DeprecatedFeatures: DeprecatedFeatures{Permit: DeprecatedPermit{
			TransientNonexclQueues: true,
		}},
		Cluster: Cluster{
			Peers:          []string{},
			Name:           "brokerd",
			Tick:           Duration(100 * time.Millisecond),
			ElectionTicks:  10,
			HeartbeatTicks: 1,
			LogKeepBytes:   256 * MiB,
		},
		Users:  []User{{Name: "guest", Password: "guest", Tags: []string{"administrator"}}},
		Vhosts: []Vhost{{Name: "/"}},
	}
}

// Disabled reports whether a listen address turns its listener off: "" or
// "off".
func Disabled(addr string) bool { return addr == "" || addr == "off" }

// Overrides are the settings command-line flags may override. A nil field
// leaves the setting alone.
type Overrides struct {
	Listen     *string // -listen: amqp.listen
	MgmtListen *string // -mgmt-listen: mgmt.listen
	DataDir    *string // -data: storage.data_dir
}

// Apply sets the non-nil fields of o. Problems with overridden values are
// reported by Validate without a file line. Call Validate after Apply.
func (c *Config) Apply(o Overrides) {
	set := func(key string, dst, v *string) {
		if v == nil {
			return
		}
		*dst = *v
		if c.src != nil {
			src := &origin{file: c.src.file, lines: maps.Clone(c.src.lines)}
			delete(src.lines, key)
			c.src = src
		}
	}
	set("amqp.listen", &c.AMQP.Listen, o.Listen)
	set("mgmt.listen", &c.Mgmt.Listen, o.MgmtListen)
	set("storage.data_dir", &c.Storage.DataDir, o.DataDir)
}

// File returns the path c was loaded from, or "" if it was not loaded from a
// file.
func (c *Config) File() string {
	if c.src == nil {
		return ""
	}
	return c.src.file
}

// origin is where a Config's values came from.
type origin struct {
	file  string
	lines map[string]int // key path ("amqp.tls.listen", "users[1].name") → 1-based line
}

// line returns the line of the first of keys that the file set, or 0.
func (o *origin) line(keys ...string) int {
	if o == nil {
		return 0
	}
	for _, k := range keys {
		if l := o.lines[k]; l > 0 {
			return l
		}
	}
	return 0
}
