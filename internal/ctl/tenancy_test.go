package ctl

import (
	"errors"
	"strings"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// TestVhostLimits: set_vhost_limits replaces the vhost's limits,
// list_vhost_limits prints them as one JSON line (or, --global, a table),
// clear_vhost_limits clears them, with rabbitmqctl 3.10's texts; the
// limit is enforced.
func TestVhostLimits(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		out := e.ok("set_vhost_limits", "-p", e.vhost, `{"max-connections": 1, "max-queues": 5}`)
		if out != "Setting vhost limits to \"{\"max-connections\": 1, \"max-queues\": 5}\" for vhost \""+e.vhost+"\" ...\n" {
			t.Errorf("set_vhost_limits printed %q", out)
		}
		if out := e.ok("list_vhost_limits", "-p", e.vhost); out != "Listing limits for vhost \""+e.vhost+"\" ...\n{\"max-connections\":1,\"max-queues\":5}\n" {
			t.Errorf("list_vhost_limits printed %q", out)
		}
		out = e.ok("list_vhost_limits", "--global")
		if !strings.HasPrefix(out, "Listing limits for all vhosts ...\nvhost\tlimits\n") || !hasLine(out, e.vhost+"\t{\"max-connections\":1,\"max-queues\":5}") {
			t.Errorf("list_vhost_limits --global printed:\n%s", out)
		}
		e.dial("guest", "guest")
		if _, err := e.dialErr("guest", "guest"); err == nil || !strings.Contains(err.Error(), "connection limit (1) is reached") {
			t.Errorf("second connection: %v, want the vhost's connection limit", err)
		}
		// The definition replaces: max-connections goes.
		e.ok("set_vhost_limits", "-p", e.vhost, `{"max-queues": 7}`)
		if out := e.ok("list_vhost_limits", "-p", e.vhost); out != "Listing limits for vhost \""+e.vhost+"\" ...\n{\"max-queues\":7}\n" {
			t.Errorf("list_vhost_limits after a replacement printed %q", out)
		}
		e.dial("guest", "guest")
		if out := e.ok("clear_vhost_limits", "-p", e.vhost); out != "Clearing vhost \""+e.vhost+"\" limits ...\n" {
			t.Errorf("clear_vhost_limits printed %q", out)
		}
		if out := e.ok("list_vhost_limits", "-p", e.vhost); out != "Listing limits for vhost \""+e.vhost+"\" ...\n\n" {
			t.Errorf("list_vhost_limits with none printed %q", out)
		}
		e.fails(ExitUnavailable, []string{"Validation failed\n\nUnrecognised terms [{<<\"max-foo\">>,3}] in limits"}, "set_vhost_limits", "-p", e.vhost, `{"max-foo": 3}`)
		e.fails(ExitDataErr, []string{"Virtual host '/h-ctl-nope' does not exist"}, "set_vhost_limits", "-p", "/h-ctl-nope", `{"max-queues": 3}`)
		e.fails(ExitUsage, []string{"not enough arguments"}, "set_vhost_limits", "-p", e.vhost)
	})
}

// TestUserLimits: set_user_limits adds to the user's limits,
// list_user_limits prints them (--user, --global), clear_user_limits
// clears one or all, with rabbitmqctl 3.10's texts; the channel limit is
// enforced.
func TestUserLimits(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		u := e.user("lim")
		e.ok("add_user", u, "pw")
		e.ok("set_permissions", "-p", e.vhost, u, ".*", ".*", ".*")
		out := e.ok("set_user_limits", u, `{"max-channels": 1}`)
		if out != "Setting user limits to \"{\"max-channels\": 1}\" for user \""+u+"\" ...\n" {
			t.Errorf("set_user_limits printed %q", out)
		}
		e.ok("set_user_limits", u, `{"max-connections": 4}`)
		if out := e.ok("list_user_limits", "--user", u); out != "Listing limits for user \""+u+"\" ...\n{\"max-channels\":1,\"max-connections\":4}\n" {
			t.Errorf("list_user_limits printed %q", out)
		}
		out = e.ok("list_user_limits", "--global")
		if !strings.HasPrefix(out, "Listing limits for all users ...\nuser\tlimits\n") || !hasLine(out, u+"\t{\"max-channels\":1,\"max-connections\":4}") {
			t.Errorf("list_user_limits --global printed:\n%s", out)
		}
		conn := e.dial(u, "pw")
		if _, err := conn.Channel(); err != nil {
			t.Fatal(err)
		}
		_, err := conn.Channel()
		var ae *amqp091.Error
		if !errors.As(err, &ae) || ae.Code != 530 || !strings.Contains(ae.Reason, "has reached the maximum allowed user limit of (1)") {
			t.Errorf("second channel: %v, want 530", err)
		}
		if out := e.ok("clear_user_limits", u, "max-channels"); out != "Clearing \"max-channels\" limit for user \""+u+"\" ...\n" {
			t.Errorf("clear_user_limits printed %q", out)
		}
		if out := e.ok("list_user_limits", "--user", u); out != "Listing limits for user \""+u+"\" ...\n{\"max-connections\":4}\n" {
			t.Errorf("list_user_limits after clearing one printed %q", out)
		}
		if out := e.ok("clear_user_limits", u, "all"); out != "Clearing all limits for user \""+u+"\" ...\n" {
			t.Errorf("clear_user_limits all printed %q", out)
		}
		if out := e.ok("list_user_limits", "--user", u); out != "Listing limits for user \""+u+"\" ...\n{}\n" {
			t.Errorf("list_user_limits with none printed %q", out)
		}
		e.fails(ExitUnavailable, []string{"Unrecognised terms [{<<\"max-queues\">>,1}] in user-limits"}, "set_user_limits", u, `{"max-queues": 1}`)
		e.fails(ExitUnavailable, []string{`{:no_such_user, "h-ctl-nobody"}`}, "set_user_limits", "h-ctl-nobody", `{"max-channels": 1}`)
		e.fails(ExitUsage, []string{"not enough arguments"}, "clear_user_limits", u)
	})
}

// TestTopicPermissions: set_topic_permissions, list_topic_permissions,
// list_user_topic_permissions (no header line, as rabbitmqctl 3.10's) and
// clear_topic_permissions, with rabbitmqctl's texts; the permission is
// enforced on a publish to the topic exchange.
func TestTopicPermissions(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		u := e.user("tp")
		e.ok("add_user", u, "pw")
		e.ok("set_permissions", "-p", e.vhost, u, ".*", ".*", ".*")
		out := e.ok("set_topic_permissions", "-p", e.vhost, u, "amq.topic", `^{username}\.`, `^audit\.`)
		if out != "Setting topic permissions on \"amq.topic\" for user \""+u+"\" in vhost \""+e.vhost+"\" ...\n" {
			t.Errorf("set_topic_permissions printed %q", out)
		}
		e.ok("set_topic_permissions", "-p", e.vhost, u, "other", "", ".*")
		out = e.ok("list_topic_permissions", "-p", e.vhost)
		if out != "Listing topic permissions for vhost \""+e.vhost+"\" ...\nuser\texchange\twrite\tread\n"+u+"\tamq.topic\t^{username}\\.\t^audit\\.\n"+u+"\tother\t\t.*\n" {
			t.Errorf("list_topic_permissions printed %q", out)
		}
		out = e.ok("list_user_topic_permissions", u)
		if out != "Listing topic permissions for user \""+u+"\" ...\n"+e.vhost+"\tamq.topic\t^{username}\\.\t^audit\\.\n"+e.vhost+"\tother\t\t.*\n" {
			t.Errorf("list_user_topic_permissions printed %q", out)
		}
		ch, err := e.dial(u, "pw").Channel()
		if err != nil {
			t.Fatal(err)
		}
		if err := ch.Confirm(false); err != nil {
			t.Fatal(err)
		}
		closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
		if err := ch.Publish("amq.topic", "someone.else", false, false, amqp091.Publishing{Body: []byte("m")}); err != nil {
			t.Fatal(err)
		}
		if ce := <-closed; ce == nil || ce.Code != 403 || ce.Reason != "ACCESS_REFUSED - access to topic 'someone.else' in exchange 'amq.topic' in vhost '"+e.vhost+"' refused for user '"+u+"'" {
			t.Errorf("publish outside the write pattern: %v", ce)
		}
		out = e.ok("clear_topic_permissions", "-p", e.vhost, u, "other")
		if out != "Clearing topic permissions on \"other\" for user \""+u+"\" in vhost \""+e.vhost+"\" ...\n" {
			t.Errorf("clear_topic_permissions EXCHANGE printed %q", out)
		}
		out = e.ok("clear_topic_permissions", "-p", e.vhost, u)
		if out != "Clearing topic permissions for user \""+u+"\" in vhost \""+e.vhost+"\" ...\n" {
			t.Errorf("clear_topic_permissions printed %q", out)
		}
		if out := e.ok("list_topic_permissions", "-p", e.vhost); out != "Listing topic permissions for vhost \""+e.vhost+"\" ...\n" {
			t.Errorf("list_topic_permissions with none printed %q", out)
		}
		e.ok("clear_topic_permissions", "-p", e.vhost, u) // none left: not an error, as rabbitmqctl
		e.fails(ExitNoUser, []string{"User \"h-ctl-nobody\" does not exist"}, "set_topic_permissions", "-p", e.vhost, "h-ctl-nobody", "amq.topic", "a", "b")
		e.fails(ExitDataErr, []string{"Virtual host '/h-ctl-nope' does not exist"}, "set_topic_permissions", "-p", "/h-ctl-nope", u, "amq.topic", "a", "b")
		e.fails(ExitUsage, []string{"not enough arguments"}, "set_topic_permissions", "-p", e.vhost, u, "amq.topic", "a")
	})
}
