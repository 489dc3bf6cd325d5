package ctl

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/brokerd/brokerd/broker/auth"
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

// closeAllConnections: close_all_connections [-p V --limit N] [--global]
// [--per-connection-delay MS] EXPLANATION, as rabbitmqctl: the vhost's
// connections (every vhost's with --global), the first --limit of them,
// each closed as close_connection closes one. A connection gone by the
// time its close is asked is not an error.
func closeAllConnections(r *run, args []string) error {
	reason := args[0]
	path := apiPath("vhosts", r.vhost(), "connections")
	if r.opts.global {
		r.out.info("Closing all connections to node %s (across all vhosts), reason: %s...", r.c.base.Host, reason)
		path = apiPath("connections")
	} else {
		r.out.info("Closing all connections in vhost %s on node %s, reason: %s...", r.vhost(), r.c.base.Host, reason)
	}
	var conns []struct {
		Name string `json:"name"`
	}
	if err := r.c.get(r.ctx, path, &conns); err != nil {
		return r.explain(err, r.vhost(), "", nil)
	}
	if r.opts.limit > 0 && len(conns) > r.opts.limit {
		conns = conns[:r.opts.limit]
	}
	for i, c := range conns {
		if i > 0 && r.opts.connDelay > 0 {
			select {
			case <-r.ctx.Done():
				return r.ctx.Err()
			case <-time.After(r.opts.connDelay): // the pause asked for
			}
		}
		_, err := r.c.do(r.ctx, request{method: http.MethodDelete, path: apiPath("connections", c.Name),
			header: http.Header{"X-Reason": []string{reason}}})
		var ae *apiError
		if err != nil && !(errors.As(err, &ae) && ae.status == http.StatusNotFound) {
			return r.explain(err, "", "", nil)
		}
	}
	return nil
}

// hashPassword: hash_password PASSWORD, as rabbitmqctl prints it: the
// salted SHA-256 hash, base64, that definitions files carry. The broker
// is not asked.
func hashPassword(r *run, args []string) error {
	r.out.info("Will hash password %s", args[0])
	r.out.write(auth.HashPassword(args[0]) + "\n")
	return nil
}
