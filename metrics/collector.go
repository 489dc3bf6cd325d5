package metrics

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/brokerd/brokerd/broker"
	hist "github.com/brokerd/brokerd/internal/histogram"
	"github.com/brokerd/brokerd/store/diskstore"
)

// Dead-letter reasons, in the order metrics list them (x-death's words).
// damaged is brokerd's own (deadletter.Damaged).
var deadLetterReasons = []string{"rejected", "expired", "maxlen", "delivery_limit", "damaged"}

// Dead-letter strategies, as broker.Stats.Died names them (RabbitMQ's
// dead_letter_strategy label).
var deadLetterStrategies = []string{"disabled", "at_most_once", "at_least_once"}

// Dead-letter drop causes, as broker.Stats.Dropped names them.
var dropCauses = []string{"no_dlx", "dlx_missing", "unroutable", "cycle", "target_full"}

// Delivery kinds, as broker.Stats.Delivered names them.
var deliveryKinds = []string{
	broker.DeliveredConsumeManualAck, broker.DeliveredConsumeAutoAck,
	broker.DeliveredGetManualAck, broker.DeliveredGetAutoAck,
}

// collector turns the broker's counters and snapshots into metrics at
// scrape time. It is unchecked (Describe sends nothing): the queue metrics
// carry the labels vhost and queue or none, depending on how many queues
// there are, which a checked collector cannot declare. Safe for concurrent
// use: it holds no state between scrapes.
type collector struct {
	opts Options
}

// NewCollector returns the broker's collector (without the Go runtime and
// process collectors Handler adds).
func NewCollector(opts Options) prometheus.Collector {
	return &collector{opts: opts}
}

// Describe implements prometheus.Collector; it sends nothing, which makes
// the collector unchecked (see collector).
func (c *collector) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	if c.opts.StoreStats != nil {
		if st, ok := c.opts.StoreStats(); ok {
			collectStore(ch, st)
		}
	}
	if c.opts.Cluster != nil {
		collectRaft(ch, c.opts.Cluster())
	}
	b := c.opts.Broker
	if c.opts.Current != nil {
		b = c.opts.Current()
	}
	if b != nil {
		c.collectBroker(ch, b)
	}
}

// collectBroker exports the broker's counters, queues, connections and
// alarms.
func (c *collector) collectBroker(ch chan<- prometheus.Metric, b *broker.Broker) {
	c.collectGlobal(ch, b.Stats())
	c.collectQueues(ch, b.Queues(""))
	c.collectDelayed(ch, b.Exchanges(""))
	conns := b.Connections("")
	channels := 0
	for _, ci := range conns {
		channels += ci.Channels
	}
	gauge(ch, "connections", "Connections currently open", float64(len(conns)))
	gauge(ch, "channels", "Channels currently open", float64(channels))
	alarms := b.Alarms()
	gauge(ch, "alarms_memory_used_watermark", "1 while the memory alarm is raised (publishers blocked), else 0",
		bool01(slices.Contains(alarms, broker.AlarmMemory)))
	gauge(ch, "alarms_free_disk_space_watermark", "1 while the disk alarm is raised (publishers blocked), else 0",
		bool01(slices.Contains(alarms, broker.AlarmDisk)))
	// brokerd's own: the store retrying what it cannot do for now, or
	// failed for good.
	d := prometheus.NewDesc("brokerd_alarms_store", "1 while the store's alarm of this kind is raised (publishers blocked): checkpoint (checkpoints fail and are retried), wal (the WAL cannot start a file), failed (the store failed for good)", []string{"alarm"}, nil)
	for _, a := range []struct{ label, resource string }{{"checkpoint", broker.AlarmCheckpoint}, {"wal", broker.AlarmWAL}, {"failed", broker.AlarmStore}} {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, bool01(slices.Contains(alarms, a.resource)), a.label)
	}
}

func (c *collector) collectGlobal(ch chan<- prometheus.Metric, st broker.Stats) {
	counter(ch, "global_messages_received_total", "Messages received from publishers", st.Published)
	counter(ch, "global_messages_received_confirm_total", "Messages received from publishers expecting confirmations", st.ReceivedConfirm)
	counter(ch, "global_messages_routed_total", "Messages routed to at least one queue", st.Routed)
	counter(ch, "global_messages_unroutable_dropped_total", "Messages published as non-mandatory and dropped as unroutable", st.Unroutable-st.Returned)
	counter(ch, "global_messages_unroutable_returned_total", "Messages published as mandatory and returned to the publisher as unroutable", st.Returned)
	counter(ch, "global_messages_confirmed_total", "Messages confirmed to publishers (basic.ack)", st.Confirmed)
	counter(ch, "global_messages_nacked_total", "Messages refused to publishers (basic.nack)", st.Nacked)
	var delivered uint64
	for _, k := range deliveryKinds {
		delivered += st.Delivered[k]
		counter(ch, "global_messages_delivered_"+k+"_total", "Messages delivered by basic."+deliveryVerb(k), st.Delivered[k])
	}
	counter(ch, "global_messages_delivered_total", "Messages delivered to consumers (consume and get)", delivered)
	counter(ch, "global_messages_get_empty_total", "basic.get operations that fetched no message", st.GetEmpty)
	counter(ch, "global_messages_redelivered_total", "Messages delivered with the redelivered flag", st.Redelivered)
	counter(ch, "global_messages_acknowledged_total", "Deliveries acknowledged by consumers", st.Acknowledged)
	for _, r := range deadLetterReasons {
		d := prometheus.NewDesc("brokerd_global_messages_dead_lettered_"+r+"_total",
			"Messages that left a queue for reason "+r+" (dead-lettered, dropped or waiting for a route), by the queue's dead-letter strategy",
			[]string{"dead_letter_strategy"}, nil)
		for _, strategy := range deadLetterStrategies {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(st.Died[strategy][r]), strategy)
		}
	}
	dc := prometheus.NewDesc("brokerd_global_messages_dead_lettered_confirmed_total",
		"Dead letters of at-least-once queues delivered to their dead letter queues", []string{"dead_letter_strategy"}, nil)
	ch <- prometheus.MustNewConstMetric(dc, prometheus.CounterValue, float64(st.DeadLetteredConfirmed), "at_least_once")
	dl := prometheus.NewDesc("brokerd_dead_letters_delivered_total", "Dead letters delivered to at least one dead letter queue, by reason", []string{"reason"}, nil)
	for _, r := range deadLetterReasons {
		ch <- prometheus.MustNewConstMetric(dl, prometheus.CounterValue, float64(st.DeadLettered[r]), r)
	}
	dd := prometheus.NewDesc("brokerd_dead_letters_dropped_total", "Dead letters dropped instead of delivered, by cause", []string{"cause"}, nil)
	for _, cause := range dropCauses {
		ch <- prometheus.MustNewConstMetric(dd, prometheus.CounterValue, float64(st.Dropped[cause]), cause)
	}
	counter(ch, "dead_letter_cycles_total", "Dead-letter targets skipped because delivering would close a cycle", st.Cycles)
	counter(ch, "dead_letters_backlogged_total", "Dead letters of at-least-once queues that had to wait for a route", st.Backlogged)
	counter(ch, "global_messages_overflowed_total", "Messages evicted (drop-head) or refused (reject-publish) by a queue length limit", st.Overflowed)
	counter(ch, "global_messages_damaged_total", "Messages lost to damaged data on disk, taken out of their queues (dead-lettered with reason damaged where possible)", st.Damaged)
	counter(ch, "delayed_messages_total", "Messages delayed exchanges (x-delayed-message) held to route at their due time", st.Delayed)
	counter(ch, "delayed_messages_released_total", "Held messages routed at their due time to at least one queue", st.DelayedReleased)
	counter(ch, "delayed_messages_dropped_total", "Held messages that reached no queue at their due time (no binding, no alternate exchange), dropped", st.DelayedDropped)
	counter(ch, "delayed_messages_cancelled_total", "Held messages cancelled before their due time (the management API's cancel), never routed", st.DelayedCancelled)
	counter(ch, "store_read_errors_total", "Store reads that failed for a reason other than damage (out of file descriptors, an I/O error) and were made again after a second", st.StoreReadErrors)
}

func deliveryVerb(kind string) string {
	switch kind {
	case broker.DeliveredConsumeManualAck:
		return "consume with manual acknowledgement"
	case broker.DeliveredConsumeAutoAck:
		return "consume with automatic acknowledgement"
	case broker.DeliveredGetManualAck:
		return "get with manual acknowledgement"
	}
	return "get with automatic acknowledgement"
}

// queueGauges are the per-queue gauges: name, help, value.
var queueGauges = []struct {
	name, help string
	value      func(*broker.QueueInfo) float64
}{
	{"queue_messages_ready", "Messages ready to be delivered", func(q *broker.QueueInfo) float64 { return float64(q.Ready) }},
	{"queue_messages_unacked", "Messages delivered and not yet acknowledged", func(q *broker.QueueInfo) float64 { return float64(q.Unacked) }},
	{"queue_messages", "Messages ready, unacknowledged, delayed and waiting dead letters (the queue's depth)", func(q *broker.QueueInfo) float64 { return float64(q.Messages()) }},
	{"queue_messages_ready_bytes", "Body bytes of ready messages", func(q *broker.QueueInfo) float64 { return float64(q.ReadyBytes) }},
	{"queue_messages_unacked_bytes", "Body bytes of unacknowledged messages", func(q *broker.QueueInfo) float64 { return float64(q.UnackedBytes) }},
	{"queue_messages_bytes", "Body bytes of ready and unacknowledged messages", func(q *broker.QueueInfo) float64 { return float64(q.ReadyBytes + q.UnackedBytes) }},
	{"queue_consumers", "Consumers", func(q *broker.QueueInfo) float64 { return float64(q.Consumers) }},
	{"queue_dead_letter_backlog", "Dead letters waiting for a route (at-least-once)", func(q *broker.QueueInfo) float64 { return float64(q.DeadLetterBacklog) }},
	{"queue_messages_delayed", "Messages waiting out a retry delay (delayed retry)", func(q *broker.QueueInfo) float64 { return float64(q.Delayed) }},
}

// collectQueues exports the queue gauges and per-queue dead-letter
// counters, per queue (labels vhost, queue) while there are at most
// PerQueueLimit queues, else summed over every queue without those labels.
func (c *collector) collectQueues(ch chan<- prometheus.Metric, qs []broker.QueueInfo) {
	gauge(ch, "queues", "Queues", float64(len(qs)))
	var consumers int
	for i := range qs {
		consumers += qs[i].Consumers
	}
	gauge(ch, "consumers", "Consumers currently subscribed", float64(consumers))
	const dlName, dlHelp = "brokerd_queue_messages_dead_lettered_total", "Messages dead-lettered from the queue to at least one dead letter queue, by reason"
	const damagedName, damagedHelp = "brokerd_queue_messages_damaged_total", "Messages the queue lost to damaged data on disk since it was created or recovered"
	if len(qs) > 0 && len(qs) <= c.opts.PerQueueLimit {
		labels := []string{"vhost", "queue"}
		for _, g := range queueGauges {
			d := prometheus.NewDesc("brokerd_"+g.name, g.help, labels, nil)
			for i := range qs {
				ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, g.value(&qs[i]), qs[i].VHost, qs[i].Name)
			}
		}
		d := prometheus.NewDesc(dlName, dlHelp, []string{"vhost", "queue", "reason"}, nil)
		for i := range qs {
			for _, r := range deadLetterReasons {
				ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(qs[i].DeadLettered[r]), qs[i].VHost, qs[i].Name, r)
			}
		}
		dm := prometheus.NewDesc(damagedName, damagedHelp, labels, nil)
		for i := range qs {
			ch <- prometheus.MustNewConstMetric(dm, prometheus.CounterValue, float64(qs[i].Damaged), qs[i].VHost, qs[i].Name)
		}
		return
	}
	for _, g := range queueGauges {
		var sum float64
		for i := range qs {
			sum += g.value(&qs[i])
		}
		gauge(ch, g.name, g.help+", summed over every queue", sum)
	}
	d := prometheus.NewDesc(dlName, dlHelp+", summed over every queue", []string{"reason"}, nil)
	for _, r := range deadLetterReasons {
		var sum uint64
		for i := range qs {
			sum += qs[i].DeadLettered[r]
		}
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(sum), r)
	}
	var damaged uint64
	for i := range qs {
		damaged += qs[i].Damaged
	}
	ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(damagedName, damagedHelp+", summed over every queue", nil, nil), prometheus.CounterValue, float64(damaged))
}

// collectDelayed exports what each delayed exchange holds (the plugin's
// messages_delayed), per exchange (labels vhost, exchange) while there
// are at most PerQueueLimit delayed exchanges, else summed without those
// labels, as the queue gauges.
func (c *collector) collectDelayed(ch chan<- prometheus.Metric, xs []broker.ExchangeInfo) {
	const name, help = "brokerd_exchange_messages_delayed", "Messages a delayed exchange (x-delayed-message) holds until their due time"
	xs = slices.DeleteFunc(xs, func(x broker.ExchangeInfo) bool { return !x.Delayed })
	if len(xs) > 0 && len(xs) <= c.opts.PerQueueLimit {
		d := prometheus.NewDesc(name, help, []string{"vhost", "exchange"}, nil)
		for _, x := range xs {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(x.MessagesDelayed), x.VHost, x.Name)
		}
		return
	}
	var sum int64
	for _, x := range xs {
		sum += x.MessagesDelayed
	}
	ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(name, help+", summed over every delayed exchange", nil, nil), prometheus.GaugeValue, float64(sum))
}

// collectStore exports the disk store's statistics.
func collectStore(ch chan<- prometheus.Metric, st diskstore.Stats) {
	histogram(ch, "wal_fsync_duration_seconds", "Duration of WAL fsyncs", st.WAL.SyncLatency)
	histogram(ch, "wal_group_commit_records", "Records per WAL group commit (one write and, with sync = fsync, one fsync)", st.WAL.GroupSize)
	counter(ch, "wal_records_total", "Records written to the WAL since start", st.WAL.Records)
	counter(ch, "wal_files_recycled_total", "WAL files started from a finished one rather than created, since start", st.WAL.Recycled)
	gauge(ch, "wal_files", "WAL files on disk", float64(st.WAL.Files))
	gauge(ch, "wal_bytes", "Bytes of records in the WAL files (not their preallocated rest)", float64(st.WAL.Bytes))
	gauge(ch, "segment_files", "Segment files on disk", float64(st.SegmentFiles))
	gauge(ch, "segment_bytes", "Bytes of the segment files on disk", float64(st.SegmentBytes))
	histogram(ch, "checkpoint_duration_seconds", "Duration of checkpoints (WAL into segments and the index)", st.CheckpointDuration)
	counter(ch, "checkpoint_failures_total", "Checkpoint attempts that failed and were retried (out of file descriptors or disk space, say), since start", st.CheckpointFailures)
	gauge(ch, "recovery_duration_seconds", "How long the store took to recover at start (index, segments, WAL replay)", st.Recovery.Seconds())
}

func histogram(ch chan<- prometheus.Metric, name, help string, s hist.Snapshot) {
	buckets := make(map[float64]uint64, len(s.Bounds))
	for i, b := range s.Bounds {
		buckets[b] = s.Cumulative[i]
	}
	ch <- prometheus.MustNewConstHistogram(prometheus.NewDesc("brokerd_"+name, help, nil, nil), s.Count, s.Sum, buckets)
}

func counter(ch chan<- prometheus.Metric, name, help string, v uint64) {
	ch <- prometheus.MustNewConstMetric(prometheus.NewDesc("brokerd_"+name, help, nil, nil), prometheus.CounterValue, float64(v))
}

func gauge(ch chan<- prometheus.Metric, name, help string, v float64) {
	ch <- prometheus.MustNewConstMetric(prometheus.NewDesc("brokerd_"+name, help, nil, nil), prometheus.GaugeValue, v)
}

func bool01(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
