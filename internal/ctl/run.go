package ctl

import (
	"errors"
	"net/http"
	"strings"
)

// explain turns a refusal for a missing subject into the error that names
// it. RabbitMQ's API answers 404 "Not Found" whatever is missing (and 400
// "vhost_or_user_not_found" for permissions), so after such an answer
// explain asks whether vhost (if not "") and then user (if not "") exist:
// a missing vhost is vhostMissing (65), a missing user userMissing (67);
// otherwise the subject itself is missing and other is returned (nil:
// the refusal is not an error). Any other error is returned as it is,
// and so is err when the questions themselves fail.
func (r *run) explain(err error, vhost, user string, other error) error {
	if err == nil || !isMissing(err) {
		return err
	}
	if vhost != "" {
		ok, qerr := r.c.exists(r.ctx, apiPath("vhosts", vhost))
		if qerr != nil {
			return err
		}
		if !ok {
			return vhostMissing(vhost)
		}
	}
	if user != "" {
		ok, qerr := r.c.exists(r.ctx, apiPath("users", user))
		if qerr != nil {
			return err
		}
		if !ok {
			return userMissing(user)
		}
	}
	return other
}

// isMissing reports whether err is the API saying that something does
// not exist.
func isMissing(err error) bool {
	var ae *apiError
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.status {
	case http.StatusNotFound:
		return true
	case http.StatusBadRequest:
		return strings.Contains(ae.reason, "not_found") || strings.Contains(ae.reason, "no_such_")
	}
	return false
}

// list prints the objects at path in the columns cols (from
// listing.pick, called before the informational line so that a bad
// column prints nothing else). A 404 is explained for vhost and user.
func (r *run) list(path string, cols []column, vhost, user string) error {
	var objs []map[string]any
	if err := r.c.get(r.ctx, path, &objs); err != nil {
		return r.explain(err, vhost, user, err)
	}
	r.out.rows(cols, rowsOf(objs, cols))
	return nil
}
