// Tests of RabbitMQ 4.x's deprecated features that brokerd can deny.

package broker_test

import (
	"errors"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
)

// RabbitMQ 4.3's refusal of a queue neither durable nor exclusive, its
// deprecated feature transient_nonexcl_queues denied: the warning cut to
// 255 characters with the reply name.
const transientNonExclRefusal = "INTERNAL_ERROR - Feature `transient_nonexcl_queues` is deprecated.\n" +
	"By default, this feature is not permitted anymore.\n" +
	"The feature will be removed from a future major RabbitMQ version, regardless of the configuration; actual version to be determined.\n" +
	"To..."

// With Options.DenyTransientNonExclQueues, as RabbitMQ 4.3 by default, a
// new queue neither durable nor exclusive (named or server-named,
// auto-delete or not) is refused with 541 INTERNAL_ERROR, closing the
// connection, and is not made; durable queues and exclusive transient
// ones are declared, and so is a transient queue by default.
func TestQueueDenyTransientNonExclusive(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{Broker: broker.Options{DenyTransientNonExclQueues: true}})
	_, ch := b.Channel(t)
	for _, d := range []struct {
		name                           string
		durable, autoDelete, exclusive bool
	}{
		{"durable", true, false, false},
		{"durable-ad", true, true, false},
		{"excl", false, false, true},
		{"excl-ad", false, true, true},
	} {
		if _, err := ch.QueueDeclare(d.name, d.durable, d.autoDelete, d.exclusive, false, nil); err != nil {
			t.Fatalf("declare %s: %v", d.name, err)
		}
	}
	if len(transientNonExclRefusal) != 255 {
		t.Fatalf("refusal text of %d bytes", len(transientNonExclRefusal))
	}
	for _, d := range []struct {
		name       string
		autoDelete bool
	}{{"transient", false}, {"transient-ad", true}, {"", false}} {
		conn := b.Dial(t)
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		closed := conn.NotifyClose(make(chan *amqp091.Error, 1))
		_, err = ch.QueueDeclare(d.name, false, d.autoDelete, false, false, nil)
		var e *amqp091.Error
		if !errors.As(err, &e) || e.Code != amqp091.InternalError || e.Reason != transientNonExclRefusal {
			t.Fatalf("declare %q transient non-exclusive: %v; want 541 %q", d.name, err, transientNonExclRefusal)
		}
		prAwaitClose(t, closed, "connection")
		if d.name != "" {
			if _, err := b.Broker.Queue("/", d.name); err == nil {
				t.Fatalf("queue %s made", d.name)
			}
		}
	}
	// A Direct that permits them (the management API's aliveness test)
	// declares one; another is refused.
	d, err := b.Broker.OpenDirect("guest", "/")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, aerr := d.Do(&amqp.QueueDeclare{Queue: "refused"}); aerr == nil || aerr.Code != amqp.InternalError {
		t.Fatalf("transient non-exclusive queue over a Direct: %v; want 541", aerr)
	}
	d2, err := b.Broker.OpenDirect("guest", "/")
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	d2.PermitTransientQueues()
	if _, aerr := d2.Do(&amqp.QueueDeclare{Queue: "aliveness-test"}); aerr != nil {
		t.Fatalf("declare over a permitting Direct: %v", aerr)
	}

	// The default: declared.
	b2 := brokertest.Start(t, brokertest.Config{})
	_, ch2 := b2.Channel(t)
	if _, err := ch2.QueueDeclare("transient", false, false, false, false, nil); err != nil {
		t.Fatalf("declare by default: %v", err)
	}
}
