// Tests of the warning for dropped dead letters: rate-limited, with counts.

package broker_test

import (
	"log/slog"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
)

// Dead letters dropped because the dead letter exchange is missing are
// warned about at once, then counted: one line per interval with the
// number and the last one's attributes, not one per message.
func TestDeadLetterDropWarningIsRateLimited(t *testing.T) {
	logs := brokertest.NewLog(slog.LevelWarn)
	b := brokertest.Start(t, brokertest.Config{Broker: broker.Options{Logger: slog.New(logs)}})
	_, ch := b.Channel(t)
	if _, err := ch.QueueDeclare("src", true, false, false, false, amqp091.Table{"x-dead-letter-exchange": "nowhere"}); err != nil {
		t.Fatal(err)
	}
	const n = 5
	for range n {
		if err := ch.Publish("", "src", false, false, amqp091.Publishing{Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		d, ok, err := ch.Get("src", false)
		if err != nil || !ok {
			t.Fatalf("get: %v %v", ok, err)
		}
		if err := d.Nack(false, false); err != nil {
			t.Fatal(err)
		}
	}
	first := logs.Await(t, 10*time.Second, "dead letters dropped", 1).Map()
	for k, v := range map[string]string{"cause": "dlx_missing", "vhost": "/", "queue": "src", "reason": "rejected", "dead_letter_exchange": "nowhere"} {
		if first[k] != v {
			t.Errorf("first warning: %s = %q, want %q (%v)", k, first[k], v, first)
		}
	}
	if _, ok := first["count"]; ok {
		t.Errorf("first warning has a count: %v", first)
	}
	// The other n-1 in one line, at the end of the interval.
	second := logs.Await(t, 10*time.Second, "dead letters dropped", 2).Map()
	if second["count"] != "4" || second["cause"] != "dlx_missing" || second["last.queue"] != "src" {
		t.Errorf("second warning: %v; want count 4, cause dlx_missing, last.queue src", second)
	}
	drops := 0
	for _, ln := range logs.Lines() {
		if ln.Msg == "dead letters dropped" {
			drops++
		}
	}
	if drops != 2 {
		t.Errorf("%d warning lines for %d drops, want 2", drops, n)
	}
}
