package config

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

func TestDefaultValidates(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
	if c.File() != "" {
		t.Errorf("Default().File() = %q; want \"\"", c.File())
	}
}

func TestDefaultReturnsFreshSlices(t *testing.T) {
	a := Default()
	a.Users[0].Tags[0] = "changed"
	a.Auth.LoopbackUsers[0] = "changed"
	a.Vhosts[0].Name = "changed"
	if b := Default(); b.Users[0].Tags[0] != "administrator" || b.Auth.LoopbackUsers[0] != "guest" || b.Vhosts[0].Name != "/" {
		t.Errorf("Default() shares slices between calls: %+v", b)
	}
}

// Without a file, problems carry no line and Error() names only key and
// message.
func TestValidateWithoutFile(t *testing.T) {
	c := Default()
	c.AMQP.ChannelMax = 0
	c.Storage.DataDir = ""
	c.Users = append(c.Users, User{Name: "guest", Password: "x"})
	err := c.Validate()
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("Validate() = %v; want *ValidationError", err)
	}
	want := "amqp.channel_max: must be between 1 and 65535, got 0\n" +
		"storage.data_dir: must not be empty\n" +
		`users[1].name: duplicate user "guest" (also users[0])`
	if err.Error() != want {
		t.Errorf("Validate() error:\n got %s\nwant %s", err, want)
	}
	for _, p := range ve.Problems {
		if p.Line != 0 {
			t.Errorf("problem %+v has a line; want none", p)
		}
	}
}

func TestApply(t *testing.T) {
	path := writeConfig(t, "[amqp]\nlisten = \"127.0.0.1:5673\"\n[mgmt]\nlisten = \"127.0.0.1:15673\"\n[storage]\ndata_dir = \"/var/lib/brokerd\"\n")
	loaded, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		o    Overrides
		want func(*Config)
	}{
		{"nothing", Overrides{}, func(*Config) {}},
		{"listen", Overrides{Listen: str("[::1]:5999")}, func(c *Config) { c.AMQP.Listen = "[::1]:5999" }},
		{"mgmt off", Overrides{MgmtListen: str("off")}, func(c *Config) { c.Mgmt.Listen = "off" }},
		{"all", Overrides{Listen: str(":1"), MgmtListen: str(":2"), DataDir: str("/tmp/d")}, func(c *Config) {
			c.AMQP.Listen, c.Mgmt.Listen, c.Storage.DataDir = ":1", ":2", "/tmp/d"
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := loaded
			c.Apply(tt.o)
			want := stripOrigin(loaded)
			tt.want(&want)
			if !reflect.DeepEqual(stripOrigin(c), want) {
				t.Errorf("after Apply:\n got %+v\nwant %+v", stripOrigin(c), want)
			}
			if err := c.Validate(); err != nil {
				t.Errorf("Validate after Apply: %v", err)
			}
		})
	}
	if loaded.src.line("amqp.listen") != 2 {
		t.Errorf("Apply on a copy changed the original's provenance")
	}
}

// A bad value given by a flag is reported without the file's line for the
// key it replaced; other keys keep theirs.
func TestApplyBadValueHasNoLine(t *testing.T) {
	path := writeConfig(t, "[amqp]\nlisten = \"127.0.0.1:5673\"\nchannel_max = 2047\n")
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	c.AMQP.ChannelMax = 0 // pretend the file said so
	c.Apply(Overrides{Listen: str("localhost")})
	err = c.Validate()
	want := path + ":3: amqp.channel_max: must be between 1 and 65535, got 0\n" +
		`amqp.listen: invalid address "localhost": want host:port (such as "0.0.0.0:5672" or "[::1]:5672"), or "off"`
	if err == nil || err.Error() != want {
		t.Errorf("Validate() error:\n got %v\nwant %s", err, want)
	}
}

func str(s string) *string { return &s }

func TestListenAddresses(t *testing.T) {
	tests := []struct {
		amqp, tls, mgmt string
		ok              bool
	}{
		{"0.0.0.0:5672", "", "127.0.0.1:15672", true},
		{":5672", "off", "off", true},
		{"[::1]:5672", "", "", true},
		{"localhost:5672", "", "", true},
		{"127.0.0.1:0", "", "127.0.0.1:0", true}, // port 0 picks a free port; no conflict
		{"off", ":5671", "", true},
		{"off", "", "", false},
		{"127.0.0.1:5672", "127.0.0.2:5672", "", true}, // distinct hosts
		{"127.0.0.1:5672", "[::]:5672", "", false},
		{"::1:5672", "", "", false},
		{"127.0.0.1:65536", "", "", false},
		{"127.0.0.1:-1", "", "", false},
		{"OFF", "", "", false},
	}
	for _, tt := range tests {
		c := Default()
		c.AMQP.Listen, c.Mgmt.Listen = tt.amqp, tt.mgmt
		if tt.tls != "" && tt.tls != "off" {
			c.AMQP.TLS = TLS{Listen: tt.tls, CertFile: "c", KeyFile: "k"}
		} else {
			c.AMQP.TLS.Listen = tt.tls
		}
		if err := c.Validate(); (err == nil) != tt.ok {
			t.Errorf("amqp %q tls %q mgmt %q: Validate() = %v; want ok %t", tt.amqp, tt.tls, tt.mgmt, err, tt.ok)
		}
	}
}

func TestDisabled(t *testing.T) {
	for addr, want := range map[string]bool{"": true, "off": true, "OFF": false, ":5672": false} {
		if got := Disabled(addr); got != want {
			t.Errorf("Disabled(%q) = %t; want %t", addr, got, want)
		}
	}
}

// The management API's and the logins' bounds are checked; the API's host
// names include the listen addresses' names.
func TestValidateMgmtAndAuth(t *testing.T) {
	c := Default()
	c.Mgmt.MaxConnections = -1
	c.Mgmt.AllowedHosts = []string{"ok.example", "bad:15672", ""}
	c.Mgmt.MaxBodySize = 1 * KiB
	c.Mgmt.BodyTimeout = 0
	c.Mgmt.MinBodyRate = 10
	c.Mgmt.RatesMode = "detailed"
	c.Mgmt.SampleInterval = Duration(100 * time.Millisecond)
	c.Auth.FailedLoginBurst = -1
	c.Auth.FailedLoginInterval = 0
	c.Auth.LoginFailureDelay = Duration(-1)
	var ve *ValidationError
	if err := c.Validate(); !errors.As(err, &ve) {
		t.Fatalf("Validate() = %v; want *ValidationError", err)
	}
	var keys []string
	for _, p := range ve.Problems {
		keys = append(keys, p.Key)
	}
	want := []string{"mgmt.max_connections", "mgmt.allowed_hosts[1]", "mgmt.allowed_hosts[2]", "mgmt.max_body_size",
		"mgmt.body_timeout", "mgmt.min_body_rate", "mgmt.rates_mode", "mgmt.sample_interval", "auth.login_failure_delay", "auth.failed_login_burst", "auth.failed_login_interval"}
	if !reflect.DeepEqual(keys, want) {
		t.Errorf("problems with %v, want %v:\n%v", keys, want, ve)
	}

	m := Default().Mgmt
	m.AllowedHosts = []string{"broker.example"}
	m.Listen, m.TLS.Listen = "mq.internal:15672", "10.0.0.1:15671"
	if got := m.HostNames(); !reflect.DeepEqual(got, []string{"broker.example", "mq.internal"}) {
		t.Errorf("HostNames() = %v", got)
	}
}
