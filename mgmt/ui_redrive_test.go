// UI tests of redrive in Chromium: the redrive dialog, its progress and failures, the redrives page.

package mgmt_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// In the browser: a DLQ's page starts a paced redrive to origin in the
// redrive dialog, which shows the task running and then finished with
// every message moved; the page's count of the DLQ falls to 0 and the
// origin queue's page shows them. A second redrive, of the messages from
// a queue since deleted, lists its failures with the reason, the first 100
// and then the rest on request. The redrives page lists both tasks and
// forgets one.
func TestUIRedrive(t *testing.T) {
	ctx := browser(t)
	a := startAPI(t)
	root := strings.TrimSuffix(a.base, "/api")
	a.must(201, "PUT", "/queues/%2F/orders.dlq", map[string]any{"durable": true})
	for _, q := range []string{"orders", "gone"} {
		a.must(201, "PUT", "/queues/%2F/"+q, map[string]any{"durable": true,
			"arguments": map[string]any{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "orders.dlq"}})
	}
	const n = 30
	var bodies []string
	for i := range n {
		bodies = append(bodies, fmt.Sprintf("order %d", i))
	}
	a.deadLetter("orders", "orders.dlq", n, bodies...)

	uiLogin(t, ctx, root, "guest", "guest")
	openQueuePage(t, ctx, root, "orders.dlq")
	until(t, ctx, "the DLQ's redrive button", chromedp.WaitVisible("#redrive-open", chromedp.ByQuery))
	poll(t, ctx, "DLQ count", `document.querySelector("#q-messages").textContent === "30"`)
	until(t, ctx, "redrive dialog",
		// Found and clicked in one step in the page: the queue page
		// re-renders as it refreshes, and a node chromedp found may be
		// gone by its click ("Could not find node with given id").
		chromedp.Evaluate(`document.querySelector("#redrive-open").click()`, nil),
		chromedp.WaitVisible("#redrive-form", chromedp.ByQuery),
		chromedp.SendKeys("#rd-rate", "10", chromedp.ByQuery))
	var checked bool
	until(t, ctx, "origin is the default", chromedp.Evaluate(`document.querySelector("#rd-to-origin").checked && document.querySelector("#rd-exchange").disabled`, &checked))
	if !checked {
		t.Fatalf("the dialog does not default to the origin queue")
	}
	screenshot(t, ctx, "redrive-dialog")
	// 10 a second: the task is running when the dialog first shows it.
	until(t, ctx, "start", chromedp.Click(`#redrive-form button[type="submit"]`, chromedp.ByQuery),
		chromedp.WaitVisible("#rd-status", chromedp.ByQuery))
	poll(t, ctx, "task running", `document.querySelector("#rd-status").dataset.state === "running"`)
	screenshot(t, ctx, "redrive-progress")
	poll(t, ctx, "task finished", `(() => { const s = document.querySelector("#rd-status");
		return !!s && s.dataset.state === "finished" && s.textContent.includes("moved 30, failed 0"); })()`)
	poll(t, ctx, "DLQ count falls to 0", `document.querySelector("#q-messages").textContent === "0"`)
	var progress string
	until(t, ctx, "progress bar", chromedp.Evaluate(`(() => { const p = document.querySelector("#rd-progress"); return p.value + "/" + p.max; })()`, &progress))
	if progress != "30/30" {
		t.Errorf("progress bar at the end: %s", progress)
	}
	until(t, ctx, "close the dialog", chromedp.KeyEvent("\x1b"))
	poll(t, ctx, "dialog closed", `!document.querySelector("#redrive-dialog").open`)
	if q := a.must(200, "GET", "/queues/%2F/orders", nil).object(t); q["messages"] != float64(n) {
		t.Fatalf("origin after the redrive: %v messages", q["messages"])
	}
	openQueuePage(t, ctx, root, "orders")
	until(t, ctx, "origin page", chromedp.WaitVisible(".message", chromedp.ByQuery))
	poll(t, ctx, "origin count", `document.querySelector("#q-messages").textContent === "30"`)
	// The page re-renders its peek as it refreshes: between two renders
	// there is no .message.
	poll(t, ctx, "redriven header", `(() => { const m = document.querySelector(".message");
		return !!m && m.textContent.includes("x-redriven-count"); })()`)

	// A redrive of the messages from "gone" only, whose queue is
	// deleted: they stay, each failure listed; the one from orders is
	// left alone.
	a.deadLetter("orders", "orders.dlq", 1, "late")
	var gone []string
	for i := range 103 {
		gone = append(gone, fmt.Sprintf("g%d", i))
	}
	a.deadLetter("gone", "orders.dlq", 104, gone...)
	a.must(204, "DELETE", "/queues/%2F/gone", nil)
	openQueuePage(t, ctx, root, "orders.dlq")
	until(t, ctx, "DLQ again", chromedp.WaitVisible("#redrive-open", chromedp.ByQuery),
		// Found and clicked in one step in the page: the queue page
		// re-renders as it refreshes, and a node chromedp found may be
		// gone by its click ("Could not find node with given id").
		chromedp.Evaluate(`document.querySelector("#redrive-open").click()`, nil),
		chromedp.WaitVisible("#redrive-form", chromedp.ByQuery),
		chromedp.SendKeys("#rd-source", "gone", chromedp.ByQuery),
		chromedp.Click(`#redrive-form button[type="submit"]`, chromedp.ByQuery))
	poll(t, ctx, "failures listed", `(() => { const s = document.querySelector("#rd-status");
		const f = document.querySelector("#rd-failures");
		return !!s && !!f && s.dataset.state === "finished" && s.textContent.includes("moved 0, failed 103, remaining in orders.dlq 104") &&
			f.querySelectorAll("table.failures tbody tr").length === 100 && f.textContent.includes("no queue 'gone': 103"); })()`)
	screenshot(t, ctx, "redrive-failures")
	until(t, ctx, "more failures", chromedp.Click("#rd-failures button.more-failures", chromedp.ByQuery))
	poll(t, ctx, "all failures listed", `document.querySelectorAll("#rd-failures table.failures tbody tr").length === 103 &&
		document.querySelector("#rd-failures button.more-failures").hidden`)
	until(t, ctx, "close", chromedp.KeyEvent("\x1b"))
	// A click while the modal dialog is still open lands on its backdrop.
	poll(t, ctx, "dialog closed again", `!document.querySelector("#redrive-dialog").open`)

	until(t, ctx, "redrives page", chromedp.Evaluate(`document.querySelector('a[href="#/redrives"]').click()`, nil),
		chromedp.WaitVisible("#redrives", chromedp.ByQuery))
	poll(t, ctx, "both tasks", `document.querySelectorAll('#redrives tr[data-state="finished"]').length === 2`)
	screenshot(t, ctx, "redrives")
	var first string
	until(t, ctx, "a task id", chromedp.Evaluate(`document.querySelector('#redrives tr[data-task]').dataset.task`, &first))
	until(t, ctx, "forget", chromedp.Click(`#redrives tr[data-task="`+first+`"] button`, chromedp.ByQuery))
	poll(t, ctx, "forgotten", `document.querySelectorAll('#redrives tr[data-task]').length === 1 && !document.querySelector('#redrives tr[data-task="`+first+`"]')`)
	a.must(404, "GET", "/redrives/"+first, nil)
}

// openQueuePage navigates to the page of queue name (vhost /) and waits
// until that page is drawn (main's data-loaded names its hash). A change
// of the hash leaves the page before it on screen until the new page's
// API answers come (slow under -race on a loaded machine); from one
// queue's page to another's, a step that only waits for #redrive-open or
// .message runs on the old page: it started a redrive of the wrong queue
// ("failures listed" timed out), or clicked a form that the new page's
// drawing then removed (the test's deadline passed in "DLQ again").
func openQueuePage(t *testing.T, ctx context.Context, root, name string) {
	t.Helper()
	hash := "#/queue/%2F/" + name
	until(t, ctx, "open "+name, chromedp.Navigate(root+"/"+hash))
	poll(t, ctx, "the page of "+name, `document.querySelector("main").dataset.loaded === `+strconv.Quote(hash))
}
