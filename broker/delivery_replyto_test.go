// Tests of direct reply-to (amq.rabbitmq.reply-to).

package broker_test

// Tests of direct reply-to (amq.rabbitmq.reply-to): replies reach the
// requester without a queue, and its misuses are channel errors.

import (
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker/brokertest"
)

func TestDeliveryDirectReplyTo(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	server := b.Session(t, brokertest.NoConfirm)
	rpc := server.Declare("rpc", nil)
	requests := dvConsume(t, server, rpc, "server", false, nil)

	client := b.Session(t, brokertest.NoConfirm)
	replies := dvConsume(t, client, "amq.rabbitmq.reply-to", "client", true, nil)
	client.Publish("", rpc, amqp091.Publishing{
		ReplyTo: "amq.rabbitmq.reply-to", CorrelationId: "req-1", Body: []byte("ping"),
	})

	req := dvRecv(t, requests)
	if !strings.HasPrefix(req.ReplyTo, "amq.rabbitmq.reply-to.") || len(req.ReplyTo) <= len("amq.rabbitmq.reply-to.") {
		t.Fatalf("server sees reply_to %q, want a rewritten amq.rabbitmq.reply-to.… address", req.ReplyTo)
	}
	if req.CorrelationId != "req-1" || string(req.Body) != "ping" {
		t.Fatalf("request %q correlation %q", req.Body, req.CorrelationId)
	}
	dvAck(t, req, false)
	server.Publish("", req.ReplyTo, amqp091.Publishing{CorrelationId: req.CorrelationId, Body: []byte("pong")})

	rep := dvRecv(t, replies)
	if string(rep.Body) != "pong" || rep.CorrelationId != "req-1" || rep.ConsumerTag != "client" || rep.RoutingKey != req.ReplyTo {
		t.Fatalf("reply %q correlation %q consumer %q key %q", rep.Body, rep.CorrelationId, rep.ConsumerTag, rep.RoutingKey)
	}

	// Once the requester has gone, a mandatory reply is returned.
	client.Close()
	returns := server.NotifyReturn(make(chan amqp091.Return, 1))
	if err := server.PublishWithContext(brokertest.Context(t), "", req.ReplyTo, true, false, amqp091.Publishing{Body: []byte("late")}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-returns:
		if r.ReplyCode != 312 || string(r.Body) != "late" {
			t.Fatalf("return %d %q", r.ReplyCode, r.Body)
		}
	case <-time.After(brokertest.Wait):
		t.Fatal("reply to a gone requester not returned")
	}
}

func TestDeliveryDirectReplyToErrors(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	c, ch := b.Channel(t)
	_, err := ch.Consume("amq.rabbitmq.reply-to", "c", false, false, false, false, nil)
	dvWantErr(t, err, 406, "PRECONDITION_FAILED - reply consumer cannot acknowledge")

	ch2 := brokertest.NewSession(t, c, brokertest.NoConfirm)
	q := ch2.Declare("rpc", nil)
	closed := dvNotifyClose(ch2)
	ch2.Publish("", q, amqp091.Publishing{ReplyTo: "amq.rabbitmq.reply-to", Body: []byte("x")})
	dvAwaitClose(t, closed, 406, "PRECONDITION_FAILED - fast reply consumer does not exist")
	brokertest.NewSession(t, c, brokertest.NoConfirm).WantReady(q, 0)
}
