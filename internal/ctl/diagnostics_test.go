package ctl

import (
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

func TestListChannelsAndConsumers(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		ch := e.channel()
		q := "h-ctl-consumed"
		if _, err := ch.QueueDeclare(q, false, true, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if err := ch.Qos(7, 0, false); err != nil {
			t.Fatal(err)
		}
		if _, err := ch.Consume(q, "ctag-1", false, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		// The channel's name, as the API gives it.
		var name string
		e.eventually(func() (bool, string) {
			var chans []map[string]any
			e.getJSON(apiPath("vhosts", e.vhost, "channels"), &chans)
			for _, c := range chans {
				if fmt.Sprint(c["consumer_count"]) == "1" {
					name, _ = c["name"].(string)
				}
			}
			return name != "", fmt.Sprint(chans)
		}, "the consuming channel in the API")

		out := e.eventuallyOut([]string{"\n" + q + "\t"}, "list_consumers", "-p", e.vhost)
		if !strings.HasPrefix(out, "Listing consumers in vhost "+e.vhost+" ...\nqueue_name\tchannel_pid\tconsumer_tag\tack_required\tprefetch_count\tactive\targuments\n") {
			t.Fatalf("list_consumers:\n%s", out)
		}
		if got, want := row(out, q), []string{q, name, "ctag-1", "true", "7", "true", "[]"}; strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("list_consumers row %q, want %q", got, want)
		}
		out = e.ok("-q", "list_consumers", "-p", e.vhost, "consumer_tag", "activity_status")
		if !hasLine(out, "ctag-1\tup") {
			t.Errorf("list_consumers consumer_tag activity_status:\n%s", out)
		}
		out = e.ok("list_consumers", "-p", e.vhost, "--formatter", "json", "queue_name,consumer_tag")
		var objs []map[string]any
		if err := json.Unmarshal([]byte(out), &objs); err != nil || len(objs) != 1 || objs[0]["queue_name"] != q || objs[0]["consumer_tag"] != "ctag-1" {
			t.Errorf("list_consumers json: %s (%v)", out, err)
		}
		e.fails(ExitDataErr, []string{"Virtual host '/h-ctl-none' does not exist"}, "list_consumers", "-p", "/h-ctl-none")
		e.fails(ExitUsage, []string{"Info key(s) pid are not supported"}, "list_consumers", "pid")

		out = e.eventuallyOut([]string{"\n" + name + "\t"}, "list_channels")
		if !strings.HasPrefix(out, "Listing channels ...\npid\tuser\tconsumer_count\tmessages_unacknowledged\n") {
			t.Fatalf("list_channels:\n%s", out)
		}
		if got, want := row(out, name), []string{name, "guest", "1", "0"}; strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("list_channels row %q, want %q", got, want)
		}
		out = e.ok("-q", "list_channels", "name", "vhost", "prefetch_count", "connection")
		if r := row(out, name); len(r) != 4 || r[1] != e.vhost || r[2] != "7" || !strings.HasPrefix(name, r[3]) {
			t.Errorf("list_channels name vhost prefetch_count connection: %q in\n%s", r, out)
		}
		e.fails(ExitUsage, []string{"Info key(s) bogus are not supported"}, "list_channels", "bogus")
	})
}

func TestPing(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		out := e.ok("ping")
		if !strings.HasPrefix(out, "Will ping "+strings.TrimSuffix(e.srv.api, "/")+". ") || !strings.HasSuffix(out, "\nPing succeeded\n") {
			t.Errorf("ping:\n%s", out)
		}
		if out := e.ok("-q", "ping"); out != "Ping succeeded\n" {
			t.Errorf("ping -q: %q", out)
		}
		u := e.user("pinger")
		e.fails(ExitNoPerm, []string{"refused user"}, "ping", "--username", u, "--password", "wrong")
		r := runCtl(nil, "", "--url", "http://"+closedAddr(t), "ping")
		if r.code != ExitUnavailable || strings.Contains(r.stdout, "succeeded") {
			t.Errorf("ping of nothing: %v", r)
		}
		e.fails(ExitUsage, []string{"too many arguments"}, "ping", "x")
	})
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestAwaitStartup: against a running broker await_startup returns at
// once and says nothing; against nothing it gives up at its timeout with
// 75; and it waits for a broker that starts while it asks: the test holds
// the port with a listener that hangs up on every connection until
// await_startup has asked twice, then starts a brokerd on that port.
func TestAwaitStartup(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		if out := e.ok("await_startup"); out != "" {
			t.Errorf("await_startup printed %q", out)
		}
		e.fails(ExitUsage, []string{"too many arguments"}, "await_startup", "x")
	})
	r := runCtl(nil, "", "--url", "http://"+closedAddr(t), "--timeout", "0.5", "await_startup")
	if r.code != ExitTempFail || !strings.Contains(r.stderr, "did not start within 500ms") {
		t.Errorf("await_startup of nothing: %v", r)
	}
	if daemonOf(servers(t)[0]) == nil {
		return // an external server: nothing to start here
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	var asked atomic.Int32
	twice := make(chan struct{})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
			if asked.Add(1) == 2 {
				close(twice)
			}
		}
	}()
	done := make(chan result, 1)
	go func() { done <- runCtl(nil, "", "--url", "http://"+addr, "--timeout", "120", "await_startup") }()
	select {
	case <-twice:
	case r := <-done:
		t.Fatalf("await_startup returned before a broker started: %v", r)
	case <-time.After(60 * time.Second):
		t.Fatal("await_startup did not ask twice within 60s")
	}
	l.Close()
	d := startBrokerdAt("await", "memory", addr)
	daemons.Lock()
	daemons.byEngine["await"] = d // TestMain stops it
	daemons.Unlock()
	if d.err != nil {
		t.Fatalf("brokerd on %s: %v\n%s", addr, d.err, d.log())
	}
	if r := <-done; r.code != 0 || r.stdout != "" || r.stderr != "" {
		t.Fatalf("await_startup with a broker starting: %v", r)
	}
}

func TestEnvironment(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		d := daemonOf(e.srv)
		if d == nil {
			e.fails(ExitUnavailable, []string{"no /api/environment"}, "environment")
			return
		}
		dataDir, _ := daemonPaths(e.srv.name)
		out := e.ok("environment")
		for _, want := range []string{
			`storage.engine = "` + e.srv.name + `"`,
			`storage.data_dir = "` + dataDir + `"`,
			`amqp.listen = "127.0.0.1:0"`,
			`limits.disk_free_limit = "50MB"`,
			`limits.memory_high_watermark = 0.4`,
			`users = [{name = "guest", tags = ["administrator"]}]`,
			`auth.loopback_users = ["guest"]`,
		} {
			if !hasLine(out, want) {
				t.Errorf("environment lacks the line %q:\n%s", want, out)
			}
		}
		if !strings.HasPrefix(out, "Application environment of node ") || strings.Contains(out, "password") {
			t.Errorf("environment:\n%s", out)
		}
		var env map[string]any
		if err := json.Unmarshal([]byte(e.ok("environment", "--formatter", "json")), &env); err != nil {
			t.Fatal(err)
		}
		if env["storage.engine"] != e.srv.name || env["mgmt.listen"] != "127.0.0.1:0" {
			t.Errorf("environment json: %v", env)
		}
		// Only an administrator sees it.
		u := e.user("monitor")
		if st, body := e.api("PUT", apiPath("users", u), map[string]any{"password": "pw", "tags": "monitoring"}); st/100 != 2 {
			t.Fatalf("add user: %d %s", st, body)
		}
		e.fails(ExitNoPerm, nil, "environment", "--username", u, "--password", "pw")
	})
}

func TestReport(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		ch := e.channel()
		if _, err := ch.QueueDeclare("h-ctl-reported", false, true, false, false, amqp091.Table{"x-max-length": int32(9)}); err != nil {
			t.Fatal(err)
		}
		out := e.ok("report")
		var want []string
		want = append(want,
			"Reporting server status of node ", "\n\nStatus of node ", "\nNode name: ",
			"\nListing connections ...\n", "\nListing channels ...\n",
			"\nListing queues for vhost "+e.vhost+" ...\n",
			"\nListing exchanges for vhost "+e.vhost+" ...\n",
			"\nListing bindings for vhost "+e.vhost+"...\n",
			"\nListing permissions for vhost \""+e.vhost+"\" ...\n",
			"\nListing policies for vhost \""+e.vhost+"\" ...\n",
			// list_queues with every column: the queue's arguments.
			"\nh-ctl-reported\tfalse\ttrue\tfalse\t[{\"x-max-length\",9}]\t",
		)
		if daemonOf(e.srv) != nil {
			want = append(want, "\n\nApplication environment of node ", "\nstorage.engine = \""+e.srv.name+"\"\n")
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("report lacks %q", w)
			}
		}
		if t.Failed() {
			t.Logf("report:\n%s", out)
		}
		e.fails(ExitUsage, []string{"Only report formatter is supported"}, "report", "--formatter", "json")
	})
}
