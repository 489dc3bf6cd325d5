package broker

import (
	"time"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/queue"
)

// Consumer timeout, as RabbitMQ's consumer_timeout (3.12 and later, every
// queue type): a delivery left unacknowledged longer than its queue's
// timeout closes its channel with 406 PRECONDITION_FAILED, and what the
// channel held goes back to its queues, marked redelivered. The timeout of
// a queue is the smaller of its x-consumer-timeout argument and its
// policy's consumer-timeout (ms), else the broker's (Options.ConsumerTimeout,
// 30 minutes by default). basic.get deliveries count too.
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

// checkConsumerTimeouts closes the channels holding a delivery past its
// queue's consumer timeout.
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
			if ms := ch.overdue(now, min); ms >= 0 {
				ch.timeOut(ms)
			}
		}
	}
}

// overdue returns the timeout (ms) of the oldest of ch's deliveries that
// is past its queue's, -1 if none is. Deliveries are in delivery order, so
// the scan stops at the first younger than min (every timeout in force is
// at least min).
func (ch *channel) overdue(now, min int64) int64 {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.closed || ch.timedOut {
		return -1
	}
	for _, d := range ch.unacked[ch.unackedHead:] {
		if d == nil {
			continue
		}
		age := now - d.at
		if age < min {
			return -1
		}
		if ms := d.q.ConsumerTimeout(); ms >= 0 && age > ms {
			return ms
		}
	}
	return -1
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
