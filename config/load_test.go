package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
)

// writeConfig writes text to a file named brokerd.toml in a temporary
// directory and returns its path.
func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "brokerd.toml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// stripOrigin returns c without its provenance, for comparison with Default.
func stripOrigin(c Config) Config {
	c.src = nil
	return c
}

// leafKeys lists the key paths of every setting of type t. Arrays of tables
// are named without an index ("users.name"), as in doc.go; with index set,
// their first element is named ("users[0].name"), as in line indexes.
func leafKeys(t reflect.Type, prefix string, index bool) []string {
	var keys []string
	for i := range t.NumField() {
		f := t.Field(i)
		name := f.Tag.Get("toml")
		if name == "" {
			continue
		}
		key := joinKey(prefix, name)
		switch {
		case f.Type.Kind() == reflect.Struct:
			keys = append(keys, leafKeys(f.Type, key, index)...)
		case f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Struct:
			if index {
				key = indexKey(key, 0)
			}
			keys = append(keys, leafKeys(f.Type.Elem(), key, index)...)
		default:
			keys = append(keys, key)
		}
	}
	return keys
}

func TestExampleIsDefault(t *testing.T) {
	c, err := Load("brokerd.example.toml")
	if err != nil {
		t.Fatalf("Load(example): %v", err)
	}
	if got, want := stripOrigin(c), Default(); !reflect.DeepEqual(got, want) {
		t.Errorf("example file differs from Default():\n got %+v\nwant %+v", got, want)
	}
	// Every key is spelled out, except the alternative to password, which is
	// shown commented out.
	for _, k := range leafKeys(reflect.TypeFor[Config](), "", true) {
		if k == "users[0].password_hash" {
			continue
		}
		if c.src.line(k) == 0 {
			t.Errorf("example file does not set %s", k)
		}
	}

	// The commented-out hash is valid and is the hash of the password beside it.
	text, err := os.ReadFile("brokerd.example.toml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^# (password_hash = ".*")$`).FindSubmatch(text)
	if m == nil {
		t.Fatal("example file lacks a commented-out password_hash")
	}
	alt := strings.Replace(string(text), `password = "guest"`, string(m[1]), 1)
	c2, err := parse("example", alt)
	if err != nil {
		t.Fatalf("example with password_hash: %v", err)
	}
	if !checkRabbitHash(c2.Users[0].PasswordHash, "guest") {
		t.Errorf("example password_hash is not the hash of \"guest\"")
	}
}

// Every key is documented in doc.go under its full path.
func TestDocListsEveryKey(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range leafKeys(reflect.TypeFor[Config](), "", false) {
		if !regexp.MustCompile(`(?m)^//\t` + regexp.QuoteMeta(k) + ` `).Match(doc) {
			t.Errorf("doc.go does not document %s", k)
		}
	}
}

func TestLoadOverridesDefaults(t *testing.T) {
	path := writeConfig(t, `
[amqp]
listen = "127.0.0.1:5673"
heartbeat = "30s"
frame_max = 65536
max_message_size = 1048576

[amqp.tls]
listen = "0.0.0.0:5671"
cert_file = "/etc/brokerd/cert.pem"
key_file = "/etc/brokerd/key.pem"

[storage]
sync = "interval"
engine = "memory"

[limits]
memory_high_watermark = 0.6
memory_high_watermark_bytes = "2GiB"
disk_free_limit = 1000000
max_connections = 1000

[log]
level = "debug"
format = "json"

[[users]]
name = "admin"
password_hash = "kI1KsWtT+9nON3W1/o0imLIDVd6oA+fMrA2rpagBHSiDQ/O9"
tags = ["administrator", "monitoring"]

[[users]]
name = "app"
password = "secret"

[auth]
loopback_users = []
`)
	c, err := Load(path)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	want := Default()
	want.AMQP.Listen = "127.0.0.1:5673"
	want.AMQP.Heartbeat = Duration(30 * time.Second)
	want.AMQP.FrameMax = 65536
	want.AMQP.MaxMessageSize = MiB
	want.AMQP.TLS = TLS{Listen: "0.0.0.0:5671", CertFile: "/etc/brokerd/cert.pem", KeyFile: "/etc/brokerd/key.pem", FailIfNoPeerCert: true}
	want.Storage.Sync = SyncInterval
	want.Storage.Engine = EngineMemory
	want.Limits = Limits{MemoryHighWatermark: 0.6, MemoryHighWatermarkBytes: 2 * GiB, DiskFreeLimit: 1_000_000, MaxConnections: 1000}
	want.Log = Log{Level: LevelDebug, Format: FormatJSON}
	want.Users = []User{
		{Name: "admin", PasswordHash: "kI1KsWtT+9nON3W1/o0imLIDVd6oA+fMrA2rpagBHSiDQ/O9", Tags: []string{"administrator", "monitoring"}},
		{Name: "app", Password: "secret"},
	}
	want.Auth.LoopbackUsers = []string{}
	if got := stripOrigin(c); !reflect.DeepEqual(got, want) {
		t.Errorf("Load:\n got %+v\nwant %+v", got, want)
	}
	if c.File() != path {
		t.Errorf("File() = %q; want %q", c.File(), path)
	}
}

func TestLoadEmptyFileIsDefault(t *testing.T) {
	c, err := Load(writeConfig(t, "# nothing\n"))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if !reflect.DeepEqual(stripOrigin(c), Default()) {
		t.Errorf("empty file: got %+v; want Default()", c)
	}
}

// Each case is a file with one problem; the error must be exactly one line,
// naming the file, the line and the key.
func TestLoadProblems(t *testing.T) {
	tests := []struct {
		name string
		text string
		want string // the error after "FILE:"; FILE stands for the file's path
	}{
		{"unknown top-level key", "\nfoo = 1\n", `2: foo: unknown key`},
		{"unknown table", "[amqp]\nlisten = \":1\"\n[amqpp]\nlisten = \":2\"\n", `3: amqpp: unknown key (did you mean "amqp"?)`},
		{"unknown key in nested table", "[amqp]\nheartbeat = \"5s\"\n\n[amqp.tls]\nlisten = \"\"\ncertfile = \"x\"\n", `6: amqp.tls.certfile: unknown key (did you mean "cert_file"?)`},
		{"unknown key in dotted form", "amqp.tls.bogus = 1\n", `1: amqp.tls.bogus: unknown key`},
		{"unknown key in inline table", "[amqp]\ntls = { listen = \"\", nope = 1 }\n", `2: amqp.tls.nope: unknown key`},
		{"unknown key in second user", "[[users]]\nname = \"a\"\npassword = \"p\"\n[[users]]\nname = \"b\"\npassword = \"p\"\nvhost = \"/\"\n", `7: users[1].vhost: unknown key`},
		{"string for integer", "[amqp]\nframe_max = \"big\"\n", `2: amqp.frame_max: must be an integer, got string`},
		{"integer for duration", "[amqp]\n\nheartbeat = 60\n", `3: amqp.heartbeat: must be a duration string such as "60s", got integer`},
		{"bad duration", "[amqp]\nhandshake_timeout = \"10 seconds\"\n", `2: amqp.handshake_timeout: invalid duration "10 seconds": want a number with a unit, such as "60s" or "1m30s"`},
		{"bad size unit", "[limits]\ndisk_free_limit = \"50XB\"\n", `2: limits.disk_free_limit: invalid size "50XB": unknown unit "XB" (want one of B, kB, MB, GB, TB, KiB, MiB, GiB, TiB)`},
		{"negative size", "[limits]\ndisk_free_limit = -5\n", `2: limits.disk_free_limit: must not be negative, got -5`},
		{"float size", "[limits]\ndisk_free_limit = 1.5\n", `2: limits.disk_free_limit: must be a number of bytes or a string with a unit such as "50MB", got float`},
		{"table expected", "amqp = 5\n", `1: amqp: must be a table ([amqp]), got integer`},
		{"array of tables expected", "users = \"guest\"\n", `1: users: must be an array of tables ([[users]]), got string`},
		{"bool expected", "[amqp.tls]\nverify_peer = \"yes\"\n", `2: amqp.tls.verify_peer: must be true or false, got string`},
		{"bad array element", "[auth]\nloopback_users = [\n  \"guest\",\n  7,\n]\n", `4: auth.loopback_users[1]: must be a string, got integer`},
		{"frame_max too small", "[amqp]\nframe_max = 1024\n", `2: amqp.frame_max: must be between 4096 and 16777216 (16MiB) bytes, got 1024`},
		{"frame_max too large", "[amqp]\nframe_max = 16777217\n", `2: amqp.frame_max: must be between 4096 and 16777216 (16MiB) bytes, got 16777217`},
		{"channel_max zero", "[amqp]\nchannel_max = 0\n", `2: amqp.channel_max: must be between 1 and 65535, got 0`},
		{"channel_max too large", "[amqp]\nchannel_max = 65536\n", `2: amqp.channel_max: must be between 1 and 65535, got 65536`},
		{"max_message_size zero", "[amqp]\nmax_message_size = 0\n", `2: amqp.max_message_size: must be between 1 byte and 512MiB, got 0`},
		{"max_message_size too large", "[amqp]\nmax_message_size = \"1GiB\"\n", `2: amqp.max_message_size: must be between 1 byte and 512MiB, got 1GiB`},
		{"negative heartbeat", "[amqp]\nheartbeat = \"-1s\"\n", `2: amqp.heartbeat: must be between 0s (disabled) and 18h12m15s, got -1s`},
		{"fractional heartbeat", "[amqp]\nheartbeat = \"1500ms\"\n", `2: amqp.heartbeat: must be a whole number of seconds (AMQP negotiates seconds), got 1.5s`},
		{"zero handshake timeout", "[amqp]\nhandshake_timeout = \"0s\"\n", `2: amqp.handshake_timeout: must be positive, got 0s`},
		{"bad listen", "[amqp]\nlisten = \"5672\"\n", `2: amqp.listen: invalid address "5672": want host:port (such as "0.0.0.0:5672" or "[::1]:5672"), or "off"`},
		{"bad port", "[mgmt]\nlisten = \"127.0.0.1:http\"\n", `2: mgmt.listen: invalid address "127.0.0.1:http": want host:port (such as "0.0.0.0:5672" or "[::1]:5672"), or "off"`},
		{"port conflict", "[mgmt]\nlisten = \"127.0.0.1:5672\"\n", `2: mgmt.listen: "127.0.0.1:5672" conflicts with amqp.listen = "0.0.0.0:5672": same port`},
		{"no amqp listener", "[amqp]\nlisten = \"off\"\n", `2: amqp.listen: no AMQP listener: amqp.listen and amqp.tls.listen are both off`},
		{"tls listen without cert and key", "[amqp.tls]\nlisten = \":5671\"\n", "2: amqp.tls.cert_file: required when amqp.tls.listen is set\nFILE:2: amqp.tls.key_file: required when amqp.tls.listen is set"},
		{"tls cert empty", "[amqp.tls]\nlisten = \":5671\"\nkey_file = \"k\"\ncert_file = \"\"\n", "4: amqp.tls.cert_file: required when amqp.tls.listen is set"},
		{"verify_peer without ca", "[amqp.tls]\nlisten = \":5671\"\ncert_file = \"c\"\nkey_file = \"k\"\nverify_peer = true\n", "5: amqp.tls.ca_file: required when amqp.tls.verify_peer is true"},
		{"empty data_dir", "[storage]\ndata_dir = \"\"\n", `2: storage.data_dir: must not be empty`},
		{"page_window_bytes too small", "[storage]\npage_window_bytes = \"4KiB\"\n", `2: storage.page_window_bytes: must be between 64KiB and 16GiB, got 4096`},
		{"bad sync", "[storage]\nsync = \"sometimes\"\n", `2: storage.sync: invalid value "sometimes": want one of "fsync", "interval", "none"`},
		{"watermark of 1", "[limits]\nmemory_high_watermark = 1\n", `2: limits.memory_high_watermark: must be a fraction of RAM between 0 and 1 (exclusive), got 1`},
		{"watermark nan", "[limits]\nmemory_high_watermark = nan\n", `2: limits.memory_high_watermark: must be a fraction of RAM between 0 and 1 (exclusive), got NaN`},
		{"negative max_connections", "[limits]\nmax_connections = -1\n", `2: limits.max_connections: must not be negative (0 means derived from the file descriptor limit), got -1`},
		{"bad level", "[log]\nlevel = \"verbose\"\n", `2: log.level: invalid value "verbose": want one of "debug", "info", "warn", "error"`},
		{"bad format", "[log]\nformat = \"xml\"\n", `2: log.format: invalid value "xml": want one of "text", "json"`},
		{"password and hash", "[[users]]\nname = \"a\"\npassword = \"p\"\npassword_hash = \"kI1KsWtT+9nON3W1/o0imLIDVd6oA+fMrA2rpagBHSiDQ/O9\"\n", `4: users[0]: password and password_hash are mutually exclusive: set one`},
		{"neither password nor hash", "[[users]]\nname = \"a\"\npassword = \"p\"\n[[users]]\nname = \"b\"\ntags = []\n", `4: users[1]: one of password and password_hash is required`},
		{"bad hash", "[[users]]\nname = \"a\"\npassword_hash = \"c2VjcmV0\"\n", "3: users[0].password_hash: not a RabbitMQ SHA-256 password hash: want base64 of a 4-byte salt and a 32-byte digest, as printed by `rabbitmqctl hash_password`"},
		{"empty user name", "[[users]]\npassword = \"p\"\n", `1: users[0].name: must not be empty`},
		{"duplicate user", "[[users]]\nname = \"a\"\npassword = \"p\"\n[[users]]\nname = \"a\"\npassword = \"q\"\n", `5: users[1].name: duplicate user "a" (also users[0])`},
		{"unknown tag", "[[users]]\nname = \"a\"\npassword = \"p\"\ntags = [\"administrator\", \"admin\"]\n", `4: users[0].tags[1]: unknown tag "admin": want one of "administrator", "monitoring", "policymaker", "management", "impersonator"`},
		{"wrong type in user", "[[users]]\nname = 5\npassword = \"p\"\n", `2: users[0].name: must be a string, got integer`},
		{"users as inline array", "users = [{ name = \"a\", password = \"p\" },\n  { name = \"\", password = \"p\" }]\n", `2: users[1].name: must not be empty`},
		{"duplicate vhost", "[[vhosts]]\nname = \"/\"\n[[vhosts]]\nname = \"/\"\n", `4: vhosts[1].name: duplicate vhost "/" (also vhosts[0])`},
		{"empty loopback user", "[auth]\nloopback_users = [\"guest\", \"\"]\n", `2: auth.loopback_users[1]: must not be empty`},
		{"unknown mechanism", "[auth]\nmechanisms = [\"PLAIN\", \"CRAM-MD5\"]\n", `2: auth.mechanisms[1]: unknown mechanism "CRAM-MD5": want one of "PLAIN", "AMQPLAIN", "EXTERNAL"`},
		{"no mechanism", "[auth]\nmechanisms = []\n", `2: auth.mechanisms: must name at least one mechanism: "PLAIN", "AMQPLAIN", "EXTERNAL"`},
		{"mechanism twice", "[auth]\nmechanisms = [\"PLAIN\", \"PLAIN\"]\n", `2: auth.mechanisms[1]: "PLAIN" is listed twice`},
		{"external without tls", "[auth]\nmechanisms = [\"EXTERNAL\"]\n", `2: auth.mechanisms: EXTERNAL logs clients in by their TLS certificate: it needs amqp.tls.listen on and amqp.tls.verify_peer = true`},
		{"external without verify_peer", "[amqp.tls]\nlisten = \":5671\"\ncert_file = \"c\"\nkey_file = \"k\"\n[auth]\nmechanisms = [\"PLAIN\", \"EXTERNAL\"]\n", `6: auth.mechanisms: EXTERNAL logs clients in by their TLS certificate: it needs amqp.tls.listen on and amqp.tls.verify_peer = true`},
		{"bad cert login from", "[auth]\nssl_cert_login_from = \"cn\"\n", `2: auth.ssl_cert_login_from: invalid value "cn": want one of "distinguished_name", "common_name", "subject_alternative_name", "subject_alt_name"`},
		{"bad san type", "[auth]\nssl_cert_login_san_type = \"other_name\"\n", `2: auth.ssl_cert_login_san_type: invalid value "other_name": want one of "dns", "ip", "email", "uri"`},
		{"negative san index", "[auth]\nssl_cert_login_san_index = -1\n", `2: auth.ssl_cert_login_san_index: must not be negative (0 is the first), got -1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeConfig(t, tt.text)
			_, err := Load(path)
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Load error = %v (%T); want *ValidationError", err, err)
			}
			if got, want := err.Error(), path+":"+strings.ReplaceAll(tt.want, "FILE", path); got != want {
				t.Errorf("error:\n got %s\nwant %s", got, want)
			}
		})
	}
}

// One file with many problems reports them all, in line order.
func TestLoadReportsEveryProblem(t *testing.T) {
	path := writeConfig(t, `[amqp]
frame_max = 100
channel_max = "many"
heartbeat = "soon"

[amqp.tls]
listen = ":5671"

[storage]
sync = "never"
typo = 1

[[users]]
name = "guest"
password = "guest"
password_hash = "x"
`)
	_, err := Load(path)
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("Load error = %v; want *ValidationError", err)
	}
	want := []Problem{
		{Key: "amqp.frame_max", Line: 2},
		{Key: "amqp.channel_max", Line: 3},
		{Key: "amqp.heartbeat", Line: 4},
		{Key: "amqp.tls.cert_file", Line: 7},
		{Key: "amqp.tls.key_file", Line: 7},
		{Key: "storage.sync", Line: 10},
		{Key: "storage.typo", Line: 11},
		{Key: "users[0]", Line: 16},
	}
	if len(ve.Problems) != len(want) {
		t.Fatalf("got %d problems; want %d:\n%v", len(ve.Problems), len(want), err)
	}
	for i, p := range ve.Problems {
		if p.Key != want[i].Key || p.Line != want[i].Line || p.Msg == "" {
			t.Errorf("problem %d = %+v; want key %s at line %d", i, p, want[i].Key, want[i].Line)
		}
	}
	if lines := strings.Split(err.Error(), "\n"); len(lines) != len(want) {
		t.Errorf("Error() has %d lines; want %d:\n%s", len(lines), len(want), err)
	}
}

func TestLoadSyntaxError(t *testing.T) {
	path := writeConfig(t, "[amqp]\nlisten = \"0.0.0.0:5672\"\nframe_max = \n")
	_, err := Load(path)
	var se *SyntaxError
	if !errors.As(err, &se) {
		t.Fatalf("Load error = %v (%T); want *SyntaxError", err, err)
	}
	if se.Err.Position.Line != 3 {
		t.Errorf("syntax error at line %d; want 3", se.Err.Position.Line)
	}
	if want := path + ":3:"; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %q does not start with %q", err, want)
	}
	if !strings.Contains(err.Error(), `last key "amqp.frame_max"`) {
		t.Errorf("error %q does not name the last key", err)
	}
	var pe toml.ParseError
	if !errors.As(err, &pe) {
		t.Errorf("error does not wrap toml.ParseError")
	}
}

func TestLoadDuplicateKeyIsSyntaxError(t *testing.T) {
	_, err := Load(writeConfig(t, "[log]\nlevel = \"info\"\nlevel = \"debug\"\n"))
	var se *SyntaxError
	if !errors.As(err, &se) || se.Err.Position.Line != 3 {
		t.Fatalf("Load error = %v; want *SyntaxError at line 3", err)
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.toml"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Load error = %v; want one wrapping os.ErrNotExist", err)
	}
}
