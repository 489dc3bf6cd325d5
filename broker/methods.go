package broker

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/queue"
)

// Handle executes one method received on the channel (anything but
// channel.open/close and content). A returned *amqp.Error closes the channel
// (soft code) or the connection (hard code).
func (ch *channel) Handle(m amqp.Method) error {
	switch m.(type) {
	case *amqp.BasicAck, *amqp.BasicNack, *amqp.BasicReject:
	default:
		ch.conn.settleHeld() // what the client acked before comes first, on any channel
	}
	if err := ch.awaitCommit(); err != nil {
		return err
	}
	if err := ch.handle(m); err != nil {
		if err.ClassID == 0 && err.MethodID == 0 {
			err.ClassID, err.MethodID = m.ClassID(), m.MethodID()
		}
		return err
	}
	return nil
}

// txPublishOverhead is what Options.MaxTxBytes counts for a publish in a
// transaction besides its bytes: its entry, message id and lengths in the
// store record, generously.
const txPublishOverhead = 256

// Publish executes basic.publish with its content. props is the decoded
// form of raw; body and raw become owned by the broker.
func (ch *channel) Publish(m *amqp.BasicPublish, props *amqp.Properties, raw, body []byte) error {
	ch.conn.settleHeld() // acks the client sent before, on any channel, come first
	ch.conn.holdForAlarms()
	// Backpressure from the store is taken here, before any lock: Apply
	// never waits. An error means the connection is closing or the store
	// failed; the publish then fails (or is nacked) in Apply as it would
	// have anyway.
	_ = ch.conn.b.env.Store.Reserve(ch.conn.ctx, len(body)+len(raw))
	p, err := ch.preparePublish(m, props, raw, body)
	if err != nil {
		err.ClassID, err.MethodID = m.ClassID(), m.MethodID()
		return err
	}
	ch.mu.Lock()
	if ch.tx {
		n := int64(len(body)+len(raw)+len(m.Exchange)+len(m.RoutingKey)) + txPublishOverhead
		if limit := ch.conn.b.opts.MaxTxBytes; ch.txBytes+n > limit {
			ch.mu.Unlock()
			err := amqp.Errorf(amqp.PreconditionFailed, "transaction too large: its publishes would hold more than %d bytes; commit in smaller transactions", limit)
			err.ClassID, err.MethodID = m.ClassID(), m.MethodID()
			return err
		}
		ch.txPubs = append(ch.txPubs, p)
		ch.txBytes += n
		ch.mu.Unlock()
		return nil
	}
	if ch.confirm {
		ch.publishSeq++
		p.seq = ch.publishSeq
		ch.conn.b.env.Counters.ReceivedConfirm.Add(1)
	}
	ch.mu.Unlock()
	ch.publish(p)
	return nil
}

// Close releases the channel after channel.close (either side) or when its
// connection goes.
func (ch *channel) Close() {
	ch.close()
	ch.conn.dropChannel(ch)
}

func (ch *channel) handle(m amqp.Method) *amqp.Error {
	switch m := m.(type) {
	case *amqp.BasicQos:
		return ch.basicQos(m)
	case *amqp.BasicConsume:
		return ch.basicConsume(m)
	case *amqp.BasicCancel:
		return ch.basicCancel(m)
	case *amqp.BasicGet:
		return ch.basicGet(m)
	case *amqp.BasicAck:
		return ch.ackOrReject(m.DeliveryTag, m.Multiple, queue.SettleAck)
	case *amqp.BasicNack:
		return ch.ackOrReject(m.DeliveryTag, m.Multiple, requeueAction(m.Requeue, false))
	case *amqp.BasicReject:
		return ch.ackOrReject(m.DeliveryTag, false, requeueAction(m.Requeue, true))
	case *amqp.BasicRecover:
		if err := ch.recover(m.Requeue); err != nil {
			return err
		}
		ch.out.Send(&amqp.BasicRecoverOk{})
		return nil
	case *amqp.BasicRecoverAsync:
		return ch.recover(m.Requeue)
	case *amqp.ExchangeDeclare:
		return ch.exchangeDeclare(m)
	case *amqp.ExchangeDelete:
		return ch.exchangeDelete(m)
	case *amqp.ExchangeBind:
		return ch.exchangeBind(m.Destination, m.Source, m.RoutingKey, m.Arguments, true, m.Nowait)
	case *amqp.ExchangeUnbind:
		return ch.exchangeBind(m.Destination, m.Source, m.RoutingKey, m.Arguments, false, m.Nowait)
	case *amqp.QueueDeclare:
		return ch.queueDeclare(m)
	case *amqp.QueueBind:
		return ch.queueBind(m.Queue, m.Exchange, m.RoutingKey, m.Arguments, true, m.Nowait)
	case *amqp.QueueUnbind:
		return ch.queueBind(m.Queue, m.Exchange, m.RoutingKey, m.Arguments, false, false)
	case *amqp.QueuePurge:
		return ch.queuePurge(m)
	case *amqp.QueueDelete:
		return ch.queueDelete(m)
	case *amqp.ConfirmSelect:
		return ch.confirmSelect(m)
	case *amqp.TxSelect:
		return ch.txSelect()
	case *amqp.TxCommit:
		return ch.txCommit()
	case *amqp.TxRollback:
		return ch.txRollback()
	case *amqp.ChannelFlow:
		ch.mu.Lock()
		ch.flowActive = m.Active
		ch.mu.Unlock()
		ch.out.Send(&amqp.ChannelFlowOk{Active: m.Active})
		if m.Active {
			ch.kick()
		}
		return nil
	case *amqp.ChannelFlowOk:
		return nil
	case *amqp.AccessRequest:
		ch.out.Send(&amqp.AccessRequestOk{Ticket: 1})
		return nil
	}
	return amqp.Errorf(amqp.CommandInvalid, "unexpected method %s on a channel", m.Name())
}

// requeueAction is a nack's or reject's settlement. As RabbitMQ 4.3's
// channel maps them, a reject with requeue is a failed delivery (it counts
// as one, and is delayed under delayed-retry type failed), a nack's is a
// plain return (type returned); a queue without delayed retry treats both
// alike.
func requeueAction(requeue, reject bool) queue.SettleAction {
	switch {
	case !requeue:
		return queue.SettleReject
	case reject:
		return queue.SettleRequeue
	}
	return queue.SettleReturn
}

func (ch *channel) basicQos(m *amqp.BasicQos) *amqp.Error {
	if m.PrefetchSize != 0 {
		return amqp.Errorf(amqp.NotImplemented, "prefetch_size!=0 (%d)", m.PrefetchSize)
	}
	ch.mu.Lock()
	if m.Global {
		ch.globalPrefetch = int(m.PrefetchCount)
	} else {
		ch.prefetch = int(m.PrefetchCount)
	}
	ch.mu.Unlock()
	ch.out.Send(&amqp.BasicQosOk{})
	ch.kick() // a larger window may let queues deliver now
	return nil
}

// consumerAddedHook, if set (by tests), runs once a basic.consume has
// added its consumer to the queue, before the queue dispatches to it.
var consumerAddedHook func()

func (ch *channel) basicConsume(m *amqp.BasicConsume) *amqp.Error {
	if m.Queue == replyToQueue {
		return ch.consumeReplyTo(m)
	}
	// A reused tag is refused before the queue's read permission is
	// checked, as in rabbit_channel.
	ch.mu.Lock()
	_, dup := ch.consumers[m.ConsumerTag]
	ch.mu.Unlock()
	if dup && m.ConsumerTag != "" {
		return amqp.Errorf(amqp.NotAllowed, "attempt to reuse consumer tag '%s'", m.ConsumerTag)
	}
	q, err := ch.readQueue(m.Queue)
	if err != nil {
		return err
	}
	priority := int64(0)
	if v, ok := m.Arguments.Get("x-priority"); ok {
		p, ok := amqp.AsInt(v)
		if !ok {
			return amqp.Errorf(amqp.PreconditionFailed, "invalid arg 'x-priority' for consumer: expected integer, got %s", amqp.TypeName(v))
		}
		priority = p
	}
	ch.mu.Lock()
	tag := m.ConsumerTag
	if tag == "" {
		tag = newGeneratedName("amq.ctag-")
	}
	if _, dup := ch.consumers[tag]; dup {
		ch.mu.Unlock()
		return amqp.Errorf(amqp.NotAllowed, "attempt to reuse consumer tag '%s'", tag)
	}
	cons := &queue.Consumer{Tag: tag, Ch: ch, Queue: q, NoAck: m.NoAck, Exclusive: m.Exclusive, Priority: priority, Prefetch: ch.prefetch}
	ch.consumers[tag] = cons
	ch.mu.Unlock()
	// consume-ok goes out as the consumer is added, under the queue's
	// lock: a delivery dispatched by another goroutine (a publish, an ack)
	// must not overtake it.
	err = q.AddConsumer(cons, func() {
		if !m.Nowait {
			ch.out.Send(&amqp.BasicConsumeOk{ConsumerTag: tag})
		}
	})
	if err != nil {
		ch.mu.Lock()
		delete(ch.consumers, tag)
		ch.mu.Unlock()
		return err
	}
	if consumerAddedHook != nil {
		consumerAddedHook()
	}
	q.Dispatch()
	return nil
}

func (ch *channel) basicCancel(m *amqp.BasicCancel) *amqp.Error {
	ch.mu.Lock()
	cons := ch.consumers[m.ConsumerTag]
	ch.mu.Unlock()
	if cons != nil {
		cons.Queue.DeliverDue()
	}
	ch.mu.Lock()
	cons = ch.consumers[m.ConsumerTag]
	delete(ch.consumers, m.ConsumerTag)
	isReply := ch.replyTo != "" && m.ConsumerTag == ch.replyTag
	ch.mu.Unlock()
	if isReply {
		ch.cancelReplyTo()
	}
	if cons != nil {
		ch.conn.b.removeConsumer(cons)
		cons.Queue.Dispatch() // with a single active consumer, the next one takes over
	}
	if !m.Nowait {
		ch.out.Send(&amqp.BasicCancelOk{ConsumerTag: m.ConsumerTag})
	}
	return nil
}

// ServerCancel tells the client its consumer is gone (queue deleted), if
// the client supports consumer_cancel_notify.
func (ch *channel) ServerCancel(c *queue.Consumer) {
	ch.mu.Lock()
	own := ch.consumers[c.Tag] == c
	if own {
		delete(ch.consumers, c.Tag)
	}
	closed := ch.closed
	ch.mu.Unlock()
	if own && !closed && ch.conn.cancelNotify {
		ch.out.Send(&amqp.BasicCancel{ConsumerTag: c.Tag, Nowait: true})
	}
}

func (ch *channel) basicGet(m *amqp.BasicGet) *amqp.Error {
	q, err := ch.readQueue(m.Queue)
	if err != nil {
		return err
	}
	e, tag, props, remaining := q.Get(ch, m.NoAck)
	if e == nil {
		ch.conn.b.env.Counters.GetEmpty.Add(1)
		q.Stats.GetEmpty.Add(1)
		ch.deliveryStats.GetEmpty.Add(1)
		ch.out.Send(&amqp.BasicGetEmpty{})
		return nil
	}
	ch.conn.b.env.Counters.Delivered.Add(true, m.NoAck, e.Redelivered)
	q.Stats.Delivered.Add(true, m.NoAck, e.Redelivered)
	ch.deliveryStats.Delivered.Add(true, m.NoAck, e.Redelivered)
	h := e.EffectiveHeader()
	ch.out.SendContent(&amqp.BasicGetOk{
		DeliveryTag:  tag,
		Redelivered:  e.Redelivered,
		Exchange:     h.Exchange,
		RoutingKey:   h.RoutingKeys[0],
		MessageCount: uint32(remaining),
	}, props, e.Msg.Body)
	return nil
}

func (ch *channel) ackOrReject(tag uint64, multiple bool, action queue.SettleAction) *amqp.Error {
	ch.mu.Lock()
	if !ch.tx && ch.conn.bursts {
		// Put off to the end of the burst of frames (conn.EndBurst),
		// or the next method that is not an ack, nack or reject.
		before := len(ch.pendingDs)
		ds, err := ch.takeUnackedLocked(tag, multiple, ch.pendingDs)
		if err != nil {
			ch.mu.Unlock()
			return err
		}
		ch.pendingDs = ds
		if n := len(ds) - before; n > 0 {
			if action == queue.SettleAck {
				ch.deliveryStats.Ack.Add(uint64(n))
			}
			if k := len(ch.pendingActs); k > 0 && ch.pendingActs[k-1].Action == action {
				ch.pendingActs[k-1].N += n
			} else {
				ch.pendingActs = append(ch.pendingActs, queue.SettleRun{N: n, Action: action})
			}
		}
		first, full := before == 0 && len(ds) > 0, len(ds) >= maxPendingSettles
		ch.mu.Unlock()
		if first {
			ch.conn.unsettled = append(ch.conn.unsettled, ch)
		}
		if full {
			ch.flushSettles()
		}
		return nil
	}
	var dst []*delivery
	if !ch.tx {
		dst = ch.ackBuf // settled before the next ack; a transaction keeps its own
	}
	ds, err := ch.takeUnackedLocked(tag, multiple, dst)
	if err != nil {
		ch.mu.Unlock()
		return err
	}
	if !ch.tx {
		ch.ackBuf = ds[:0]
	}
	if action == queue.SettleAck {
		ch.deliveryStats.Ack.Add(uint64(len(ds)))
	}
	if ch.tx {
		// Settled at commit; until then the deliveries still hold their
		// prefetch credit, as in RabbitMQ.
		ch.holdCreditLocked(ds, 1)
		ch.txAcks = append(ch.txAcks, txAck{ds: ds, action: action})
		ch.mu.Unlock()
		return nil
	}
	ch.mu.Unlock()
	ch.settle(ds, action)
	return nil
}

func (ch *channel) recover(requeue bool) *amqp.Error {
	if !requeue {
		return amqp.Errorf(amqp.NotImplemented, "requeue=false")
	}
	ch.mu.Lock()
	ds, _ := ch.takeUnackedLocked(0, true, nil)
	ch.mu.Unlock()
	if len(ds) > 0 {
		ch.settle(ds, queue.SettleReturn) // not a failure (RabbitMQ 4.3)
	}
	return nil
}

func (ch *channel) confirmSelect(m *amqp.ConfirmSelect) *amqp.Error {
	ch.mu.Lock()
	if ch.tx {
		ch.mu.Unlock()
		return amqp.Errorf(amqp.PreconditionFailed, "cannot switch from tx to confirm mode")
	}
	if !ch.confirm {
		ch.confirm = true
		g, _ := ch.conn.b.env.Store.(groupCompleter)
		ch.confirms.start(ch.out, g, &ch.conn.b.env.Counters)
	}
	ch.mu.Unlock()
	if !m.Nowait {
		ch.out.Send(&amqp.ConfirmSelectOk{})
	}
	return nil
}

func (ch *channel) txSelect() *amqp.Error {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.confirm {
		return amqp.Errorf(amqp.PreconditionFailed, "cannot switch from confirm to tx mode")
	}
	ch.tx = true
	ch.out.Send(&amqp.TxSelectOk{})
	return nil
}

// txCommit commits the channel's transaction: its publishes and
// settlements become one store operation (commitTx), and tx.commit-ok is
// sent from that operation's completion, once it is durable. If the store
// fails, the connection is closed with 541 INTERNAL_ERROR instead: the
// client must not believe the transaction committed.
//
// The reader does not wait for the store: the connection's other channels
// go on meanwhile. A method that arrives on this channel before the
// completion waits for it (awaitCommit), so no reply overtakes
// tx.commit-ok.
func (ch *channel) txCommit() *amqp.Error {
	ch.mu.Lock()
	if !ch.tx {
		ch.mu.Unlock()
		return amqp.Errorf(amqp.PreconditionFailed, "channel is not transactional")
	}
	pubs, acks := ch.txPubs, ch.txAcks
	ch.txPubs, ch.txAcks, ch.txBytes = nil, nil, 0
	for _, a := range acks {
		ch.holdCreditLocked(a.ds, -1)
	}
	ch.mu.Unlock()
	pc := &pendingCommit{done: make(chan struct{})}
	ch.committing = pc
	ch.commitTx(pubs, acks, func(err error) {
		if err != nil {
			pc.err = amqp.Errorf(amqp.InternalError, "message store failed; transaction not committed: %s", err)
			m := &amqp.TxCommit{}
			pc.err.ClassID, pc.err.MethodID = m.ClassID(), m.MethodID()
			if ac := ch.conn.ac; ac != nil {
				ac.Close(pc.err)
			}
		} else {
			ch.out.Send(&amqp.TxCommitOk{})
		}
		close(pc.done)
	})
	return nil
}

// pendingCommit is a tx.commit waiting for the store.
type pendingCommit struct {
	done chan struct{}
	err  *amqp.Error // the connection error it ended with; set before done is closed
}

// awaitCommit waits until the channel's last tx.commit has completed, and
// returns its error if it failed (the connection is closing with it).
// Called by the reader before each method of the channel.
func (ch *channel) awaitCommit() *amqp.Error {
	pc := ch.committing
	if pc == nil {
		return nil
	}
	var closing <-chan struct{} // nil (never ready) without a connection
	if ac := ch.conn.ac; ac != nil {
		closing = ac.Done()
	}
	select {
	case <-pc.done:
	case <-closing:
		return amqp.Errorf(amqp.InternalError, "connection closing with tx.commit in flight")
	}
	ch.committing = nil
	return pc.err
}

func (ch *channel) txRollback() *amqp.Error {
	ch.mu.Lock()
	if !ch.tx {
		ch.mu.Unlock()
		return amqp.Errorf(amqp.PreconditionFailed, "channel is not transactional")
	}
	var ds []*delivery
	for _, a := range ch.txAcks {
		ch.holdCreditLocked(a.ds, -1)
		ds = append(ds, a.ds...)
	}
	ch.txPubs, ch.txAcks, ch.txBytes = nil, nil, 0
	if len(ds) > 0 {
		ch.restoreUnackedLocked(ds)
	}
	ch.mu.Unlock()
	ch.out.Send(&amqp.TxRollbackOk{})
	return nil
}

// newGeneratedName returns prefix + 22 random URL-safe base64 characters,
// the shape of RabbitMQ's server-generated names.
func newGeneratedName(prefix string) string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err)) // never fails on supported platforms
	}
	return prefix + base64.RawURLEncoding.EncodeToString(b[:])
}
