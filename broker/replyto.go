package broker

import (
	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/store"
)

// Direct reply-to (RabbitMQ's amq.rabbitmq.reply-to): a client consumes
// from the pseudo-queue in no-ack mode, publishes requests with reply_to
// set to it, and the broker rewrites reply_to into an address that routes
// replies straight to that channel, with no queue in between.
const (
	replyToQueue  = "amq.rabbitmq.reply-to"
	replyToPrefix = replyToQueue + "."
)

func (ch *channel) consumeReplyTo(m *amqp.BasicConsume) *amqp.Error {
	if !m.NoAck {
		return amqp.Errorf(amqp.PreconditionFailed, "reply consumer cannot acknowledge")
	}
	ch.mu.Lock()
	if ch.replyTo != "" {
		ch.mu.Unlock()
		return amqp.Errorf(amqp.PreconditionFailed, "reply consumer already set")
	}
	tag := m.ConsumerTag
	if tag == "" {
		tag = newGeneratedName("amq.ctag-")
	}
	ch.replyTo = newGeneratedName(replyToPrefix)
	ch.replyTag = tag
	addr := ch.replyTo
	ch.mu.Unlock()
	ch.conn.b.replyTo.Store(addr, ch)
	if !m.Nowait {
		ch.out.Send(&amqp.BasicConsumeOk{ConsumerTag: tag})
	}
	return nil
}

func (ch *channel) cancelReplyTo() {
	ch.mu.Lock()
	addr := ch.replyTo
	ch.replyTo, ch.replyTag = "", ""
	ch.mu.Unlock()
	if addr != "" {
		ch.conn.b.replyTo.Delete(addr)
	}
}

// replyAddress returns the address to put in reply_to for requests sent on
// this channel.
func (ch *channel) replyAddress() (string, *amqp.Error) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.replyTo == "" {
		return "", amqp.Errorf(amqp.PreconditionFailed, "fast reply consumer does not exist")
	}
	return ch.replyTo, nil
}

// deliverReply sends a reply published to a direct reply-to address to its
// consumer. It reports false when the address is unknown (the requester
// has gone) or the requester's connection has its outbound queue full (it
// does not read): the reply is then unroutable.
func (b *Broker) deliverReply(addr string, m *store.Message) bool {
	v, ok := b.replyTo.Load(addr)
	if !ok {
		return false
	}
	ch := v.(*channel)
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.closed || ch.replyTo != addr || ch.out.Saturated() {
		return false
	}
	tag := ch.nextTag
	ch.nextTag++
	ch.out.SendContent(&amqp.BasicDeliver{
		ConsumerTag: ch.replyTag,
		DeliveryTag: tag,
		Exchange:    "",
		RoutingKey:  addr,
	}, m.Header.Props, m.Body)
	return true
}
