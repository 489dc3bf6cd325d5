package ctl

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// redrive: redrive QUEUE [--to-origin | --exchange X --routing-key K]
// [--max N] [--reason R]. Moves the queue's ready messages (dead letters)
// back to the queue each came from, or through an exchange, with POST
// /api/queues/{vhost}/{name}/redrive, which runs it before it answers.
// Prints moved, failed and remaining, then one line per failure.
func redrive(r *run, args []string) error {
	q := args[0]
	if r.opts.toOrigin && (r.opts.exchange != nil || r.opts.routingKey != nil) {
		return failf(ExitUsage, "--to-origin and --exchange/--routing-key exclude each other")
	}
	if r.opts.routingKey != nil && r.opts.exchange == nil {
		return failf(ExitUsage, "--routing-key needs --exchange")
	}
	body := map[string]any{"to": "origin", "max": r.opts.max}
	if r.opts.exchange != nil {
		body["to"], body["exchange"] = "exchange", *r.opts.exchange
		if r.opts.routingKey != nil {
			body["routing_key"] = *r.opts.routingKey
		}
	}
	if r.opts.reason != "" {
		body["reason"] = r.opts.reason
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
	var res map[string]any
	if err := decodeJSON(answer, path, &res); err != nil {
		return err
	}
	r.out.rows(redriveColumns, rowsOf([]map[string]any{res}, redriveColumns))
	failures, _ := res["failures"].([]any)
	for _, f := range failures {
		if m, ok := f.(map[string]any); ok {
			r.out.info("Not moved: seq %v: %v", m["seq"], m["reason"])
		}
	}
	return nil
}

var redriveColumns = []column{field("moved"), field("failed"), field("remaining")}
