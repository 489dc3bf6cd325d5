package ctl

import (
	"net/http"
	"net/url"
	"strings"
)

// listQueues: list_queues [COLUMN ...]. rabbitmqctl prints its timeout
// first; so does brokerctl.
func listQueues(r *run, args []string) error {
	cols, err := queueColumns.pick(r.opts.verb, args)
	if err != nil {
		return err
	}
	r.out.info("Timeout: %.1f seconds ...", r.opts.timeout.Seconds())
	r.out.info("Listing queues for vhost %s ...", r.vhost())
	return r.list(apiPath("queues", r.vhost()), cols, r.vhost(), "")
}

// listExchanges: list_exchanges [COLUMN ...].
func listExchanges(r *run, args []string) error {
	cols, err := exchangeColumns.pick(r.opts.verb, args)
	if err != nil {
		return err
	}
	r.out.info("Listing exchanges for vhost %s ...", r.vhost())
	return r.list(apiPath("exchanges", r.vhost()), cols, r.vhost(), "")
}

// listBindings: list_bindings [COLUMN ...]. The API lists the default
// exchange's implicit bindings too, as rabbitmqctl does.
func listBindings(r *run, args []string) error {
	cols, err := bindingColumns.pick(r.opts.verb, args)
	if err != nil {
		return err
	}
	r.out.info("Listing bindings for vhost %s...", r.vhost())
	return r.list(apiPath("bindings", r.vhost()), cols, r.vhost(), "")
}

// listConnections: list_connections [COLUMN ...], every vhost's.
func listConnections(r *run, args []string) error {
	cols, err := connectionColumns.pick(r.opts.verb, args)
	if err != nil {
		return err
	}
	r.out.info("Listing connections ...")
	return r.list(apiPath("connections"), cols, "", "")
}

// listChannels: list_channels [COLUMN ...], every vhost's.
func listChannels(r *run, args []string) error {
	cols, err := channelColumns.pick(r.opts.verb, args)
	if err != nil {
		return err
	}
	r.out.info("Listing channels ...")
	return r.list(apiPath("channels"), cols, "", "")
}

// listConsumers: list_consumers [-p V] [COLUMN ...].
func listConsumers(r *run, args []string) error {
	cols, err := consumerColumns.pick(r.opts.verb, args)
	if err != nil {
		return err
	}
	r.out.info("Listing consumers in vhost %s ...", r.vhost())
	return r.list(apiPath("consumers", r.vhost()), cols, r.vhost(), "")
}

// closeConnection: close_connection NAME REASON. The server closes it with
// 320 CONNECTION_FORCED and the reason (the API's X-Reason header).
func closeConnection(r *run, args []string) error {
	name, reason := args[0], args[1]
	r.out.info("Closing connection %s, reason: %s...", name, reason)
	_, err := r.c.do(r.ctx, request{
		method: http.MethodDelete, path: apiPath("connections", name),
		header: http.Header{"X-Reason": []string{reason}},
	})
	return r.explain(err, "", "", failf(ExitUnavailable, "Connection '%s' not found", name))
}

// purgeQueue: purge_queue QUEUE.
func purgeQueue(r *run, args []string) error {
	q := args[0]
	r.out.info("Purging queue '%s' in vhost '%s' ...", q, r.vhost())
	err := r.c.send(r.ctx, http.MethodDelete, apiPath("queues", r.vhost(), q, "contents"), nil)
	return r.explain(err, r.vhost(), "", queueMissing(q, r.vhost()))
}

// deleteQueue: delete_queue QUEUE [--if-empty] [--if-unused]. A queue
// that is not empty or is in use is refused by the server (its reason is
// printed).
func deleteQueue(r *run, args []string) error {
	q := args[0]
	var conds []string
	query := url.Values{}
	if r.opts.ifEmpty {
		conds = append(conds, "if queue is empty")
		query.Set("if-empty", "true")
	}
	if r.opts.ifUnused {
		conds = append(conds, "if queue is unused")
		query.Set("if-unused", "true")
	}
	cond := ""
	if len(conds) > 0 {
		cond = " " + strings.Join(conds, " and ")
	}
	r.out.info("Deleting queue '%s' on vhost '%s'%s ...", q, r.vhost(), cond)
	path := apiPath("queues", r.vhost(), q)
	if len(query) > 0 {
		path += "?" + query.Encode()
	}
	err := r.c.send(r.ctx, http.MethodDelete, path, nil)
	return r.explain(err, r.vhost(), "", queueMissing(q, r.vhost()))
}

func queueMissing(q, vhost string) error {
	return failf(ExitUnavailable, "Queue '%s' in vhost '%s' not found", q, vhost)
}
