package mgmt_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// axeScript returns axe-core's browser script, from the npm package
// installed globally (.ci/run installs it), or skips the test.
func axeScript(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("npm", "root", "-g").Output()
	if err != nil {
		t.Skipf("npm not found (%v): the accessibility test needs axe-core (npm install -g axe-core)", err)
	}
	path := filepath.Join(strings.TrimSpace(string(out)), "axe-core", "axe.min.js")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Skipf("axe-core not installed (%v): npm install -g axe-core", err)
	}
	return string(data)
}

// axeViolation is what axe-core reports of one rule a page breaks.
type axeViolation struct {
	ID     string `json:"id"`
	Impact string `json:"impact"`
	Help   string `json:"help"`
	Nodes  []struct {
		Target []any  `json:"target"`
		HTML   string `json:"html"`
	} `json:"nodes"`
}

// axeCheck runs axe-core's WCAG 2 A and AA rules on the page as it is and
// fails the test with each violation.
func axeCheck(t *testing.T, ctx context.Context, page string) {
	t.Helper()
	var js string
	until(t, ctx, "axe on "+page, chromedp.Evaluate(`axe.run(document, {runOnly: {type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]}}).then(r => JSON.stringify(r.violations))`,
		&js, func(p *runtime.EvaluateParams) *runtime.EvaluateParams { return p.WithAwaitPromise(true) }))
	var vs []axeViolation
	if err := json.Unmarshal([]byte(js), &vs); err != nil {
		t.Fatalf("axe on %s: %v in %s", page, err, js)
	}
	for _, v := range vs {
		var where []string
		for _, n := range v.Nodes {
			where = append(where, n.HTML)
		}
		t.Errorf("%s: %s (%s, %s): %s", page, v.ID, v.Impact, v.Help, strings.Join(where, " | "))
	}
}

// Every page, at 1280 px and at phone width, and the redrive dialog pass
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
	a.deadLetter("orders", "orders.dlq", 1, "order 1")
	a.must(201, "POST", "/queues/%2F/orders.dlq/redrive", map[string]any{"rate": 1, "source_queue": "nowhere"})
	conn := a.Dial(t)
	defer conn.Close()

	uiLogin(t, ctx, root, "guest", "guest")
	until(t, ctx, "load axe", chromedp.Evaluate(script+";true", nil))
	pages := []string{"#/overview", "#/queues", "#/queue/%2F/orders.dlq", "#/exchanges", "#/exchange/%2F/events",
		"#/connections", "#/redrives", "#/policies", "#/users"}
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

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
