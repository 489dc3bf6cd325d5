package ctl

import (
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// list_scheduled and cancel_scheduled are brokerd's own (RabbitMQ's
// plugin has neither): against RabbitMQ the test is skipped. Messages
// delayed by hours stay held while it runs.
func TestListCancelScheduled(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		if e.srv.name == "external" {
			t.Skip("scheduled messages are brokerd's; the external server is RabbitMQ")
		}
		ch := e.channel()
		if err := ch.ExchangeDeclare("later", "x-delayed-message", true, false, false, false, amqp091.Table{"x-delayed-type": "direct"}); err != nil {
			t.Fatal(err)
		}
		if err := ch.Confirm(false); err != nil {
			t.Fatal(err)
		}
		pub := func(key, body string, delayMS int64, tenant string) {
			t.Helper()
			dc, err := ch.PublishWithDeferredConfirm("later", key, false, false, amqp091.Publishing{Body: []byte(body),
				DeliveryMode: amqp091.Persistent, Headers: amqp091.Table{"x-delay": delayMS, "tenant": tenant}})
			if err != nil || !dc.Wait() {
				t.Fatalf("publish %s: %v", body, err)
			}
		}
		pub("k", "third", 3*3600_000, "a")
		pub("j", "first", 1*3600_000, "b")
		pub("k", "second", 2*3600_000, "b")
		pub("k", "fourth", 4*3600_000, "a")

		out := e.ok("list_scheduled", "-p", e.vhost, "later")
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if len(lines) != 6 || lines[0] != "Listing scheduled messages of exchange later in vhost "+e.vhost+" ..." ||
			lines[1] != "id\tdue\tin\trouting_key\tpayload_bytes" {
			t.Fatalf("list_scheduled printed:\n%s", out)
		}
		var ids []string
		for i, want := range []struct {
			key  string
			in   time.Duration
			size string
		}{{"j", time.Hour, "5"}, {"k", 2 * time.Hour, "6"}, {"k", 3 * time.Hour, "5"}, {"k", 4 * time.Hour, "6"}} {
			c := strings.Split(lines[2+i], "\t")
			// in: from now, to the second; a minute's slack for a slow run
			in, err := time.ParseDuration(c[2])
			if len(c) != 5 || c[3] != want.key || err != nil || in > want.in || in < want.in-time.Minute || c[4] != want.size || !strings.HasSuffix(c[1], "Z") {
				t.Fatalf("row %d %q, want key %s, in %s…, %s bytes:\n%s", i, lines[2+i], want.key, want.in, want.size, out)
			}
			ids = append(ids, c[0])
		}
		out = e.ok("-s", "list_scheduled", "-p", e.vhost, "--count", "2", "later", "id", "payload", "headers")
		if !hasLine(out, ids[0]+"\tfirst\t"+`{"tenant":"b","x-delay":3600000}`) || strings.Count(out, "\n") != 2 {
			t.Fatalf("list_scheduled --count 2 id payload headers printed:\n%s", out)
		}

		// By id, then by header (tenant a: third, fourth), then nothing left
		// to cancel by key j.
		if out := e.ok("-s", "cancel_scheduled", "-p", e.vhost, "later", "--id", ids[1]); out != "1\n" {
			t.Fatalf("cancel_scheduled --id printed %q, want 1", out)
		}
		if out := e.ok("-s", "cancel_scheduled", "-p", e.vhost, "later", "--header", "tenant=a", "--due-after", "1h"); out != "2\n" {
			t.Fatalf("cancel_scheduled --header tenant=a printed %q, want 2", out)
		}
		out = e.ok("-s", "list_scheduled", "-p", e.vhost, "later", "payload")
		if out != "first\n" {
			t.Fatalf("after the cancels, list_scheduled payload printed %q, want first", out)
		}
		if out := e.ok("-s", "--formatter", "json", "cancel_scheduled", "-p", e.vhost, "later", "--routing-key", "k"); out != "{\"cancelled\":0}\n" {
			t.Fatalf("cancel_scheduled --routing-key k --formatter json printed %q", out)
		}
		e.fails(ExitUsage, []string{"needs --id"}, "cancel_scheduled", "-p", e.vhost, "later")
		e.fails(ExitUsage, []string{"--all excludes"}, "cancel_scheduled", "-p", e.vhost, "later", "--all", "--routing-key", "k")
		e.fails(ExitUnavailable, []string{"Exchange 'nope' in vhost '" + e.vhost + "' not found"}, "list_scheduled", "-p", e.vhost, "nope")
		e.fails(ExitUnavailable, []string{"not a delayed exchange"}, "list_scheduled", "-p", e.vhost, "amq.direct")
		if out := e.ok("-s", "cancel_scheduled", "-p", e.vhost, "later", "--all"); out != "1\n" {
			t.Fatalf("cancel_scheduled --all printed %q, want 1", out)
		}
		if out := e.ok("-s", "list_exchanges", "-p", e.vhost, "name", "messages_delayed"); !hasLine(out, "later\t0") {
			t.Fatalf("list_exchanges printed:\n%s", out)
		}
	})
}
