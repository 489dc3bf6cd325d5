// UI tests of message rates in Chromium: the queues list's and the queue page's rates between two polls.

package mgmt_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// The queues list and the queue page show incoming, deliver/get and ack
// rates: "—" before a second poll, then each counter's growth between two
// polls over the time between them (the polls' times are on the page).
func TestUIQueueRates(t *testing.T) {
	ctx := browser(t)
	a := startAPI(t)
	root := strings.TrimSuffix(a.base, "/api")
	_, ch := a.Channel(t)
	for _, q := range []string{"rated", "quiet"} {
		if _, err := ch.QueueDeclare(q, false, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	// traffic publishes n to rated and takes k of them with an ack, then
	// waits until the API counts the acks (they are asynchronous).
	var published, acked int
	traffic := func(n, k int) {
		t.Helper()
		for i := range n {
			if err := ch.Publish("", "rated", false, false, amqp091.Publishing{Body: []byte{byte(i)}}); err != nil {
				t.Fatal(err)
			}
		}
		for range k {
			m, ok, err := ch.Get("rated", false)
			if err != nil || !ok || m.Ack(false) != nil {
				t.Fatalf("get: %v %v", ok, err)
			}
		}
		published, acked = published+n, acked+k
		waitFor(t, func() bool {
			ms, _ := a.must(200, "GET", "/queues/%2F/rated", nil).object(t)["message_stats"].(map[string]any)
			return ms["publish"] == float64(published) && ms["ack"] == float64(acked)
		})
	}
	traffic(2, 1) // before the page: not a rate

	uiLogin(t, ctx, root, "guest", "guest")
	until(t, ctx, "queues page", chromedp.Navigate(root+"/#/queues"),
		chromedp.WaitVisible(`tr[data-queue="rated"] td[data-rate="publish"]`, chromedp.ByQuery))
	for _, k := range []string{"publish", "deliver_get", "ack"} {
		if got := text(t, ctx, `tr[data-queue="rated"] td[data-rate="`+k+`"]`); got != "—" {
			t.Errorf("%s rate on the first render: %q", k, got)
		}
	}
	_, first := pollTimes(t, ctx, "#queues")
	traffic(10, 4)
	if _, at := pollTimes(t, ctx, "#queues"); at != first {
		t.Fatal("the list polled while the test published; too slow a machine for this test")
	}
	poll(t, ctx, "list poll", fmt.Sprintf(`document.querySelector("#queues")?.dataset.prevAt === %q`, strconv.FormatFloat(first, 'f', -1, 64)))
	prev, at := pollTimes(t, ctx, "#queues")
	checkRates(t, ctx, func(k string) string { return `tr[data-queue="rated"] td[data-rate="` + k + `"]` },
		map[string]int{"publish": 10, "deliver_get": 4, "ack": 4}, prev, at)
	checkRates(t, ctx, func(k string) string { return `tr[data-queue="quiet"] td[data-rate="` + k + `"]` },
		map[string]int{"publish": 0, "deliver_get": 0, "ack": 0}, prev, at)
	screenshot(t, ctx, "queues-rates")

	until(t, ctx, "queue page", chromedp.Click(`tr[data-queue="rated"] a`, chromedp.ByQuery),
		chromedp.WaitVisible("#q-rate-publish", chromedp.ByQuery))
	if got := text(t, ctx, "#q-rate-publish"); got != "—" {
		t.Errorf("queue page's publish rate before a poll: %q", got)
	}
	poll(t, ctx, "first refresh", `document.querySelector("#queue-details").dataset.at !== undefined`)
	_, first = pollTimes(t, ctx, "#queue-details")
	traffic(6, 3)
	if _, at := pollTimes(t, ctx, "#queue-details"); at != first {
		t.Fatal("the queue page polled while the test published; too slow a machine for this test")
	}
	poll(t, ctx, "queue page poll", fmt.Sprintf(`document.querySelector("#queue-details").dataset.prevAt === %q`, strconv.FormatFloat(first, 'f', -1, 64)))
	prev, at = pollTimes(t, ctx, "#queue-details")
	checkRates(t, ctx, func(k string) string { return "#q-rate-" + k }, map[string]int{"publish": 6, "deliver_get": 3, "ack": 3}, prev, at)
}
