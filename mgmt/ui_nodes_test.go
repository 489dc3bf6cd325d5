// UI tests of the nodes page in Chromium: resources against their limits, alarms, and RabbitMQ's health checks.

package mgmt_test

import (
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
	"github.com/brokerd/brokerd/mgmt"
	"github.com/chromedp/chromedp"
)

// The nodes page shows the node's memory, disk, descriptors, sockets,
// processes, uptime and run queue against their limits, and every health
// check passed or failed with its reason: a memory alarm raised shows on
// the memory figure and fails the alarms checks with the alarm named; a
// TLS listener's certificate expiring in ten days fails
// certificate-expiration/1/months with its expiry date; the listeners'
// port and protocol checks pass. Once the alarm clears, the page's next
// poll shows the checks passed. A user without the monitoring tag sees the
// checks without the node table.
func TestUINodes(t *testing.T) {
	ctx := browser(t)
	notAfter := time.Now().Add(10 * 24 * time.Hour).UTC().Truncate(time.Second)
	cert := writeExpiringCert(t, notAfter)
	inst := brokertest.Start(t, brokertest.Config{Server: amqp.ServerConfig{MaxConnections: 100}})
	addr, err := net.ResolveTCPAddr("tcp", inst.Addr)
	if err != nil {
		t.Fatal(err)
	}
	// The TLS listener is only listed (the checks read the options, as
	// they read the daemon's listeners): nothing listens on its port.
	tls := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5671}
	a := &api{t: t, Instance: inst, opts: mgmt.Options{
		Listeners: []mgmt.Listener{{Protocol: "amqp", Addr: addr}, {Protocol: "amqp/ssl", Addr: tls, CertFile: cert}},
		Node: mgmt.NodeOptions{AMQP: inst.Server(), DataDir: t.TempDir(),
			MemoryLimit: func() uint64 { return 1 << 40 }, DiskFreeLimit: func() uint64 { return 50 << 20 }},
	}}
	a.serve()
	t.Cleanup(a.stopAPI)
	root := strings.TrimSuffix(a.base, "/api")
	conn := a.Dial(t)
	defer conn.Close()
	a.Broker.SetAlarm(broker.AlarmMemory, true)
	defer a.Broker.SetAlarm(broker.AlarmMemory, false)

	uiLogin(t, ctx, root, "guest", "guest")
	until(t, ctx, "nodes page", chromedp.Click(`a[href="#/nodes"]`, chromedp.ByQuery))
	poll(t, ctx, "nodes page loaded", `document.querySelector("main").dataset.loaded === "#/nodes"`)
	node := a.must(200, "GET", "/nodes", nil).list(t)[0]["name"].(string)
	row := `#nodes-detail tr[data-node=` + jsString(node) + `] `
	cells := map[string]*regexp.Regexp{
		"running": regexp.MustCompile(`^running$`),
		"uptime":  regexp.MustCompile(`^\d+s$|^\d+m \d+s$`),
		"mem":     regexp.MustCompile(`^\d+(\.\d)? [KMG]iB / 1\.0 TiB memory alarm$`),
		"disk":    regexp.MustCompile(`^\d+(\.\d)? [KMGT]iB / 50\.0 MiB$`),
		"fd":      regexp.MustCompile(`^[\d,]+ / [\d,]+$`),
		"sockets": regexp.MustCompile(`^1 / 100$`),
		"proc":    regexp.MustCompile(`^[\d,]+ / 1,048,576$`),
		"runq":    regexp.MustCompile(`^\d+$`),
	}
	for cls, re := range cells {
		if got := text(t, ctx, row+"td."+cls); !re.MatchString(got) {
			t.Errorf("%s shown %q, want %v", cls, got, re)
		}
	}

	checks := func() map[string][2]string {
		var rows [][3]string
		until(t, ctx, "checks", chromedp.Evaluate(`[...document.querySelectorAll("#health-checks tbody tr")].map(r =>
			[r.dataset.check, r.querySelector(".result").textContent, r.querySelector(".details").textContent])`, &rows))
		out := map[string][2]string{}
		for _, r := range rows {
			out[r[0]] = [2]string{r[1], r[2]}
		}
		return out
	}
	port := strings.TrimPrefix(addr.String(), "127.0.0.1:")
	got := checks()
	want := map[string]struct{ result, details string }{
		"alarms":                          {"failed", "There are alarms in effect in the cluster; alarms: memory on " + node},
		"local-alarms":                    {"failed", "There are alarms in effect in the cluster; alarms: memory on " + node},
		"virtual-hosts":                   {"passed", ""},
		"certificate-expiration/1/months": {"failed", "Certificates expiring" + "amqp/ssl on 127.0.0.1:5671: certificate " + cert + " expires " + notAfter.Format("2006-01-02 ") + strings.TrimPrefix(notAfter.Format("15:04:05"), "0")},
		"is-in-service":                   {"passed", ""},
		"ready-to-accept-clients":         {"passed", ""},
		"below-node-connection-limit":     {"passed", "connections: 1; limit: 100"},
		"port-listener/" + port:           {"passed", "port: " + port},
		"port-listener/5671":              {"passed", "port: 5671"},
		"protocol-listener/amqp":          {"passed", "protocol: amqp"},
		"protocol-listener/amqp%2Fssl":    {"passed", "protocol: amqp/ssl"},
	}
	for path, w := range want {
		if g, ok := got[path]; !ok || g[0] != w.result || g[1] != w.details {
			t.Errorf("check %s shown %q, want %s %q", path, g, w.result, w.details)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d checks shown, want %d: %v", len(got), len(want), got)
	}
	screenshot(t, ctx, "nodes")

	a.Broker.SetAlarm(broker.AlarmMemory, false)
	poll(t, ctx, "alarm cleared at the next poll", `document.querySelector('#health-checks tr[data-check="alarms"]').dataset.result === "passed" &&
		document.querySelector('#health-checks tr[data-check="local-alarms"]').dataset.result === "passed" &&
		document.querySelector("#nodes-detail tbody tr").dataset.memAlarm === "false"`)
	if got := text(t, ctx, row+"td.mem"); strings.Contains(got, "alarm") {
		t.Errorf("memory shown %q after the alarm cleared", got)
	}

	a.must(201, "PUT", "/users/plain", map[string]any{"password": "pw", "tags": "management"})
	until(t, ctx, "log out", chromedp.Click("#logout", chromedp.ByQuery))
	uiLogin(t, ctx, root, "plain", "pw")
	until(t, ctx, "nodes page", chromedp.Navigate(root+"/#/nodes"))
	poll(t, ctx, "checks shown without nodes", `document.querySelector("main").dataset.loaded === "#/nodes" &&
		document.querySelectorAll("#health-checks tbody tr").length > 0 && !document.querySelector("#nodes-detail")`)
	if got := text(t, ctx, "#nodes-section p"); !strings.Contains(got, "monitoring") {
		t.Errorf("a management user is told %q", got)
	}
}
