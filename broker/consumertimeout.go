package broker

import (
	"time"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/queue"
)

// Consumer timeout, as RabbitMQ's consumer_timeout (3.12 and later, every
// queue type): a delivery left unacknowledged longer than its queue's
// timeout closes its channel with 406 PRECONDITION_FAILED, and what the
// channel held goes back to its queues, marked redelivered. With
// Options.ConsumerTimeoutCancel, as RabbitMQ 4.3 for quorum queues, a
// client that announced consumer_cancel_notify has only the consumer
// cancelled instead (basic.cancel) and only the overdue deliveries
// returned (cancelTimedOut). The timeout of a queue is the smaller of its
// x-consumer-timeout argument and its policy's consumer-timeout (ms), else
// the broker's (Options.ConsumerTimeout, 30 minutes by default). basic.get
// deliveries count too.
//
// Every ConsumerTimeoutCheck (1 s) each channel's unacknowledged
// deliveries are looked at oldest first, stopping at the first one younger
// than every timeout in force, so a check costs what is overdue or nearly
// so. The channel is closed from the checker's goroutine: its unacked
// deliveries are requeued at once, it takes no new delivery, and
// channel.close is sent; the rest of the close (consumers cancelled) is
// done when the client answers close-ok, as for any channel close.

// SetConsumerTimeout changes Options.ConsumerTimeout while the broker runs
// (brokerd's SIGHUP reload): negative means none. Queues with their own
// timeout keep it; deliveries already out are checked against the new
// value. Safe for concurrent use.
func (b *Broker) SetConsumerTimeout(d time.Duration) {
	ms := int64(-1)
	if d >= 0 {
		ms = d.Milliseconds()
	}
	b.env.SetConsumerTimeoutMs(ms)
}

// checkConsumerTimeouts deals with the deliveries past their queue's
// consumer timeout, channel by channel (channel.checkTimeouts).
func (b *Broker) checkConsumerTimeouts() {
	min := b.env.ConsumerTimeoutBound()
	b.mu.RLock()
	conns := make([]*conn, 0, len(b.conns))
	for c := range b.conns {
		conns = append(conns, c)
	}
	b.mu.RUnlock()
	now := b.env.NowMS()
	for _, c := range conns {
		c.mu.Lock()
		chs := make([]*channel, 0, len(c.channels))
		for _, ch := range c.channels {
			chs = append(chs, ch)
		}
		c.mu.Unlock()
		for _, ch := range chs {
			ch.checkTimeouts(now, min)
		}
	}
}

// checkTimeouts closes ch (timeOut) if it holds a delivery past its
// queue's consumer timeout; or, with Options.ConsumerTimeoutCancel and a
// client that announced consumer_cancel_notify, cancels the consumers of
// such deliveries instead (cancelTimedOut), unless one of them is a
// basic.get's or a consumer's the client cancelled itself, which closes
// the channel as before (rabbit_channel's fallback).
//
// Deliveries are in delivery order, so the scan stops at the first younger
// than min (every timeout in force is at least min).
func (ch *channel) checkTimeouts(now, min int64) {
	cancel := ch.conn.b.opts.ConsumerTimeoutCancel && ch.conn.cancelNotify
	ch.mu.Lock()
	if ch.closed || ch.timedOut {
		ch.mu.Unlock()
		return
	}
	closeMs := int64(-1)
	var overdue []int // indexes in unacked of the deliveries to return
	for i := ch.unackedHead; i < len(ch.unacked); i++ {
		d := ch.unacked[i]
		if d == nil {
			continue
		}
		age := now - d.at
		if age < min {
			break
		}
		ms := d.q.ConsumerTimeout()
		if ms < 0 || age <= ms {
			continue
		}
		if !cancel || d.c == nil || (ch.consumers[d.c.Tag] != d.c && !ch.timedOutCons[d.c]) {
			closeMs = ms
			break
		}
		overdue = append(overdue, i)
	}
	if closeMs >= 0 {
		ch.mu.Unlock()
		ch.timeOut(closeMs)
		return
	}
	if len(overdue) == 0 {
		ch.mu.Unlock()
		return
	}
	ds := make([]*delivery, 0, len(overdue))
	var cancelled []*queue.Consumer
	for _, i := range overdue {
		d := ch.unacked[i]
		ch.unacked[i] = nil
		ch.unackedN--
		d.c.Unacked--
		if ch.reclaimed == nil {
			ch.reclaimed = map[uint64]struct{}{}
		}
		ch.reclaimed[d.tag] = struct{}{}
		ds = append(ds, d)
		if ch.consumers[d.c.Tag] == d.c {
			delete(ch.consumers, d.c.Tag)
			if ch.timedOutCons == nil {
				ch.timedOutCons = map[*queue.Consumer]bool{}
			}
			ch.timedOutCons[d.c] = true
			cancelled = append(cancelled, d.c)
		}
	}
	ch.compactLocked()
	ch.mu.Unlock()
	ch.cancelTimedOut(cancelled, ds)
}

// cancelTimedOut cancels the consumers whose deliveries ds (taken from the
// channel's unacked) timed out, as RabbitMQ 4.3 does for a client with
// consumer_cancel_notify: each is removed from its queue and the client
// is sent basic.cancel; ds return to their queues (redelivered, their
// delivery count unchanged, as a quorum queue returns them); the channel
// and its other consumers go on. The consumers' deliveries not yet overdue
// stay the client's to settle, and return in turn when they time out. A
// late ack, nack or reject of one of ds is ignored (channel.reclaimed), as
// RabbitMQ's channel ignores it.
func (ch *channel) cancelTimedOut(cancelled []*queue.Consumer, ds []*delivery) {
	c := ch.conn
	for _, cons := range cancelled {
		c.b.removeConsumer(cons)
		ch.out.Send(&amqp.BasicCancel{ConsumerTag: cons.Tag, Nowait: true})
		c.b.env.Log.Warn("consumer timeout: consumer cancelled",
			"vhost", c.vhost.Name, "user", c.userName, "channel", ch.id, "consumer", cons.Tag,
			"queue", cons.Queue.Name, "timeout_ms", cons.Queue.ConsumerTimeout())
	}
	ch.settle(ds, queue.SettleReturn)
	for _, cons := range cancelled {
		cons.Queue.Dispatch() // a single active consumer's successor takes over
	}
}

// timeOut closes ch for a delivery unacknowledged past ms: its deliveries
// return to their queues now, it takes no more, and the client is sent
// channel.close 406.
func (ch *channel) timeOut(ms int64) {
	ch.mu.Lock()
	if ch.closed || ch.timedOut {
		ch.mu.Unlock()
		return
	}
	ch.timedOut = true
	ds, _ := ch.takeUnackedLocked(0, true, nil)
	ch.mu.Unlock()
	c := ch.conn
	c.b.env.Log.Warn("consumer timeout: channel closed",
		"vhost", c.vhost.Name, "user", c.userName, "channel", ch.id, "timeout_ms", ms, "requeued", len(ds))
	ch.out.Close(amqp.Errorf(amqp.PreconditionFailed,
		"delivery acknowledgement on channel %d timed out. Timeout value used: %d ms. This timeout value can be configured, see consumers doc guide to learn more", ch.id, ms))
	if len(ds) > 0 {
		// A plain return, not a failure, as RabbitMQ 4.3's quorum
		// queues return timed-out deliveries (delivery-count unchanged).
		ch.settle(ds, queue.SettleReturn)
	}
}
