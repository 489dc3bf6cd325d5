// UI tests of scheduled delivery and delayed retry in Chromium: a delayed exchange's scheduled messages, cancelled one and by filter; a queue's retry settings.

package mgmt_test

import (
	"fmt"
	"strings"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/chromedp/chromedp"

	"github.com/brokerd/brokerd/broker/brokertest"
	"github.com/brokerd/brokerd/mgmt"
)

// In the browser: the exchanges list badges a delayed exchange with how
// many messages it holds; its page lists them soonest first (due time,
// how long until, routing key, size); Cancel on one asks first, then the
// message is gone from the page and from the API; the filter form cancels
// those with a routing key, after asking, and says how many. A queue with
// x-delayed-retry-* arguments has a "retry" badge in the list and its
// settings on its page, each from its argument and its policy, with the
// count of messages waiting out a retry delay. The broker's clock stands still (a fake clock), so
// nothing is released meanwhile.
func TestUIScheduled(t *testing.T) {
	ctx := browser(t)
	clk := brokertest.NewClock()
	a := startBrokerAPI(t, brokertest.Config{Clock: clk}, mgmt.Options{})
	root := strings.TrimSuffix(a.base, "/api")
	a.must(201, "PUT", "/exchanges/%2F/later", map[string]any{"type": "x-delayed-message", "durable": true, "arguments": map[string]any{"x-delayed-type": "direct"}})
	a.must(201, "PUT", "/queues/%2F/work", map[string]any{"durable": true})
	a.must(201, "POST", "/bindings/%2F/e/later/q/work", map[string]any{"routing_key": "k"})
	a.must(201, "PUT", "/queues/%2F/retrying", map[string]any{"durable": true,
		"arguments": map[string]any{"x-delayed-retry-min": 1000, "x-delayed-retry-max": 30000}})
	// A policy sets min too: the page shows both sources.
	a.must(201, "PUT", "/policies/%2F/retry-pol", map[string]any{"pattern": "^retrying$", "apply-to": "queues",
		"definition": map[string]any{"delayed-retry-min": 2000}})
	ch := a.Session(t, brokertest.Persistent)
	// One message waits out its retry delay (the clock stands still).
	ch.Publish("", "retrying", amqp091.Publishing{Body: []byte("fails")})
	ch.Get("retrying").Reject(true)
	// Published out of due order: 5 min (k), 1 min (j), 2 h (k), 30 s (j), 90 s (k).
	for i, p := range []struct {
		key   string
		delay int64
	}{{"k", 300_000}, {"j", 60_000}, {"k", 7_200_000}, {"j", 30_000}, {"k", 90_000}} {
		ch.Publish("later", p.key, amqp091.Publishing{Body: []byte(strings.Repeat("x", 100*(i+1))), Headers: amqp091.Table{"x-delay": p.delay}})
	}

	uiLogin(t, ctx, root, "guest", "guest")
	until(t, ctx, "exchanges", chromedp.Navigate(root+"/#/exchanges"),
		chromedp.WaitVisible(`#exchanges tr[data-exchange="later"]`, chromedp.ByQuery))
	if b := text(t, ctx, `#exchanges tr[data-exchange="later"] .badge.delayed`); b != "delayed 5" {
		t.Fatalf("later's badge %q, want delayed 5", b)
	}
	screenshot(t, ctx, "exchanges-delayed")

	until(t, ctx, "the delayed exchange's page", chromedp.Navigate(root+"/#/exchange/%2F/later"))
	poll(t, ctx, "scheduled listed", `document.querySelector("main").dataset.loaded === "#/exchange/%2F/later" &&
		document.querySelectorAll("#scheduled tbody tr").length === 5`)
	var rows string
	until(t, ctx, "rows", chromedp.Evaluate(`[...document.querySelectorAll("#scheduled tbody tr")].map(r =>
		[...r.children].slice(1, 4).map(c => c.textContent).join("|")).join("\n")`, &rows))
	want := strings.Join([]string{"in 30 s|j|400 B", "in 1 min 0 s|j|200 B", "in 1 min 30 s|k|500 B", "in 5 min 0 s|k|100 B", "in 2 h 0 min|k|300 B"}, "\n")
	if rows != want {
		t.Fatalf("scheduled rows (in|key|size):\n%s\nwant:\n%s", rows, want)
	}
	if c := text(t, ctx, "#sched-count"); c != "5 messages scheduled" {
		t.Fatalf("count %q", c)
	}
	until(t, ctx, "scroll", chromedp.Evaluate(`document.querySelector("#sched").scrollIntoView()`, nil))
	screenshot(t, ctx, "exchange-scheduled")

	// Cancel the one due in 90 s, answering the confirmation yes.
	until(t, ctx, "record confirmations", chromedp.Evaluate(`window.confirmed = []; window.confirm = m => { window.confirmed.push(m); return true; }`, nil))
	var id string
	until(t, ctx, "its id", chromedp.Evaluate(`document.querySelectorAll("#scheduled tbody tr")[2].dataset.id`, &id))
	until(t, ctx, "cancel one", chromedp.Evaluate(`document.querySelectorAll("#scheduled tbody tr")[2].querySelector("button.cancel-one").click()`, nil))
	poll(t, ctx, "cancelled one gone", fmt.Sprintf(`document.querySelectorAll("#scheduled tbody tr").length === 4 &&
		!document.querySelector('#scheduled tr[data-id="%s"]') && document.querySelector("#sched-count").textContent === "4 messages scheduled"`, id))
	var asked string
	until(t, ctx, "the question", chromedp.Evaluate(`window.confirmed.join("\n")`, &asked))
	if !strings.Contains(asked, "Cancel the message due") || !strings.Contains(asked, "“k”") {
		t.Fatalf("asked %q, want the message's due time and key", asked)
	}
	a.must(404, "DELETE", "/exchanges/%2F/later/scheduled/"+id, nil)

	// By filter: routing key j (the 30 s and 1 min ones).
	until(t, ctx, "filter by key", chromedp.SendKeys("#sc-key", "j", chromedp.ByQuery),
		chromedp.Click(`#sched-cancel-form button[type="submit"]`, chromedp.ByQuery))
	poll(t, ctx, "cancelled by key", `document.querySelector("#sched-msg").textContent === "Cancelled 2 scheduled messages." &&
		document.querySelectorAll("#scheduled tbody tr").length === 2 && !document.querySelector('#scheduled tr[data-key="j"]')`)
	until(t, ctx, "the question", chromedp.Evaluate(`window.confirmed.join("\n")`, &asked))
	if !strings.Contains(asked, "Cancel every scheduled message with routing key “j”") {
		t.Fatalf("asked %q, want the filter named", asked)
	}
	until(t, ctx, "scroll", chromedp.Evaluate(`document.querySelector("#sched").scrollIntoView()`, nil))
	screenshot(t, ctx, "exchange-scheduled-cancelled")
	if x := a.must(200, "GET", "/exchanges/%2F/later", nil).object(t); x["messages_delayed"] != 2.0 {
		t.Fatalf("messages_delayed %v, want 2", x["messages_delayed"])
	}

	// A queue's retry settings.
	until(t, ctx, "queues", chromedp.Navigate(root+"/#/queues"),
		chromedp.WaitVisible(`#queues tr[data-queue="retrying"]`, chromedp.ByQuery))
	if b := text(t, ctx, `#queues tr[data-queue="retrying"] .badge.retry`); b != "retry" {
		t.Fatalf("retrying's badge %q, want retry", b)
	}
	until(t, ctx, "the retrying queue's page", chromedp.Navigate(root+"/#/queue/%2F/retrying"),
		chromedp.WaitVisible("#retry-settings", chromedp.ByQuery))
	var settings string
	until(t, ctx, "settings", chromedp.Evaluate(`[...document.querySelectorAll("#retry-settings tr")].map(r => r.textContent).join("|")`, &settings))
	if settings != "delayed-retry-max30000 (argument)|delayed-retry-min1000 (argument) · 2000 (policy)|Waiting to retry1" {
		t.Fatalf("retry settings %q", settings)
	}
	screenshot(t, ctx, "queue-retry")
	until(t, ctx, "work's page", chromedp.Navigate(root+"/#/queue/%2F/work"))
	poll(t, ctx, "work's page, no retry", `document.querySelector("main").dataset.loaded === "#/queue/%2F/work" && !document.querySelector("#retry")`)
}
