package ctl

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// scheduledPage is how many messages list_scheduled asks for at a time.
const scheduledPage = 1000

// listScheduled: list_scheduled EXCHANGE [COLUMN ...] [--count N]. The
// messages a delayed exchange (x-delayed-message) holds, in due-time
// order (GET /api/exchanges/{vhost}/{name}/scheduled, every page, or the
// first N). The id column is what cancel_scheduled --id takes.
func listScheduled(r *run, args []string) error {
	x := args[0]
	cols, err := scheduledColumns.pick(r.opts.verb, args[1:])
	if err != nil {
		return err
	}
	limit := r.opts.count // 0: all
	r.out.info("Listing scheduled messages of exchange %s in vhost %s ...", x, r.vhost())
	var all []map[string]any
	after := ""
	for {
		n := scheduledPage
		if limit > 0 {
			n = min(n, limit-len(all))
		}
		q := url.Values{}
		q.Set("count", strconv.Itoa(n))
		q.Set("truncate", "200")
		if after != "" {
			q.Set("after", after)
		}
		var page struct {
			Messages []map[string]any `json:"messages"`
			Next     string           `json:"next"`
		}
		if err := r.c.get(r.ctx, apiPath("exchanges", r.vhost(), x, "scheduled")+"?"+q.Encode(), &page); err != nil {
			return r.explain(err, r.vhost(), "", exchangeMissing(x, r.vhost()))
		}
		all = append(all, page.Messages...)
		after = page.Next
		if after == "" || limit > 0 && len(all) >= limit {
			break
		}
	}
	r.out.rows(cols, rowsOf(all, cols))
	return nil
}

func exchangeMissing(x, vhost string) error {
	return failf(ExitUnavailable, "Exchange '%s' in vhost '%s' not found", x, vhost)
}

var scheduledColumns = listing{
	defaults: []string{"id", "due", "in", "routing_key", "payload_bytes"},
	all: []column{
		field("id"), field("due"), field("due_ms"),
		column{name: "in", get: func(m map[string]any) any { return m["due_in_ms"] }, text: dueIn, json: nullEmpty},
		field("routing_key"), field("routing_keys").withText(compactJSON), field("exchange"),
		field("payload_bytes"), field("payload"), field("payload_encoding"),
		column{name: "headers", get: scheduledHeaders, text: compactJSON, json: nullEmpty},
		field("properties").withText(compactJSON),
	},
}

// dueIn renders due_in_ms as a duration from now, to the second
// ("1m30s"; "due" once
// due and not yet released).
func dueIn(v any) string {
	n, ok := v.(json.Number) // the client decodes numbers so
	if !ok {
		return ""
	}
	ms, err := n.Int64()
	if err != nil {
		return ""
	}
	if ms <= 0 {
		return "due"
	}
	return (time.Duration(ms) * time.Millisecond).Round(time.Second).String()
}

func scheduledHeaders(m map[string]any) any {
	props, _ := m["properties"].(map[string]any)
	return props["headers"]
}

// cancelScheduled: cancel_scheduled EXCHANGE [--id ID ...] |
// [--routing-key K] [--header NAME=VALUE ...] [--due-before T]
// [--due-after T] | --all. Cancels held messages of a delayed exchange
// (POST /api/exchanges/{vhost}/{name}/scheduled/cancel): those named, or
// those that pass every filter given; --all, alone, everything held. A
// time is RFC 3339, Unix milliseconds, or a duration from now (10m). It
// prints how many it cancelled; they are gone for good (durably).
func cancelScheduled(r *run, args []string) error {
	x := args[0]
	o := r.opts
	body := map[string]any{}
	filtered := o.routingKey != nil || len(o.headers) > 0 || o.dueBefore != "" || o.dueAfter != ""
	switch {
	case len(o.ids) > 0 && (filtered || o.all):
		return failf(ExitUsage, "--id excludes the filters and --all")
	case o.all && filtered:
		return failf(ExitUsage, "--all excludes the filters")
	case len(o.ids) == 0 && !filtered && !o.all:
		return failf(ExitUsage, "cancel_scheduled needs --id, a filter (--routing-key, --header, --due-before, --due-after) or --all")
	}
	if len(o.ids) > 0 {
		body["ids"] = o.ids
	}
	if o.all {
		body["all"] = true
	}
	if o.routingKey != nil {
		body["routing_key"] = *o.routingKey
	}
	if len(o.headers) > 0 {
		body["headers"] = o.headers
	}
	for _, t := range []struct{ name, v string }{{"due_before", o.dueBefore}, {"due_after", o.dueAfter}} {
		if t.v == "" {
			continue
		}
		if d, err := time.ParseDuration(t.v); err == nil {
			body[t.name] = time.Now().Add(d).UnixMilli()
		} else {
			body[t.name] = t.v // RFC 3339 or Unix ms: the API reads it
		}
	}
	data, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("encode cancel request: %w", err)
	}
	r.out.info("Cancelling scheduled messages of exchange %s in vhost %s ...", x, r.vhost())
	answer, err := r.c.do(r.ctx, request{method: http.MethodPost, path: apiPath("exchanges", r.vhost(), x, "scheduled", "cancel"), body: data})
	if err != nil {
		return r.explain(err, r.vhost(), "", exchangeMissing(x, r.vhost()))
	}
	var res struct {
		Cancelled int `json:"cancelled"`
	}
	if err := json.Unmarshal(answer, &res); err != nil {
		return fmt.Errorf("decode cancel answer: %w", err)
	}
	if r.opts.json {
		r.out.write(fmt.Sprintf("{\"cancelled\":%d}\n", res.Cancelled))
		return nil
	}
	r.out.write(fmt.Sprintf("%d\n", res.Cancelled))
	return nil
}

// parseHeaderOpt reads --header NAME=VALUE.
func parseHeaderOpt(o *options, v string) error {
	name, value, ok := strings.Cut(v, "=")
	if !ok || name == "" {
		return fmt.Errorf("--header %q: want NAME=VALUE", v)
	}
	if o.headers == nil {
		o.headers = map[string]string{}
	}
	o.headers[name] = value
	return nil
}
