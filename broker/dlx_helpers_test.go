// Helpers of the dead-lettering tests (ds*): the suite's groups, dsEnv and header checks.

package broker_test

// Helpers, prefixed ds, for the dead-lettering tests (dlx_*_test.go): the
// suite's groups (queue type and strategy), a broker and a session per
// test (dsEnv), and checks of counters and x-death headers.

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"errors"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
)

// dsGroup is one of the suite's groups: a queue type and dead-letter
// strategy, applied to every queue that dead-letters.
type dsGroup struct {
	name        string
	quorum      bool
	atLeastOnce bool
	// rejectPublish adds x-overflow=reject-publish, as RabbitMQ's
	// quorum_queue/at_least_once group does (it needs it for
	// at-least-once; brokerd does not).
	rejectPublish bool
	// refALO marks RabbitMQ's quorum_queue/at_least_once group: the rows
	// the reference leaves out of it are left out here too.
	refALO bool
}

var dsGroups = []dsGroup{
	{name: "classic_at_most_once"},
	{name: "quorum_at_most_once", quorum: true},
	{name: "quorum_at_least_once", quorum: true, atLeastOnce: true, rejectPublish: true, refALO: true},
	// beyond RabbitMQ: at-least-once on a classic queue, and without
	// reject-publish, so the drop-head rows apply too.
	{name: "classic_at_least_once", atLeastOnce: true},
}

var dsALOGroups = []dsGroup{dsGroups[2], dsGroups[3]}

// args returns the group's queue arguments plus extra (extra wins).
func (g dsGroup) args(extra amqp091.Table) amqp091.Table {
	a := amqp091.Table{}
	if g.quorum {
		a["x-queue-type"] = "quorum"
		a["x-dead-letter-strategy"] = "at-most-once"
	}
	if g.atLeastOnce {
		a["x-dead-letter-strategy"] = "at-least-once"
	}
	if g.rejectPublish {
		a["x-overflow"] = "reject-publish"
	}
	maps.Copy(a, extra)
	return a
}

// dsEnv is one test's broker and client: a session whose publishes are
// persistent unless they say otherwise, and not confirmed.
type dsEnv struct {
	*brokertest.Session
	t     *testing.T
	g     dsGroup
	b     *brokertest.Instance
	start time.Time        // x-death times are not before it (to the second)
	now   func() time.Time // the broker's clock
}

func dsStart(t *testing.T, g dsGroup, cfg brokertest.Config) *dsEnv {
	t.Helper()
	now := cfg.Broker.Now
	if now == nil && cfg.Clock != nil {
		now = cfg.Clock.Now
	}
	if now == nil {
		now = time.Now
	}
	if cfg.Broker.Logger == nil {
		cfg.Broker.Logger = slog.New(slog.DiscardHandler)
	}
	start := now()
	b := brokertest.Start(t, cfg)
	s := b.Session(t, brokertest.NoConfirm, brokertest.Persistent)
	return &dsEnv{Session: s, t: t, g: g, b: b, start: start, now: now}
}

// redial replaces the session with a new connection's, as after a
// restart.
func (e *dsEnv) redial() {
	e.t.Helper()
	e.Session = e.b.Session(e.t, brokertest.NoConfirm, brokertest.Persistent)
}

// queue declares a durable queue of the group's type with extra arguments.
func (e *dsEnv) queue(name string, extra amqp091.Table) {
	e.t.Helper()
	e.Declare(name, e.g.args(extra), brokertest.Durable)
}

// setup is the suite's declare_dead_letter_queues: a direct DLX "dlx", the
// source queue "src" with x-dead-letter-exchange=dlx and
// x-dead-letter-routing-key=dlq (plus extra), and a durable classic "dlq"
// bound to the DLX with key dlq.
func (e *dsEnv) setup(extra amqp091.Table) {
	e.t.Helper()
	e.DeclareExchange("dlx", "direct", nil, brokertest.Durable)
	args := amqp091.Table{"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "dlq"}
	maps.Copy(args, extra)
	e.queue("src", args)
	e.Declare("dlq", nil, brokertest.Durable)
	e.Bind("dlq", "dlq", "dlx", nil)
}

func (e *dsEnv) policy(p broker.Policy) {
	e.t.Helper()
	if err := e.b.Broker.SetPolicy("/", p); err != nil {
		e.t.Fatalf("set policy %q: %v", p.Name, err)
	}
}

func (e *dsEnv) nack(d amqp091.Delivery, multiple, requeue bool) {
	e.t.Helper()
	if err := e.Nack(d.DeliveryTag, multiple, requeue); err != nil {
		e.t.Fatalf("nack %d: %v", d.DeliveryTag, err)
	}
}

func (e *dsEnv) reject(d amqp091.Delivery, requeue bool) {
	e.t.Helper()
	if err := e.Reject(d.DeliveryTag, requeue); err != nil {
		e.t.Fatalf("reject %d: %v", d.DeliveryTag, err)
	}
}

// waitFor is the suite's wait_for_messages [queue, messages, ready,
// unacked]; messages include the dead-letter backlog.
func (e *dsEnv) waitFor(q string, messages, ready, unacked int) {
	e.t.Helper()
	brokertest.Eventually(e.t, fmt.Sprintf("queue %q to hold %d messages, %d ready, %d unacked", q, messages, ready, unacked), func() error {
		st, ok := e.b.Broker.QueueStats("/", q)
		if !ok {
			return fmt.Errorf("queue %q does not exist", q)
		}
		if n := st.Ready + st.Unacked + st.DeadLetterBacklog; n != messages || st.Ready != ready || st.Unacked != unacked {
			return fmt.Errorf("messages %d ready %d unacked %d (backlog %d)", n, st.Ready, st.Unacked, st.DeadLetterBacklog)
		}
		return nil
	})
}

// waitBacklog waits until q's dead-letter backlog holds n messages.
func (e *dsEnv) waitBacklog(q string, n int) {
	e.t.Helper()
	brokertest.Eventually(e.t, fmt.Sprintf("queue %q's dead-letter backlog to hold %d", q, n), func() error {
		if st, _ := e.b.Broker.QueueStats("/", q); st.DeadLetterBacklog != n {
			return fmt.Errorf("backlog %d", st.DeadLetterBacklog)
		}
		return nil
	})
}

// dsFlat flattens the dead-letter counters: dead_lettered.<reason>,
// discarded.<reason>, dropped.<cause>, cycles, backlogged.
func dsFlat(s broker.Stats) map[string]uint64 {
	m := map[string]uint64{"cycles": s.Cycles, "backlogged": s.Backlogged}
	for k, v := range s.DeadLettered {
		m["dead_lettered."+k] = v
	}
	for k, v := range s.Discarded {
		m["discarded."+k] = v
	}
	for k, v := range s.Dropped {
		m["dropped."+k] = v
	}
	return m
}

// wantCounters waits until the broker's dead-letter counters are want,
// every counter not listed being 0, except those in ignore.
func (e *dsEnv) wantCounters(want map[string]uint64, ignore ...string) {
	e.t.Helper()
	brokertest.Eventually(e.t, "the dead-letter counters", func() error {
		got := dsFlat(e.b.Broker.Stats())
		var diff []string
		for _, k := range slices.Sorted(maps.Keys(got)) {
			if _, ok := want[k]; !ok && slices.Contains(ignore, k) {
				continue
			}
			if got[k] != want[k] {
				diff = append(diff, fmt.Sprintf("%s=%d (want %d)", k, got[k], want[k]))
			}
		}
		for k := range want {
			if _, ok := got[k]; !ok {
				diff = append(diff, "no counter "+k)
			}
		}
		if len(diff) > 0 {
			return errors.New(strings.Join(diff, ", "))
		}
		return nil
	})
}

// wantDied waits until the broker counts n messages dead for reason under
// strategy (Stats.Died, RabbitMQ's messages_dead_lettered_<reason>_total)
// and confirmed at-least-once dead letters.
func (e *dsEnv) wantDied(strategy, reason string, n, confirmed uint64) {
	e.t.Helper()
	brokertest.Eventually(e.t, fmt.Sprintf("%d died %s/%s, %d confirmed", n, strategy, reason, confirmed), func() error {
		st := e.b.Broker.Stats()
		if got := st.Died[strategy][reason]; got != n || st.DeadLetteredConfirmed != confirmed {
			return fmt.Errorf("died %s/%s = %d, confirmed %d", strategy, reason, got, st.DeadLetteredConfirmed)
		}
		return nil
	})
}

// wantQueueDeadLettered checks a queue's per-reason dead-lettered counts
// (reasons not listed: 0).
func (e *dsEnv) wantQueueDeadLettered(q string, want map[string]uint64) {
	e.t.Helper()
	st, ok := e.b.Broker.QueueStats("/", q)
	if !ok {
		e.t.Fatalf("queue %q does not exist", q)
	}
	for _, r := range []string{"rejected", "expired", "maxlen", "delivery_limit"} {
		if st.DeadLettered[r] != want[r] {
			e.t.Fatalf("queue %q dead-lettered %v, want %v", q, st.DeadLettered, want)
		}
	}
}

// dsDeath is an expected x-death entry.
type dsDeath struct {
	queue, reason, exchange string
	count                   int64
	keys                    []string
	origExp                 string // "" = no original-expiration
}

// wantDeaths checks x-death as amqp091 decodes it: an array of tables,
// most recent first, each with exactly the expected fields and types
// (count int64 'l', time time.Time 'T', routing-keys []interface{} of
// strings 'A' of 'S', the rest string 'S'). It returns the times.
func (e *dsEnv) wantDeaths(h amqp091.Table, want ...dsDeath) []time.Time {
	e.t.Helper()
	v, ok := h["x-death"]
	if !ok {
		e.t.Fatalf("no x-death header in %v", h)
	}
	arr, ok := v.([]interface{})
	if !ok {
		e.t.Fatalf("x-death is %T, want an array", v)
	}
	if len(arr) != len(want) {
		e.t.Fatalf("x-death has %d entries, want %d: %v", len(arr), len(want), arr)
	}
	times := make([]time.Time, len(want))
	for i, w := range want {
		d, ok := arr[i].(amqp091.Table)
		if !ok {
			e.t.Fatalf("x-death[%d] is %T, want a table", i, arr[i])
		}
		keys := []string{"count", "exchange", "queue", "reason", "routing-keys", "time"}
		if w.origExp != "" {
			keys = append(keys, "original-expiration")
			slices.Sort(keys)
		}
		if got := slices.Sorted(maps.Keys(d)); !slices.Equal(got, keys) {
			e.t.Fatalf("x-death[%d] has fields %q, want %q", i, got, keys)
		}
		str := func(k, want string) {
			e.t.Helper()
			if s, ok := d[k].(string); !ok || s != want {
				e.t.Fatalf("x-death[%d].%s = %#v (%T), want string %q", i, k, d[k], d[k], want)
			}
		}
		str("queue", w.queue)
		str("reason", w.reason)
		str("exchange", w.exchange)
		if w.origExp != "" {
			str("original-expiration", w.origExp)
		}
		if c, ok := d["count"].(int64); !ok || c != w.count {
			e.t.Fatalf("x-death[%d].count = %#v (%T), want int64 %d", i, d["count"], d["count"], w.count)
		}
		rk, ok := d["routing-keys"].([]interface{})
		if !ok {
			e.t.Fatalf("x-death[%d].routing-keys is %T, want an array", i, d["routing-keys"])
		}
		var keysGot []string
		for _, k := range rk {
			s, ok := k.(string)
			if !ok {
				e.t.Fatalf("x-death[%d].routing-keys element %#v is %T, want string", i, k, k)
			}
			keysGot = append(keysGot, s)
		}
		if !slices.Equal(keysGot, w.keys) {
			e.t.Fatalf("x-death[%d].routing-keys = %q, want %q", i, keysGot, w.keys)
		}
		tm, ok := d["time"].(time.Time)
		if !ok {
			e.t.Fatalf("x-death[%d].time is %T, want a timestamp", i, d["time"])
		}
		if tm.Before(e.start.Truncate(time.Second)) || tm.After(e.now().Add(time.Second)) {
			e.t.Fatalf("x-death[%d].time = %v, not between %v and now", i, tm, e.start)
		}
		times[i] = tm
	}
	return times
}

// wantStr checks that header k is a string (longstr) with value want.
func dsWantStr(t testing.TB, h amqp091.Table, k, want string) {
	t.Helper()
	if s, ok := h[k].(string); !ok || s != want {
		t.Fatalf("header %s = %#v (%T), want string %q", k, h[k], h[k], want)
	}
}

func dsWantAbsent(t testing.TB, h amqp091.Table, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if v, ok := h[k]; ok {
			t.Fatalf("header %s = %#v, want it absent", k, v)
		}
	}
}

// wantFirstLast checks x-first-death-* and x-last-death-* (reason, queue,
// exchange).
func dsWantFirstLast(t testing.TB, h amqp091.Table, first, last [3]string) {
	t.Helper()
	for i, f := range []string{"reason", "queue", "exchange"} {
		dsWantStr(t, h, "x-first-death-"+f, first[i])
		dsWantStr(t, h, "x-last-death-"+f, last[i])
	}
}

func dsWantArray(t testing.TB, h amqp091.Table, k string, want ...string) {
	t.Helper()
	arr, ok := h[k].([]interface{})
	if !ok {
		t.Fatalf("header %s = %#v, want an array %q", k, h[k], want)
	}
	var got []string
	for _, v := range arr {
		s, _ := v.(string)
		got = append(got, s)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("header %s = %q, want %q", k, got, want)
	}
}

func dsWantRoute(t testing.TB, d amqp091.Delivery, exchange, key string) {
	t.Helper()
	if d.Exchange != exchange || d.RoutingKey != key {
		t.Fatalf("%q delivered from exchange %q key %q, want %q %q", d.Body, d.Exchange, d.RoutingKey, exchange, key)
	}
}

func dsRecv(t testing.TB, msgs <-chan amqp091.Delivery, want ...string) []amqp091.Delivery {
	t.Helper()
	out := make([]amqp091.Delivery, len(want))
	for i, w := range want {
		select {
		case d, ok := <-msgs:
			if !ok {
				t.Fatal("delivery channel closed")
			}
			if string(d.Body) != w {
				t.Fatalf("delivery %d: %q, want %q (of %q)", i+1, d.Body, w, want)
			}
			out[i] = d
		case <-time.After(brokertest.Wait):
			t.Fatalf("no delivery %d, want %q (of %q)", i+1, w, want)
		}
	}
	return out
}
