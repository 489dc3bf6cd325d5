package broker

import (
	"fmt"
	"maps"
	"slices"

	"github.com/brokerd/brokerd/broker/queue"
	"github.com/brokerd/brokerd/broker/stats"
)

// Counters for the management API's message rates. The API samples them
// (Broker.Counters) every few seconds and computes rates from the change
// between samples, as RabbitMQ's management plugin does; nothing here
// knows about time. Each counter is one atomic add where its event is
// counted already (no lock, no allocation): per exchange the publishes
// into it and the copies it routed to queues, per channel its publishes,
// their confirms and their unroutable fates. A queue's counters are its
// stats.Queue; a channel's deliveries are its delivery tags.

// consumptionStats reads c into a QueueMessageStats.
func consumptionStats(c *stats.Consumption) QueueMessageStats {
	return QueueMessageStats{
		Deliver: c.Delivered.ConsumeManual.Load(), DeliverNoAck: c.Delivered.ConsumeAuto.Load(),
		Get: c.Delivered.GetManual.Load(), GetNoAck: c.Delivered.GetAuto.Load(), GetEmpty: c.GetEmpty.Load(),
		Redeliver: c.Delivered.Redelivered.Load(), Ack: c.Ack.Load(),
	}
}

// Counters is a snapshot of every object's counters for rate sampling.
// Each object is read on its own (its queue lock for a queue's lengths),
// so the snapshot is not one instant across objects.
type Counters struct {
	Stats     Stats
	Queues    []QueueCounters
	Exchanges []ExchangeCounters
	Conns     []ConnCounters
	Channels  []ChannelCounters
}

// QueueCounters are a queue's lengths and message counters.
type QueueCounters struct {
	VHost, Name string
	// ID tells a queue from a later one of the same name.
	ID                      uint64
	Ready, Unacked, Backlog int
	Stats                   QueueMessageStats
}

// ExchangeCounters are an exchange's publish counters.
type ExchangeCounters struct {
	VHost, Name           string
	PublishIn, PublishOut uint64
}

// ConnCounters are a client connection's traffic: bytes and reads
// received, bytes and writes sent.
type ConnCounters struct {
	Name, VHost                        string
	RecvOct, RecvCnt, SendOct, SendCnt uint64
}

// ChannelCounters are a channel's publish counters and its deliveries,
// split as a queue's are (QueueMessageStats).
type ChannelCounters struct {
	Name, VHost                         string
	Publish, Confirm, Returned, Dropped uint64
	Deliveries                          QueueMessageStats // Publish unused
}

// Counters reads every counter the management API samples. Safe for
// concurrent use; it takes each queue's and channel's lock briefly.
func (b *Broker) Counters() Counters {
	out := Counters{Stats: b.Stats()}
	for _, v := range b.vhostsNamed("") {
		v.mu.RLock()
		qs := slices.Collect(maps.Values(v.topo.Queues))
		for _, x := range v.topo.Exchanges {
			out.Exchanges = append(out.Exchanges, ExchangeCounters{VHost: v.Name, Name: x.Name,
				PublishIn: x.Stats.PublishIn.Load(), PublishOut: x.Stats.PublishOut.Load()})
		}
		v.mu.RUnlock()
		for _, q := range qs {
			qc := QueueCounters{VHost: v.Name, Name: q.Name, ID: uint64(q.ID)}
			l := q.Lengths()
			qc.Ready, qc.Unacked, qc.Backlog = l.Ready, l.Unacked, l.Backlog
			qc.Stats = queueMessageStats(q)
			out.Queues = append(out.Queues, qc)
		}
	}
	for _, c := range b.connList() {
		name := c.name()
		if c.ac != nil {
			cc := ConnCounters{Name: name, VHost: c.vhost.Name}
			cc.RecvOct, cc.RecvCnt, cc.SendOct, cc.SendCnt = c.ac.Traffic()
			out.Conns = append(out.Conns, cc)
		}
		for _, ch := range c.channelList() {
			cs := &ch.confirms.stats
			chc := ChannelCounters{Name: fmt.Sprintf("%s (%d)", name, ch.id), VHost: c.vhost.Name,
				Publish: cs.Publish.Load(), Confirm: cs.Confirm.Load(), Returned: cs.Returned.Load(), Dropped: cs.Dropped.Load()}
			chc.Deliveries = consumptionStats(&ch.deliveryStats)
			out.Channels = append(out.Channels, chc)
		}
	}
	return out
}

// queueMessageStats reads q's message counters.
func queueMessageStats(q *queue.Queue) QueueMessageStats {
	ms := consumptionStats(&q.Stats.Consumption)
	ms.Publish = q.Stats.Publish.Load()
	return ms
}
