// UI tests of the basics in Chromium: files served without auth, the login page, the acceptance walk.

package mgmt_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

func TestUIServesPagesWithoutAuth(t *testing.T) {
	a := startAPI(t)
	root := strings.TrimSuffix(a.base, "/api")
	for path, want := range map[string]string{"/": "text/html", "/ui/app.js": "javascript", "/ui/style.css": "text/css"} {
		r, err := http.Get(root + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != 200 || !strings.Contains(r.Header.Get("Content-Type"), want) || len(body) == 0 {
			t.Errorf("GET %s: %d %q, %d bytes", path, r.StatusCode, r.Header.Get("Content-Type"), len(body))
		}
	}
	for _, path := range []string{"/ui/nope.js", "/ui/..%2Fui.go", "/nope"} {
		r, err := http.Get(root + path)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != 404 {
			t.Errorf("GET %s: %d, want 404", path, r.StatusCode)
		}
	}
	a.as("guest", "wrong", "GET", "/overview", nil) // the API still needs credentials
	if r := a.as("guest", "wrong", "GET", "/overview", nil); r.status != 401 {
		t.Errorf("API without valid credentials: %d", r.status)
	}
}

// The acceptance walk through the UI in Chromium: a wrong password is
// refused with the API's message; the overview; the queues list shows the
// work queue's DLX badge and the DLQ's depth; the DLQ's page shows the
// dead letter's x-death as a table; a policy made in the UI (after one the
// API refuses, its message shown) applies to a queue.
func TestUIBrowser(t *testing.T) {
	ctx := browser(t)
	a := startAPI(t)
	root := strings.TrimSuffix(a.base, "/api")
	a.must(201, "PUT", "/queues/%2F/orders.dlq", map[string]any{"durable": true})
	a.must(201, "PUT", "/queues/%2F/orders", map[string]any{"durable": true,
		"arguments": map[string]any{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "orders.dlq", "x-message-ttl": 60000}})
	a.must(201, "PUT", "/queues/%2F/plain", map[string]any{"durable": true})
	a.must(200, "POST", "/exchanges/%2F/amq.default/publish", map[string]any{
		"properties": map[string]any{"delivery_mode": 2}, "routing_key": "orders", "payload": "order 7", "payload_encoding": "string"})
	a.must(200, "POST", "/queues/%2F/orders/get", map[string]any{"count": 1, "ackmode": "reject_requeue_false", "encoding": "auto"})
	waitFor(t, func() bool { return a.must(200, "GET", "/queues/%2F/orders.dlq", nil).object(t)["messages"] == 1.0 })

	// A wrong password: the API's reason shows.
	refused := a.as("guest", "wrong", "GET", "/whoami", nil)
	var ref struct{ Reason string }
	if err := json.Unmarshal(refused.body, &ref); err != nil || refused.status != 401 || ref.Reason == "" {
		t.Fatalf("whoami with a wrong password: %d %s", refused.status, refused.body)
	}
	var shown string
	until(t, ctx, "wrong password",
		chromedp.Navigate(root+"/"),
		chromedp.WaitVisible("#username", chromedp.ByQuery),
		chromedp.SendKeys("#username", "guest", chromedp.ByQuery),
		chromedp.SendKeys("#password", "wrong", chromedp.ByQuery),
		chromedp.Click(`#login button[type="submit"]`, chromedp.ByQuery),
		chromedp.WaitVisible("#login-error .error", chromedp.ByQuery),
		chromedp.Text("#login-error .error", &shown, chromedp.ByQuery))
	if shown != ref.Reason {
		t.Errorf("wrong password shows %q, want the API's %q", shown, ref.Reason)
	}
	screenshot(t, ctx, "login-refused")

	until(t, ctx, "log in",
		setValue("#password", ""),
		chromedp.SendKeys("#password", "guest", chromedp.ByQuery),
		chromedp.Click(`#login button[type="submit"]`, chromedp.ByQuery),
		chromedp.WaitVisible("#ov-queues", chromedp.ByQuery))
	poll(t, ctx, "overview totals", `document.querySelector("#ov-queues").textContent === "3" && document.querySelector("#ov-messages").textContent === "1"`)
	screenshot(t, ctx, "overview")

	until(t, ctx, "queues list", chromedp.Click(`a[href="#/queues"]`, chromedp.ByQuery))
	poll(t, ctx, "DLQ depth", `document.querySelector('tr[data-queue="orders.dlq"] td.messages')?.textContent === "1"`)
	var badges string
	until(t, ctx, "badges", chromedp.Text(`tr[data-queue="orders"] td.features`, &badges, chromedp.ByQuery))
	for _, b := range []string{"D", "TTL", "DLX", "DLK"} {
		if !strings.Contains(" "+strings.Join(strings.Fields(badges), " ")+" ", " "+b+" ") && !strings.Contains(badges, b) {
			t.Errorf("orders badges %q lack %s", badges, b)
		}
	}
	var stray bool
	until(t, ctx, "no stray text", chromedp.Evaluate(`/\b(null|undefined)\b/.test(document.querySelector("main").innerText)`, &stray))
	if stray {
		t.Errorf("the queues page shows a stray null or undefined")
	}
	screenshot(t, ctx, "queues")

	// Filtering asks the API for matching names.
	until(t, ctx, "filter", chromedp.SendKeys("#q-filter", "dlq", chromedp.ByQuery))
	poll(t, ctx, "filtered list", `document.querySelectorAll("#queues tbody tr").length === 1 && !!document.querySelector('tr[data-queue="orders.dlq"]')`)

	until(t, ctx, "open the DLQ", chromedp.Click(`tr[data-queue="orders.dlq"] a`, chromedp.ByQuery),
		chromedp.WaitVisible(".x-death", chromedp.ByQuery))
	var reason, from, count, payload string
	until(t, ctx, "x-death",
		chromedp.Text(`.x-death td[data-col="reason"]`, &reason, chromedp.ByQuery),
		chromedp.Text(`.x-death td[data-col="queue"]`, &from, chromedp.ByQuery),
		chromedp.Text(`.x-death td[data-col="count"]`, &count, chromedp.ByQuery),
		chromedp.Text(`.message .payload`, &payload, chromedp.ByQuery))
	if reason != "rejected" || from != "orders" || count != "1" || payload != "order 7" {
		t.Errorf("x-death shown: reason %q queue %q count %q payload %q", reason, from, count, payload)
	}
	until(t, ctx, "scroll to the message", chromedp.ScrollIntoView(".message", chromedp.ByQuery))
	screenshot(t, ctx, "queue-dlq")

	// A policy the API refuses shows its message; a good one applies.
	bad := map[string]any{"pattern": "^plain$", "apply-to": "queues", "definition": map[string]any{"max-length": "many"}}
	var badRef struct{ Reason string }
	if r := a.do("PUT", "/policies/%2F/ui-probe", bad); r.status != 400 || json.Unmarshal(r.body, &badRef) != nil {
		t.Fatalf("API accepted a bad policy: %d %s", r.status, r.body)
	}
	until(t, ctx, "policies page", chromedp.Click(`a[href="#/policies"]`, chromedp.ByQuery),
		chromedp.WaitVisible("#policy-form", chromedp.ByQuery),
		chromedp.SendKeys("#p-name", "dlx-pol", chromedp.ByQuery),
		chromedp.SendKeys("#p-pattern", "^plain$", chromedp.ByQuery),
		setValue("#p-apply", "queues"),
		chromedp.SendKeys("#p-definition", `{"max-length": "many"}`, chromedp.ByQuery),
		chromedp.Click(`#policy-form button[type="submit"]`, chromedp.ByQuery),
		chromedp.WaitVisible("#policy-msg .error", chromedp.ByQuery),
		chromedp.Text("#policy-msg .error", &shown, chromedp.ByQuery))
	if strings.Join(strings.Fields(shown), " ") != strings.Join(strings.Fields(badRef.Reason), " ") {
		t.Errorf("refused policy shows %q, want the API's %q", shown, badRef.Reason)
	}
	until(t, ctx, "add a policy",
		setValue("#p-definition", ""),
		chromedp.SendKeys("#p-definition", `{"dead-letter-exchange": "dlx"}`, chromedp.ByQuery),
		chromedp.Click(`#policy-form button[type="submit"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`tr[data-policy="dlx-pol"]`, chromedp.ByQuery))
	screenshot(t, ctx, "policies")
	waitFor(t, func() bool { return a.must(200, "GET", "/queues/%2F/plain", nil).object(t)["policy"] == "dlx-pol" })
	until(t, ctx, "queues after the policy", chromedp.Click(`a[href="#/queues"]`, chromedp.ByQuery),
		chromedp.WaitVisible("#q-filter", chromedp.ByQuery),
		setValue("#q-filter", ""),
		chromedp.SendKeys("#q-filter", "plain", chromedp.ByQuery))
	poll(t, ctx, "policy column", `(() => { const r = document.querySelector('tr[data-queue="plain"]');
		return !!r && r.querySelector("td.policy").textContent === "dlx-pol" && r.querySelector("td.features").textContent.includes("DLX"); })()`)

	// Phone width: the list still fits.
	until(t, ctx, "phone width", chromedp.EmulateViewport(390, 844))
	var overflow bool
	until(t, ctx, "no horizontal scroll", chromedp.Evaluate(`document.documentElement.scrollWidth > window.innerWidth + 1`, &overflow))
	if overflow {
		t.Errorf("queues page scrolls sideways at phone width")
	}
	screenshot(t, ctx, "queues-phone")
}

// TestUILoginHidesNavigation checks that the login page shows no
// navigation links and no logout button: they are marked hidden until a
// user is logged in, and a display rule of the page's own (header nav is
// a flex box) must not override that. After the login they show; after
// the logout they are gone again.
func TestUILoginHidesNavigation(t *testing.T) {
	ctx := browser(t)
	a := startAPI(t)
	root := strings.TrimSuffix(a.base, "/api")
	// shown is true when any navigation link or the logout button takes
	// up room on the page (a hidden element has no client rects).
	const shown = `[...document.querySelectorAll("#nav a, #logout")].some(e => e.getClientRects().length > 0)`
	var visible bool
	until(t, ctx, "login page",
		chromedp.Navigate(root+"/"),
		chromedp.WaitVisible("#username", chromedp.ByQuery),
		chromedp.Evaluate(shown, &visible))
	if visible {
		var display string
		until(t, ctx, "nav display", chromedp.Evaluate(`getComputedStyle(document.querySelector("#nav")).display`, &display))
		t.Fatalf("the login page shows the navigation (nav display %q)", display)
	}
	screenshot(t, ctx, "login")
	until(t, ctx, "log in",
		chromedp.SendKeys("#username", "guest", chromedp.ByQuery),
		chromedp.SendKeys("#password", "guest", chromedp.ByQuery),
		chromedp.Click(`#login button[type="submit"]`, chromedp.ByQuery),
		chromedp.WaitVisible("#ov-queues", chromedp.ByQuery))
	poll(t, ctx, "navigation after login", shown)
	until(t, ctx, "log out",
		chromedp.Click("#logout", chromedp.ByQuery),
		chromedp.WaitVisible("#username", chromedp.ByQuery),
		chromedp.Evaluate(shown, &visible))
	if visible {
		t.Fatal("the login page after a logout shows the navigation")
	}
}
