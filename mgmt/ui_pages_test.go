// UI tests of the pages in Chromium: exchanges, users, connections, overview, queue chart, policies, phone width.

package mgmt_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/mgmt"
	"github.com/chromedp/chromedp"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// The exchanges list shows types and feature badges and filters by name
// through the API; an exchange's page lists its bindings both ways; a
// binding made in the UI routes (the API sees it) and one deleted there is
// gone; the queue page lists the queue's bindings and binds it too.
func TestUIExchanges(t *testing.T) {
	ctx := browser(t)
	a := startAPI(t)
	root := strings.TrimSuffix(a.base, "/api")
	a.must(201, "PUT", "/exchanges/%2F/orders.x", map[string]any{"type": "topic", "durable": true})
	a.must(201, "PUT", "/exchanges/%2F/orders.internal", map[string]any{"type": "fanout", "auto_delete": true, "internal": true})
	a.must(201, "PUT", "/queues/%2F/orders.q", map[string]any{"durable": true})
	a.must(201, "POST", "/bindings/%2F/e/orders.x/e/orders.internal", map[string]any{"routing_key": "all.#"})
	uiLogin(t, ctx, root, "guest", "guest")

	until(t, ctx, "exchanges list", chromedp.Click(`a[href="#/exchanges"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`tr[data-exchange="orders.x"]`, chromedp.ByQuery))
	if got := text(t, ctx, `tr[data-exchange="orders.x"] td.type`); got != "topic" {
		t.Errorf("orders.x type %q", got)
	}
	var feats string
	until(t, ctx, "features", chromedp.Evaluate(`[...document.querySelectorAll('tr[data-exchange="orders.internal"] td.features abbr')].map(b => b.textContent).join(" ")`, &feats))
	if got := feats; got != "AD I" {
		t.Errorf("orders.internal features %q, want AD I", got)
	}
	if got := text(t, ctx, `tr[data-exchange=""] th`); got != "(AMQP default)" {
		t.Errorf("default exchange shown as %q", got)
	}
	screenshot(t, ctx, "exchanges")
	until(t, ctx, "filter", chromedp.SendKeys("#x-filter", "orders", chromedp.ByQuery))
	poll(t, ctx, "filtered exchanges", `document.querySelectorAll("#exchanges tbody tr").length === 2 && document.querySelector("#x-count").textContent === "2 exchanges"`)

	until(t, ctx, "exchange page", chromedp.Click(`tr[data-exchange="orders.x"] a`, chromedp.ByQuery),
		chromedp.WaitVisible("#bindings-source", chromedp.ByQuery))
	if got := text(t, ctx, `#bindings-source tr[data-destination="orders.internal"] td.rk`); got != "all.#" {
		t.Errorf("exchange-to-exchange binding key %q", got)
	}
	until(t, ctx, "bind a queue",
		chromedp.SendKeys("#bind-form-dest", "orders.q", chromedp.ByQuery),
		chromedp.SendKeys("#bind-form-key", "order.*", chromedp.ByQuery),
		chromedp.Click(`#bind-form button[type="submit"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#bindings-source tr[data-destination="orders.q"]`, chromedp.ByQuery))
	if l := a.must(200, "GET", "/bindings/%2F/e/orders.x/q/orders.q", nil).list(t); len(l) != 1 || l[0]["routing_key"] != "order.*" {
		t.Fatalf("binding made in the UI: %v", l)
	}
	// A refusal shows the API's reason.
	until(t, ctx, "bind to a missing queue",
		chromedp.SendKeys("#bind-form-dest", "nope", chromedp.ByQuery),
		chromedp.Click(`#bind-form button[type="submit"]`, chromedp.ByQuery),
		chromedp.WaitVisible("#bind-msg .error", chromedp.ByQuery))
	if got, want := text(t, ctx, "#bind-msg .error"), a.do("POST", "/bindings/%2F/e/orders.x/q/nope", map[string]any{"routing_key": ""}).reason(t); got != want {
		t.Errorf("refused binding shows %q, want the API's %q", got, want)
	}
	screenshot(t, ctx, "exchange")

	until(t, ctx, "the internal exchange's page", chromedp.Click(`#bindings-source tr[data-destination="orders.internal"] td:nth-child(2) a`, chromedp.ByQuery),
		chromedp.WaitVisible(`#bindings-destination tr[data-source="orders.x"]`, chromedp.ByQuery))
	until(t, ctx, "unbind", chromedp.Click(`#bindings-destination tr[data-source="orders.x"] button.unbind`, chromedp.ByQuery),
		chromedp.WaitVisible(`p#bindings-destination`, chromedp.ByQuery))
	if l := a.must(200, "GET", "/bindings/%2F/e/orders.x/e/orders.internal", nil).list(t); len(l) != 0 {
		t.Errorf("binding deleted in the UI is still there: %v", l)
	}

	// The queue's page: the default exchange's binding and orders.x's.
	until(t, ctx, "queue page", chromedp.Navigate(root+"/#/queue/%2F/orders.q"),
		chromedp.WaitVisible(`#queue-bindings tr[data-source="orders.x"]`, chromedp.ByQuery))
	poll(t, ctx, "default binding", `document.querySelector('#queue-bindings tr[data-source=""] td.rk')?.textContent === "orders.q" && !document.querySelector('#queue-bindings tr[data-source=""] button')`)
	until(t, ctx, "bind from the queue page",
		chromedp.SendKeys("#qbind-form-source", "amq.direct", chromedp.ByQuery),
		chromedp.SendKeys("#qbind-form-key", "direct-key", chromedp.ByQuery),
		chromedp.Click(`#qbind-form button[type="submit"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#queue-bindings tr[data-source="amq.direct"]`, chromedp.ByQuery))
	a.must(200, "GET", "/bindings/%2F/e/amq.direct/q/orders.q/direct-key", nil)
}

// reason is an error reply's reason.
func (r resp) reason(t *testing.T) string {
	t.Helper()
	var e struct{ Reason string }
	if err := json.Unmarshal(r.body, &e); err != nil || r.status < 400 || e.Reason == "" {
		t.Fatalf("not an error reply: %d %s", r.status, r.body)
	}
	return e.Reason
}

// Users and permissions in the UI: a user added there logs in with its
// password and has its tags; a permission the API refuses (a bad regular
// expression) shows the API's reason; one set there applies; clearing it
// and deleting the user take them away.
func TestUIUsersAndPermissions(t *testing.T) {
	ctx := browser(t)
	a := startAPI(t)
	root := strings.TrimSuffix(a.base, "/api")
	uiLogin(t, ctx, root, "guest", "guest")
	until(t, ctx, "users page", chromedp.Click(`a[href="#/users"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#users tr[data-user="guest"]`, chromedp.ByQuery))
	if got := text(t, ctx, `#users tr[data-user="guest"] td.tags`); got != "administrator" {
		t.Errorf("guest's tags shown %q", got)
	}
	until(t, ctx, "add a user",
		chromedp.SendKeys("#u-name", "alice", chromedp.ByQuery),
		chromedp.SendKeys("#u-password", "s3cret", chromedp.ByQuery),
		chromedp.SendKeys("#u-tags", "monitoring, management", chromedp.ByQuery),
		chromedp.Click(`#user-form button[type="submit"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#users tr[data-user="alice"]`, chromedp.ByQuery))
	if got := text(t, ctx, `#users tr[data-user="alice"] td.tags`); got != "monitoring, management" {
		t.Errorf("alice's tags shown %q", got)
	}
	if r := a.as("alice", "s3cret", "GET", "/whoami", nil); r.status != 200 {
		t.Fatalf("alice cannot log in: %d %s", r.status, r.body)
	}

	bad := map[string]any{"configure": "(", "write": ".*", "read": ".*"}
	want := a.do("PUT", "/permissions/%2F/alice", bad).reason(t)
	until(t, ctx, "a refused permission",
		setValue("#perm-user", "alice"),
		setValue("#perm-configure", "("),
		chromedp.Click(`#perm-form button[type="submit"]`, chromedp.ByQuery),
		chromedp.WaitVisible("#perm-msg .error", chromedp.ByQuery))
	if got := text(t, ctx, "#perm-msg .error"); got != want {
		t.Errorf("refused permission shows %q, want the API's %q", got, want)
	}
	until(t, ctx, "set a permission",
		setValue("#perm-configure", "^alice\\."),
		setValue("#perm-read", "^$"),
		chromedp.Click(`#perm-form button[type="submit"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#permissions tr[data-user="alice"]`, chromedp.ByQuery))
	if got := text(t, ctx, `#permissions tr[data-user="alice"] td.configure`); got != `^alice\.` {
		t.Errorf("alice's configure shown %q", got)
	}
	p := a.must(200, "GET", "/permissions/%2F/alice", nil).object(t)
	if p["configure"] != `^alice\.` || p["write"] != ".*" || p["read"] != "^$" {
		t.Errorf("permission set in the UI: %v", p)
	}
	screenshot(t, ctx, "users")

	until(t, ctx, "clear the permission",
		chromedp.Click(`#permissions tr[data-user="alice"] button.clear`, chromedp.ByQuery),
		chromedp.WaitNotPresent(`#permissions tr[data-user="alice"]`, chromedp.ByQuery))
	a.must(404, "GET", "/permissions/%2F/alice", nil)
	until(t, ctx, "delete the user",
		chromedp.Click(`#users tr[data-user="alice"] button.delete`, chromedp.ByQuery),
		chromedp.WaitNotPresent(`#users tr[data-user="alice"]`, chromedp.ByQuery))
	a.must(404, "GET", "/users/alice", nil)
	if got := text(t, ctx, "#status"); got != "User alice deleted" {
		t.Errorf("announced %q", got)
	}
}

// Connections and channels: an amqp091-go connection is listed with its
// user, vhost and channel, the channel with its prefetch, unacked count
// and consumer; closing it from the UI with a reason closes the client's
// connection with 320 CONNECTION_FORCED and that reason.
func TestUIConnections(t *testing.T) {
	ctx := browser(t)
	a := startAPI(t)
	root := strings.TrimSuffix(a.base, "/api")
	a.must(201, "PUT", "/queues/%2F/work", map[string]any{})
	conn, err := amqp091.DialConfig("amqp://guest:guest@"+a.Addr+"/", amqp091.Config{Properties: amqp091.Table{"connection_name": "ui-conn"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	closed := conn.NotifyClose(make(chan *amqp091.Error, 1))
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Qos(7, 0, false); err != nil {
		t.Fatal(err)
	}
	if err := ch.Publish("", "work", false, false, amqp091.Publishing{Body: []byte("job")}); err != nil {
		t.Fatal(err)
	}
	dels, err := ch.Consume("work", "worker", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-dels // one unacknowledged delivery

	uiLogin(t, ctx, root, "guest", "guest")
	until(t, ctx, "connections page", chromedp.Click(`a[href="#/connections"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#connections tr[data-client-name="ui-conn"]`, chromedp.ByQuery))
	row := `#connections tr[data-client-name="ui-conn"] `
	if u, v, n := text(t, ctx, row+"td.user"), text(t, ctx, row+"td.vhost"), text(t, ctx, row+"td.channels"); u != "guest" || v != "/" || n != "1" {
		t.Errorf("connection shows user %q vhost %q channels %q", u, v, n)
	}
	poll(t, ctx, "channel counts", `(() => { const r = document.querySelector("#channels tbody tr[data-channel]");
		return !!r && r.querySelector(".prefetch").textContent === "7" && r.querySelector(".unacked").textContent === "1" && r.querySelector(".consumers").textContent === "1"; })()`)
	screenshot(t, ctx, "connections")

	// The list follows new connections (a poll every 5 s).
	conn2, err := amqp091.DialConfig("amqp://guest:guest@"+a.Addr+"/", amqp091.Config{Properties: amqp091.Table{"connection_name": "ui-conn-2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	poll(t, ctx, "second connection listed", `!!document.querySelector('#connections tr[data-client-name="ui-conn-2"]')`)

	const reason = "maintenance window"
	until(t, ctx, "close the connection",
		chromedp.Click(row+"button.close", chromedp.ByQuery),
		chromedp.WaitVisible("#close-reason", chromedp.ByQuery),
		setValue("#close-reason", ""),
		chromedp.SendKeys("#close-reason", reason, chromedp.ByQuery),
		chromedp.Click(`#close-form button[type="submit"]`, chromedp.ByQuery))
	select {
	case e := <-closed:
		if e == nil || e.Code != amqp091.ConnectionForced || !strings.Contains(e.Reason, reason) {
			t.Fatalf("client's connection closed with %v, want 320 with %q", e, reason)
		}
	case <-ctx.Done():
		t.Fatal("the client's connection was not closed")
	}
	poll(t, ctx, "connection gone", `!document.querySelector('#connections tr[data-client-name="ui-conn"]') && !document.querySelector("#channels tbody tr[data-channel]")`)
}

// The overview's rates come from the growth of the counters between two
// polls 5 s apart: 10 publishes, 4 gets and 4 acks made right after the
// first poll show at the second, as counts over the interval. A memory
// alarm raised while the page is open shows as an alert.
func TestUIOverviewRatesAndAlarms(t *testing.T) {
	ctx := browser(t)
	a := startAPI(t)
	root := strings.TrimSuffix(a.base, "/api")
	_, ch := a.Channel(t)
	if _, err := ch.QueueDeclare("rated", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	uiLogin(t, ctx, root, "guest", "guest")
	if got := text(t, ctx, "#ov-alarms"); got != "No alarms." {
		t.Errorf("alarms shown %q", got)
	}
	if got := text(t, ctx, "#rate-publish"); got != "—" {
		t.Errorf("publish rate before a second poll: %q", got)
	}
	var before string
	until(t, ctx, "samples", chromedp.Evaluate(`document.querySelector("main").dataset.samples`, &before))
	for i := range 10 {
		if err := ch.Publish("", "rated", false, false, amqp091.Publishing{Body: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	for range 4 {
		m, ok, err := ch.Get("rated", false)
		if err != nil || !ok || m.Ack(false) != nil {
			t.Fatalf("get: %v %v", ok, err)
		}
	}
	waitFor(t, func() bool { return a.must(200, "GET", "/queues/%2F/rated", nil).object(t)["messages"] == 6.0 })
	var after string
	until(t, ctx, "samples", chromedp.Evaluate(`document.querySelector("main").dataset.samples`, &after))
	if before != "1" || after != before {
		t.Fatalf("the page polled while the test published (samples %s then %s); too slow a machine for this test", before, after)
	}
	poll(t, ctx, "second sample", `document.querySelector("main").dataset.samples === "2"`)
	for k, want := range map[string]string{"publish": "10", "deliver_get": "4", "ack": "4", "redeliver": "0"} {
		var delta, shown string
		until(t, ctx, "rate "+k,
			chromedp.Evaluate(`document.querySelector("#rate-`+k+`").dataset.delta`, &delta),
			chromedp.Evaluate(`document.querySelector("#rate-`+k+`").textContent`, &shown))
		var r float64
		if _, err := fmt.Sscan(shown, &r); err != nil || delta != want {
			t.Errorf("%s: %q per second from a growth of %s, want a growth of %s", k, shown, delta, want)
		}
		// Over 5 s (the interval, give or take the poll's own time).
		if n, _ := strconv.Atoi(want); n > 0 && (r < float64(n)/7 || r > float64(n)/4) {
			t.Errorf("%s rate %v for %d in about 5 s", k, r, n)
		}
	}
	if got := text(t, ctx, "#ov-messages"); got != "6" {
		t.Errorf("messages total %q after the poll", got)
	}
	screenshot(t, ctx, "overview-rates")

	a.Broker.SetAlarm(broker.AlarmMemory, true)
	defer a.Broker.SetAlarm(broker.AlarmMemory, false)
	poll(t, ctx, "alarm shown", `document.querySelector('#ov-alarms.alarm[role="alert"]')?.textContent.includes("Resource alarm: memory")`)
	screenshot(t, ctx, "overview-alarm")
}

// The queue page's depth chart follows the queue every 5 s: its label
// gives the latest ready and unacked counts, the lines get a point per
// poll, the details' counts follow too, and a legend names the lines.
func TestUIQueueDepthChart(t *testing.T) {
	ctx := browser(t)
	a := startAPI(t)
	root := strings.TrimSuffix(a.base, "/api")
	_, ch := a.Channel(t)
	if _, err := ch.QueueDeclare("depth", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	publish := func(n int) {
		for i := range n {
			if err := ch.Publish("", "depth", false, false, amqp091.Publishing{Body: []byte{byte(i)}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish(3)
	waitFor(t, func() bool { return a.must(200, "GET", "/queues/%2F/depth", nil).object(t)["messages"] == 3.0 })
	uiLogin(t, ctx, root, "guest", "guest")
	until(t, ctx, "queue page", chromedp.Navigate(root+"/#/queue/%2F/depth"),
		chromedp.WaitVisible("#depth-chart", chromedp.ByQuery))
	var label string
	until(t, ctx, "chart label", chromedp.AttributeValue("#depth-chart", "aria-label", &label, nil, chromedp.ByQuery))
	if !strings.Contains(label, "now 3 ready, 0 unacked") {
		t.Errorf("chart label %q", label)
	}
	if got := text(t, ctx, ".legend"); !strings.Contains(got, "Ready") || !strings.Contains(got, "Unacked") {
		t.Errorf("legend %q", got)
	}

	// One taken without an ack, two more published: 4 ready, 1 unacked.
	if _, ok, err := ch.Get("depth", false); err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	publish(2)
	waitFor(t, func() bool { return a.must(200, "GET", "/queues/%2F/depth", nil).object(t)["messages_ready"] == 4.0 })
	poll(t, ctx, "chart follows the queue", `document.querySelector("#depth-chart").getAttribute("aria-label").includes("now 4 ready, 1 unacked; peak 4")`)
	var points int
	until(t, ctx, "points", chromedp.Evaluate(`document.querySelector("#depth-chart polyline.ready").points.numberOfItems`, &points))
	if points < 2 {
		t.Errorf("ready line has %d points after a poll", points)
	}
	if r, u := text(t, ctx, "#q-ready"), text(t, ctx, "#q-unacked"); r != "4" || u != "1" {
		t.Errorf("details show ready %q unacked %q", r, u)
	}
	screenshot(t, ctx, "queue-chart")
}

// At phone width (390×844) every page fits: nothing scrolls sideways
// (wide tables scroll inside their own box).
func TestUIPhoneWidth(t *testing.T) {
	ctx := browser(t)
	a := startAPI(t)
	root := strings.TrimSuffix(a.base, "/api")
	a.must(201, "PUT", "/queues/%2F/a-rather-long-queue-name.with.several.parts.dlq", map[string]any{"durable": true,
		"arguments": map[string]any{"x-dead-letter-exchange": "amq.direct", "x-message-ttl": 1000, "x-max-length": 10}})
	a.must(201, "PUT", "/users/phone", map[string]any{"password": "pw", "tags": "management"})
	conn, err := amqp091.Dial("amqp://guest:guest@" + a.Addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Channel(); err != nil {
		t.Fatal(err)
	}
	uiLogin(t, ctx, root, "guest", "guest")
	until(t, ctx, "phone width", chromedp.EmulateViewport(390, 844))
	for _, page := range []struct{ hash, ready string }{
		{"#/overview", "#rates"},
		{"#/nodes", "#health-checks"},
		{"#/queues", "#queues"},
		{"#/queue/%2F/a-rather-long-queue-name.with.several.parts.dlq", "#depth-chart"},
		{"#/exchanges", "#exchanges"},
		{"#/exchange/%2F/amq.direct", "#bind-form"},
		{"#/connections", "#channels"},
		{"#/users", "#permissions"},
		{"#/policies", "#policy-form"},
		{"#/shovels", "#shovel-form"},
		{"#/limits", "#user-limits-form"},
	} {
		until(t, ctx, page.hash, chromedp.Navigate(root+"/"+page.hash), chromedp.WaitVisible(page.ready, chromedp.ByQuery))
		var width, inner int
		until(t, ctx, "widths", chromedp.Evaluate(`document.documentElement.scrollWidth`, &width), chromedp.Evaluate(`window.innerWidth`, &inner))
		if width > inner {
			// Name what sticks out, to tell which rule to fix.
			var wide string
			chromedp.Run(ctx, chromedp.Evaluate(`[...document.querySelectorAll("body *")].filter(e => e.getBoundingClientRect().right > innerWidth).slice(0, 8)
				.map(e => e.tagName + (e.id ? "#" + e.id : "") + " right " + Math.round(e.getBoundingClientRect().right)).join("; ")`, &wide))
			t.Errorf("%s scrolls sideways at phone width: %d > %d (%s)", page.hash, width, inner, wide)
		}
		screenshot(t, ctx, "phone-"+strings.Split(strings.TrimPrefix(page.hash, "#/"), "/")[0])
	}
}

// A policy's Edit button fills the form with it and moves focus there;
// saving replaces the policy under the same name.
func TestUIPolicyEdit(t *testing.T) {
	ctx := browser(t)
	a := startAPI(t)
	root := strings.TrimSuffix(a.base, "/api")
	a.must(201, "PUT", "/policies/%2F/edit-me", map[string]any{"pattern": `^e\.`, "apply-to": "queues", "priority": 3,
		"definition": map[string]any{"message-ttl": 1000}})
	uiLogin(t, ctx, root, "guest", "guest")
	until(t, ctx, "policies page", chromedp.Navigate(root+"/#/policies"),
		chromedp.WaitVisible(`tr[data-policy="edit-me"] button.edit`, chromedp.ByQuery),
		chromedp.Click(`tr[data-policy="edit-me"] button.edit`, chromedp.ByQuery))
	var name, pattern, apply, prio, def, focused string
	until(t, ctx, "form filled",
		chromedp.Value("#p-name", &name, chromedp.ByQuery), chromedp.Value("#p-pattern", &pattern, chromedp.ByQuery),
		chromedp.Value("#p-apply", &apply, chromedp.ByQuery), chromedp.Value("#p-priority", &prio, chromedp.ByQuery),
		chromedp.Value("#p-definition", &def, chromedp.ByQuery),
		chromedp.Evaluate(`document.activeElement.id`, &focused))
	if name != "edit-me" || pattern != `^e\.` || apply != "queues" || prio != "3" || strings.Join(strings.Fields(def), "") != `{"message-ttl":1000}` {
		t.Errorf("form: name %q pattern %q apply-to %q priority %q definition %q", name, pattern, apply, prio, def)
	}
	if focused != "p-name" {
		t.Errorf("focus on %q after Edit", focused)
	}
	until(t, ctx, "save",
		setValue("#p-definition", `{"message-ttl": 2000, "max-length": 5}`),
		chromedp.Click(`#policy-form button[type="submit"]`, chromedp.ByQuery))
	want := map[string]any{"message-ttl": 2000.0, "max-length": 5.0}
	waitFor(t, func() bool {
		return reflect.DeepEqual(a.must(200, "GET", "/policies/%2F/edit-me", nil).object(t)["definition"], want)
	})
	p := a.must(200, "GET", "/policies/%2F/edit-me", nil).object(t)
	if p["pattern"] != `^e\.` || p["apply-to"] != "queues" || p["priority"] != 3.0 {
		t.Errorf("edited policy %v", p)
	}
	if n := len(a.must(200, "GET", "/policies", nil).list(t)); n != 1 {
		t.Errorf("%d policies after the edit, want 1", n)
	}
	poll(t, ctx, "list shows the edit", `document.querySelector('tr[data-policy="edit-me"] pre')?.textContent.includes('"max-length":5')`)
}

// The overview shows the nodes to a monitoring user: on a cluster each
// node with its role, whether the leader reaches it, its lag and last
// contact, and the answering node's uptime and memory; the page passes
// the accessibility check. A user without the monitoring tag sees the
// overview without the table (asking would be refused, and log out).
func TestUIOverviewNodes(t *testing.T) {
	ctx := browser(t)
	a := startAPIWith(t, mgmt.Options{Cluster: leaderStatus, Node: mgmt.NodeOptions{DataDir: t.TempDir()}})
	root := strings.TrimSuffix(a.base, "/api")
	uiLogin(t, ctx, root, "guest", "guest")
	poll(t, ctx, "node table", `document.querySelectorAll("#nodes tbody tr").length === 3`)
	var rows []map[string]string
	until(t, ctx, "rows", chromedp.Evaluate(`[...document.querySelectorAll("#nodes tbody tr")].map(r => ({
		name: r.dataset.node, running: r.dataset.running,
		cells: [...r.children].map(c => c.textContent.trim()).join("|")}))`, &rows))
	want := []struct{ name, running, prefix, lag string }{
		{"n1", "true", "n1|leader|running|", "|0|"},
		{"n2", "true", "n2|follower|running|||", "|0|"},
		{"n3", "false", "n3|follower|not running|||", "|40|"},
	}
	for i, w := range want {
		r := rows[i]
		if r["name"] != w.name || r["running"] != w.running || !strings.HasPrefix(r["cells"], w.prefix) || !strings.Contains(r["cells"], w.lag) {
			t.Errorf("row %d: %v, want %s running=%s starting %q with lag %q", i, r, w.name, w.running, w.prefix, w.lag)
		}
	}
	if cells := rows[0]["cells"]; !strings.Contains(cells, "iB|") || !strings.HasSuffix(cells, "|0|") {
		t.Errorf("the leader's row %q: no memory or disk figure, or a last contact with itself", cells)
	}
	if !strings.HasSuffix(rows[2]["cells"], " ms ago") {
		t.Errorf("n3's row %q has no last contact", rows[2]["cells"])
	}
	if got := text(t, ctx, "#ov-node"); !strings.Contains(got, "on n1, cluster brokerd") {
		t.Errorf("node line %q", got)
	}
	until(t, ctx, "load axe", chromedp.Evaluate(axeScript(t)+";true", nil))
	axeCheck(t, ctx, "overview-nodes")
	screenshot(t, ctx, "overview-nodes")

	a.must(201, "PUT", "/users/plain", map[string]any{"password": "pw", "tags": "management"})
	a.must(201, "PUT", "/permissions/%2F/plain", map[string]any{"configure": ".*", "write": ".*", "read": ".*"})
	until(t, ctx, "log out", chromedp.Click("#logout", chromedp.ByQuery))
	uiLogin(t, ctx, root, "plain", "pw")
	poll(t, ctx, "overview drawn", `document.querySelector("#ov-node") !== null`)
	var n int
	until(t, ctx, "node table", chromedp.Evaluate(`document.querySelectorAll("#nodes").length`, &n))
	if n != 0 {
		t.Error("a management user sees the node table")
	}
}
