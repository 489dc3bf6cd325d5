package ctl

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
)

// Vhost limits, user limits and topic permissions, as rabbitmqctl 3.10
// has them (its texts, columns and exit codes, checked against 3.10.8),
// over the management API's /api/vhost-limits, /api/user-limits and
// /api/topic-permissions.

// Options of these verbs: --global (list_vhost_limits, list_user_limits:
// every vhost's or user's), --user (list_user_limits; rabbitmqctl's
// default is "guest").
func init() {
	optSpecs = append(optSpecs,
		optSpec{long: "global", verbs: []string{"list_vhost_limits", "list_user_limits"}, set: func(o *options, _ string) error { o.limitsGlobal = true; return nil }},
		optSpec{long: "user", value: true, verbs: []string{"list_user_limits"}, set: func(o *options, v string) error { o.limitsUser = v; return nil }},
	)
}

var (
	vhostLimitNames = []string{"max-connections", "max-queues"}
	userLimitNames  = []string{"max-connections", "max-channels"}
)

// limitsDefinition parses a limits JSON document as rabbitmqctl does,
// refusing (69, with RabbitMQ's validation text) a name not in known or a
// value that is not an integer; wrapped is a vhost's "Validation
// failed" form.
func limitsDefinition(doc string, known []string, what string, wrapped bool) (map[string]json.Number, error) {
	dec := json.NewDecoder(strings.NewReader(doc))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil || m == nil {
		return nil, failf(ExitDataErr, "JSON decoding error. Reason: %s", strings.TrimSpace(doc))
	}
	out := map[string]json.Number{}
	var unknown []string
	var msgs []string
	for _, name := range slices.Sorted(maps.Keys(m)) {
		n, ok := m[name].(json.Number)
		if _, err := n.Int64(); !ok || err != nil {
			b, _ := json.Marshal(m[name])
			msgs = append(msgs, fmt.Sprintf("%s should be a number, actually was %s", name, b))
			continue
		}
		if !slices.Contains(known, name) {
			unknown = append(unknown, fmt.Sprintf("{<<%q>>,%s}", name, n))
			continue
		}
		out[name] = n
	}
	if len(unknown) > 0 {
		msgs = append(msgs, fmt.Sprintf("Unrecognised terms [%s] in %s", strings.Join(unknown, ","), what))
	}
	if len(msgs) > 0 {
		if wrapped {
			return nil, failf(ExitUnavailable, "Validation failed\n\n%s\n", strings.Join(msgs, "\n"))
		}
		return nil, failf(ExitUnavailable, "%s", strings.Join(msgs, "\n"))
	}
	return out, nil
}

// limitsText renders limits as rabbitmqctl prints them: compact JSON,
// names sorted.
func limitsText(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Sprint(v)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// limitsRow is one row of a --global listing: its owner and limits.
var limitsColumn = column{name: "limits", get: func(o map[string]any) any { return o["value"] }, text: limitsText, json: func(v any) any { return v }}

// vhostLimitsOf reads vhost's limits (none: an empty map).
func (r *run) limitsOf(path string) (map[string]any, error) {
	var rows []struct {
		Value map[string]any `json:"value"`
	}
	if err := r.c.get(r.ctx, path, &rows); err != nil {
		return nil, err
	}
	out := map[string]any{}
	for _, row := range rows {
		maps.Copy(out, row.Value)
	}
	return out, nil
}

// setVhostLimits: set_vhost_limits [-p V] DEFINITION. The definition
// replaces the vhost's limits, as rabbitmqctl's: each limit is set, and
// those it leaves out are cleared.
func setVhostLimits(r *run, args []string) error {
	r.out.info("Setting vhost limits to \"%s\" for vhost \"%s\" ...", args[0], r.vhost())
	def, err := limitsDefinition(args[0], vhostLimitNames, "limits", true)
	if err != nil {
		return err
	}
	old, err := r.limitsOf(apiPath("vhost-limits", r.vhost()))
	if err != nil {
		return r.explain(err, r.vhost(), "", err)
	}
	for _, name := range slices.Sorted(maps.Keys(def)) {
		if err := r.c.send(r.ctx, http.MethodPut, apiPath("vhost-limits", r.vhost(), name), map[string]any{"value": def[name]}); err != nil {
			return r.explain(err, r.vhost(), "", err)
		}
	}
	for name := range old {
		if _, keep := def[name]; !keep {
			if err := r.c.send(r.ctx, http.MethodDelete, apiPath("vhost-limits", r.vhost(), name), nil); err != nil {
				return r.explain(err, r.vhost(), "", err)
			}
		}
	}
	return nil
}

// clearVhostLimits: clear_vhost_limits [-p V].
func clearVhostLimits(r *run, args []string) error {
	r.out.info("Clearing vhost \"%s\" limits ...", r.vhost())
	old, err := r.limitsOf(apiPath("vhost-limits", r.vhost()))
	if err != nil {
		return r.explain(err, r.vhost(), "", err)
	}
	for _, name := range slices.Sorted(maps.Keys(old)) {
		if err := r.c.send(r.ctx, http.MethodDelete, apiPath("vhost-limits", r.vhost(), name), nil); err != nil {
			return r.explain(err, r.vhost(), "", err)
		}
	}
	return nil
}

// listVhostLimits: list_vhost_limits [-p V] [--global]: the vhost's
// limits as one JSON line (an empty line for none), or with --global a
// table of every vhost that has some.
func listVhostLimits(r *run, args []string) error {
	if r.opts.limitsGlobal {
		r.out.info("Listing limits for all vhosts ...")
		return r.list(apiPath("vhost-limits"), []column{field("vhost"), limitsColumn}, "", "")
	}
	r.out.info("Listing limits for vhost \"%s\" ...", r.vhost())
	l, err := r.limitsOf(apiPath("vhost-limits", r.vhost()))
	if err != nil {
		return r.explain(err, r.vhost(), "", err)
	}
	r.limitsLine(l, len(l) == 0)
	return nil
}

// limitsLine prints limits as rabbitmqctl's one-object listing does: the
// JSON, an empty line for a vhost without any, {} for a user.
func (r *run) limitsLine(l map[string]any, blank bool) {
	switch {
	case r.out.json:
		r.out.write(limitsText(l) + "\n")
	case blank:
		r.out.write("\n")
	default:
		r.out.write(limitsText(l) + "\n")
	}
}

// setUserLimits: set_user_limits USER DEFINITION: the limits named are
// set, the user's others kept (as rabbitmqctl's).
func setUserLimits(r *run, args []string) error {
	user := args[0]
	r.out.info("Setting user limits to \"%s\" for user \"%s\" ...", args[1], user)
	def, err := limitsDefinition(args[1], userLimitNames, "user-limits", false)
	if err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(def)) {
		err := r.c.send(r.ctx, http.MethodPut, apiPath("user-limits", user, name), map[string]any{"value": def[name]})
		if isAPIStatus(err, http.StatusBadRequest) && strings.Contains(specificReason(err), "no_such_user") {
			return failf(ExitUnavailable, "{:no_such_user, %q}", user)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// clearUserLimits: clear_user_limits USER NAME|all.
func clearUserLimits(r *run, args []string) error {
	user, name := args[0], args[1]
	if name == "all" {
		r.out.info("Clearing all limits for user \"%s\" ...", user)
	} else {
		r.out.info("Clearing \"%s\" limit for user \"%s\" ...", name, user)
	}
	err := r.c.send(r.ctx, http.MethodDelete, apiPath("user-limits", user, name), nil)
	if isAPIStatus(err, http.StatusBadRequest, http.StatusNotFound) {
		if ok, qerr := r.c.exists(r.ctx, apiPath("users", user)); qerr == nil && !ok {
			return failf(ExitUnavailable, "{:no_such_user, %q}", user)
		}
	}
	return err
}

// listUserLimits: list_user_limits [--user U] [--global]: the user's
// limits as one JSON line ({} for none; the user is "guest" unless
// named, as in rabbitmqctl), or with --global a table of every user that
// has some.
func listUserLimits(r *run, args []string) error {
	if r.opts.limitsGlobal {
		r.out.info("Listing limits for all users ...")
		return r.list(apiPath("user-limits"), []column{field("user"), limitsColumn}, "", "")
	}
	user := r.opts.limitsUser
	if user == "" {
		user = "guest"
	}
	r.out.info("Listing limits for user \"%s\" ...", user)
	l, err := r.limitsOf(apiPath("user-limits", user))
	if isAPIStatus(err, http.StatusNotFound) {
		return failf(ExitUnavailable, "{:no_such_user, %q}", user)
	}
	if err != nil {
		return err
	}
	r.limitsLine(l, false)
	return nil
}

// setTopicPermissions: set_topic_permissions [-p V] USER EXCHANGE WRITE READ.
func setTopicPermissions(r *run, args []string) error {
	user, x := args[0], args[1]
	r.out.info("Setting topic permissions on \"%s\" for user \"%s\" in vhost \"%s\" ...", x, user, r.vhost())
	body := map[string]string{"exchange": x, "write": args[2], "read": args[3]}
	err := r.c.send(r.ctx, http.MethodPut, apiPath("topic-permissions", r.vhost(), user), body)
	return r.explain(err, r.vhost(), user, err)
}

// clearTopicPermissions: clear_topic_permissions [-p V] USER [EXCHANGE].
// Clearing what is not set is not an error, as with rabbitmqctl.
func clearTopicPermissions(r *run, args []string) error {
	user := args[0]
	path := apiPath("topic-permissions", r.vhost(), user)
	if len(args) == 2 {
		r.out.info("Clearing topic permissions on \"%s\" for user \"%s\" in vhost \"%s\" ...", args[1], user, r.vhost())
		path = apiPath("topic-permissions", r.vhost(), user, args[1])
	} else {
		r.out.info("Clearing topic permissions for user \"%s\" in vhost \"%s\" ...", user, r.vhost())
	}
	err := r.c.send(r.ctx, http.MethodDelete, path, nil)
	return r.explain(err, r.vhost(), user, nil)
}

// listTopicPermissions: list_topic_permissions [-p V].
func listTopicPermissions(r *run, args []string) error {
	cols, err := topicPermissionColumns.pick(r.opts.verb, nil)
	if err != nil {
		return err
	}
	r.out.info("Listing topic permissions for vhost \"%s\" ...", r.vhost())
	return r.list(apiPath("vhosts", r.vhost(), "topic-permissions"), cols, r.vhost(), "")
}

// listUserTopicPermissions: list_user_topic_permissions USER. rabbitmqctl
// 3.10 prints this table without its header line; so does brokerctl.
func listUserTopicPermissions(r *run, args []string) error {
	cols, err := userTopicPermissionColumns.pick(r.opts.verb, nil)
	if err != nil {
		return err
	}
	user := args[0]
	r.out.info("Listing topic permissions for user \"%s\" ...", user)
	noHeaders := r.out.noHeaders
	r.out.noHeaders = true
	defer func() { r.out.noHeaders = noHeaders }()
	err = r.list(apiPath("users", user, "topic-permissions"), cols, "", user)
	if _, missing := err.(*cliError); missing && strings.Contains(err.Error(), "does not exist") {
		return failf(ExitUnavailable, "{:no_such_user, %q}", user)
	}
	return err
}

var (
	topicPermissionColumns = listing{
		defaults: []string{"user", "exchange", "write", "read"},
		all:      []column{field("user"), field("exchange"), field("write"), field("read")},
	}
	userTopicPermissionColumns = listing{
		defaults: []string{"vhost", "exchange", "write", "read"},
		all:      []column{field("vhost"), field("exchange"), field("write"), field("read")},
	}
)
