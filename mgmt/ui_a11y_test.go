// UI accessibility tests in Chromium: every page and the redrive dialog against axe-core's WCAG 2.1 A and AA rules.

package mgmt_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// Every page (a delayed exchange's with its scheduled messages, a queue's
// with retry settings), at 1280 px and at phone width, and the redrive dialog pass
// axe-core's WCAG 2.1 A and AA rules (labels, names, contrast, landmarks,
// ARIA use); the dialog opens
// and closes from the keyboard and gives focus back to its button.
func TestUIAccessibility(t *testing.T) {
	script := axeScript(t)
	ctx := browser(t)
	a := startAPI(t)
	root := strings.TrimSuffix(a.base, "/api")
	a.must(201, "PUT", "/queues/%2F/orders.dlq", map[string]any{"durable": true})
	a.must(201, "PUT", "/queues/%2F/orders", map[string]any{"durable": true,
		"arguments": map[string]any{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "orders.dlq", "x-max-length": 100}})
	a.must(201, "PUT", "/exchanges/%2F/events", map[string]any{"type": "topic", "durable": true})
	a.must(201, "PUT", "/policies/%2F/dlx", map[string]any{"pattern": "^orders$", "apply-to": "queues", "definition": map[string]any{"message-ttl": 60000}})
	// A delayed exchange holding a message, and a queue with retry settings.
	a.must(201, "PUT", "/exchanges/%2F/later", map[string]any{"type": "x-delayed-message", "durable": true, "arguments": map[string]any{"x-delayed-type": "direct"}})
	a.must(200, "POST", "/exchanges/%2F/later/publish", map[string]any{"routing_key": "k", "payload": "soon", "payload_encoding": "string",
		"properties": map[string]any{"headers": map[string]any{"x-delay": 3_600_000}}})
	a.must(201, "PUT", "/queues/%2F/retrying", map[string]any{"durable": true, "arguments": map[string]any{"x-delayed-retry-min": 1000}})
	a.deadLetter("orders", "orders.dlq", 1, "order 1")
	a.must(201, "POST", "/queues/%2F/orders.dlq/redrive", map[string]any{"rate": 1, "source_queue": "nowhere"})
	conn := a.Dial(t)
	defer conn.Close()

	uiLogin(t, ctx, root, "guest", "guest")
	until(t, ctx, "load axe", chromedp.Evaluate(script+";true", nil))
	pages := []string{"#/overview", "#/nodes", "#/queues", "#/queue/%2F/orders.dlq", "#/queue/%2F/retrying", "#/exchanges", "#/exchange/%2F/events", "#/exchange/%2F/later",
		"#/connections", "#/redrives", "#/shovels", "#/policies", "#/users", "#/limits"}
	for _, width := range []int64{1280, 390} {
		until(t, ctx, "viewport", chromedp.EmulateViewport(width, 844))
		for _, page := range pages {
			until(t, ctx, page, chromedp.Navigate(root+"/"+page))
			poll(t, ctx, page+" loaded", `document.querySelector("main").dataset.loaded === `+jsString(page)+` && typeof axe !== "undefined"`)
			axeCheck(t, ctx, fmt.Sprintf("%s at %d px", page, width))
		}
	}
	until(t, ctx, "viewport", chromedp.EmulateViewport(1280, 800))

	// The redrive dialog, from the keyboard.
	until(t, ctx, "queue page", chromedp.Navigate(root+"/#/queue/%2F/orders.dlq"))
	// Loaded, and focus given to main as the hash change does once the
	// page is drawn: a focus before that is taken back.
	poll(t, ctx, "queue page loaded", `document.querySelector("main").dataset.loaded === "#/queue/%2F/orders.dlq" &&
		document.activeElement === document.querySelector("main") && typeof axe !== "undefined"`)
	until(t, ctx, "open with Enter", chromedp.Focus("#redrive-open", chromedp.ByQuery), chromedp.KeyEvent("\r"))
	poll(t, ctx, "dialog open, focus in it", `document.querySelector("#redrive-dialog").open && document.querySelector("#redrive-dialog").contains(document.activeElement)`)
	axeCheck(t, ctx, "redrive dialog")
	until(t, ctx, "close with Escape", chromedp.KeyEvent("\x1b"))
	poll(t, ctx, "dialog closed, focus back", `!document.querySelector("#redrive-dialog").open && document.activeElement === document.querySelector("#redrive-open")`)
}
