package ctl

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func decode(t *testing.T, s string) any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// The renderings are rabbitmqctl 3.10's, as printed by the live
// rabbitmqctl for the same objects.
func TestRender(t *testing.T) {
	tests := []struct {
		json string
		f    func(any) string
		want string
	}{
		{`null`, plain, ""},
		{`true`, plain, "true"},
		{`60000`, plain, "60000"},
		{`"dlx"`, plain, "dlx"},
		{`{}`, term, "[]"},
		{`{"x-tbl":{"b":"s","a":1},"x-dead-letter-exchange":"dlx2","x-max-priority":5}`, term,
			`[{"x-dead-letter-exchange","dlx2"},{"x-max-priority",5},{"x-tbl",[{"a",1},{"b","s"}]}]`},
		{`{"x-list":[1,"a",true]}`, term, `[{"x-list",[1,"a",true]}]`},
		{`["administrator","monitoring"]`, atomList, "[administrator, monitoring]"},
		{`"administrator,monitoring"`, atomList, "[administrator, monitoring]"},
		{`[]`, atomList, "[]"},
		{`{"rabbit@h":"running"}`, nodeStates, "[{rabbit@h, running}]"},
		{`"AMQP 0-9-1"`, protocolTerm, "{0,9,1}"},
		{`{"message-ttl":1000,"dead-letter-exchange":"dlx","max-length":10}`, compactJSON,
			`{"dead-letter-exchange":"dlx","max-length":10,"message-ttl":1000}`},
		{`{"a":"<&>"}`, compactJSON, `{"a":"<&>"}`},
	}
	for _, tt := range tests {
		if got := tt.f(decode(t, tt.json)); got != tt.want {
			t.Errorf("%s: got %s, want %s", tt.json, got, tt.want)
		}
	}
}

func TestPrinter(t *testing.T) {
	cols, err := queueColumns.pick("list_queues", []string{"name", "arguments", "exclusive_consumer_tag", "effective_policy_definition"})
	if err != nil {
		t.Fatal(err)
	}
	objs := []map[string]any{
		decode(t, `{"name":"a","arguments":{"x-max-length":5},"exclusive_consumer_tag":null,"effective_policy_definition":{"max-length":1}}`).(map[string]any),
		decode(t, `{"name":"b","arguments":{},"exclusive_consumer_tag":"t"}`).(map[string]any),
	}
	rows := rowsOf(objs, cols)
	var b bytes.Buffer
	p := &printer{w: &b}
	p.info("Listing ...")
	p.rows(cols, rows)
	want := "Listing ...\nname\targuments\texclusive_consumer_tag\teffective_policy_definition\n" +
		"a\t[{\"x-max-length\",5}]\t\t{\"max-length\":1}\nb\t[]\tt\t\n"
	if b.String() != want {
		t.Errorf("table:\n%q\nwant\n%q", b.String(), want)
	}

	b.Reset()
	p = &printer{w: &b, json: true}
	p.info("Listing ...")
	p.rows(cols, rows)
	want = "[\n" +
		`{"name":"a","arguments":{"x-max-length":5},"exclusive_consumer_tag":"","effective_policy_definition":"{\"max-length\":1}"}` + "\n" +
		`,{"name":"b","arguments":{},"exclusive_consumer_tag":"t","effective_policy_definition":""}` + "\n]\n"
	if b.String() != want {
		t.Errorf("json:\n%s\nwant\n%s", b.String(), want)
	}

	b.Reset()
	p = &printer{w: &b, quiet: true, noHeaders: true}
	p.info("Listing ...")
	p.rows(cols, rows[:1])
	if b.String() != "a\t[{\"x-max-length\",5}]\t\t{\"max-length\":1}\n" {
		t.Errorf("silent: %q", b.String())
	}
}

func TestUsageAndHelp(t *testing.T) {
	for _, tt := range []struct {
		args       []string
		code       int
		stdout     string // substring
		stderr     string // substring
		stdoutNone bool
	}{
		{args: nil, code: ExitUsage, stderr: "Available commands:", stdoutNone: true},
		{args: []string{"frobnicate"}, code: ExitUsage, stderr: "Command 'frobnicate' not found.", stdoutNone: true},
		{args: []string{"help"}, code: 0, stdout: "   set_policy "},
		{args: []string{"help", "list_queues"}, code: 0, stdout: "must be one of arguments, auto_delete, consumer_capacity"},
		{args: []string{"help", "nope"}, code: ExitUsage, stderr: "Command 'nope' not found."},
		{args: []string{"set_policy", "--help"}, code: 0, stdout: "set_policy [--vhost <vhost>] [--priority <priority>] [--apply-to <apply-to>] <name> <pattern> <definition>"},
		{args: []string{"list_queues", "--bogus"}, code: ExitUsage, stderr: "Error (argument validation): unrecognized option --bogus\nArguments given:\n\tlist_queues --bogus\n\nUsage\n\nbrokerctl ", stdoutNone: true},
		{args: []string{"delete_queue"}, code: ExitUsage, stderr: "not enough arguments.", stdoutNone: true},
		{args: []string{"--url", "nota url", "status"}, code: ExitUsage, stderr: "management API URL", stdoutNone: true},
	} {
		r := runCtl(nil, "", tt.args...)
		if r.code != tt.code || !strings.Contains(r.stdout, tt.stdout) || !strings.Contains(r.stderr, tt.stderr) || (tt.stdoutNone && r.stdout != "") {
			t.Errorf("%v", r)
		}
	}
}
