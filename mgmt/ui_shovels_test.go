// UI tests of the shovels page in Chromium: status, adding a shovel from the form, restart and delete.

package mgmt_test

import (
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// needServed skips the test when a request that sets up its fixture
// answered 404 or 405: the API has no such endpoint in this build (the
// page was written to RabbitMQ's API while its backend was built on
// another branch), so there is nothing for the page to show yet. Any
// other answer but a 2xx fails the test.
func needServed(t *testing.T, r resp, what string) {
	t.Helper()
	if r.status == 404 || r.status == 405 {
		t.Skipf("%s answered %d %s: this build's API does not serve it yet, so the page has nothing to show; the test runs once the backend is merged",
			what, r.status, http.StatusText(r.status))
	}
	if r.status/100 != 2 {
		t.Fatalf("%s: status %d %s", what, r.status, r.body)
	}
}

// The shovels page lists each shovel with its state, the reason a
// terminated one stopped, where it moves from and to and how many it
// forwarded; a shovel added with the form is stored with the parameter
// value the form says (RabbitMQ's keys); a value the API refuses shows the
// API's reason; Restart and Delete ask first, and Delete clears the
// parameter.
func TestUIShovels(t *testing.T) {
	ctx := browser(t)
	a, amqpAddr := startDaemonAPI(t)
	root := strings.TrimSuffix(a.base, "/api")
	for _, q := range []string{"src.q", "dest.q", "src2", "moved.q"} {
		a.must(201, "PUT", "/queues/%2F/"+q, map[string]any{"durable": true})
	}
	a.must(201, "POST", "/bindings/%2F/e/amq.direct/q/moved.q", map[string]any{"routing_key": "moved"})
	a.must(200, "POST", "/exchanges/%2F/amq.default/publish", map[string]any{"routing_key": "src2", "payload": "to move",
		"payload_encoding": "string", "properties": map[string]any{"delivery_mode": 2}})
	for i := range 3 {
		a.must(200, "POST", "/exchanges/%2F/amq.default/publish", map[string]any{"routing_key": "src.q", "payload": fmt.Sprint("m", i),
			"payload_encoding": "string", "properties": map[string]any{"delivery_mode": 2}})
	}
	// The shovels reach this broker over TCP, as a remote one.
	uri := "amqp://guest:guest@" + amqpAddr
	needServed(t, a.do("PUT", "/parameters/shovel/%2F/move", map[string]any{"value": map[string]any{
		"src-uri": uri, "src-queue": "src.q", "dest-uri": uri, "dest-queue": "dest.q"}}), "PUT /api/parameters/shovel/%2F/move")
	// Nothing listens on port 1, and reconnect-delay 0 does not retry:
	// the shovel terminates.
	a.must(201, "PUT", "/parameters/shovel/%2F/broken", map[string]any{"value": map[string]any{
		"src-uri": "amqp://guest:guest@127.0.0.1:1", "src-queue": "src.q", "dest-uri": uri, "dest-queue": "dest.q", "reconnect-delay": 0}})
	waitFor(t, func() bool { return a.must(200, "GET", "/queues/%2F/dest.q", nil).object(t)["messages"] == 3.0 })
	status := func(name string) map[string]any {
		for _, s := range a.must(200, "GET", "/shovels", nil).list(t) {
			if s["name"] == name {
				return s
			}
		}
		return nil
	}
	waitFor(t, func() bool { s := status("broken"); return s != nil && s["state"] == "terminated" })
	waitFor(t, func() bool {
		s := status("move")
		return s != nil && s["state"] == "running" && s["messages_forwarded"] == 3.0
	})

	uiLogin(t, ctx, root, "guest", "guest")
	until(t, ctx, "shovels page", chromedp.Click(`a[href="#/shovels"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#shovels tr[data-shovel="broken"]`, chromedp.ByQuery))
	move, broken := `#shovels tr[data-shovel="move"] `, `#shovels tr[data-shovel="broken"] `
	mv := status("move")
	if got := text(t, ctx, move+"td.state"); got != "running" {
		t.Errorf("move's state shown %q", got)
	}
	if got, want := text(t, ctx, move+"td.src"), fmt.Sprint(mv["src_uri"], "\nqueue src.q"); got != want {
		t.Errorf("move's source shown %q, want %q", got, want)
	}
	if got, want := text(t, ctx, move+"td.dest"), fmt.Sprint(mv["dest_uri"], "\nqueue dest.q"); got != want {
		t.Errorf("move's destination shown %q, want %q", got, want)
	}
	if strings.Contains(text(t, ctx, "#shovels"), "guest:guest") {
		t.Error("the page shows a URI's password")
	}
	if got := text(t, ctx, move+"td.forwarded"); got != "3" {
		t.Errorf("move forwarded %q, want 3", got)
	}
	if got, want := text(t, ctx, move+"td.blocked"), fmt.Sprint(mv["blocked_status"]); mv["blocked_status"] != nil && got != want {
		t.Errorf("move's blocked status %q, want %q", got, want)
	}
	reason, _ := status("broken")["reason"].(string)
	if got := text(t, ctx, broken+"td.state"); reason == "" || got != "terminated\n"+strings.TrimSpace(reason) {
		t.Errorf("broken's state shown %q, want terminated with the API's reason %q", got, reason)
	}

	// A shovel from the form: two source URIs, this broker as the
	// destination (amqp://, the field's default) with an exchange and
	// routing key, every setting given; it moves src2's message.
	until(t, ctx, "add a shovel",
		chromedp.SendKeys("#sh-name", "ui-made", chromedp.ByQuery),
		setValue("#sh-src-uri", uri+" "+uri),
		chromedp.SendKeys("#sh-src-queue", "src2", chromedp.ByQuery),
		chromedp.SetValue("#sh-dest-type", "exchange", chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelector("#sh-dest-type").dispatchEvent(new Event("change"))`, nil),
		chromedp.WaitVisible("#sh-dest-exchange", chromedp.ByQuery),
		chromedp.SendKeys("#sh-dest-exchange", "amq.direct", chromedp.ByQuery),
		chromedp.SendKeys("#sh-dest-key", "moved", chromedp.ByQuery),
		chromedp.SetValue("#sh-ack-mode", "on-publish", chromedp.ByQuery),
		chromedp.SetValue("#sh-delete-after", "count", chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelector("#sh-delete-after").dispatchEvent(new Event("change"))`, nil),
		chromedp.WaitVisible("#sh-delete-count", chromedp.ByQuery),
		chromedp.SendKeys("#sh-delete-count", "5", chromedp.ByQuery),
		chromedp.SendKeys("#sh-prefetch", "10", chromedp.ByQuery),
		chromedp.SendKeys("#sh-reconnect", "1", chromedp.ByQuery),
		chromedp.Click(`#shovel-form button[type="submit"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#shovels tr[data-shovel="ui-made"]`, chromedp.ByQuery))
	want := map[string]any{"src-protocol": "amqp091", "src-uri": []any{uri, uri}, "src-queue": "src2",
		"dest-protocol": "amqp091", "dest-uri": "amqp://", "dest-exchange": "amq.direct", "dest-exchange-key": "moved",
		"ack-mode": "on-publish", "src-delete-after": 5.0, "src-prefetch-count": 10.0, "reconnect-delay": 1.0}
	value, _ := a.must(200, "GET", "/parameters/shovel/%2F/ui-made", nil).object(t)["value"].(map[string]any)
	for k, w := range want {
		if !reflect.DeepEqual(value[k], w) {
			t.Errorf("ui-made's %s stored as %v, want %v (value %v)", k, value[k], w, value)
		}
	}
	waitFor(t, func() bool { return a.must(200, "GET", "/queues/%2F/moved.q", nil).object(t)["messages"] == 1.0 })
	poll(t, ctx, "ui-made listed with its destination and the message forwarded", `(() => {
		const r = document.querySelector('#shovels tr[data-shovel="ui-made"]');
		return r?.querySelector("td.dest .what").textContent === "exchange amq.direct, key moved" && r.querySelector("td.forwarded").textContent === "1";
	})()`)
	until(t, ctx, "scroll to the list", chromedp.Evaluate(`window.scrollTo(0, 0)`, nil))
	screenshot(t, ctx, "shovels")
	until(t, ctx, "load axe", chromedp.Evaluate(axeScript(t)+";true", nil))
	axeCheck(t, ctx, "shovels")

	// A value the API refuses: the API's reason, nothing stored.
	bad := map[string]any{"src-protocol": "amqp091", "src-uri": "nowhere", "src-queue": "src2", "dest-protocol": "amqp091", "dest-uri": uri,
		"dest-queue": "dest.q", "ack-mode": "on-confirm", "src-delete-after": "never"}
	wantReason := a.do("PUT", "/parameters/shovel/%2F/refused", map[string]any{"value": bad}).reason(t)
	until(t, ctx, "a refused shovel",
		chromedp.SendKeys("#sh-name", "refused", chromedp.ByQuery),
		setValue("#sh-src-uri", "nowhere"),
		chromedp.SendKeys("#sh-src-queue", "src2", chromedp.ByQuery),
		chromedp.SendKeys("#sh-dest-queue", "dest.q", chromedp.ByQuery),
		chromedp.Click(`#shovel-form button[type="submit"]`, chromedp.ByQuery),
		chromedp.WaitVisible("#shovel-msg .error", chromedp.ByQuery))
	// The reason has RabbitMQ's lines ("Validation failed\n\n...\n"):
	// shown as lines, the last newline trimmed.
	if got := text(t, ctx, "#shovel-msg .error"); got != strings.TrimSpace(wantReason) {
		t.Errorf("refused shovel shows %q, want the API's %q", got, wantReason)
	}
	a.must(404, "GET", "/parameters/shovel/%2F/refused", nil)

	// Restart asks first, then restarts.
	until(t, ctx, "restart", chromedp.Evaluate(`window.asked = []; window.confirm = q => { asked.push(q); return true; }`, nil),
		clickNow(move+"button.restart"))
	poll(t, ctx, "restarted", `document.querySelector("#status").textContent === "Shovel move restarted" && asked.length === 1 && asked[0].startsWith("Restart shovel move")`)

	// Delete, answered no, leaves it; answered yes, clears the parameter.
	until(t, ctx, "delete, no", chromedp.Evaluate(`window.confirm = () => false`, nil),
		clickNow(`#shovels tr[data-shovel="ui-made"] button.delete`),
		chromedp.Evaluate(`window.confirm = () => true`, nil))
	a.must(200, "GET", "/parameters/shovel/%2F/ui-made", nil)
	until(t, ctx, "delete, yes", clickNow(`#shovels tr[data-shovel="ui-made"] button.delete`),
		chromedp.WaitNotPresent(`#shovels tr[data-shovel="ui-made"]`, chromedp.ByQuery))
	a.must(404, "GET", "/parameters/shovel/%2F/ui-made", nil)
	waitFor(t, func() bool { return status("ui-made") == nil })
}

// A user without the monitoring tag is told the shovels' status needs it
// rather than asking for it (refused with 401, which would log them out);
// a policymaker still gets the form.
func TestUIShovelsNeedMonitoring(t *testing.T) {
	ctx := browser(t)
	a := startAPI(t)
	root := strings.TrimSuffix(a.base, "/api")
	a.must(201, "PUT", "/users/pm", map[string]any{"password": "pw", "tags": "policymaker"})
	a.must(201, "PUT", "/permissions/%2F/pm", map[string]any{"configure": ".*", "write": ".*", "read": ".*"})
	uiLogin(t, ctx, root, "pm", "pw")
	until(t, ctx, "shovels page", chromedp.Navigate(root+"/#/shovels"))
	poll(t, ctx, "shovels page loaded", `document.querySelector("main").dataset.loaded === "#/shovels"`)
	if got := text(t, ctx, "#shovels-error"); !strings.Contains(got, "needs the monitoring tag") {
		t.Errorf("a policymaker is told %q", got)
	}
	var form, nav bool
	until(t, ctx, "form and nav", chromedp.Evaluate(`!!document.querySelector("#shovel-form")`, &form),
		chromedp.Evaluate(`!document.querySelector("#nav").hidden`, &nav))
	if !form || !nav {
		t.Errorf("policymaker: form shown %v, still logged in %v", form, nav)
	}
}
