package mgmt_test

import (
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker/brokertest"
)

// head_message_timestamp is, as RabbitMQ 3.10 reports it, the timestamp
// property (seconds) of a classic queue's next message, and null when the
// queue is empty, when that message has none, and for a quorum queue
// (checked against rabbitmqctl list_queues on RabbitMQ 3.10.8: 1700000000
// for a classic queue, "" — null in the API — for the others).
func TestHeadMessageTimestamp(t *testing.T) {
	a := startAPI(t)
	for _, q := range []struct{ name, typ string }{{"ts", "classic"}, {"none", "classic"}, {"qq", "quorum"}, {"empty", "classic"}} {
		a.must(201, "PUT", "/queues/%2F/"+q.name, map[string]any{"durable": true, "arguments": map[string]any{"x-queue-type": q.typ}})
	}
	ch := a.Session(t, brokertest.Persistent)
	ch.Publish("", "ts", amqp091.Publishing{Timestamp: time.Unix(1_700_000_000, 0), Body: []byte("a")})
	ch.Publish("", "ts", amqp091.Publishing{Timestamp: time.Unix(1_700_000_100, 0), Body: []byte("b")})
	ch.Publish("", "none", amqp091.Publishing{Body: []byte("a")})
	ch.Publish("", "qq", amqp091.Publishing{Timestamp: time.Unix(1_700_000_000, 0), Body: []byte("a")})
	ch.Sync()
	head := func(q string) any {
		t.Helper()
		return a.must(200, "GET", "/queues/%2F/"+q, nil).object(t)["head_message_timestamp"]
	}
	if got := head("ts"); got != 1_700_000_000.0 {
		t.Fatalf("ts: head_message_timestamp %v, want 1700000000", got)
	}
	for _, q := range []string{"none", "qq", "empty"} {
		if got := head(q); got != nil {
			t.Fatalf("%s: head_message_timestamp %v, want null", q, got)
		}
	}
	// The head taken (unacked), the next one's.
	d := ch.Get("ts")
	if got := head("ts"); got != 1_700_000_100.0 {
		t.Fatalf("ts after a get: head_message_timestamp %v, want 1700000100", got)
	}
	if err := d.Ack(false); err != nil {
		t.Fatal(err)
	}
	ch.Get("ts").Ack(false)
	ch.Sync()
	if got := head("ts"); got != nil {
		t.Fatalf("ts emptied: head_message_timestamp %v, want null", got)
	}
	// In the queue listing too.
	ch.Publish("", "ts", amqp091.Publishing{Timestamp: time.Unix(1_700_000_200, 0), Body: []byte("c")})
	ch.Sync()
	for _, q := range a.must(200, "GET", "/queues/%2F?columns=name,head_message_timestamp", nil).list(t) {
		if want := map[any]any{"ts": 1_700_000_200.0, "qq": nil}[q["name"]]; (q["name"] == "ts" || q["name"] == "qq") && q["head_message_timestamp"] != want {
			t.Fatalf("listing: %v", q)
		}
	}
}
