package mgmt_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
	"github.com/brokerd/brokerd/metrics"
	"github.com/brokerd/brokerd/mgmt"
	"github.com/brokerd/brokerd/store/diskstore"
)

// startMetricsAPI starts a broker on backend be with its management API
// serving /metrics with perQueueLimit, and the options set changes.
func startMetricsAPI(t *testing.T, be brokertest.Backend, perQueueLimit int, set ...func(*metrics.Options)) *api {
	t.Helper()
	a := &api{t: t, Instance: brokertest.Start(t, brokertest.Config{Backend: be})}
	mo := metrics.Options{
		Broker:        a.Broker,
		PerQueueLimit: perQueueLimit,
		StoreStats:    metrics.DiskStats(a.Store),
	}
	for _, f := range set {
		f(&mo)
	}
	a.opts = mgmt.Options{Metrics: metrics.Handler(mo)}
	a.serve()
	t.Cleanup(a.stopAPI)
	return a
}

// scrape is one parsed /metrics reply.
type scrape map[string]*dto.MetricFamily

func (a *api) scrape() scrape {
	a.t.Helper()
	res, err := http.Get(strings.TrimSuffix(a.base, "/api") + "/metrics")
	if err != nil {
		a.t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		a.t.Fatalf("GET /metrics: %s", res.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(res.Body)
	if err != nil {
		a.t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// value returns the value of the sample of name whose labels include
// labels ("k=v" each), failing the test unless exactly one matches.
func (s scrape) value(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	f := s[name]
	if f == nil {
		t.Fatalf("no metric %s", name)
	}
	var found []float64
	for _, m := range f.Metric {
		if hasLabels(m, labels) {
			switch {
			case m.Counter != nil:
				found = append(found, m.Counter.GetValue())
			case m.Gauge != nil:
				found = append(found, m.Gauge.GetValue())
			case m.Untyped != nil:
				found = append(found, m.Untyped.GetValue())
			default:
				t.Fatalf("%s is a %s, not a number", name, f.GetType())
			}
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d samples of %s%v, want 1", len(found), name, labels)
	}
	return found[0]
}

func hasLabels(m *dto.Metric, labels []string) bool {
	for _, l := range labels {
		k, v, _ := strings.Cut(l, "=")
		ok := false
		for _, lp := range m.Label {
			if lp.GetName() == k && lp.GetValue() == v {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// want checks exact values: name (with optional {k=v,...}) → value.
func (s scrape) want(t *testing.T, want map[string]float64) {
	t.Helper()
	for key, v := range want {
		name, ls, _ := strings.Cut(strings.TrimSuffix(key, "}"), "{")
		var labels []string
		if ls != "" {
			labels = strings.Split(ls, ",")
		}
		if got := s.value(t, name, labels...); got != v {
			t.Errorf("%s = %v, want %v", key, got, v)
		}
	}
}

func backends() []brokertest.Backend {
	return []brokertest.Backend{brokertest.Memory(), brokertest.Disk()}
}

// TestMetricsAfterWorkload runs a known workload over AMQP and checks the
// exact values /metrics reports, on every store.
func TestMetricsAfterWorkload(t *testing.T) {
	for _, be := range backends() {
		t.Run(be.Name(), func(t *testing.T) {
			a := startMetricsAPI(t, be, 1000)
			conn, ch := a.Channel(t)
			defer conn.Close()
			declare := func(name string, args amqp091.Table) {
				t.Helper()
				if _, err := ch.QueueDeclare(name, true, false, false, false, args); err != nil {
					t.Fatal(err)
				}
			}
			if err := ch.ExchangeDeclare("dlx", "fanout", true, false, false, false, nil); err != nil {
				t.Fatal(err)
			}
			declare("dlq", nil)
			if err := ch.QueueBind("dlq", "", "dlx", false, nil); err != nil {
				t.Fatal(err)
			}
			declare("q", amqp091.Table{"x-dead-letter-exchange": "dlx"})
			declare("qm", amqp091.Table{"x-dead-letter-exchange": "missing"})
			declare("ttl", nil)
			declare("plain", nil)
			declare("ml", amqp091.Table{"x-max-length": 1})
			declare("dl", amqp091.Table{"x-queue-type": "quorum", "x-delivery-limit": 0, "x-dead-letter-exchange": "dlx"})
			declare("alo", amqp091.Table{"x-queue-type": "quorum", "x-dead-letter-exchange": "dlx",
				"x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"})
			if err := ch.Confirm(false); err != nil {
				t.Fatal(err)
			}
			returns := ch.NotifyReturn(make(chan amqp091.Return, 1))
			publish := func(exchange, key string, mandatory bool, msg amqp091.Publishing) {
				t.Helper()
				msg.DeliveryMode = amqp091.Persistent
				dc, err := ch.PublishWithDeferredConfirm(exchange, key, mandatory, false, msg)
				if err != nil {
					t.Fatal(err)
				}
				if ok, err := dc.WaitContext(t.Context()); !ok || err != nil {
					t.Fatalf("publish to %q/%q: confirmed %v, %v", exchange, key, ok, err)
				}
			}
			for i := range 3 {
				publish("", "q", false, amqp091.Publishing{Body: fmt.Appendf(nil, "q%d", i)})
			}
			publish("", "qm", false, amqp091.Publishing{Body: []byte("qm")})
			for range 2 { // expire on arrival: no consumer, no DLX
				publish("", "ttl", false, amqp091.Publishing{Expiration: "0", Body: []byte("t")})
			}
			for i := range 3 {
				publish("", "plain", false, amqp091.Publishing{Body: fmt.Appendf(nil, "p%d", i)})
			}
			for range 3 { // drop-head: two evicted, no DLX
				publish("", "ml", false, amqp091.Publishing{Body: []byte("m")})
			}
			publish("", "dl", false, amqp091.Publishing{Body: []byte("dl")})
			publish("", "alo", false, amqp091.Publishing{Body: []byte("alo")})
			publish("amq.direct", "nowhere", true, amqp091.Publishing{Body: []byte("returned")})
			<-returns
			publish("amq.direct", "nowhere", false, amqp091.Publishing{Body: []byte("dropped")})

			// q: three deliveries to a consumer, each rejected: dead-lettered
			// to dlq for reason rejected.
			ds, err := ch.Consume("q", "c", false, false, false, false, nil)
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				d := <-ds
				if err := d.Reject(false); err != nil {
					t.Fatal(err)
				}
			}
			// qm: its DLX does not exist, so the nacked message is dropped.
			get := func(queue string, autoAck bool) amqp091.Delivery {
				t.Helper()
				d, ok, err := ch.Get(queue, autoAck)
				if err != nil || !ok {
					t.Fatalf("get %s: %v, %v", queue, ok, err)
				}
				return d
			}
			if err := get("qm", false).Nack(false, false); err != nil {
				t.Fatal(err)
			}
			// dl: requeued once with a delivery limit of 0: dead-lettered
			// to dlq for reason delivery_limit.
			if err := get("dl", false).Nack(false, true); err != nil {
				t.Fatal(err)
			}
			// alo: rejected, dead-lettered at least once to dlq.
			if err := get("alo", false).Reject(false); err != nil {
				t.Fatal(err)
			}
			// plain: one get without ack, one requeued and got again
			// (redelivered) and acked, one acked, then empty.
			get("plain", true)
			if err := get("plain", false).Nack(false, true); err != nil {
				t.Fatal(err)
			}
			if d := get("plain", false); !d.Redelivered {
				t.Fatal("requeued message not redelivered")
			} else if err := d.Ack(false); err != nil {
				t.Fatal(err)
			}
			if err := get("plain", false).Ack(false); err != nil {
				t.Fatal(err)
			}
			if _, ok, err := ch.Get("plain", false); ok || err != nil {
				t.Fatalf("plain not empty: %v, %v", ok, err)
			}
			// Methods on a channel are handled in order: once this reply
			// is here, the ack before it has been applied.
			if _, err := ch.QueueDeclarePassive("dlq", true, false, false, false, nil); err != nil {
				t.Fatal(err)
			}

			a.Broker.SetAlarm(broker.AlarmDisk, true)
			s := a.scrape()
			a.Broker.SetAlarm(broker.AlarmDisk, false)
			s.want(t, map[string]float64{
				"brokerd_global_messages_received_total":                                                        16,
				"brokerd_global_messages_received_confirm_total":                                                16,
				"brokerd_global_messages_routed_total":                                                          14,
				"brokerd_global_messages_unroutable_returned_total":                                             1,
				"brokerd_global_messages_unroutable_dropped_total":                                              1,
				"brokerd_global_messages_confirmed_total":                                                       16,
				"brokerd_global_messages_nacked_total":                                                          0,
				"brokerd_global_messages_delivered_total":                                                       10,
				"brokerd_global_messages_delivered_consume_manual_ack_total":                                    3,
				"brokerd_global_messages_delivered_consume_auto_ack_total":                                      0,
				"brokerd_global_messages_delivered_get_manual_ack_total":                                        6,
				"brokerd_global_messages_delivered_get_auto_ack_total":                                          1,
				"brokerd_global_messages_get_empty_total":                                                       1,
				"brokerd_global_messages_redelivered_total":                                                     1,
				"brokerd_global_messages_acknowledged_total":                                                    2,
				"brokerd_global_messages_dead_lettered_rejected_total{dead_letter_strategy=at_most_once}":       4, // q, qm
				"brokerd_global_messages_dead_lettered_rejected_total{dead_letter_strategy=at_least_once}":      1, // alo
				"brokerd_global_messages_dead_lettered_rejected_total{dead_letter_strategy=disabled}":           0,
				"brokerd_global_messages_dead_lettered_expired_total{dead_letter_strategy=disabled}":            2, // ttl
				"brokerd_global_messages_dead_lettered_expired_total{dead_letter_strategy=at_most_once}":        0,
				"brokerd_global_messages_dead_lettered_maxlen_total{dead_letter_strategy=disabled}":             2, // ml
				"brokerd_global_messages_dead_lettered_delivery_limit_total{dead_letter_strategy=at_most_once}": 1, // dl
				"brokerd_global_messages_dead_lettered_confirmed_total{dead_letter_strategy=at_least_once}":     1, // alo
				"brokerd_queue_messages_dead_lettered_total{vhost=/,queue=alo,reason=rejected}":                 1,
				"brokerd_dead_letters_delivered_total{reason=rejected}":                                         4,
				"brokerd_dead_letters_delivered_total{reason=expired}":                                          0,
				"brokerd_dead_letters_dropped_total{cause=dlx_missing}":                                         1,
				"brokerd_dead_letters_dropped_total{cause=no_dlx}":                                              4,
				"brokerd_dead_letters_dropped_total{cause=unroutable}":                                          0,
				"brokerd_dead_letter_cycles_total":                                                              0,
				"brokerd_global_messages_overflowed_total":                                                      2,
				"brokerd_dead_letters_delivered_total{reason=delivery_limit}":                                   1,
				"brokerd_queue_messages_dead_lettered_total{vhost=/,queue=dl,reason=delivery_limit}":            1,
				"brokerd_queue_messages_ready{vhost=/,queue=ml}":                                                1,
				"brokerd_queue_messages_ready{vhost=/,queue=dl}":                                                0,
				"brokerd_queue_messages_dead_lettered_total{vhost=/,queue=q,reason=rejected}":                   3,
				"brokerd_queue_messages_dead_lettered_total{vhost=/,queue=qm,reason=rejected}":                  0,
				"brokerd_queue_messages_ready{vhost=/,queue=dlq}":                                               5,
				"brokerd_queue_messages{vhost=/,queue=dlq}":                                                     5,
				"brokerd_queue_messages_bytes{vhost=/,queue=dlq}":                                               11, // q0 q1 q2 dl alo
				"brokerd_queue_messages_ready{vhost=/,queue=plain}":                                             0,
				"brokerd_queue_messages_ready{vhost=/,queue=ttl}":                                               0,
				"brokerd_queue_consumers{vhost=/,queue=q}":                                                      1,
				"brokerd_queues":                           8,
				"brokerd_consumers":                        1,
				"brokerd_connections":                      1,
				"brokerd_channels":                         1,
				"brokerd_alarms_memory_used_watermark":     0,
				"brokerd_alarms_free_disk_space_watermark": 1,
			})
			if s["go_goroutines"] == nil || s["process_resident_memory_bytes"] == nil {
				t.Error("no Go runtime or process metrics")
			}
		})
	}
}

// TestMetricsPerQueueLimit checks that queues get their own label set only
// while there are at most per_queue_limit of them; beyond it, and at 0,
// the same metrics are aggregates without vhost and queue labels.
func TestMetricsPerQueueLimit(t *testing.T) {
	for _, limit := range []int{0, 2, 3} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			a := startMetricsAPI(t, brokertest.Selected(t), limit)
			conn, ch := a.Channel(t)
			defer conn.Close()
			for i, q := range []string{"a", "b", "c"} {
				if _, err := ch.QueueDeclare(q, false, false, false, false, nil); err != nil {
					t.Fatal(err)
				}
				for range i + 1 {
					if err := ch.Publish("", q, false, false, amqp091.Publishing{Body: []byte("xy")}); err != nil {
						t.Fatal(err)
					}
				}
			}
			// A passive declare after the publishes returns once they are
			// enqueued: methods of a channel are handled in order.
			if _, err := ch.QueueDeclarePassive("c", false, false, false, false, nil); err != nil {
				t.Fatal(err)
			}
			s := a.scrape()
			ready := s["brokerd_queue_messages_ready"]
			if limit >= 3 {
				s.want(t, map[string]float64{
					"brokerd_queue_messages_ready{vhost=/,queue=a}":                              1,
					"brokerd_queue_messages_ready{vhost=/,queue=b}":                              2,
					"brokerd_queue_messages_ready{vhost=/,queue=c}":                              3,
					"brokerd_queue_messages_bytes{vhost=/,queue=c}":                              6,
					"brokerd_queue_messages_dead_lettered_total{vhost=/,queue=a,reason=expired}": 0,
				})
				if n := len(ready.Metric); n != 3 {
					t.Errorf("%d series of brokerd_queue_messages_ready, want 3", n)
				}
				return
			}
			if n := len(ready.Metric); n != 1 || len(ready.Metric[0].Label) != 0 {
				t.Fatalf("brokerd_queue_messages_ready has %d series (%v), want one without labels", n, ready.Metric)
			}
			s.want(t, map[string]float64{
				"brokerd_queue_messages_ready":                                6,
				"brokerd_queue_messages_bytes":                                12,
				"brokerd_queue_consumers":                                     0,
				"brokerd_queues":                                              3,
				"brokerd_queue_messages_dead_lettered_total{reason=rejected}": 0,
			})
			if n := len(s["brokerd_queue_messages_dead_lettered_total"].Metric); n != 5 { // rejected, expired, maxlen, delivery_limit, damaged
				t.Errorf("%d series of brokerd_queue_messages_dead_lettered_total, want one per reason", n)
			}
		})
	}
}

// histogram returns the only sample of histogram name.
func (s scrape) histogram(t *testing.T, name string) *dto.Histogram {
	t.Helper()
	f := s[name]
	if f == nil || len(f.Metric) != 1 || f.Metric[0].Histogram == nil {
		t.Fatalf("no histogram %s", name)
	}
	return f.Metric[0].Histogram
}

// TestMetricsStore checks the disk store's metrics after durable
// publishes and a checkpoint, and that the memory store exports none.
func TestMetricsStore(t *testing.T) {
	for _, be := range backends() {
		t.Run(be.Name(), func(t *testing.T) {
			a := startMetricsAPI(t, be, 1000)
			conn, ch := a.Channel(t)
			defer conn.Close()
			if _, err := ch.QueueDeclare("d", true, false, false, false, nil); err != nil {
				t.Fatal(err)
			}
			if err := ch.Confirm(false); err != nil {
				t.Fatal(err)
			}
			for range 5 {
				dc, err := ch.PublishWithDeferredConfirm("", "d", false, false, amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: []byte("durable")})
				if err != nil {
					t.Fatal(err)
				}
				if ok, err := dc.WaitContext(t.Context()); !ok || err != nil {
					t.Fatalf("confirm: %v, %v", ok, err)
				}
			}
			ds, disk := a.Store.(*diskstore.Store)
			if !disk {
				for _, name := range []string{"brokerd_wal_fsync_duration_seconds", "brokerd_wal_bytes", "brokerd_segment_bytes", "brokerd_checkpoint_duration_seconds"} {
					if a.scrape()[name] != nil {
						t.Errorf("%s exported for the %s store", name, be.Name())
					}
				}
				return
			}
			s := a.scrape()
			fsync := s.histogram(t, "brokerd_wal_fsync_duration_seconds")
			if fsync.GetSampleCount() < 1 || fsync.GetSampleSum() <= 0 {
				t.Errorf("fsync histogram: %d fsyncs, %v s; want some after confirmed durable publishes", fsync.GetSampleCount(), fsync.GetSampleSum())
			}
			checkBuckets(t, "brokerd_wal_fsync_duration_seconds", fsync)
			groups := s.histogram(t, "brokerd_wal_group_commit_records")
			checkBuckets(t, "brokerd_wal_group_commit_records", groups)
			// Every record is written by one group commit.
			if recs := s.value(t, "brokerd_wal_records_total"); groups.GetSampleSum() != recs || recs < 5 {
				t.Errorf("group commits cover %v records, wal_records_total %v; want equal and at least the 5 publishes", groups.GetSampleSum(), recs)
			}
			if v := s.value(t, "brokerd_wal_bytes"); v <= 5*float64(len("durable")) {
				t.Errorf("brokerd_wal_bytes = %v, want more than the bodies written", v)
			}
			if v := s.value(t, "brokerd_recovery_duration_seconds"); v <= 0 {
				t.Errorf("brokerd_recovery_duration_seconds = %v, want > 0", v)
			}
			before := s.histogram(t, "brokerd_checkpoint_duration_seconds").GetSampleCount()
			if err := ds.Checkpoint(); err != nil {
				t.Fatal(err)
			}
			s = a.scrape()
			cp := s.histogram(t, "brokerd_checkpoint_duration_seconds")
			if cp.GetSampleCount() <= before || cp.GetSampleSum() <= 0 {
				t.Errorf("checkpoints: %d before, %d after a checkpoint (sum %v s)", before, cp.GetSampleCount(), cp.GetSampleSum())
			}
			if s.value(t, "brokerd_segment_files") < 1 || s.value(t, "brokerd_segment_bytes") <= 5*float64(len("durable")) {
				t.Errorf("after a checkpoint: %v segment files, %v bytes", s.value(t, "brokerd_segment_files"), s.value(t, "brokerd_segment_bytes"))
			}
		})
	}
}

// checkBuckets checks that h's buckets are cumulative and within its count.
func checkBuckets(t *testing.T, name string, h *dto.Histogram) {
	t.Helper()
	var last uint64
	for _, b := range h.Bucket {
		if b.GetCumulativeCount() < last || b.GetCumulativeCount() > h.GetSampleCount() {
			t.Errorf("%s: bucket le=%v has %d (previous %d, count %d)", name, b.GetUpperBound(), b.GetCumulativeCount(), last, h.GetSampleCount())
		}
		last = b.GetCumulativeCount()
	}
	if len(h.Bucket) == 0 {
		t.Errorf("%s has no buckets", name)
	}
}
