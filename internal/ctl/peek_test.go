package ctl

import (
	"strings"
	"testing"
)

// peek is brokerd's own (RabbitMQ has no peek): against RabbitMQ the test
// is skipped.
func TestPeek(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		if e.srv.name == "external" {
			t.Skip("peek is brokerd's; the external server is RabbitMQ")
		}
		ch := e.channel()
		if _, err := ch.QueueDeclare("pk", true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		e.publish(ch, "pk", "m1", "m2", "m3")
		out := e.ok("peek", "-p", e.vhost, "--count", "2", "pk")
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if len(lines) != 5 || lines[1] != "seq\texchange\trouting_key\tredelivered\tx_death\tpayload" ||
			!strings.HasSuffix(lines[2], "\tpk\tfalse\t\tm1") || !strings.HasSuffix(lines[3], "\tpk\tfalse\t\tm2") ||
			!strings.HasPrefix(lines[4], "More: --from ") {
			t.Fatalf("peek printed:\n%s", out)
		}
		from := strings.TrimPrefix(lines[4], "More: --from ")
		out = e.ok("-q", "peek", "-p", e.vhost, "--from", from, "pk")
		if !strings.HasSuffix(strings.TrimSpace(out), "\tpk\tfalse\t\tm3") || strings.Count(out, "\n") != 2 {
			t.Errorf("second page:\n%s", out)
		}
		// Nothing was consumed.
		for _, want := range []string{"m1", "m2", "m3"} {
			d, ok, err := ch.Get("pk", true)
			if err != nil || !ok || string(d.Body) != want || d.Redelivered {
				t.Fatalf("after peek: got %q %v %v redelivered=%v, want %s", d.Body, ok, err, d.Redelivered, want)
			}
		}
		e.fails(ExitUnavailable, []string{"Queue 'nope' in vhost '" + e.vhost + "' not found"}, "peek", "-p", e.vhost, "nope")
		e.fails(ExitUsage, []string{"--count"}, "peek", "-p", e.vhost, "--count", "0", "pk")
	})
}
