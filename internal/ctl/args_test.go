package ctl

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseArgs(t *testing.T) {
	tests := []struct {
		args  []string
		check func(o *options) bool
	}{
		{[]string{"list_queues"}, func(o *options) bool {
			return o.verb == "list_queues" && len(o.args) == 0 && o.vhost == "/" && !o.vhostSet && o.timeout == DefaultTimeout
		}},
		{[]string{"-p", "/x", "list_queues", "name", "messages"}, func(o *options) bool {
			return o.vhost == "/x" && o.vhostSet && slices.Equal(o.args, []string{"name", "messages"})
		}},
		{[]string{"list_queues", "name", "--vhost=/y", "-q"}, func(o *options) bool {
			return o.vhost == "/y" && o.quiet && slices.Equal(o.args, []string{"name"})
		}},
		{[]string{"set_policy", "--priority", "-2", "p", "^a", "{}", "--apply-to=queues"}, func(o *options) bool {
			return o.priority == -2 && o.applyTo == "queues" && slices.Equal(o.args, []string{"p", "^a", "{}"})
		}},
		// -u is --if-unused after delete_queue, --username elsewhere.
		{[]string{"delete_queue", "q", "-u", "-e"}, func(o *options) bool {
			return o.ifUnused && o.ifEmpty && !o.userSet && slices.Equal(o.args, []string{"q"})
		}},
		{[]string{"-u", "admin", "delete_queue", "q"}, func(o *options) bool {
			return o.userSet && o.username == "admin" && !o.ifUnused && slices.Equal(o.args, []string{"q"})
		}},
		{[]string{"list_users", "-u", "admin"}, func(o *options) bool {
			return o.userSet && o.username == "admin"
		}},
		// "--" ends the options; "-" is an argument.
		{[]string{"set_policy", "--", "-p", "-x", "{}"}, func(o *options) bool {
			return slices.Equal(o.args, []string{"-p", "-x", "{}"}) && !o.vhostSet
		}},
		{[]string{"import_definitions", "-"}, func(o *options) bool { return slices.Equal(o.args, []string{"-"}) }},
		{[]string{"-s", "--no-table-headers", "--formatter", "json", "-t", "2.5", "list_vhosts"}, func(o *options) bool {
			return o.silent && o.noHeaders && o.json && o.timeout == 2500*time.Millisecond
		}},
		{[]string{"-l", "-n", "rabbit@h", "status"}, func(o *options) bool { return o.node == "rabbit@h" && o.verb == "status" }},
		{[]string{"list_queues", "-?"}, func(o *options) bool { return o.help }},
	}
	for _, tt := range tests {
		o, err := parseArgs(tt.args)
		if err != nil {
			t.Errorf("%q: %v", tt.args, err)
			continue
		}
		if !tt.check(o) {
			t.Errorf("%q: parsed %+v", tt.args, o)
		}
	}
}

func TestParseArgsErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"list_queues", "--bogus"}, "unrecognized option --bogus"},
		{[]string{"list_queues", "-p"}, "option -p needs a value"},
		{[]string{"list_queues", "-q=1"}, "option -q takes no value"},
		{[]string{"list_queues", "--priority", "1"}, "Invalid options for this command:\n--priority"},
		{[]string{"set_policy", "--priority", "high"}, "--priority : high"},
		{[]string{"list_queues", "--formatter", "csv"}, `formatter "csv" is not supported`},
		{[]string{"list_queues", "--timeout", "0"}, "want a positive number of seconds"},
		{[]string{"list_queues", "-e"}, "unrecognized option -e"},
		{[]string{"list_queues", "--if-empty"}, "Invalid options for this command:\n--if-empty"},
	}
	for _, tt := range tests {
		_, err := parseArgs(tt.args)
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(ue.msg, tt.want) {
			t.Errorf("%q: %v, want a usage error with %q", tt.args, err, tt.want)
		}
	}
}

func TestEndpoint(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	tests := []struct {
		args                []string
		env                 map[string]string
		url, user, password string
	}{
		{nil, nil, "http://127.0.0.1:15672", "guest", "guest"},
		{nil, map[string]string{EnvURL: "http://h:1", EnvUsername: "a", EnvPassword: "b"}, "http://h:1", "a", "b"},
		{[]string{"--url", "https://x:2/prefix"}, map[string]string{EnvURL: "http://h:1"}, "https://x:2/prefix", "guest", "guest"},
		{[]string{"-n", "rabbit@myhost"}, nil, "http://myhost:15672", "guest", "guest"},
		{[]string{"-n", "myhost:1234"}, nil, "http://myhost:1234", "guest", "guest"},
		{[]string{"-n", "::1"}, nil, "http://[::1]:15672", "guest", "guest"},
		{[]string{"-n", "[::1]:99"}, nil, "http://[::1]:99", "guest", "guest"},
		// URL credentials come after the flags, before the environment.
		{[]string{"--url", "http://u:p@h:1"}, map[string]string{EnvUsername: "a", EnvPassword: "b"}, "http://h:1", "u", "p"},
		{[]string{"--url", "http://u:p@h:1", "--username", "f", "--password", "g"}, nil, "http://h:1", "f", "g"},
	}
	for _, tt := range tests {
		o, err := parseArgs(append(tt.args, "status"))
		if err != nil {
			t.Fatal(err)
		}
		base, user, pass, err := o.endpoint(env(tt.env))
		if err != nil {
			t.Errorf("%q: %v", tt.args, err)
			continue
		}
		if base.String() != tt.url || user != tt.user || pass != tt.password {
			t.Errorf("%q %v: %s %s %s, want %s %s %s", tt.args, tt.env, base, user, pass, tt.url, tt.user, tt.password)
		}
	}
	for _, args := range [][]string{
		{"--url", "ftp://h"}, {"--url", "h:15672"}, {"--url", "http://h", "-n", "h"},
	} {
		o, err := parseArgs(append(args, "status"))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, _, err := o.endpoint(env(nil)); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}

func TestAPIPath(t *testing.T) {
	for _, tt := range []struct {
		segs []string
		want string
	}{
		{[]string{"queues", "/", "q"}, "api/queues/%2F/q"},
		{[]string{"queues", "/a b", "q/1"}, "api/queues/%2Fa%20b/q%2F1"},
		{[]string{"connections", "127.0.0.1:5 -> 127.0.0.1:6"}, "api/connections/127.0.0.1:5%20-%3E%20127.0.0.1:6"},
	} {
		if got := apiPath(tt.segs...); got != tt.want {
			t.Errorf("apiPath(%q) = %q, want %q", tt.segs, got, tt.want)
		}
	}
}
