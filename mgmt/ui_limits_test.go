// UI tests of the limits page and the users page's topic permissions in Chromium.

package mgmt_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// The limits page lists the virtual hosts' and the users' limits; a limit
// set with a form is stored (RabbitMQ's {"value": n} under the limit's
// name), and Clear asks, then removes that limit alone.
func TestUILimits(t *testing.T) {
	ctx := browser(t)
	a, _ := startDaemonAPI(t)
	root := strings.TrimSuffix(a.base, "/api")
	a.must(201, "PUT", "/vhosts/tenant", map[string]any{})
	a.must(201, "PUT", "/users/alice", map[string]any{"password": "pw", "tags": ""})
	needServed(t, a.do("PUT", "/vhost-limits/tenant/max-connections", map[string]any{"value": 10}), "PUT /api/vhost-limits/tenant/max-connections")
	needServed(t, a.do("PUT", "/user-limits/alice/max-channels", map[string]any{"value": 20}), "PUT /api/user-limits/alice/max-channels")

	uiLogin(t, ctx, root, "guest", "guest")
	until(t, ctx, "limits page", chromedp.Click(`a[href="#/limits"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#vhost-limits tr[data-vhost="tenant"]`, chromedp.ByQuery))
	vrow := func(name string) string { return `#vhost-limits tr[data-vhost="tenant"][data-limit="` + name + `"]` }
	urow := func(name string) string { return `#user-limits tr[data-user="alice"][data-limit="` + name + `"]` }
	if got := text(t, ctx, vrow("max-connections")+" td.value"); got != "10" {
		t.Errorf("tenant's max-connections shown %q", got)
	}
	if got := text(t, ctx, urow("max-channels")+" td.value"); got != "20" {
		t.Errorf("alice's max-channels shown %q", got)
	}

	until(t, ctx, "set a vhost limit",
		chromedp.SetValue("#vhost-limits-owner", "tenant", chromedp.ByQuery),
		chromedp.SetValue("#vhost-limits-name", "max-queues", chromedp.ByQuery),
		chromedp.SendKeys("#vhost-limits-value", "5", chromedp.ByQuery),
		chromedp.Click(`#vhost-limits-form button[type="submit"]`, chromedp.ByQuery),
		chromedp.WaitVisible(vrow("max-queues"), chromedp.ByQuery))
	wantLimits := func(path, key, owner string, want map[string]any) {
		t.Helper()
		l := a.must(200, "GET", path, nil).list(t)
		if len(l) != 1 || l[0][key] != owner || !reflect.DeepEqual(l[0]["value"], want) {
			t.Errorf("GET %s: %v, want %s %s with %v", path, l, key, owner, want)
		}
	}
	wantLimits("/vhost-limits/tenant", "vhost", "tenant", map[string]any{"max-connections": 10.0, "max-queues": 5.0})
	until(t, ctx, "set a user limit",
		chromedp.SetValue("#user-limits-owner", "alice", chromedp.ByQuery),
		chromedp.SetValue("#user-limits-name", "max-connections", chromedp.ByQuery),
		chromedp.SendKeys("#user-limits-value", "2", chromedp.ByQuery),
		chromedp.Click(`#user-limits-form button[type="submit"]`, chromedp.ByQuery),
		chromedp.WaitVisible(urow("max-connections"), chromedp.ByQuery))
	wantLimits("/user-limits/alice", "user", "alice", map[string]any{"max-connections": 2.0, "max-channels": 20.0})
	if got := text(t, ctx, "#status"); got != "Limit max-connections of alice set to 2" {
		t.Errorf("announced %q", got)
	}
	screenshot(t, ctx, "limits")
	until(t, ctx, "load axe", chromedp.Evaluate(axeScript(t)+";true", nil))
	axeCheck(t, ctx, "limits")

	until(t, ctx, "clear, no", chromedp.Evaluate(`window.confirm = () => false`, nil),
		clickNow(vrow("max-connections")+" button.clear"),
		chromedp.Evaluate(`window.confirm = () => true`, nil))
	wantLimits("/vhost-limits/tenant", "vhost", "tenant", map[string]any{"max-connections": 10.0, "max-queues": 5.0})
	until(t, ctx, "clear, yes", clickNow(vrow("max-connections")+" button.clear"),
		chromedp.WaitNotPresent(vrow("max-connections"), chromedp.ByQuery))
	wantLimits("/vhost-limits/tenant", "vhost", "tenant", map[string]any{"max-queues": 5.0})
	until(t, ctx, "clear a user limit", clickNow(urow("max-channels")+" button.clear"),
		chromedp.WaitNotPresent(urow("max-channels"), chromedp.ByQuery))
	wantLimits("/user-limits/alice", "user", "alice", map[string]any{"max-connections": 2.0})
}

// The users page lists topic permissions; one set with its form is
// stored with the exchange and patterns given, a refused one shows the
// API's reason, and Clear asks, then removes the permission on that
// exchange alone.
func TestUITopicPermissions(t *testing.T) {
	ctx := browser(t)
	a, _ := startDaemonAPI(t)
	root := strings.TrimSuffix(a.base, "/api")
	a.must(201, "PUT", "/users/alice", map[string]any{"password": "pw", "tags": ""})
	needServed(t, a.do("PUT", "/topic-permissions/%2F/alice", map[string]any{"exchange": "amq.topic", "write": `^alice\.`, "read": ".*"}),
		"PUT /api/topic-permissions/%2F/alice")

	uiLogin(t, ctx, root, "guest", "guest")
	row := func(x string) string {
		return `#topic-permissions tr[data-user="alice"][data-vhost="/"][data-exchange="` + x + `"]`
	}
	until(t, ctx, "users page", chromedp.Click(`a[href="#/users"]`, chromedp.ByQuery),
		chromedp.WaitVisible(row("amq.topic"), chromedp.ByQuery))
	if w, r := text(t, ctx, row("amq.topic")+" td.write"), text(t, ctx, row("amq.topic")+" td.read"); w != `^alice\.` || r != ".*" {
		t.Errorf("amq.topic's patterns shown write %q read %q", w, r)
	}

	bad := map[string]any{"exchange": "events", "write": "(", "read": ".*"}
	want := a.do("PUT", "/topic-permissions/%2F/alice", bad).reason(t)
	until(t, ctx, "a refused topic permission",
		chromedp.SetValue("#tp-user", "alice", chromedp.ByQuery),
		setValue("#tp-exchange", "events"),
		setValue("#tp-write", "("),
		chromedp.Click(`#tp-form button[type="submit"]`, chromedp.ByQuery),
		chromedp.WaitVisible("#topic-msg .error", chromedp.ByQuery))
	if got := text(t, ctx, "#topic-msg .error"); got != want {
		t.Errorf("refused topic permission shows %q, want the API's %q", got, want)
	}
	until(t, ctx, "set a topic permission",
		setValue("#tp-write", `^{username}\.`),
		setValue("#tp-read", `^{vhost}\.`),
		chromedp.Click(`#tp-form button[type="submit"]`, chromedp.ByQuery),
		chromedp.WaitVisible(row("events"), chromedp.ByQuery))
	got := map[string]map[string]any{}
	for _, p := range a.must(200, "GET", "/users/alice/topic-permissions", nil).list(t) {
		got[p["exchange"].(string)] = p
	}
	if p := got["events"]; len(got) != 2 || p["vhost"] != "/" || p["write"] != `^{username}\.` || p["read"] != `^{vhost}\.` {
		t.Errorf("topic permissions after the form: %v", got)
	}
	until(t, ctx, "scroll to topic permissions", chromedp.Evaluate(`document.querySelector("#topic-h").scrollIntoView()`, nil))
	screenshot(t, ctx, "topic-permissions")
	until(t, ctx, "load axe", chromedp.Evaluate(axeScript(t)+";true", nil))
	axeCheck(t, ctx, "topic permissions")

	// Clear removes the row's exchange's permission alone.
	until(t, ctx, "clear, no", chromedp.Evaluate(`window.confirm = () => false`, nil),
		clickNow(row("events")+" button.clear"),
		chromedp.Evaluate(`window.confirm = () => true`, nil))
	if l := a.must(200, "GET", "/users/alice/topic-permissions", nil).list(t); len(l) != 2 {
		t.Errorf("topic permissions after Clear answered no: %v", l)
	}
	until(t, ctx, "clear", clickNow(row("events")+" button.clear"),
		chromedp.WaitNotPresent(row("events"), chromedp.ByQuery))
	if l := a.must(200, "GET", "/users/alice/topic-permissions", nil).list(t); len(l) != 1 || l[0]["exchange"] != "amq.topic" {
		t.Errorf("topic permissions after clearing events': %v", l)
	}
	until(t, ctx, "clear the last", clickNow(row("amq.topic")+" button.clear"),
		chromedp.WaitNotPresent(`#topic-permissions tr[data-user="alice"]`, chromedp.ByQuery))
	if l := a.must(200, "GET", "/users/alice/topic-permissions", nil).list(t); len(l) != 0 {
		t.Errorf("topic permissions after Clear: %v", l)
	}
}

// A user without the administrator tag sees the virtual hosts' limits
// without the form and Clear buttons (RabbitMQ lets administrators alone
// change them; a refusal is a 401, which would log the user out), and is
// told that user limits need the tag rather than asking for them.
func TestUILimitsReadOnly(t *testing.T) {
	ctx := browser(t)
	a := startAPI(t)
	root := strings.TrimSuffix(a.base, "/api")
	a.must(201, "PUT", "/users/mon", map[string]any{"password": "pw", "tags": "monitoring"})
	a.must(201, "PUT", "/permissions/%2F/mon", map[string]any{"configure": ".*", "write": ".*", "read": ".*"})
	uiLogin(t, ctx, root, "mon", "pw")
	until(t, ctx, "limits page", chromedp.Navigate(root+"/#/limits"))
	poll(t, ctx, "limits page loaded", `document.querySelector("main").dataset.loaded === "#/limits"`)
	var forms, clears int
	var nav bool
	var said string
	until(t, ctx, "page", chromedp.Evaluate(`document.querySelectorAll("main form").length`, &forms),
		chromedp.Evaluate(`document.querySelectorAll("main button.clear").length`, &clears),
		chromedp.Evaluate(`!document.querySelector("#nav").hidden && !!document.querySelector("#vhost-limits")`, &nav),
		chromedp.Evaluate(`document.querySelector("main").textContent`, &said))
	if forms != 0 || clears != 0 || !nav {
		t.Errorf("a monitoring user: %d forms, %d Clear buttons, vhost limits shown and still logged in: %v", forms, clears, nav)
	}
	if !strings.Contains(said, "User limits need the administrator tag") {
		t.Errorf("a monitoring user is not told why user limits are missing: %q", said)
	}
}
