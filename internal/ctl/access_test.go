package ctl

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

func TestUsers(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		u := e.user("alice")
		out := e.ok("add_user", u, "s3cret")
		if out != "Adding user \""+u+"\" ...\nDone. Don't forget to grant the user permissions to some virtual hosts! See 'brokerctl help set_permissions' to learn more.\n" {
			t.Errorf("add_user printed %q", out)
		}
		if out := e.ok("-q", "set_permissions", "-p", e.vhost, u, ".*", ".*", ".*"); out != "" {
			t.Errorf("-q set_permissions printed %q", out)
		}
		// The user logs in with the password.
		e.dial(u, "s3cret")

		e.fails(ExitSoftware, []string{`User "` + u + `" already exists`}, "add_user", u, "other")
		e.dial(u, "s3cret") // add_user of an existing user changed nothing

		out = e.ok("set_user_tags", u, "monitoring", "policymaker")
		if out != "Setting tags for user \""+u+"\" to [monitoring, policymaker] ...\n" {
			t.Errorf("set_user_tags printed %q", out)
		}
		var user struct {
			Tags any `json:"tags"`
		}
		e.getJSON(apiPath("users", u), &user)
		if got := strings.Join(stringList(user.Tags), ","); got != "monitoring,policymaker" {
			t.Errorf("tags on the server: %q", got)
		}
		e.dial(u, "s3cret") // set_user_tags kept the password
		out = e.ok("list_users")
		if !strings.HasPrefix(out, "Listing users ...\nuser\ttags\n") || !hasLine(out, u+"\t[monitoring, policymaker]") || !hasLine(out, "guest\t[administrator]") {
			t.Errorf("list_users printed:\n%s", out)
		}
		var rows []map[string]any
		if err := json.Unmarshal([]byte(e.ok("list_users", "--formatter", "json")), &rows); err != nil {
			t.Fatal(err)
		}
		found := false
		for _, r := range rows {
			if r["user"] == u {
				found = true
				if tags, _ := r["tags"].([]any); len(tags) != 2 || tags[0] != "monitoring" {
					t.Errorf("json row %v", r)
				}
			}
		}
		if !found {
			t.Errorf("json rows lack %s: %v", u, rows)
		}
		e.ok("set_user_tags", u)
		if out := e.ok("-s", "list_users"); !hasLine(out, u+"\t[]") {
			t.Errorf("after clearing the tags list_users printed:\n%s", out)
		}

		out = e.ok("change_password", u, "n3w")
		if out != "Changing password for user \""+u+"\" ...\n" {
			t.Errorf("change_password printed %q", out)
		}
		e.dial(u, "n3w")
		if _, err := e.dialErr(u, "s3cret"); err == nil {
			t.Error("the old password still logs in")
		}

		out = e.ok("delete_user", u)
		if out != "Deleting user \""+u+"\" ...\n" {
			t.Errorf("delete_user printed %q", out)
		}
		if st, _ := e.api("GET", apiPath("users", u), nil); st != http.StatusNotFound {
			t.Errorf("after delete_user GET: %d", st)
		}
		for _, args := range [][]string{
			{"delete_user", u}, {"change_password", u, "x"}, {"set_user_tags", u, "management"},
			{"list_user_permissions", u}, {"set_permissions", "-p", e.vhost, u, ".*", ".*", ".*"},
			{"clear_permissions", "-p", e.vhost, u},
		} {
			e.fails(ExitNoUser, []string{`User "` + u + `" does not exist`}, args...)
		}
		e.fails(ExitUsage, []string{"not enough arguments"}, "add_user", u)
		e.fails(ExitUsage, []string{"too many arguments"}, "delete_user", u, "x")
	})
}

func TestVhosts(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		v := e.vhost + "-extra"
		t.Cleanup(func() { e.api("DELETE", apiPath("vhosts", v), nil) })
		out := e.ok("add_vhost", v, "--description", "for brokerctl")
		if out != "Adding vhost \""+v+"\" ...\n" {
			t.Errorf("add_vhost printed %q", out)
		}
		var vh struct {
			Name        string `json:"name"`
			Description string `json:"description"`
		}
		e.getJSON(apiPath("vhosts", v), &vh)
		if vh.Name != v || vh.Description != "for brokerctl" {
			t.Errorf("the server holds %+v", vh)
		}
		e.ok("add_vhost", v) // existing: no error and no change, as rabbitmqctl
		out = e.ok("list_vhosts")
		if !strings.HasPrefix(out, "Listing vhosts ...\nname\n") || !hasLine(out, v) || !hasLine(out, "/") {
			t.Errorf("list_vhosts printed:\n%s", out)
		}
		if out := e.ok("-s", "list_vhosts", "name", "description"); !hasLine(out, v+"\tfor brokerctl") {
			t.Errorf("list_vhosts name description printed:\n%s", out)
		}

		// Deleting a vhost deletes what is in it.
		e.ok("set_policy", "-p", v, "p", ".*", `{"max-length":1}`)
		out = e.ok("delete_vhost", v)
		if out != "Deleting vhost \""+v+"\" ...\n" {
			t.Errorf("delete_vhost printed %q", out)
		}
		if st, _ := e.api("GET", apiPath("vhosts", v), nil); st != http.StatusNotFound {
			t.Errorf("after delete_vhost GET: %d", st)
		}
		if out := e.ok("-s", "list_vhosts"); hasLine(out, v) {
			t.Errorf("list_vhosts still lists %s", v)
		}
		e.fails(ExitDataErr, []string{"Virtual host '" + v + "' does not exist"}, "delete_vhost", v)
		e.fails(ExitUsage, []string{"Info key(s) bogus are not supported"}, "list_vhosts", "bogus")
	})
}

func TestPermissions(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		u := e.user("bob")
		e.ok("add_user", u, "pw")
		out := e.ok("set_permissions", "-p", e.vhost, u, "^bob-", "", "^bob-")
		if out != "Setting permissions for user \""+u+"\" in vhost \""+e.vhost+"\" ...\n" {
			t.Errorf("set_permissions printed %q", out)
		}
		var perm struct{ Configure, Write, Read string }
		e.getJSON(apiPath("permissions", e.vhost, u), &perm)
		if perm.Configure != "^bob-" || perm.Write != "" || perm.Read != "^bob-" {
			t.Errorf("the server holds %+v", perm)
		}
		out = e.ok("list_permissions", "-p", e.vhost)
		if !strings.HasPrefix(out, "Listing permissions for vhost \""+e.vhost+"\" ...\nuser\tconfigure\twrite\tread\n") ||
			!hasLine(out, u+"\t^bob-\t\t^bob-") || !hasLine(out, "guest\t.*\t.*\t.*") {
			t.Errorf("list_permissions printed:\n%s", out)
		}
		out = e.ok("list_user_permissions", u)
		if out != "Listing permissions for user \""+u+"\" ...\nvhost\tconfigure\twrite\tread\n"+e.vhost+"\t^bob-\t\t^bob-\n" {
			t.Errorf("list_user_permissions printed %q", out)
		}
		var rows []map[string]string
		if err := json.Unmarshal([]byte(e.ok("list_user_permissions", u, "--formatter", "json")), &rows); err != nil {
			t.Fatal(err)
		}
		if len(rows) != 1 || rows[0]["vhost"] != e.vhost || rows[0]["configure"] != "^bob-" || rows[0]["write"] != "" {
			t.Errorf("json rows %v", rows)
		}

		// The permissions are enforced: configure on bob-* only.
		ch, err := e.dial(u, "pw").Channel()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ch.QueueDeclare("bob-q", false, false, false, false, nil); err != nil {
			t.Fatalf("declare within the configure pattern: %v", err)
		}
		_, err = ch.QueueDeclare("other", false, false, false, false, nil)
		var ae *amqp091.Error
		if !errors.As(err, &ae) || ae.Code != amqp091.AccessRefused {
			t.Errorf("declare outside the configure pattern: %v, want 403", err)
		}

		out = e.ok("clear_permissions", "-p", e.vhost, u)
		if out != "Clearing permissions for user \""+u+"\" in vhost \""+e.vhost+"\" ...\n" {
			t.Errorf("clear_permissions printed %q", out)
		}
		if st, _ := e.api("GET", apiPath("permissions", e.vhost, u), nil); st != http.StatusNotFound {
			t.Errorf("after clear_permissions GET: %d", st)
		}
		if _, err := e.dialErr(u, "pw"); err == nil {
			t.Error("a user without permissions opened the vhost")
		}
		e.ok("clear_permissions", "-p", e.vhost, u) // none left: not an error, as rabbitmqctl
		if out := e.ok("list_user_permissions", u); out != "Listing permissions for user \""+u+"\" ...\n" {
			t.Errorf("list_user_permissions with none printed %q", out)
		}

		e.fails(ExitUnavailable, nil, "set_permissions", "-p", e.vhost, u, "(", ".*", ".*")
		e.fails(ExitDataErr, []string{"Virtual host '/h-ctl-nope' does not exist"}, "set_permissions", "-p", "/h-ctl-nope", u, ".*", ".*", ".*")
		e.fails(ExitDataErr, []string{"Virtual host '/h-ctl-nope' does not exist"}, "clear_permissions", "-p", "/h-ctl-nope", u)
		e.fails(ExitDataErr, []string{"Virtual host '/h-ctl-nope' does not exist"}, "list_permissions", "-p", "/h-ctl-nope")
		e.fails(ExitUsage, []string{"not enough arguments"}, "set_permissions", "-p", e.vhost, u, ".*", ".*")
	})
}

// TestRefusedCredentials: a wrong password is 401, a user without the
// administrator tag is refused user management; both exit 77.
func TestRefusedCredentials(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		e.fails(ExitNoPerm, []string{`refused user "guest"`, "401"}, "--password", "wrong", "list_vhosts")
		u := e.user("mon")
		e.ok("add_user", u, "pw")
		e.ok("set_user_tags", u, "monitoring")
		r := runCtl(map[string]string{EnvURL: e.srv.api, EnvUsername: u, EnvPassword: "pw"}, "", "add_user", u+"-x", "pw")
		if r.code != ExitNoPerm || !strings.Contains(r.stderr, `refused user "`+u+`"`) {
			t.Errorf("%v", r)
		}
		if st, _ := e.api("GET", apiPath("users", u+"-x"), nil); st != http.StatusNotFound {
			t.Errorf("a monitoring user created a user: GET %d", st)
		}
		// Flags win over the environment.
		r = runCtl(map[string]string{EnvURL: e.srv.api, EnvUsername: u, EnvPassword: "pw"}, "",
			"--username", "guest", "--password", "guest", "-q", "list_users")
		if r.code != 0 || !hasLine(r.stdout, u+"\t[monitoring]") {
			t.Errorf("%v", r)
		}
	})
}
