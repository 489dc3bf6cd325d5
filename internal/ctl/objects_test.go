package ctl

import (
	"encoding/base64"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/brokerd/brokerd/broker/auth"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

func TestListQueues(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		ch := e.channel()
		args := amqp091.Table{
			"x-dead-letter-exchange":    "dlx",
			"x-dead-letter-routing-key": "rk",
			"x-message-ttl":             int32(60000),
		}
		if _, err := ch.QueueDeclare("work", true, false, false, false, args); err != nil {
			t.Fatal(err)
		}
		if _, err := ch.QueueDeclare("idle", false, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		e.publish(ch, "work", "one", "two", "three")
		// One of the three is delivered and left unacknowledged.
		cch := e.channel()
		if err := cch.Qos(1, 0, false); err != nil {
			t.Fatal(err)
		}
		deliveries, err := cch.Consume("work", "c1", false, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-deliveries:
		case <-time.After(10 * time.Second):
			t.Fatal("no delivery")
		}

		// Default columns: name and messages, as rabbitmqctl.
		out := e.eventuallyOut([]string{"work\t3\n"}, "list_queues", "-p", e.vhost)
		want := "Timeout: 60.0 seconds ...\nListing queues for vhost " + e.vhost + " ...\nname\tmessages\n"
		if !strings.HasPrefix(out, want) || !hasLine(out, "idle\t0") {
			t.Errorf("list_queues printed:\n%s\nwant it to start with:\n%s", out, want)
		}
		out = e.eventuallyOut([]string{"work\ttrue\tfalse\tfalse\t3\t2\t1\t1\n"}, "-q", "list_queues", "-p", e.vhost,
			"name", "durable", "auto_delete", "exclusive", "messages", "messages_ready", "messages_unacknowledged", "consumers")
		if !strings.HasPrefix(out, "name\tdurable\tauto_delete\texclusive\tmessages\tmessages_ready\tmessages_unacknowledged\tconsumers\n") {
			t.Errorf("header:\n%s", out)
		}
		// Argument tables as rabbitmqctl prints them; comma-separated
		// columns are taken too.
		out = e.ok("-s", "list_queues", "-p", e.vhost, "name,arguments", "state", "type")
		wantRow := `work	[{"x-dead-letter-exchange","dlx"},{"x-dead-letter-routing-key","rk"},{"x-message-ttl",60000}]	running	classic`
		if !hasLine(out, wantRow) || !hasLine(out, "idle\t[]\trunning\tclassic") {
			t.Errorf("list_queues -s name,arguments state type printed:\n%s\nwant the line\n%s", out, wantRow)
		}
		var rows []map[string]any
		if err := json.Unmarshal([]byte(e.ok("list_queues", "-p", e.vhost, "name", "arguments", "durable", "--formatter", "json")), &rows); err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if r["name"] == "work" {
				a, _ := r["arguments"].(map[string]any)
				if a["x-dead-letter-exchange"] != "dlx" || a["x-message-ttl"] != float64(60000) || r["durable"] != true {
					t.Errorf("json row %v", r)
				}
			}
		}
		if len(rows) != 2 {
			t.Errorf("json rows %v, want 2", rows)
		}
		e.fails(ExitUsage, []string{"Info key(s) bogus are not supported"}, "list_queues", "-p", e.vhost, "name", "bogus")
		e.fails(ExitDataErr, []string{"Virtual host '/h-ctl-nope' does not exist"}, "list_queues", "-p", "/h-ctl-nope")
	})
}

func TestListQueuesEmptyVhost(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		// No rows: no header either, as rabbitmqctl; JSON is an empty array.
		out := e.ok("list_queues", "-p", e.vhost)
		if out != "Timeout: 60.0 seconds ...\nListing queues for vhost "+e.vhost+" ...\n" {
			t.Errorf("list_queues printed %q", out)
		}
		if out := e.ok("list_queues", "-p", e.vhost, "--formatter", "json"); out != "[\n]\n" {
			t.Errorf("json printed %q", out)
		}
	})
}

// A delayed exchange's messages_delayed is a column of list_exchanges,
// blank for the other exchanges.
func TestListExchangesMessagesDelayed(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		ch := e.channel()
		if err := ch.ExchangeDeclare("later", "x-delayed-message", true, false, false, false, amqp091.Table{"x-delayed-type": "direct"}); err != nil {
			t.Fatal(err)
		}
		if err := ch.Confirm(false); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			dc, err := ch.PublishWithDeferredConfirm("later", "k", false, false, amqp091.Publishing{Headers: amqp091.Table{"x-delay": int64(600_000)}})
			if err != nil || !dc.Wait() {
				t.Fatalf("publish: %v", err)
			}
		}
		out := e.ok("-s", "list_exchanges", "-p", e.vhost, "name", "type", "messages_delayed")
		if !hasLine(out, "later\tx-delayed-message\t2") || !hasLine(out, "amq.direct\tdirect\t") {
			t.Errorf("list_exchanges name type messages_delayed printed:\n%s", out)
		}
	})
}

func TestListExchangesAndBindings(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		ch := e.channel()
		if err := ch.ExchangeDeclare("ex", "topic", true, false, false, false, amqp091.Table{"alternate-exchange": "ae"}); err != nil {
			t.Fatal(err)
		}
		if _, err := ch.QueueDeclare("q", true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if err := ch.QueueBind("q", "a.#", "ex", false, amqp091.Table{"x-m": "all"}); err != nil {
			t.Fatal(err)
		}

		out := e.ok("list_exchanges", "-p", e.vhost)
		if !strings.HasPrefix(out, "Listing exchanges for vhost "+e.vhost+" ...\nname\ttype\n") ||
			!hasLine(out, "ex\ttopic") || !hasLine(out, "\tdirect") || !hasLine(out, "amq.fanout\tfanout") {
			t.Errorf("list_exchanges printed:\n%s", out)
		}
		out = e.ok("-s", "list_exchanges", "-p", e.vhost, "name", "type", "durable", "auto_delete", "internal", "arguments", "policy")
		if !hasLine(out, "ex\ttopic\ttrue\tfalse\tfalse\t[{\"alternate-exchange\",\"ae\"}]\t") {
			t.Errorf("list_exchanges with columns printed:\n%s", out)
		}

		out = e.ok("list_bindings", "-p", e.vhost)
		if !strings.HasPrefix(out, "Listing bindings for vhost "+e.vhost+"...\nsource_name\tsource_kind\tdestination_name\tdestination_kind\trouting_key\targuments\n") {
			t.Errorf("list_bindings printed:\n%s", out)
		}
		for _, line := range []string{
			"ex\texchange\tq\tqueue\ta.#\t[{\"x-m\",\"all\"}]",
			"\texchange\tq\tqueue\tq\t[]", // the default exchange's
		} {
			if !hasLine(out, line) {
				t.Errorf("list_bindings lacks %q:\n%s", line, out)
			}
		}
		out = e.ok("-s", "list_bindings", "-p", e.vhost, "destination_name", "source_name")
		if !hasLine(out, "q\tex") {
			t.Errorf("list_bindings destination_name source_name printed:\n%s", out)
		}
		e.fails(ExitUsage, []string{"Info key(s) nope are not supported"}, "list_exchanges", "-p", e.vhost, "nope")
		e.fails(ExitDataErr, []string{"does not exist"}, "list_bindings", "-p", "/h-ctl-nope")
	})
}

func TestListAndCloseConnection(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		conn := e.dial("guest", "guest")
		if _, err := conn.Channel(); err != nil {
			t.Fatal(err)
		}
		closed := conn.NotifyClose(make(chan *amqp091.Error, 1))
		_, port, err := net.SplitHostPort(conn.LocalAddr().String())
		if err != nil {
			t.Fatal(err)
		}

		// The connection is found by its client port.
		var name string
		e.eventually(func() (bool, string) {
			r := e.ctl("-s", "list_connections", "peer_port", "name", "user", "vhost", "peer_host", "state", "protocol")
			cells := row(r.stdout, port)
			if len(cells) != 7 {
				return false, r.String()
			}
			name = cells[1]
			if cells[2] != "guest" || cells[3] != e.vhost || cells[4] != "127.0.0.1" || cells[5] != "running" || cells[6] != "{0,9,1}" {
				t.Fatalf("connection row %q", cells)
			}
			return true, ""
		}, "the connection from port "+port+" in list_connections")
		out := e.ok("list_connections")
		if !strings.HasPrefix(out, "Listing connections ...\nuser\tpeer_host\tpeer_port\tstate\n") ||
			!hasLine(out, "guest\t127.0.0.1\t"+port+"\trunning") {
			t.Errorf("list_connections printed:\n%s", out)
		}

		out = e.ok("close_connection", name, "go away")
		if out != "Closing connection "+name+", reason: go away...\n" {
			t.Errorf("close_connection printed %q", out)
		}
		select {
		case err := <-closed:
			if err == nil || err.Code != amqp091.ConnectionForced || !strings.Contains(err.Reason, "go away") {
				t.Errorf("connection closed with %v, want 320 with the reason", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the connection was not closed")
		}
		// (Not the closed one: RabbitMQ lists it for a few seconds more.)
		e.fails(ExitUnavailable, []string{"Connection '127.0.0.1:1 -> 127.0.0.1:2' not found"},
			"close_connection", "127.0.0.1:1 -> 127.0.0.1:2", "again")
		e.fails(ExitUsage, []string{"not enough arguments"}, "close_connection", name)
	})
}

func TestPurgeQueue(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		ch := e.channel()
		if _, err := ch.QueueDeclare("p", true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		e.publish(ch, "p", "a", "b")
		out := e.ok("purge_queue", "-p", e.vhost, "p")
		if out != "Purging queue 'p' in vhost '"+e.vhost+"' ...\n" {
			t.Errorf("purge_queue printed %q", out)
		}
		if _, ok, err := ch.Get("p", true); err != nil || ok {
			t.Errorf("after purge_queue a get returned a message (%v, %v)", ok, err)
		}
		e.fails(ExitUnavailable, []string{"Queue 'nope' in vhost '" + e.vhost + "' not found"}, "purge_queue", "-p", e.vhost, "nope")
		e.fails(ExitDataErr, []string{"Virtual host '/h-ctl-nope' does not exist"}, "purge_queue", "-p", "/h-ctl-nope", "p")
	})
}

func TestDeleteQueue(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		ch := e.channel()
		for _, q := range []string{"full", "used", "plain"} {
			if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
				t.Fatal(err)
			}
		}
		e.publish(ch, "full", "m")
		cch := e.channel()
		if _, err := cch.Consume("used", "c", false, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		exists := func(q string) bool {
			st, _ := e.api("GET", apiPath("queues", e.vhost, q), nil)
			return st == http.StatusOK
		}

		r := e.fails(ExitUnavailable, []string{"not empty"}, "delete_queue", "-p", e.vhost, "full", "--if-empty")
		if r.stdout != "Deleting queue 'full' on vhost '"+e.vhost+"' if queue is empty ...\n" {
			t.Errorf("delete_queue --if-empty printed %q", r.stdout)
		}
		if !exists("full") {
			t.Error("delete_queue --if-empty deleted a queue with a message")
		}
		// Against RabbitMQ the consumer count comes from a statistics
		// sample: wait until the server knows of the consumer.
		e.eventuallyOut([]string{"used\t1\n"}, "-s", "list_queues", "-p", e.vhost, "name", "consumers")
		e.fails(ExitUnavailable, []string{"in use"}, "delete_queue", "-p", e.vhost, "-u", "used")
		if !exists("used") {
			t.Error("delete_queue -u deleted a queue with a consumer")
		}
		// -u after delete_queue is --if-unused, -e --if-empty.
		out := e.ok("delete_queue", "-p", e.vhost, "plain", "-e", "-u")
		if out != "Deleting queue 'plain' on vhost '"+e.vhost+"' if queue is empty and if queue is unused ...\n" {
			t.Errorf("delete_queue -e -u printed %q", out)
		}
		if exists("plain") {
			t.Error("delete_queue left the queue")
		}
		e.ok("delete_queue", "-p", e.vhost, "full")
		if exists("full") {
			t.Error("delete_queue left the queue")
		}
		e.fails(ExitUnavailable, []string{"Queue 'full' in vhost '" + e.vhost + "' not found"}, "delete_queue", "-p", e.vhost, "full")
		e.fails(ExitUsage, []string{"Invalid options for this command", "--if-empty"}, "purge_queue", "-p", e.vhost, "--if-empty", "x")
	})
}

// TestUnreachable needs no server: a port nothing listens on, and one
// where a server accepts but never answers.
func TestUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := l.Addr().(*net.TCPAddr).Port
	l.Close()
	r := runCtl(nil, "", "-n", "127.0.0.1:"+strconv.Itoa(closedPort), "list_vhosts")
	if r.code != ExitUnavailable || !strings.Contains(r.stderr, "unable to reach the management API at http://127.0.0.1:"+strconv.Itoa(closedPort)) {
		t.Errorf("%v", r)
	}

	// A server that accepts connections and says nothing: the request
	// times out (75).
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := silent.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	defer func() {
		select {
		case c := <-accepted:
			c.Close()
		default:
		}
	}()
	r = runCtl(map[string]string{EnvURL: "http://" + silent.Addr().String()}, "", "--timeout", "0.5", "list_vhosts")
	if r.code != ExitTempFail || !strings.Contains(r.stderr, "did not answer in time") {
		t.Errorf("%v", r)
	}
}

// close_all_connections closes a vhost's connections with the
// explanation, at most --limit of them; hash_password prints a hash the
// broker's users check a password against.
func TestCloseAllConnectionsAndHashPassword(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		closed := make(chan *amqp091.Error, 3)
		var ports []string
		for range 3 {
			conn := e.dial("guest", "guest")
			go func() { closed <- <-conn.NotifyClose(make(chan *amqp091.Error, 1)) }()
			_, port, _ := net.SplitHostPort(conn.LocalAddr().String())
			ports = append(ports, port)
		}
		ours := func() int {
			r := e.ctl("-s", "-p", e.vhost, "list_connections", "peer_port", "vhost")
			n := 0
			for _, p := range ports {
				if cells := row(r.stdout, p); len(cells) == 2 && cells[1] == e.vhost {
					n++
				}
			}
			return n
		}
		e.eventually(func() (bool, string) { return ours() == 3, "" }, "the three connections listed")
		out := e.ok("close_all_connections", "-p", e.vhost, "--limit", "2", "maintenance")
		if !strings.HasPrefix(out, "Closing all connections in vhost "+e.vhost) {
			t.Errorf("close_all_connections printed %q", out)
		}
		for range 2 {
			select {
			case err := <-closed:
				if err == nil || err.Code != amqp091.ConnectionForced || !strings.Contains(err.Reason, "maintenance") {
					t.Fatalf("closed with %v, want 320 with the explanation", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("--limit 2 closed fewer than 2 connections")
			}
		}
		e.eventually(func() (bool, string) { return ours() == 1, "" }, "one connection left after --limit 2")
		e.ok("close_all_connections", "-p", e.vhost, "again")
		select {
		case err := <-closed:
			if err == nil || err.Code != amqp091.ConnectionForced {
				t.Fatalf("closed with %v, want 320", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the last connection was not closed")
		}
		e.fails(ExitUsage, []string{"--limit"}, "close_all_connections", "--limit", "0", "x")

		out = e.ok("hash_password", "s3cret")
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if len(lines) != 2 || lines[0] != "Will hash password s3cret" {
			t.Fatalf("hash_password printed %q", out)
		}
		hash, err := base64.StdEncoding.DecodeString(lines[1])
		if err != nil {
			t.Fatalf("hash %q: %v", lines[1], err)
		}
		u := auth.StoredUser("x", auth.HashSHA256, hash, nil)
		if !u.CheckPassword("s3cret") || u.CheckPassword("other") {
			t.Fatalf("hash %q does not check the password", lines[1])
		}
		if q := e.ok("-q", "hash_password", "s3cret"); strings.Count(q, "\n") != 1 || q == out {
			t.Fatalf("hash_password -q printed %q", q)
		}
	})
}
