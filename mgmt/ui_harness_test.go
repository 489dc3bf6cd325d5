// The UI tests' harness: headless Chromium, actions and waits on a page, login, page readers and checks.

package mgmt_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

const chromiumPath = "/usr/bin/chromium"

// browser starts headless Chromium for a test at 1280×800, or skips the
// test when Chromium is not installed (.ci/run installs it). The browser
// is stopped when the test ends.
func browser(t *testing.T) context.Context {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Skipf("chromium not installed (%s: %v); apt-get install chromium to run the UI tests", chromiumPath, err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath),
		chromedp.NoSandbox, // the tests may run as root
		chromedp.WindowSize(1280, 800),
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	// chromedp logs CDP events it does not model (a <dialog> entering
	// the top layer, say) as errors; those are not the test's.
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithErrorf(func(format string, args ...any) {
		if msg := fmt.Sprintf(format, args...); !strings.Contains(msg, "unhandled node event") {
			t.Logf("chromedp: %s", msg)
		}
	}))
	tctx, tcancel := context.WithTimeout(ctx, 40*time.Second)
	t.Cleanup(func() {
		// Not chromedp.Cancel: its Browser.close waited forever here.
		// Cancelling the allocator kills Chromium and waits for it.
		tcancel()
		cancel()
		acancel()
	})
	// The page's console and uncaught errors go to the test log.
	chromedp.ListenTarget(ctx, func(ev any) {
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			var args []string
			for _, a := range ev.Args {
				args = append(args, string(a.Value)+a.Description)
			}
			t.Logf("console.%s: %s", ev.Type, strings.Join(args, " "))
		case *runtime.EventExceptionThrown:
			t.Logf("page error: %s", ev.ExceptionDetails.Error())
		}
	})
	if err := chromedp.Run(tctx, chromedp.EmulateViewport(1280, 800)); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return tctx
}

// screenshot writes what the viewport shows as name.png under $BROKERD_UI_SCREENSHOTS
// (nothing when it is unset).
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("BROKERD_UI_SCREENSHOTS")
	if dir == "" {
		return
	}
	var buf []byte
	if err := chromedp.Run(ctx, chromedp.CaptureScreenshot(&buf)); err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), buf, 0o644); err != nil {
		t.Fatal(err)
	}
}

// until runs actions and fails the test with what it was waiting for.
func until(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action) {
	t.Helper()
	if err := chromedp.Run(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// clickNow clicks the element sel matches, found and clicked in one step
// in the page: a row a refresh redraws between chromedp's look-up and its
// click ("Could not find node with given id") cannot slip away. Waits
// until sel matches.
func clickNow(sel string) chromedp.Action {
	q, _ := json.Marshal(sel)
	return chromedp.ActionFunc(func(ctx context.Context) error {
		if err := chromedp.WaitVisible(sel, chromedp.ByQuery).Do(ctx); err != nil {
			return err
		}
		var ok bool
		if err := chromedp.Evaluate("(e => e ? (e.click(), true) : false)(document.querySelector("+string(q)+"))", &ok).Do(ctx); err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("click %s: gone", sel)
		}
		return nil
	})
}

// setValue sets a form control's value as a script would (no input
// event), to clear it before typing.
func setValue(sel, value string) chromedp.Action {
	q, _ := json.Marshal(sel)
	v, _ := json.Marshal(value)
	return chromedp.Evaluate("document.querySelector("+string(q)+").value = "+string(v), nil)
}

// poll waits until the JavaScript expression is true in the page.
func poll(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	var ok bool
	until(t, ctx, what, chromedp.Poll(expr, &ok, chromedp.WithPollingTimeout(20*time.Second)))
}

// uiLogin opens the UI at root, logs in as user and waits for the
// overview. window.confirm is made to answer yes, as a user would, for
// the pages' delete buttons.
func uiLogin(t *testing.T, ctx context.Context, root, user, pass string) {
	t.Helper()
	until(t, ctx, "log in",
		chromedp.Navigate(root+"/"),
		chromedp.WaitVisible("#username", chromedp.ByQuery),
		chromedp.SendKeys("#username", user, chromedp.ByQuery),
		chromedp.SendKeys("#password", pass, chromedp.ByQuery),
		chromedp.Click(`#login button[type="submit"]`, chromedp.ByQuery),
		chromedp.WaitVisible("#ov-queues", chromedp.ByQuery),
		chromedp.Evaluate(`window.confirm = () => true`, nil))
}

// text returns the trimmed text of the first element sel matches.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	var s string
	until(t, ctx, "text of "+sel, chromedp.Text(sel, &s, chromedp.ByQuery))
	return strings.TrimSpace(s)
}

// pollTimes reads the times (performance.now() ms) of a page's last two
// polls from the data-at and data-prev-at attributes of sel.
func pollTimes(t *testing.T, ctx context.Context, sel string) (prev, at float64) {
	t.Helper()
	var p, a string
	until(t, ctx, "poll times of "+sel,
		chromedp.Evaluate(`document.querySelector(`+strconv.Quote(sel)+`).dataset.prevAt ?? ""`, &p),
		chromedp.Evaluate(`document.querySelector(`+strconv.Quote(sel)+`).dataset.at ?? ""`, &a))
	prev, _ = strconv.ParseFloat(p, 64)
	at, _ = strconv.ParseFloat(a, 64)
	return prev, at
}

// checkRates checks the rates shown in the cells sel(k) for counters that
// grew by want[k] between polls at prev and at (ms): the cell's growth is
// want[k] and its text want[k] per elapsed second, to the one decimal shown.
func checkRates(t *testing.T, ctx context.Context, sel func(k string) string, want map[string]int, prev, at float64) {
	t.Helper()
	secs := (at - prev) / 1000
	if secs <= 0 {
		t.Fatalf("poll times %v then %v", prev, at)
	}
	for k, n := range want {
		var delta, shown string
		until(t, ctx, "rate "+k,
			chromedp.Evaluate(`document.querySelector(`+strconv.Quote(sel(k))+`).dataset.delta ?? ""`, &delta),
			chromedp.Evaluate(`document.querySelector(`+strconv.Quote(sel(k))+`).textContent`, &shown))
		r, err := strconv.ParseFloat(shown, 64)
		if want := float64(n) / secs; err != nil || math.Abs(r-want) > 0.05+1e-9 {
			t.Errorf("%s: shown %q, want %.1f (%d over %.3f s)", k, shown, want, n, secs)
		}
		if delta != strconv.Itoa(n) {
			t.Errorf("%s: growth %q, want %d", k, delta, n)
		}
	}
}

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

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// deadLetter publishes bodies to queue q and rejects them (without
// requeue) so each is dead-lettered, then waits until dlq holds total.
func (a *api) deadLetter(q, dlq string, total int, bodies ...string) {
	a.t.Helper()
	for _, b := range bodies {
		a.must(200, "POST", "/exchanges/%2F/amq.default/publish", map[string]any{
			"properties": map[string]any{"delivery_mode": 2}, "routing_key": q, "payload": b, "payload_encoding": "string"})
	}
	a.must(200, "POST", "/queues/%2F/"+q+"/get", map[string]any{"count": len(bodies), "ackmode": "reject_requeue_false", "encoding": "auto"})
	waitFor(a.t, func() bool {
		return a.must(200, "GET", "/queues/%2F/"+dlq, nil).object(a.t)["messages"] == float64(total)
	})
}
