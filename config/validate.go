package config

import (
	"encoding/base64"
	"fmt"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Limits Validate enforces.
const (
	MinFrameMax       = 4096     // AMQP 0-9-1 §4.2.3: frame-max is at least 4096
	MaxFrameMax       = 16 << 20 // each connection may buffer a frame this size
	MaxChannelMax     = 65535    // channel numbers are 16 bits
	MaxMaxMessageSize = 512 * MiB
	MaxHeartbeat      = 65535 * time.Second // the tune field is 16-bit seconds
)

// Problem is one invalid setting.
type Problem struct {
	Key  string // "amqp.frame_max", "users[1].password"
	Line int    // line in the file that set Key; 0 if it came from defaults or overrides
	Msg  string
}

// ValidationError lists every problem found in a configuration.
type ValidationError struct {
	File     string // the file loaded, if any
	Problems []Problem
}

// Error lists the problems one per line, as "file:line: key: message", or
// "key: message" for values that did not come from the file.
func (e *ValidationError) Error() string {
	var b strings.Builder
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteByte('\n')
		}
		if p.Line > 0 && e.File != "" {
			fmt.Fprintf(&b, "%s:%d: ", e.File, p.Line)
		}
		fmt.Fprintf(&b, "%s: %s", p.Key, p.Msg)
	}
	return b.String()
}

// sortProblems orders problems by line, those without a line last, keeping
// the order of discovery among equals.
func sortProblems(ps []Problem) {
	slices.SortStableFunc(ps, func(a, b Problem) int {
		la, lb := a.Line, b.Line
		if la == 0 {
			la = math.MaxInt
		}
		if lb == 0 {
			lb = math.MaxInt
		}
		return la - lb
	})
}

// checker collects problems, with lines from the origin.
type checker struct {
	src   *origin
	probs []Problem
}

// add reports a problem with key at the line of the first of lineKeys the
// file set; nil lineKeys means key's own line.
func (k *checker) add(key string, lineKeys []string, format string, args ...any) {
	if lineKeys == nil {
		lineKeys = []string{key}
	}
	line := k.src.line(lineKeys...)
	k.probs = append(k.probs, Problem{Key: key, Line: line, Msg: fmt.Sprintf(format, args...)})
}

func (k *checker) addf(key, format string, args ...any) { k.add(key, nil, format, args...) }

// Validate checks every setting and returns a *ValidationError listing all
// problems, or nil.
func (c *Config) Validate() error {
	k := &checker{src: c.src}
	c.validateAMQP(k)
	c.validateMgmt(k)
	c.validateListeners(k)
	c.validateCluster(k)
	if d := time.Duration(c.Daemon.ShutdownTimeout); d < time.Second || d > time.Hour {
		k.addf("daemon.shutdown_timeout", "must be between 1s and 1h, got %s", d)
	}

	k.listen("metrics.listen", c.Metrics.Listen)
	if c.Metrics.PerQueueLimit < 0 {
		k.addf("metrics.per_queue_limit", "must be 0 or more, got %d", c.Metrics.PerQueueLimit)
	}
	if c.Storage.DataDir == "" {
		k.addf("storage.data_dir", "must not be empty")
	}
	if !slices.Contains(StorageEngines, c.Storage.Engine) {
		k.addf("storage.engine", "invalid value %q: want one of %s", c.Storage.Engine, quoteList(StorageEngines))
	}
	if !slices.Contains(SyncPolicies, c.Storage.Sync) {
		k.addf("storage.sync", "invalid value %q: want one of %s", c.Storage.Sync, quoteList(SyncPolicies))
	}
	if d := time.Duration(c.Storage.SyncInterval); d < time.Millisecond || d > time.Minute {
		k.addf("storage.sync_interval", "must be between 1ms and 1m, got %s", d)
	}
	if b := c.Storage.CheckpointBytes; b < 1*MiB || b > 16*GiB {
		k.addf("storage.checkpoint_bytes", "must be between 1MiB and 16GiB, got %d", uint64(b))
	}
	if d := time.Duration(c.Storage.CheckpointInterval); d < time.Second || d > time.Hour {
		k.addf("storage.checkpoint_interval", "must be between 1s and 1h, got %s", d)
	}
	if b := c.Storage.SegmentCache; b < 1*MiB || b > 1024*GiB {
		k.addf("storage.segment_cache", "must be at least 1MiB, got %d", uint64(b))
	}
	if b := c.Storage.IndexCache; b < 1*MiB || b > 1024*GiB {
		k.addf("storage.index_cache", "must be at least 1MiB, got %d", uint64(b))
	}
	if w := c.Storage.PageWindow; w < 0 || w > 1<<20 {
		k.addf("storage.page_window", "must be between 0 and 1048576, got %d", w)
	}
	if n := c.Storage.DeliveredMarkChunk; n < 1 || n > 1<<20 {
		k.addf("storage.delivered_mark_chunk", "must be between 1 and 1048576, got %d", n)
	}
	if b := c.Storage.PageWindowBytes; b < 64*KiB || b > 16*GiB {
		k.addf("storage.page_window_bytes", "must be between 64KiB and 16GiB, got %d", uint64(b))
	}

	if w := c.Limits.MemoryHighWatermark; !(w > 0 && w < 1) {
		k.addf("limits.memory_high_watermark", "must be a fraction of RAM between 0 and 1 (exclusive), got %v", w)
	}
	if n := c.Limits.MaxConnections; n < 0 {
		k.addf("limits.max_connections", "must not be negative (0 means derived from the file descriptor limit), got %d", n)
	}

	if !slices.Contains(LogLevels, c.Log.Level) {
		k.addf("log.level", "invalid value %q: want one of %s", c.Log.Level, quoteList(LogLevels))
	}
	if !slices.Contains(LogFormats, c.Log.Format) {
		k.addf("log.format", "invalid value %q: want one of %s", c.Log.Format, quoteList(LogFormats))
	}

	for i, u := range c.Auth.LoopbackUsers {
		if u == "" {
			k.addf(indexKey("auth.loopback_users", i), "must not be empty")
		}
	}
	if d := time.Duration(c.Auth.LoginFailureDelay); d < 0 || d > time.Minute {
		k.addf("auth.login_failure_delay", "must be between 0s and 1m, got %s", d)
	}
	if n := c.Auth.FailedLoginBurst; n < 0 {
		k.addf("auth.failed_login_burst", "must not be negative (0 means no limit), got %d", n)
	}
	if d := time.Duration(c.Auth.FailedLoginInterval); d < time.Millisecond || d > time.Hour {
		k.addf("auth.failed_login_interval", "must be between 1ms and 1h, got %s", d)
	}
	c.validateMechanisms(k)
	c.validateUsers(k)
	c.validateVhosts(k)

	if len(k.probs) == 0 {
		return nil
	}
	sortProblems(k.probs)
	return &ValidationError{File: c.File(), Problems: k.probs}
}

func (c *Config) validateMgmt(k *checker) {
	m := &c.Mgmt
	k.listen("mgmt.listen", m.Listen)
	k.tls("mgmt.tls", &m.TLS)
	if m.MaxConnections < 0 {
		k.addf("mgmt.max_connections", "must not be negative (0 means a share of the descriptor limit), got %d", m.MaxConnections)
	}
	for i, h := range m.AllowedHosts {
		if h == "" || strings.ContainsAny(h, "/: ") {
			k.addf(indexKey("mgmt.allowed_hosts", i), "invalid host name %q: want a name such as \"broker.example.com\", without a port, or \"*\"", h)
		}
	}
	if b := m.MaxBodySize; b < 64*KiB || b > 1*GiB {
		k.addf("mgmt.max_body_size", "must be between 64KiB and 1GiB, got %s", b)
	}
	if b := m.MaxDefinitionsSize; b < 64*KiB || b > 4*GiB {
		k.addf("mgmt.max_definitions_size", "must be between 64KiB and 4GiB, got %s", b)
	}
	if d := time.Duration(m.BodyTimeout); d < 100*time.Millisecond || d > time.Hour {
		k.addf("mgmt.body_timeout", "must be between 100ms and 1h, got %s", d)
	}
	if b := m.MinBodyRate; b < 1*KiB {
		k.addf("mgmt.min_body_rate", "must be at least 1KiB (a second), got %s", b)
	}
	if m.RatesMode != "basic" && m.RatesMode != "none" {
		k.addf("mgmt.rates_mode", "must be \"basic\" or \"none\", got %q", m.RatesMode)
	}
	// The finest level of samples kept is one per 5s (mgmt/rates.go).
	if d := time.Duration(m.SampleInterval); d < 5*time.Second || d > time.Minute {
		k.addf("mgmt.sample_interval", "must be between 5s and 1m, got %s", d)
	}
}

func (c *Config) validateAMQP(k *checker) {
	a := &c.AMQP
	k.listen("amqp.listen", a.Listen)

	if h := time.Duration(a.Heartbeat); h < 0 || h > MaxHeartbeat {
		k.addf("amqp.heartbeat", "must be between 0s (disabled) and %s, got %s", MaxHeartbeat, h)
	} else if h%time.Second != 0 {
		k.addf("amqp.heartbeat", "must be a whole number of seconds (AMQP negotiates seconds), got %s", h)
	}
	if a.FrameMax < MinFrameMax || a.FrameMax > MaxFrameMax {
		k.addf("amqp.frame_max", "must be between %d and %d (%s) bytes, got %d", MinFrameMax, MaxFrameMax, ByteSize(MaxFrameMax), a.FrameMax)
	}
	if a.ChannelMax < 1 || a.ChannelMax > MaxChannelMax {
		k.addf("amqp.channel_max", "must be between 1 and %d, got %d", MaxChannelMax, a.ChannelMax)
	}
	if a.MaxMessageSize < 1 || a.MaxMessageSize > MaxMaxMessageSize {
		k.addf("amqp.max_message_size", "must be between 1 byte and %s, got %s", MaxMaxMessageSize, a.MaxMessageSize)
	}
	if a.HandshakeTimeout <= 0 {
		k.addf("amqp.handshake_timeout", "must be positive, got %s", a.HandshakeTimeout)
	}
	if b := a.UnfinishedContentLimit; b < 64*KiB || b > 1024*GiB {
		k.addf("amqp.unfinished_content_limit", "must be between 64KiB and 1024GiB, got %s", b)
	}
	if a.ConsumerTimeout < 0 {
		k.addf("amqp.consumer_timeout", "must not be negative (0 disables it), got %s", a.ConsumerTimeout)
	}

	k.tls("amqp.tls", &a.TLS)
}

// validateMechanisms checks auth.mechanisms and the certificate login
// settings: EXTERNAL needs an amqps listener that verifies client
// certificates, as RabbitMQ refuses EXTERNAL logins ("TLS configuration is
// unsafe") unless ssl_options.verify is verify_peer.
func (c *Config) validateMechanisms(k *checker) {
	a := &c.Auth
	if len(a.Mechanisms) == 0 {
		k.addf("auth.mechanisms", "must name at least one mechanism: %s", quoteList(Mechanisms))
	}
	for i, m := range a.Mechanisms {
		switch {
		case !slices.Contains(Mechanisms, m):
			k.addf(indexKey("auth.mechanisms", i), "unknown mechanism %q: want one of %s", m, quoteList(Mechanisms))
		case slices.Index(a.Mechanisms, m) < i:
			k.addf(indexKey("auth.mechanisms", i), "%q is listed twice", m)
		}
	}
	if slices.Contains(a.Mechanisms, MechanismEXTERNAL) {
		t := &c.AMQP.TLS
		if Disabled(t.Listen) || !t.VerifyPeer {
			k.add("auth.mechanisms", []string{"auth.mechanisms", "amqp.tls.verify_peer", "amqp.tls.listen"},
				"EXTERNAL logs clients in by their TLS certificate: it needs amqp.tls.listen on and amqp.tls.verify_peer = true")
		}
	}
	if !slices.Contains(CertLoginFroms, a.SSLCertLoginFrom) {
		k.addf("auth.ssl_cert_login_from", "invalid value %q: want one of %s", a.SSLCertLoginFrom, quoteList(CertLoginFroms))
	}
	if !slices.Contains(CertLoginSANTypes, a.SSLCertLoginSANType) {
		k.addf("auth.ssl_cert_login_san_type", "invalid value %q: want one of %s", a.SSLCertLoginSANType, quoteList(CertLoginSANTypes))
	}
	if a.SSLCertLoginSANIndex < 0 {
		k.addf("auth.ssl_cert_login_san_index", "must not be negative (0 is the first), got %d", a.SSLCertLoginSANIndex)
	}
}

// tls checks a TLS listener's table, [amqp.tls] or [mgmt.tls].
func (k *checker) tls(table string, t *TLS) {
	k.listen(table+".listen", t.Listen)
	if !Disabled(t.Listen) {
		if t.CertFile == "" {
			k.add(table+".cert_file", []string{table + ".cert_file", table + ".listen"}, "required when %s.listen is set", table)
		}
		if t.KeyFile == "" {
			k.add(table+".key_file", []string{table + ".key_file", table + ".listen"}, "required when %s.listen is set", table)
		}
		if t.VerifyPeer && t.CAFile == "" {
			k.add(table+".ca_file", []string{table + ".ca_file", table + ".verify_peer"}, "required when %s.verify_peer is true", table)
		}
	}
}

// listen checks one listen address; "" and "off" are valid.
func (k *checker) listen(key, addr string) {
	if Disabled(addr) {
		return
	}
	if _, _, ok := splitListen(addr); !ok {
		k.addf(key, "invalid address %q: want host:port (such as \"0.0.0.0:5672\" or \"[::1]:5672\"), or \"off\"", addr)
	}
}

// splitListen splits a listen address into host and numeric port.
func splitListen(addr string) (host string, port int, ok bool) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, false
	}
	port, err = strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, false
	}
	return host, port, true
}

// validateListeners checks that some AMQP listener is on and that no two
// listeners want the same port.
func (c *Config) validateListeners(k *checker) {
	if Disabled(c.AMQP.Listen) && Disabled(c.AMQP.TLS.Listen) {
		k.add("amqp.listen", []string{"amqp.listen", "amqp.tls.listen"}, "no AMQP listener: amqp.listen and amqp.tls.listen are both off")
	}
	ls := []struct{ key, addr string }{
		{"amqp.listen", c.AMQP.Listen},
		{"amqp.tls.listen", c.AMQP.TLS.Listen},
		{"mgmt.listen", c.Mgmt.Listen},
		{"mgmt.tls.listen", c.Mgmt.TLS.Listen},
		{"metrics.listen", c.Metrics.Listen},
	}
	if c.Cluster.Enabled() {
		ls = append(ls, struct{ key, addr string }{"cluster.listen", c.Cluster.Listen})
	}
	wildcard := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	for i := range ls {
		hi, pi, ok := splitListen(ls[i].addr)
		if Disabled(ls[i].addr) || !ok || pi == 0 {
			continue
		}
		for j := range i {
			hj, pj, ok := splitListen(ls[j].addr)
			if Disabled(ls[j].addr) || !ok || pj != pi {
				continue
			}
			if hi == hj || wildcard(hi) || wildcard(hj) {
				k.addf(ls[i].key, "%q conflicts with %s = %q: same port", ls[i].addr, ls[j].key, ls[j].addr)
				break
			}
		}
	}
}

// passwordHashLen is the decoded length of a RabbitMQ SHA-256 password hash:
// a 4-byte salt followed by SHA-256(salt ‖ password).
const passwordHashLen = 4 + 32

func (c *Config) validateUsers(k *checker) {
	seen := make(map[string]int)
	for i, u := range c.Users {
		p := indexKey("users", i)
		switch {
		case u.Name == "":
			k.add(p+".name", []string{p + ".name", p}, "must not be empty")
		default:
			if j, dup := seen[u.Name]; dup {
				k.addf(p+".name", "duplicate user %q (also users[%d])", u.Name, j)
			} else {
				seen[u.Name] = i
			}
		}
		switch {
		case u.Password == "" && u.PasswordHash == "":
			k.add(p, nil, "one of password and password_hash is required")
		case u.Password != "" && u.PasswordHash != "":
			k.add(p, []string{p + ".password_hash", p + ".password", p}, "password and password_hash are mutually exclusive: set one")
		case u.PasswordHash != "":
			if b, err := base64.StdEncoding.DecodeString(u.PasswordHash); err != nil || len(b) != passwordHashLen {
				k.addf(p+".password_hash", "not a RabbitMQ SHA-256 password hash: want base64 of a 4-byte salt and a 32-byte digest, as printed by `rabbitmqctl hash_password`")
			}
		}
		for j, t := range u.Tags {
			if !slices.Contains(UserTags, t) {
				k.add(indexKey(p+".tags", j), []string{indexKey(p+".tags", j), p + ".tags", p}, "unknown tag %q: want one of %s", t, quoteList(UserTags))
			}
		}
	}
}

func (c *Config) validateVhosts(k *checker) {
	seen := make(map[string]int)
	for i, v := range c.Vhosts {
		p := indexKey("vhosts", i)
		if v.Name == "" {
			k.add(p+".name", []string{p + ".name", p}, "must not be empty")
			continue
		}
		if j, dup := seen[v.Name]; dup {
			k.addf(p+".name", "duplicate vhost %q (also vhosts[%d])", v.Name, j)
			continue
		}
		seen[v.Name] = i
	}
}
