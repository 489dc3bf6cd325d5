package main

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// The RabbitMQ 4.3 behaviours are set from the configuration file:
// [deprecated_features.permit] transient_nonexcl_queues = false refuses a
// queue neither durable nor exclusive (541), and
// amqp.consumer_timeout_cancel = true cancels a timed-out consumer
// (basic.cancel) and leaves its channel open.
func TestRabbit43Settings(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "brokerd.toml")
	cfg := `[amqp]
listen = "127.0.0.1:0"
consumer_timeout = "1s"
consumer_timeout_cancel = true
[deprecated_features.permit]
transient_nonexcl_queues = false
`
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, dir, "-config", cfgFile, "-mgmt-listen", "off", "-data", filepath.Join(dir, "data"))
	c, err := amqp091.Dial(d.url())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("work", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Publish("", "work", false, false, amqp091.Publishing{Body: []byte("a")}); err != nil {
		t.Fatal(err)
	}
	cancels := ch.NotifyCancel(make(chan string, 1))
	msgs, err := ch.Consume("work", "slow", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-msgs:
	case <-time.After(30 * time.Second):
		t.Fatal("no delivery")
	}
	// Time is the point here: the daemon's clock, checked every second.
	select {
	case tag := <-cancels:
		if tag != "slow" {
			t.Fatalf("basic.cancel for %q", tag)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no basic.cancel after the 1s consumer timeout")
	}
	if _, err := ch.QueueDeclarePassive("work", true, false, false, false, nil); err != nil {
		t.Fatalf("channel closed by the consumer timeout: %v", err)
	}
	_, err = ch.QueueDeclare("transient", false, false, false, false, nil)
	if e := (*amqp091.Error)(nil); !errors.As(err, &e) || e.Code != amqp091.InternalError {
		t.Fatalf("transient non-exclusive queue: %v; want 541", err)
	}
}
