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
	_, server := b.Channel(t)
	rpc := dvDeclare(t, server, "rpc", nil)
	requests := dvConsume(t, server, rpc, "server", false, nil)

	_, client := b.Channel(t)
	replies := dvConsume(t, client, "amq.rabbitmq.reply-to", "client", true, nil)
	dvPublish(t, client, "", rpc, amqp091.Publishing{
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
	dvPublish(t, server, "", req.ReplyTo, amqp091.Publishing{CorrelationId: req.CorrelationId, Body: []byte("pong")})

	rep := dvRecv(t, replies)
	if string(rep.Body) != "pong" || rep.CorrelationId != "req-1" || rep.ConsumerTag != "client" || rep.RoutingKey != req.ReplyTo {
		t.Fatalf("reply %q correlation %q consumer %q key %q", rep.Body, rep.CorrelationId, rep.ConsumerTag, rep.RoutingKey)
	}

	// Once the requester has gone, a mandatory reply is returned.
	client.Close()
	returns := server.NotifyReturn(make(chan amqp091.Return, 1))
	if err := server.PublishWithContext(dvCtx(t), "", req.ReplyTo, true, false, amqp091.Publishing{Body: []byte("late")}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-returns:
		if r.ReplyCode != 312 || string(r.Body) != "late" {
			t.Fatalf("return %d %q", r.ReplyCode, r.Body)
		}
	case <-time.After(dvWait):
		t.Fatal("reply to a gone requester not returned")
	}
}

func TestDeliveryDirectReplyToErrors(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	c, ch := b.Channel(t)
	_, err := ch.Consume("amq.rabbitmq.reply-to", "c", false, false, false, false, nil)
	dvWantErr(t, err, 406, "PRECONDITION_FAILED - reply consumer cannot acknowledge")

	ch2 := dvChannel(t, c)
	q := dvDeclare(t, ch2, "rpc", nil)
	closed := dvNotifyClose(ch2)
	dvPublish(t, ch2, "", q, amqp091.Publishing{ReplyTo: "amq.rabbitmq.reply-to", Body: []byte("x")})
	dvAwaitClose(t, closed, 406, "PRECONDITION_FAILED - fast reply consumer does not exist")
	dvWantReady(t, dvChannel(t, c), q, 0)
}
