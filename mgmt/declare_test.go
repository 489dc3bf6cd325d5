package mgmt_test

import (
	"testing"
)

// PUT of a queue or exchange takes RabbitMQ's defaults for what the body
// leaves out (props_to_method over the AMQP method's defaults): not
// durable, not auto-delete, and for an exchange the type direct. So a
// client declaring the same object non-durable over AMQP agrees with it.
func TestPutDefaults(t *testing.T) {
	a := startAPI(t)
	a.must(201, "PUT", "/queues/%2F/plain", map[string]any{})
	a.must(201, "PUT", "/queues/%2F/nobody", nil)
	a.must(201, "PUT", "/exchanges/%2F/plain", map[string]any{})
	a.must(201, "PUT", "/exchanges/%2F/fan", map[string]any{"type": "fanout"})
	for _, q := range []string{"plain", "nobody"} {
		if o := a.must(200, "GET", "/queues/%2F/"+q, nil).object(t); o["durable"] != false || o["auto_delete"] != false {
			t.Errorf("queue %s: durable %v auto_delete %v, want false, false", q, o["durable"], o["auto_delete"])
		}
	}
	if o := a.must(200, "GET", "/exchanges/%2F/plain", nil).object(t); o["type"] != "direct" || o["durable"] != false {
		t.Errorf("exchange plain: type %v durable %v, want direct, false", o["type"], o["durable"])
	}
	if o := a.must(200, "GET", "/exchanges/%2F/fan", nil).object(t); o["type"] != "fanout" || o["durable"] != false {
		t.Errorf("exchange fan: type %v durable %v, want fanout, false", o["type"], o["durable"])
	}
	_, ch := a.Channel(t)
	if _, err := ch.QueueDeclare("plain", false, false, false, false, nil); err != nil {
		t.Errorf("non-durable redeclaration of queue plain over AMQP: %v", err)
	}
	_, ch = a.Channel(t)
	if err := ch.ExchangeDeclare("plain", "direct", false, false, false, false, nil); err != nil {
		t.Errorf("non-durable redeclaration of exchange plain over AMQP: %v", err)
	}
}
