package ctl

import (
	"encoding/json"
	"net"
	"strings"
	"testing"
)

func TestStatus(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		_, amqpPort, err := net.SplitHostPort(strings.TrimSuffix(strings.SplitN(e.srv.amqp, "@", 2)[1], "/"))
		if err != nil {
			t.Fatal(err)
		}
		out := e.ok("status")
		for _, want := range []string{
			"Status of node ", "\nRuntime\n", "RabbitMQ version: ", "\nAlarms\n\n(none)\n",
			"\nTotals\n", "Queue count: ", "Virtual host count: ", "\nMessages\n", "Ready: ",
			"\nListeners\n", ", port: " + amqpPort + ", protocol: amqp, purpose: AMQP 0-9-1",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("status lacks %q:\n%s", want, out)
			}
		}
		if strings.Contains(e.ok("-q", "status"), "Status of node") {
			t.Error("-q status printed the informational line")
		}

		var rep statusReport
		if err := json.Unmarshal([]byte(e.ok("status", "--formatter", "json")), &rep); err != nil {
			t.Fatal(err)
		}
		if rep.NodeName == "" || rep.RabbitVersion == "" || rep.Alarms == nil || len(rep.Alarms) != 0 {
			t.Errorf("status json: %+v", rep)
		}
		// At least guest's vhost and the test's.
		if rep.Totals.VirtualHosts < 2 {
			t.Errorf("virtual_host_count %d", rep.Totals.VirtualHosts)
		}
		amqp := false
		for _, l := range rep.Listeners {
			amqp = amqp || (l.Protocol == "amqp" && l.Port.String() == amqpPort)
		}
		if !amqp {
			t.Errorf("status json lists no AMQP listener on port %s: %+v", amqpPort, rep.Listeners)
		}
		e.fails(ExitUsage, []string{"too many arguments"}, "status", "x")
	})
}
