package ctl

import (
	"net/http"
	"strings"
)

// userBody is what brokerctl reads of the API's user object. Tags are a
// list since RabbitMQ 3.9 and a comma-separated string before; PUT takes
// the string form in every version.
type userBody struct {
	PasswordHash     *string `json:"password_hash"`
	HashingAlgorithm string  `json:"hashing_algorithm"`
	Tags             any     `json:"tags"`
}

// getUser reads a user; a missing one is userMissing.
func (r *run) getUser(name string) (userBody, error) {
	var u userBody
	err := r.c.get(r.ctx, apiPath("users", name), &u)
	if isAPIStatus(err, http.StatusNotFound) {
		return u, userMissing(name)
	}
	return u, err
}

// putUser writes a user with either a password or, when password is nil,
// the given hash ("" hash: no password, login by password disabled).
func (r *run) putUser(name string, password *string, hash, algorithm string, tags []string) error {
	body := map[string]any{"tags": strings.Join(tags, ",")}
	if password != nil {
		body["password"] = *password
	} else {
		body["password_hash"] = hash
		if algorithm != "" {
			body["hashing_algorithm"] = algorithm
		}
	}
	return r.c.send(r.ctx, http.MethodPut, apiPath("users", name), body)
}

// addUser: add_user NAME PASSWORD. The API's PUT creates or overwrites,
// so brokerctl asks first, to refuse an existing user as rabbitmqctl does
// (exit 70). An empty password makes a user who cannot log in with one.
func addUser(r *run, args []string) error {
	name, password := args[0], args[1]
	r.out.info("Adding user \"%s\" ...", name)
	exists, err := r.c.exists(r.ctx, apiPath("users", name))
	if err != nil {
		return err
	}
	if exists {
		return failf(ExitSoftware, "User \"%s\" already exists", name)
	}
	if password == "" {
		err = r.putUser(name, nil, "", "", nil)
	} else {
		err = r.putUser(name, &password, "", "", nil)
	}
	if err != nil {
		return err
	}
	r.out.info("Done. Don't forget to grant the user permissions to some virtual hosts! See 'brokerctl help set_permissions' to learn more.")
	return nil
}

// deleteUser: delete_user NAME.
func deleteUser(r *run, args []string) error {
	name := args[0]
	r.out.info("Deleting user \"%s\" ...", name)
	err := r.c.send(r.ctx, http.MethodDelete, apiPath("users", name), nil)
	if isAPIStatus(err, http.StatusNotFound) {
		return userMissing(name)
	}
	return err
}

// changePassword: change_password NAME PASSWORD. The user's tags are read
// and written back with the new password.
func changePassword(r *run, args []string) error {
	name, password := args[0], args[1]
	r.out.info("Changing password for user \"%s\" ...", name)
	u, err := r.getUser(name)
	if err != nil {
		return err
	}
	return r.putUser(name, &password, "", "", stringList(u.Tags))
}

// setUserTags: set_user_tags NAME [TAG ...]. The user's password hash is
// read and written back with the new tags (a PUT without one would clear
// the password).
func setUserTags(r *run, args []string) error {
	name, tags := args[0], args[1:]
	r.out.info("Setting tags for user \"%s\" to [%s] ...", name, strings.Join(tags, ", "))
	u, err := r.getUser(name)
	if err != nil {
		return err
	}
	if u.PasswordHash == nil {
		// Writing the user back without it would clear the password.
		return failf(ExitSoftware, "the management API did not return the password hash of user \"%s\": its tags cannot be set without clearing its password", name)
	}
	return r.putUser(name, nil, *u.PasswordHash, u.HashingAlgorithm, tags)
}

// listUsers: list_users.
func listUsers(r *run, args []string) error {
	cols, err := userColumns.pick(r.opts.verb, nil)
	if err != nil {
		return err
	}
	r.out.info("Listing users ...")
	return r.list(apiPath("users"), cols, "", "")
}

// addVhost: add_vhost VHOST. Adding an existing vhost succeeds and
// changes nothing, as with rabbitmqctl; brokerctl asks first, because the
// API's PUT would reset its description and tags.
func addVhost(r *run, args []string) error {
	name := args[0]
	r.out.info("Adding vhost \"%s\" ...", name)
	exists, err := r.c.exists(r.ctx, apiPath("vhosts", name))
	if err != nil || exists {
		return err
	}
	body := map[string]any{}
	if r.opts.description != "" {
		body["description"] = r.opts.description
	}
	if r.opts.tags != "" {
		body["tags"] = r.opts.tags
	}
	if r.opts.queueType != "" {
		body["default_queue_type"] = r.opts.queueType
	}
	return r.c.send(r.ctx, http.MethodPut, apiPath("vhosts", name), body)
}

// deleteVhost: delete_vhost VHOST.
func deleteVhost(r *run, args []string) error {
	name := args[0]
	r.out.info("Deleting vhost \"%s\" ...", name)
	err := r.c.send(r.ctx, http.MethodDelete, apiPath("vhosts", name), nil)
	if isAPIStatus(err, http.StatusNotFound) {
		return vhostMissing(name)
	}
	return err
}

// listVhosts: list_vhosts [COLUMN ...].
func listVhosts(r *run, args []string) error {
	cols, err := vhostColumns.pick(r.opts.verb, args)
	if err != nil {
		return err
	}
	r.out.info("Listing vhosts ...")
	return r.list(apiPath("vhosts"), cols, "", "")
}

// setPermissions: set_permissions [-p V] USER CONF WRITE READ.
func setPermissions(r *run, args []string) error {
	user := args[0]
	r.out.info("Setting permissions for user \"%s\" in vhost \"%s\" ...", user, r.vhost())
	body := map[string]string{"configure": args[1], "write": args[2], "read": args[3]}
	err := r.c.send(r.ctx, http.MethodPut, apiPath("permissions", r.vhost(), user), body)
	return r.explain(err, r.vhost(), user, err)
}

// clearPermissions: clear_permissions [-p V] USER. A user without
// permissions in the vhost is not an error, as with rabbitmqctl.
func clearPermissions(r *run, args []string) error {
	user := args[0]
	r.out.info("Clearing permissions for user \"%s\" in vhost \"%s\" ...", user, r.vhost())
	err := r.c.send(r.ctx, http.MethodDelete, apiPath("permissions", r.vhost(), user), nil)
	return r.explain(err, r.vhost(), user, nil)
}

// listPermissions: list_permissions [-p V].
func listPermissions(r *run, args []string) error {
	cols, err := permissionColumns.pick(r.opts.verb, nil)
	if err != nil {
		return err
	}
	r.out.info("Listing permissions for vhost \"%s\" ...", r.vhost())
	return r.list(apiPath("vhosts", r.vhost(), "permissions"), cols, r.vhost(), "")
}

// listUserPermissions: list_user_permissions USER.
func listUserPermissions(r *run, args []string) error {
	cols, err := userPermissionColumns.pick(r.opts.verb, nil)
	if err != nil {
		return err
	}
	user := args[0]
	r.out.info("Listing permissions for user \"%s\" ...", user)
	return r.list(apiPath("users", user, "permissions"), cols, "", user)
}
