package main

import (
	"strings"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// Vhost limits, user limits and topic permissions are definitions: set
// through the leader (brokerctl), they are committed to the group, and
// the node elected after the leader is killed with SIGKILL has them and
// enforces them.
func TestClusterTenancyFollowsLeader(t *testing.T) {
	tn := startOpsNodes(t)
	l := tn.leader()
	tn.brokerctl(l, "set_vhost_limits", "-p", "/", `{"max-queues": 1}`)
	tn.brokerctl(l, "set_user_limits", "guest", `{"max-channels": 7}`)
	tn.brokerctl(l, "set_topic_permissions", "-p", "/", "guest", "amq.topic", `^ok\.`, ".*")
	tn.kill(l)
	nl := tn.leader(l)
	for path, want := range map[string]string{
		"/api/vhost-limits":      `[{"value":{"max-queues":1},"vhost":"/"}]`,
		"/api/user-limits":       `[{"user":"guest","value":{"max-channels":7}}]`,
		"/api/topic-permissions": `[{"exchange":"amq.topic","read":".*","user":"guest","vhost":"/","write":"^ok\\."}]`,
	} {
		var got string
		if err := tn.get(nl, path, &got); err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(got) != want {
			t.Errorf("new leader %s: %s = %s, want %s", tn.names[nl], path, got, want)
		}
	}
	conn, err := amqp091.Dial(tn.url(nl))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("q1", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	_, err = ch.QueueDeclare("q2", true, false, false, false, nil)
	if err == nil || !strings.Contains(err.Error(), "PRECONDITION_FAILED - cannot declare queue 'q2': queue limit in vhost '/' (1) is reached") {
		t.Fatalf("second queue on the new leader: %v", err)
	}
	ch, err = conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
	if err := ch.Publish("amq.topic", "no.x", false, false, amqp091.Publishing{Body: []byte("m")}); err != nil {
		t.Fatal(err)
	}
	if e := <-closed; e == nil || e.Reason != "ACCESS_REFUSED - access to topic 'no.x' in exchange 'amq.topic' in vhost '/' refused for user 'guest'" {
		t.Fatalf("publish outside the topic permission on the new leader: %v", e)
	}
}
