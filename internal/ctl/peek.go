package ctl

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// peek: peek [--count N] [--from SEQ [--priority P]] QUEUE. Ready messages, in delivery
// order, left where they are (GET /api/queues/{vhost}/{name}/peek). The
// table shows each message's x-death as "reason@queue×count" entries; the
// JSON output lists the messages as the API gives them. The line after
// the table names the --from of the next page.
func peek(r *run, args []string) error {
	count := 20
	if r.opts.count > 0 {
		count = r.opts.count
	}
	q := url.Values{}
	q.Set("count", strconv.Itoa(count))
	q.Set("from", strconv.FormatUint(r.opts.from, 10))
	if r.opts.peekPrio != nil {
		q.Set("priority", strconv.Itoa(*r.opts.peekPrio))
	}
	q.Set("truncate", "200")
	var page struct {
		Messages []map[string]any `json:"messages"`
		Next     uint64           `json:"next"`
		NextPrio int              `json:"next_priority"`
	}
	path := apiPath("queues", r.vhost(), args[0], "peek") + "?" + q.Encode()
	r.out.info("Peeking at queue %s in vhost %s ...", args[0], r.vhost())
	if err := r.c.get(r.ctx, path, &page); err != nil {
		return r.explain(err, r.vhost(), "", queueMissing(args[0], r.vhost()))
	}
	r.out.rows(peekColumns.all, rowsOf(page.Messages, peekColumns.all))
	if page.Next != 0 && !r.opts.json {
		// A priority queue's pages go on from a level and a seq.
		levels := r.opts.peekPrio != nil || page.NextPrio > 0
		for _, m := range page.Messages {
			if p, _ := m["priority_level"].(float64); p > 0 {
				levels = true
			}
		}
		if levels {
			r.out.info("More: --from %d --priority %d", page.Next, page.NextPrio)
		} else {
			r.out.info("More: --from %d", page.Next)
		}
	}
	return nil
}

var peekColumns = listing{
	defaults: []string{"seq", "exchange", "routing_key", "redelivered", "x_death", "payload"},
	all: []column{
		field("seq"), field("exchange"), field("routing_key"), field("redelivered"),
		column{name: "x_death", get: xDeathSummary, text: plain, json: nullEmpty},
		field("payload"),
	},
}

// xDeathSummary renders a message's x-death header as
// "reason@queue×count" entries, newest first, as the header lists them.
func xDeathSummary(m map[string]any) any {
	props, _ := m["properties"].(map[string]any)
	headers, _ := props["headers"].(map[string]any)
	deaths, _ := headers["x-death"].([]any)
	var parts []string
	for _, d := range deaths {
		t, ok := d.(map[string]any)
		if !ok {
			continue
		}
		parts = append(parts, fmt.Sprintf("%v@%v×%v", t["reason"], t["queue"], t["count"]))
	}
	return strings.Join(parts, ",")
}
