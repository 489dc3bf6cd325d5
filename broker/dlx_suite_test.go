// A port of RabbitMQ's dead_lettering_SUITE, run in each of its groups.

package broker_test

// A port of RabbitMQ's dead_lettering_SUITE (reference §4) and of the
// dead-lettering rules of SPEC §2, through amqp091-go against a real broker.
// Where SPEC.md and the reference differ, the assertions follow SPEC.md:
// a dead-letter routing key removes the CC header, a well-formed client
// x-death keeps counting, expiry happens anywhere in the queue,
// at-least-once works on classic queues without reject-publish, and
// reject-publish-dlx works on quorum queues. This file holds the suite's
// table and its other groups; each row's function is in the dlx_*_test.go
// file of its mechanism, the ds* helpers in dlx_helpers_test.go.

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
)

// ---------------------------------------------------------------------------
// The DeadLetterTests of dead_lettering_SUITE, one function per row.

type dsRow struct {
	name string
	// notRefALO: the reference leaves the row out of quorum_queue/
	// at_least_once (it needs drop-head or asserts a drop).
	notRefALO bool
	run       func(e *dsEnv)
}

var dsRows = []dsRow{
	{"dead_letter_nack", false, dsNack},
	{"dead_letter_multiple_nack", false, dsMultipleNack},
	{"dead_letter_nack_requeue", false, dsNackRequeue},
	{"dead_letter_nack_requeue_multiple", false, dsNackRequeueMultiple},
	{"dead_letter_reject", false, dsReject},
	{"dead_letter_reject_expire_expire", false, dsRejectExpireExpire},
	{"dead_letter_reject_many", false, dsRejectMany},
	{"dead_letter_reject_requeue", false, dsRejectRequeue},
	{"dead_letter_max_length_drop_head", true, dsMaxLengthDropHead},
	{"dead_letter_reject_requeue_reject_norequeue", false, dsRejectRequeueRejectNoRequeue},
	{"dead_letter_nack_requeue_nack_norequeue_basic_get", false, dsNackRequeueNackNoRequeueGet},
	{"dead_letter_nack_requeue_nack_norequeue_basic_consume", false, dsNackRequeueNackNoRequeueConsume},
	// RabbitMQ runs it on classic queues only; brokerd on every type.
	{"dead_letter_max_length_reject_publish_dlx", false, dsMaxLengthRejectPublishDLX},
	{"dead_letter_missing_exchange", true, dsMissingExchange},
	{"dead_letter_routing_key", false, dsRoutingKey},
	{"dead_letter_routing_key_header_CC", false, dsRoutingKeyHeaderCC},
	{"dead_letter_routing_key_header_BCC", false, dsRoutingKeyHeaderBCC},
	{"dead_letter_routing_key_cycle_max_length", true, dsRoutingKeyCycleMaxLength},
	{"dead_letter_routing_key_cycle_with_reject", false, dsRoutingKeyCycleWithReject},
	{"dead_letter_policy", false, dsPolicy},
	{"dead_letter_override_policy", false, dsOverridePolicy},
	{"dead_letter_ignore_policy", false, dsIgnorePolicy},
	{"dead_letter_headers", false, dsHeaders},
	{"dead_letter_headers_reason_maxlen", true, dsHeadersReasonMaxLen},
	{"dead_letter_headers_batch", false, dsHeadersBatch},
	{"dead_letter_headers_cycle", false, dsHeadersCycle},
	{"dead_letter_headers_BCC", false, dsHeadersBCC},
	{"dead_letter_headers_CC", false, dsHeadersCC},
	{"dead_letter_headers_CC_with_routing_key", false, dsHeadersCCWithRoutingKey},
	{"dead_letter_headers_first_death", false, dsHeadersFirstDeath},
	{"dead_letter_headers_first_death_route", false, dsHeadersFirstDeathRoute},
	{"dead_letter_headers_should_be_appended_for_each_event", false, dsHeadersAppendedForEachEvent},
	{"dead_letter_headers_should_not_be_appended_for_republish", false, dsHeadersRepublish},
	{"dead_letter_ttl", false, dsTTL},
	{"dead_letter_routing_key_cycle_ttl", true, dsRoutingKeyCycleTTL},
	{"dead_letter_headers_reason_expired", false, dsHeadersReasonExpired},
	{"dead_letter_headers_reason_expired_per_message", false, dsHeadersReasonExpiredPerMessage},
	// dead_letter_extra_bcc is not ported: extra_bcc is an internal
	// RabbitMQ queue option no client can set. Its observable effect (one
	// dead letter, several target queues) is TestDLXFanOut.
}

// TestDLXSuite runs every row in every group, each on its own broker, so
// the counters are the row's own.
func TestDLXSuite(t *testing.T) {
	for _, g := range dsGroups {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			for _, r := range dsRows {
				if r.notRefALO && g.refALO {
					continue
				}
				t.Run(r.name, func(t *testing.T) {
					t.Parallel()
					r.run(dsStart(t, g, brokertest.Config{}))
				})
			}
		})
	}
}

// ---------------------------------------------------------------------------
// The suite's other groups: the metric tests (classic_queue/disabled,
// quorum_queue/disabled) and the stream test.

// TestDLXSuiteMetrics: without a DLX, messages removed for a dead-letter
// reason are counted by reason (RabbitMQ's "disabled" counters).
func TestDLXSuiteMetrics(t *testing.T) {
	const n = 1000
	bodies := make([]string, n)
	for i := range bodies {
		bodies[i] = fmt.Sprint("m", i)
	}
	for _, g := range []dsGroup{{name: "classic_disabled"}, {name: "quorum_disabled", quorum: true}} {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			t.Run("metric_maxlen", func(t *testing.T) {
				t.Parallel()
				e := dsStart(t, g, brokertest.Config{})
				e.queue("q", amqp091.Table{"x-max-length": int64(1)})
				e.PublishBodies("q", bodies...)
				e.wantCounters(map[string]uint64{"discarded.maxlen": n - 1, "dropped.no_dlx": n - 1})
				e.waitFor("q", 1, 1, 0)
			})
			t.Run("metric_rejected", func(t *testing.T) {
				t.Parallel()
				e := dsStart(t, g, brokertest.Config{})
				e.queue("q", nil)
				e.PublishBodies("q", bodies...)
				for _, d := range dsRecv(t, dvConsume(e.t, e.Session, "q", "c", false, nil), bodies...) {
					e.reject(d, false)
				}
				e.wantCounters(map[string]uint64{"discarded.rejected": n, "dropped.no_dlx": n})
				e.waitFor("q", 0, 0, 0)
			})
			t.Run("metric_expired_queue_msg_ttl", func(t *testing.T) {
				t.Parallel()
				e := dsStart(t, g, brokertest.Config{})
				e.queue("q", amqp091.Table{"x-message-ttl": int64(0)})
				e.PublishBodies("q", bodies...)
				e.wantCounters(map[string]uint64{"discarded.expired": n, "dropped.no_dlx": n})
				e.waitFor("q", 0, 0, 0)
			})
			t.Run("metric_expired_per_msg_msg_ttl", func(t *testing.T) {
				t.Parallel()
				e := dsStart(t, g, brokertest.Config{})
				e.queue("q", nil)
				for _, b := range bodies {
					e.Publish("", "q", amqp091.Publishing{Body: []byte(b), Expiration: "0"})
				}
				e.wantCounters(map[string]uint64{"discarded.expired": n, "dropped.no_dlx": n})
				e.waitFor("q", 0, 0, 0)
			})
		})
	}
}

// TestDLXSuiteStream ports the stream test with a classic queue in place
// of the stream (brokerd has none): q1 (TTL 0 message) → q2 (queue TTL) →
// q3. The broker's clock jumps 10 s between the two deaths, so the entries'
// times differ as in the original's 2.5 s wait.
func TestDLXSuiteStream(t *testing.T) {
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	e := dsStart(t, dsGroups[0], brokertest.Config{Broker: broker.Options{Now: now}})
	e.queue("q1", amqp091.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "q2"})
	e.queue("q2", amqp091.Table{"x-message-ttl": int64(100), "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "q3"})
	e.Declare("q3", nil, brokertest.Durable)
	pc, err := e.Conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.Confirm(false); err != nil {
		t.Fatal(err)
	}
	dc, err := pc.PublishWithDeferredConfirmWithContext(brokertest.Context(e.t), "", "q1", false, false, amqp091.Publishing{
		Body: []byte("msg"), Expiration: "0",
		Headers: amqp091.Table{"CC": []interface{}{"cc 1", "cc 2"}, "BCC": []interface{}{"bcc 1", "bcc 2"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if ack, err := dc.WaitContext(brokertest.Context(e.t)); err != nil || !ack {
		t.Fatalf("publish confirm: ack %t, %v", ack, err)
	}
	// The message died in q1 before the confirm; it dies in q2 after.
	offset.Store(int64(10 * time.Second))
	e.waitFor("q3", 1, 1, 0)
	d := e.Expect("q3", "msg")[0]
	dsWantFirstLast(t, d.Headers, [3]string{"expired", "q1", ""}, [3]string{"expired", "q2", ""})
	times := e.wantDeaths(d.Headers,
		dsDeath{queue: "q2", reason: "expired", exchange: "", count: 1, keys: []string{"q2"}},
		dsDeath{queue: "q1", reason: "expired", exchange: "", count: 1, keys: []string{"q1", "cc 1", "cc 2"}, origExp: "0"})
	if gap := times[0].Sub(times[1]); gap < 9*time.Second {
		t.Fatalf("q2's death at %v is %v after q1's at %v, want ~10s", times[0], gap, times[1])
	}
	// RabbitMQ keeps CC here; brokerd removes it with a dead-letter
	// routing key (SPEC §2).
	dsWantAbsent(t, d.Headers, "CC", "BCC")
	if d.Expiration != "" {
		t.Fatalf("expiration %q, want none", d.Expiration)
	}
	dsWantRoute(t, d, "", "q3")
}
