package ctl

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// redrivePoll is how often redrive asks how its task is doing.
const redrivePoll = 250 * time.Millisecond

// redrive: redrive QUEUE [--to-origin | --exchange X --routing-key K]
// [--rate N] [--max N] [--reason R] [--source-queue Q] [--min-age D]
// [--detach]. The filters are on each message's latest death (the
// broker's record of it; x-death for a message without one): its reason,
// its queue, and its time at least D ago. Starts a redrive task (POST
// /api/queues/{vhost}/{name}/redrive): ready messages (dead letters) move
// back to the queue the broker dead-lettered each from, as it recorded
// then (never as x-death says: a message without that record is a
// failure), or through an exchange.
// It then watches the task (GET /api/redrives/{id}), printing its
// progress at most once a second, until it ends, and prints its state,
// moved, failed and remaining, then one line per listed failure. With
// --detach it prints the task's id and returns at once. Interrupting
// brokerctl leaves the task running (cancel_redrive stops it). A task
// that failed (its queue deleted, its user's permissions revoked) exits
// with EX_SOFTWARE, one cancelled meanwhile with EX_TEMPFAIL.
func redrive(r *run, args []string) error {
	q := args[0]
	if r.opts.toOrigin && (r.opts.exchange != nil || r.opts.routingKey != nil) {
		return failf(ExitUsage, "--to-origin and --exchange/--routing-key exclude each other")
	}
	if r.opts.routingKey != nil && r.opts.exchange == nil {
		return failf(ExitUsage, "--routing-key needs --exchange")
	}
	body := map[string]any{"to": "origin", "max": r.opts.max, "rate": r.opts.rate}
	if r.opts.exchange != nil {
		body["to"], body["exchange"] = "exchange", *r.opts.exchange
		if r.opts.routingKey != nil {
			body["routing_key"] = *r.opts.routingKey
		}
	}
	if r.opts.reason != "" {
		body["reason"] = r.opts.reason
	}
	if r.opts.sourceQueue != "" {
		body["source_queue"] = r.opts.sourceQueue
	}
	if r.opts.minAge > 0 {
		body["min_age_ms"] = r.opts.minAge.Milliseconds()
	}
	data, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("encode redrive request: %w", err)
	}
	path := apiPath("queues", r.vhost(), q, "redrive")
	r.out.info("Redriving queue %s in vhost %s ...", q, r.vhost())
	answer, err := r.c.do(r.ctx, request{method: http.MethodPost, path: path, body: data})
	if err != nil {
		return r.explain(err, r.vhost(), "", queueMissing(q, r.vhost()))
	}
	var task map[string]any
	if err := decodeJSON(answer, path, &task); err != nil {
		return err
	}
	id := fmt.Sprint(task["id"])
	if r.opts.detach {
		r.out.info("Started redrive task %s; list_redrives shows it, cancel_redrive %s stops it", id, id)
		r.out.rows(redriveDetachColumns, rowsOf([]map[string]any{task}, redriveDetachColumns))
		return nil
	}
	r.out.info("Redrive task %s started; interrupting this command leaves it running", id)
	last, lastAt := "", time.Now()
	for task["state"] == "running" {
		select {
		case <-r.ctx.Done():
			return fmt.Errorf("watch redrive task %s: %w", id, r.ctx.Err())
		case <-time.After(redrivePoll):
		}
		if err := r.c.get(r.ctx, apiPath("redrives", id), &task); err != nil {
			return fmt.Errorf("watch redrive task %s: %w", id, err)
		}
		line := fmt.Sprintf("moved %v, failed %v, remaining %v", task["moved"], task["failed"], task["remaining"])
		if task["state"] == "running" && line != last && time.Since(lastAt) >= time.Second {
			r.out.info("%s", line)
			last, lastAt = line, time.Now()
		}
	}
	r.out.rows(redriveColumns, rowsOf([]map[string]any{task}, redriveColumns))
	failures, _ := task["failures"].([]any)
	for _, f := range failures {
		if m, ok := f.(map[string]any); ok {
			r.out.info("Not moved: seq %v: %v", m["seq"], m["reason"])
		}
	}
	if n, _ := task["failed"].(float64); int(n) > len(failures) {
		r.out.info("(%d more failures not listed; failure_reasons in list_redrives --formatter json counts them)", int(n)-len(failures))
	}
	switch task["state"] {
	case "failed":
		return failf(ExitSoftware, "Redrive task %s failed: %v", id, task["error"])
	case "cancelled":
		return failf(ExitTempFail, "Redrive task %s was cancelled", id)
	}
	return nil
}

var (
	redriveColumns       = []column{field("state"), field("moved"), field("failed"), field("remaining")}
	redriveDetachColumns = []column{field("id"), field("state")}
)

// listRedrives: list_redrives [column ...]. Every redrive task the user
// may see (GET /api/redrives), running or ended, oldest first.
func listRedrives(r *run, args []string) error {
	cols, err := redriveTaskColumns.pick(r.opts.verb, args)
	if err != nil {
		return err
	}
	r.out.info("Listing redrive tasks ...")
	return r.list(apiPath("redrives"), cols, "", "")
}

var redriveTaskColumns = listing{
	all: []column{field("id"), field("vhost"), field("queue"), field("state"), field("moved"), field("failed"),
		field("remaining"), field("to"), field("exchange"), field("routing_key"), field("rate"), field("max"),
		field("reason"), field("user"), field("created_at"), field("ended_at"), field("error"),
		field("failure_reasons").withText(compactJSON)},
	defaults: []string{"id", "vhost", "queue", "state", "moved", "failed", "remaining"},
}

// cancelRedrive: cancel_redrive ID. Stops a running task after the move
// under way (DELETE /api/redrives/{id}); the moves it made stay, and the
// task stays listed. An ended task is left as it is.
func cancelRedrive(r *run, args []string) error {
	r.out.info("Cancelling redrive task %s ...", args[0])
	return deleteRedrive(r, args[0], "")
}

// forgetRedrive: forget_redrive ID. Removes a task from the list
// (DELETE /api/redrives/{id}?forget=true), cancelling it if it runs.
func forgetRedrive(r *run, args []string) error {
	r.out.info("Forgetting redrive task %s ...", args[0])
	return deleteRedrive(r, args[0], "?forget=true")
}

func deleteRedrive(r *run, id, query string) error {
	_, err := r.c.do(r.ctx, request{method: http.MethodDelete, path: apiPath("redrives", id) + query})
	if err != nil && isMissing(err) {
		return failf(ExitUnavailable, "Redrive task '%s' not found", id)
	}
	return err
}
