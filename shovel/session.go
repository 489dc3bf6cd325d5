package shovel

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/brokerd/brokerd/broker"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// session is one connection to each side, run by the worker's goroutine.
type session struct {
	w              *worker
	ctx            context.Context
	src, dst       *amqp091.Connection
	srcURI, dstURI string
	// dstLocal: the destination is this brokerd (Options.Local), which
	// delivers a message marked broker.RedeliveredHeader as redelivered.
	dstLocal     bool
	srcCh, dstCh *amqp091.Channel
	queue        string // consumed

	deliveries <-chan amqp091.Delivery
	confirms   chan amqp091.Confirmation
	blocked    chan amqp091.Blocking
	srcClosed  chan *amqp091.Error
	srcChClose chan *amqp091.Error
	cancelled  chan string
	dstClosed  chan *amqp091.Error
	dstChClose chan *amqp091.Error

	// maxInFlight bounds the publishes awaiting a confirm: confirms,
	// buffered to it, then never fills, so the client library's reader
	// never waits on this goroutine while it waits in a publish.
	maxInFlight int
	// inFlight are the publishes awaiting a confirm, in publish order.
	inFlight []pending
	// unackedLimit counts the deliveries still to publish before
	// src-delete-after (-1: no limit); those after it are left
	// unacknowledged, to go back to the source when it closes.
	unackedLimit int64
	// skipped: a delivery was left unacknowledged, so an ack with
	// multiple set could settle it; acks go one by one.
	skipped bool
	// ackTo is the source tag up to which confirmed deliveries await
	// their ack (0: none).
	ackTo uint64
}

type pending struct{ seq, tag uint64 }

func (s *session) setup() error {
	w, d := s.w, &s.w.def
	var err error
	if s.srcCh, err = s.src.Channel(); err != nil {
		return fmt.Errorf("open source channel: %w", err)
	}
	if s.dstCh, err = s.dst.Channel(); err != nil {
		return fmt.Errorf("open destination channel: %w", err)
	}
	if d.SrcIsExchange {
		// RabbitMQ's src_decl_exchange: a server-named exclusive queue.
		q, err := s.srcCh.QueueDeclare("", false, false, true, false, nil)
		if err != nil {
			return fmt.Errorf("declare source queue: %w", err)
		}
		if err := s.srcCh.QueueBind(q.Name, d.SrcExchangeKey, d.SrcExchange, false, nil); err != nil {
			return fmt.Errorf("bind source queue to exchange '%s': %w", d.SrcExchange, err)
		}
		s.queue = q.Name
	} else {
		if err := ensureQueue(s.src, d.SrcQueue, d.SrcQueueArgs, d.SrcPredeclared); err != nil {
			return fmt.Errorf("source queue '%s': %w", d.SrcQueue, err)
		}
		s.queue = d.SrcQueue
	}
	if d.HasDestQueue {
		if err := ensureQueue(s.dst, d.DestQueue, d.DestQueueArgs, d.DestPredeclared); err != nil {
			return fmt.Errorf("destination queue '%s': %w", d.DestQueue, err)
		}
	}
	if d.AckMode != NoAck {
		if err := s.srcCh.Qos(d.PrefetchCount, 0, false); err != nil {
			return fmt.Errorf("set source prefetch: %w", err)
		}
	}
	if !w.remainingSet {
		switch d.DeleteAfter {
		case "never":
			w.remaining = -1
		case "queue-length":
			q, err := s.srcCh.QueueDeclarePassive(s.queue, false, false, false, false, nil)
			if err != nil {
				return fmt.Errorf("read source queue length: %w", err)
			}
			w.remaining = int64(q.Messages)
		default:
			w.remaining = int64(min(d.DeleteAfterCount, 1<<62))
		}
		w.remainingSet = true
	}
	if w.remaining == 0 {
		return errDeleteAfter
	}
	s.unackedLimit = w.remaining
	if d.AckMode == OnConfirm {
		if err := s.dstCh.Confirm(false); err != nil {
			return fmt.Errorf("select confirms on destination: %w", err)
		}
		s.maxInFlight = d.PrefetchCount
		if s.maxInFlight == 0 {
			s.maxInFlight = 1 << 16
		}
		s.confirms = s.dstCh.NotifyPublish(make(chan amqp091.Confirmation, s.maxInFlight))
	}
	s.blocked = s.dst.NotifyBlocked(make(chan amqp091.Blocking, 16))
	s.srcClosed = s.src.NotifyClose(make(chan *amqp091.Error, 1))
	s.srcChClose = s.srcCh.NotifyClose(make(chan *amqp091.Error, 1))
	s.cancelled = s.srcCh.NotifyCancel(make(chan string, 1))
	s.dstClosed = s.dst.NotifyClose(make(chan *amqp091.Error, 1))
	s.dstChClose = s.dstCh.NotifyClose(make(chan *amqp091.Error, 1))
	s.deliveries, err = s.srcCh.Consume(s.queue, d.SrcConsumerName, d.AckMode == NoAck, false, false, false, d.SrcConsumerArgs)
	if err != nil {
		return fmt.Errorf("consume from source queue '%s': %w", s.queue, err)
	}
	w.setState(StateRunning, "")
	w.log.Info("shovel running", "src", s.srcURI, "dest", s.dstURI)
	return nil
}

// ensureQueue is RabbitMQ's ensure_queue: a passive declaration, and when
// the queue does not exist (and is not predeclared) a durable one with
// args. Each on a channel of its own, since a 404 closes it.
func ensureQueue(c *amqp091.Connection, name string, args amqp091.Table, predeclared bool) error {
	ch, err := c.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	_, err = ch.QueueDeclarePassive(name, false, false, false, false, nil)
	if err == nil {
		ch.Close()
		return nil
	}
	var aerr *amqp091.Error
	if predeclared || !errors.As(err, &aerr) || aerr.Code != amqp091.NotFound {
		return fmt.Errorf("check queue: %w", err)
	}
	ch2, err := c.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	defer ch2.Close()
	if _, err := ch2.QueueDeclare(name, true, false, false, false, args); err != nil {
		return fmt.Errorf("declare queue: %w", err)
	}
	return nil
}

func closedErr(what string, e *amqp091.Error) error {
	if e == nil {
		return fmt.Errorf("%s closed", what)
	}
	return fmt.Errorf("%s closed: %w", what, e)
}

func (s *session) loop() error {
	w := s.w
	for {
		deliveries := s.deliveries
		w.mu.Lock()
		blocked := w.blocked
		w.mu.Unlock()
		if blocked || (s.confirms != nil && len(s.inFlight) >= s.maxInFlight) {
			deliveries = nil // RabbitMQ holds what it would forward while blocked
		}
		select {
		case <-s.ctx.Done():
			return s.ctx.Err()
		case e := <-s.srcClosed:
			return closedErr("source connection", e)
		case e := <-s.srcChClose:
			return closedErr("source channel", e)
		case <-s.cancelled:
			return errors.New("source consumer cancelled by the server (basic.cancel)")
		case e := <-s.dstClosed:
			return closedErr("destination connection", e)
		case e := <-s.dstChClose:
			return closedErr("destination channel", e)
		case b := <-s.blocked:
			w.mu.Lock()
			w.blocked = b.Active
			w.mu.Unlock()
			if b.Active {
				w.log.Warn("shovel destination blocked", "reason", b.Reason)
			}
		case c, ok := <-s.confirms:
			if !ok {
				return errors.New("destination channel closed")
			}
			if err := s.confirmed(c); err != nil {
				return err
			}
		case dl, ok := <-deliveries:
			if !ok {
				return errors.New("source consumer ended")
			}
			if err := s.forward(dl); err != nil {
				return err
			}
		}
	}
}

// forward publishes one delivery to the destination and settles it on the
// source as the ack mode says.
func (s *session) forward(dl amqp091.Delivery) error {
	w, d := s.w, &s.w.def
	if s.unackedLimit == 0 {
		// src-delete-after is reached once the publishes in flight are
		// confirmed: this one goes back to the source (RabbitMQ drops it
		// on the floor unacknowledged the same way).
		s.skipped = true
		return nil
	}
	ex, key := dl.Exchange, dl.RoutingKey
	if d.HasDestExchange {
		ex = d.DestExchange
	}
	if d.HasDestExchangeKey {
		key = d.DestExchangeKey
	}
	if d.HasDestQueue {
		ex, key = "", d.DestQueue
	}
	pub := s.publishing(&dl)
	var seq uint64
	if d.AckMode == OnConfirm {
		seq = s.dstCh.GetNextPublishSeqNo()
	}
	if err := s.dstCh.PublishWithContext(s.ctx, ex, key, false, false, pub); err != nil {
		return fmt.Errorf("publish to destination: %w", err)
	}
	if s.unackedLimit > 0 {
		s.unackedLimit--
	}
	switch d.AckMode {
	case OnConfirm:
		s.inFlight = append(s.inFlight, pending{seq: seq, tag: dl.DeliveryTag})
		return nil
	case OnPublish:
		if err := s.srcCh.Ack(dl.DeliveryTag, false); err != nil {
			return fmt.Errorf("ack source: %w", err)
		}
	}
	w.forwarded.Add(1)
	return s.settled(1)
}

// settled counts n messages settled towards src-delete-after.
func (s *session) settled(n int64) error {
	w := s.w
	if w.remaining < 0 {
		return nil
	}
	w.remaining = max(w.remaining-n, 0)
	if w.remaining == 0 {
		return errDeleteAfter
	}
	return nil
}

// confirmed settles the source deliveries of c and of every confirm
// already waiting: an ack acks the source delivery (one ack with
// multiple set for a run of them), a nack nacks it with requeue, as
// RabbitMQ's shovel does.
func (s *session) confirmed(c amqp091.Confirmation) error {
	var n int64
	for {
		if len(s.inFlight) == 0 || s.inFlight[0].seq != c.DeliveryTag {
			return fmt.Errorf("destination confirmed publish %d, not awaited", c.DeliveryTag)
		}
		p := s.inFlight[0]
		s.inFlight = s.inFlight[1:]
		n++
		if c.Ack {
			s.w.forwarded.Add(1)
			if s.skipped {
				if err := s.srcCh.Ack(p.tag, false); err != nil {
					return fmt.Errorf("ack source: %w", err)
				}
			} else {
				s.ackTo = p.tag
			}
		} else {
			if err := s.flushAcks(); err != nil {
				return err
			}
			if err := s.srcCh.Nack(p.tag, false, true); err != nil {
				return fmt.Errorf("nack source: %w", err)
			}
		}
		select {
		case c = <-s.confirms:
			continue
		default:
		}
		break
	}
	if len(s.inFlight) == 0 {
		s.inFlight = nil // let the array go
	}
	if err := s.flushAcks(); err != nil {
		return err
	}
	return s.settled(n)
}

func (s *session) flushAcks() error {
	if s.ackTo == 0 {
		return nil
	}
	tag := s.ackTo
	s.ackTo = 0
	if err := s.srcCh.Ack(tag, true); err != nil {
		return fmt.Errorf("ack source: %w", err)
	}
	return nil
}

// publishing is the message to publish for dl: its properties and
// headers as received, then dest-publish-properties, then the x-shovelled
// and x-shovelled-timestamp headers when asked.
func (s *session) publishing(dl *amqp091.Delivery) amqp091.Publishing {
	d := &s.w.def
	p := amqp091.Publishing{
		Headers: dl.Headers, ContentType: dl.ContentType, ContentEncoding: dl.ContentEncoding,
		DeliveryMode: dl.DeliveryMode, Priority: dl.Priority, CorrelationId: dl.CorrelationId,
		ReplyTo: dl.ReplyTo, Expiration: dl.Expiration, MessageId: dl.MessageId,
		Timestamp: dl.Timestamp, Type: dl.Type, UserId: dl.UserId, AppId: dl.AppId, Body: dl.Body,
	}
	for k, v := range d.PublishProperties {
		str, _ := v.(string)
		num, _ := v.(float64)
		switch k {
		case "content_type":
			p.ContentType = str
		case "content_encoding":
			p.ContentEncoding = str
		case "delivery_mode":
			p.DeliveryMode = uint8(num)
		case "priority":
			p.Priority = uint8(num)
		case "correlation_id":
			p.CorrelationId = str
		case "reply_to":
			p.ReplyTo = str
		case "expiration":
			p.Expiration = str
		case "message_id":
			p.MessageId = str
		case "timestamp":
			p.Timestamp = time.Unix(int64(num), 0)
		case "type":
			p.Type = str
		case "user_id":
			p.UserId = str
		case "app_id":
			p.AppId = str
		}
	}
	if mark := dl.Redelivered && s.dstLocal; mark || d.AddForwardHeaders || d.AddTimestampHeader {
		h := make(amqp091.Table, len(p.Headers)+3)
		for k, v := range p.Headers {
			h[k] = v
		}
		if d.AddForwardHeaders {
			h["x-shovelled"] = s.forwardHeader(h["x-shovelled"])
		}
		if d.AddTimestampHeader {
			h["x-shovelled-timestamp"] = time.Now().Unix()
		}
		if mark {
			// This brokerd takes the header off and delivers the copy
			// flagged redelivered: a copy of it may be there already.
			h[broker.RedeliveredHeader] = true
		}
		p.Headers = h
	}
	return p
}

// forwardHeader prepends this shovel's entry to the x-shovelled array
// (RabbitMQ's rabbit_shovel_util:update_headers): its fields, all long
// strings, are shovelled-by, shovel-type, shovel-name, shovel-vhost,
// src-uri, dest-uri, the source (src-queue, or src-exchange and
// src-exchange-key) and the destination keys the definition has.
func (s *session) forwardHeader(prev any) []any {
	d := &s.w.def
	t := amqp091.Table{
		"shovelled-by": s.w.m.o.Node, "shovel-type": "dynamic", "shovel-name": s.w.name,
		"shovel-vhost": s.w.vhost, "src-uri": s.srcURI, "dest-uri": s.dstURI,
	}
	if d.SrcIsExchange {
		t["src-exchange"], t["src-exchange-key"] = d.SrcExchange, d.SrcExchangeKey
	} else {
		t["src-queue"] = d.SrcQueue
	}
	if d.HasDestExchange {
		t["dest-exchange"] = d.DestExchange
	}
	if d.HasDestExchangeKey {
		t["dest-exchange-key"] = d.DestExchangeKey
	}
	if d.HasDestQueue {
		t["dest-queue"] = d.DestQueue
	}
	old, _ := prev.([]any)
	return append([]any{t}, old...)
}
