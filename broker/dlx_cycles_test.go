// Tests of dead-letter cycles: detected, counted, logged once per pair.

package broker_test

// Tests of dead-letter cycles (SPEC §2, B26–B28): a loop without a
// rejection drops the message where it closes, counts and logs it; a
// rejection in the loop keeps it going.

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
)

// dsRejectExpireExpire: b --rejected--> a2 --expired--> a3 --expired--> b,
// twice. The rejection in the loop keeps it from being a cycle (B26-B28).
func dsRejectExpireExpire(e *dsEnv) {
	e.queue("b", amqp091.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "a2"})
	e.queue("a2", amqp091.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "a3", "x-message-ttl": int64(5)})
	e.queue("a3", amqp091.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "b", "x-message-ttl": int64(5)})
	e.PublishBodies("b", "msg")
	e.waitFor("b", 1, 1, 0)
	for round := int64(1); round <= 2; round++ {
		d := e.Expect("b", "msg")[0]
		if round == 2 {
			e.wantDeaths(d.Headers,
				dsDeath{queue: "a3", reason: "expired", exchange: "", count: 1, keys: []string{"a3"}},
				dsDeath{queue: "a2", reason: "expired", exchange: "", count: 1, keys: []string{"a2"}},
				dsDeath{queue: "b", reason: "rejected", exchange: "", count: 1, keys: []string{"b"}})
		}
		e.reject(d, false)
		e.waitFor("b", 1, 1, 0)
	}
	d := e.Expect("b", "msg")[0]
	e.wantDeaths(d.Headers,
		dsDeath{queue: "a3", reason: "expired", exchange: "", count: 2, keys: []string{"a3"}},
		dsDeath{queue: "a2", reason: "expired", exchange: "", count: 2, keys: []string{"a2"}},
		dsDeath{queue: "b", reason: "rejected", exchange: "", count: 2, keys: []string{"b"}})
	dsWantFirstLast(e.t, d.Headers, [3]string{"rejected", "b", ""}, [3]string{"expired", "a3", ""})
	e.wantCounters(map[string]uint64{"dead_lettered.rejected": 2, "dead_lettered.expired": 4})
}

func dsRoutingKeyCycleMaxLength(e *dsEnv) {
	e.queue("src", amqp091.Table{"x-max-length": int64(1), "x-dead-letter-exchange": ""})
	e.PublishBodies("src", "p1", "p2")
	if !e.g.atLeastOnce {
		// p1, dropped from the head, would return to src: a cycle, so
		// it is discarded.
		e.waitFor("src", 1, 1, 0)
		d := e.Expect("src", "p2")[0]
		e.WantEmpty("src")
		if err := d.Ack(false); err != nil {
			e.t.Fatal(err)
		}
		e.waitFor("src", 0, 0, 0)
		e.wantCounters(map[string]uint64{"discarded.maxlen": 1, "dropped.cycle": 1, "cycles": 1})
		return
	}
	// At-least-once keeps the cycling message (B30) until a policy
	// gives the queue a routing key that breaks the cycle.
	e.waitFor("src", 2, 1, 0)
	d := e.Expect("src", "p2")[0]
	e.WantEmpty("src")
	if err := d.Ack(false); err != nil {
		e.t.Fatal(err)
	}
	e.waitFor("src", 1, 0, 0)
	e.Declare("dlq", nil, brokertest.Durable)
	e.policy(broker.Policy{Name: "dlrk", Pattern: "^src$", Definition: map[string]any{"dead-letter-routing-key": "dlq"}})
	e.waitFor("src", 0, 0, 0)
	d = e.Expect("dlq", "p1")[0]
	e.wantDeaths(d.Headers, dsDeath{queue: "src", reason: "maxlen", exchange: "", count: 1, keys: []string{"src"}})
	e.wantCounters(map[string]uint64{"backlogged": 1, "dead_lettered.maxlen": 1}, "cycles")
	if e.b.Broker.Stats().Cycles == 0 {
		e.t.Fatal("cycle not counted")
	}
}

func dsRoutingKeyCycleWithReject(e *dsEnv) {
	e.queue("src", amqp091.Table{"x-dead-letter-exchange": ""})
	e.PublishBodies("src", "p")
	for range 2 {
		e.nack(e.Expect("src", "p")[0], false, false)
		e.waitFor("src", 1, 1, 0)
	}
	e.Expect("src", "p")
	e.wantCounters(map[string]uint64{"dead_lettered.rejected": 2})
}

func dsRoutingKeyCycleTTL(e *dsEnv) {
	e.queue("src", amqp091.Table{"x-message-ttl": int64(1), "x-dead-letter-exchange": ""})
	e.PublishBodies("src", "p1", "p2")
	if !e.g.atLeastOnce {
		e.wantCounters(map[string]uint64{"discarded.expired": 2, "dropped.cycle": 2, "cycles": 2})
		e.waitFor("src", 0, 0, 0)
		e.WantEmpty("src")
		return
	}
	e.waitFor("src", 2, 0, 0)
	e.WantEmpty("src")
	e.Declare("dlq", nil, brokertest.Durable)
	e.policy(broker.Policy{Name: "dlrk", Pattern: "^src$", Definition: map[string]any{"dead-letter-routing-key": "dlq"}})
	e.waitFor("src", 0, 0, 0)
	for _, d := range e.Expect("dlq", "p1", "p2") {
		e.wantDeaths(d.Headers, dsDeath{queue: "src", reason: "expired", exchange: "", count: 1, keys: []string{"src"}})
	}
	e.wantCounters(map[string]uint64{"backlogged": 2, "dead_lettered.expired": 2}, "cycles")
}

// dsHeadersCycle: a self-loop by rejection counts up in one entry whose
// first-death fields (time included) stay.
func dsHeadersCycle(e *dsEnv) {
	e.queue("src", amqp091.Table{"x-dead-letter-exchange": ""})
	e.PublishBodies("src", "p")
	e.nack(e.Expect("src", "p")[0], false, false)
	d := e.Expect("src", "p")[0]
	t1 := e.wantDeaths(d.Headers, dsDeath{queue: "src", reason: "rejected", exchange: "", count: 1, keys: []string{"src"}})
	e.nack(d, false, false)
	d = e.Expect("src", "p")[0]
	t2 := e.wantDeaths(d.Headers, dsDeath{queue: "src", reason: "rejected", exchange: "", count: 2, keys: []string{"src"}})
	if !t1[0].Equal(t2[0]) {
		e.t.Fatalf("time changed from %v to %v on the second death", t1[0], t2[0])
	}
}

// dsCycles returns the attributes of the cycle warnings logged.
func dsCycles(log *brokertest.Log) []map[string]string {
	var out []map[string]string
	for _, ln := range log.Lines() {
		if ln.Level == slog.LevelWarn && strings.HasPrefix(ln.Msg, "dead-letter cycle") {
			out = append(out, ln.Map())
		}
	}
	return out
}

// TestDLXCycleDetection: a cycle without a rejection drops the message for
// the target that closes it, counts it and logs once per pair of queues;
// other targets still get it (B27).
func TestDLXCycleDetection(t *testing.T) {
	h := brokertest.NewLog(slog.LevelDebug)
	e := dsStart(t, dsGroups[0], brokertest.Config{Broker: broker.Options{Logger: slog.New(h)}})
	e.queue("loop", amqp091.Table{"x-message-ttl": int64(5), "x-dead-letter-exchange": ""})
	e.PublishBodies("loop", "p1", "p2", "p3", "p4", "p5")
	e.wantCounters(map[string]uint64{"discarded.expired": 5, "dropped.cycle": 5, "cycles": 5})
	e.waitFor("loop", 0, 0, 0)
	want := []map[string]string{{"vhost": "/", "from": "loop", "to": "loop", "reason": "expired"}}
	if got := dsCycles(h); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("cycle log lines %v, want %v", got, want)
	}

	// A fanout DLX back to the queue and to a DLQ: the DLQ still gets it.
	e.DeclareExchange("fan", "fanout", nil, brokertest.Durable)
	e.queue("loop2", amqp091.Table{"x-message-ttl": int64(5), "x-dead-letter-exchange": "fan"})
	e.Declare("dlq", nil, brokertest.Durable)
	e.Bind("loop2", "", "fan", nil)
	e.Bind("dlq", "", "fan", nil)
	e.PublishBodies("loop2", "q1", "q2")
	e.waitFor("dlq", 2, 2, 0)
	e.waitFor("loop2", 0, 0, 0)
	for _, d := range e.Expect("dlq", "q1", "q2") {
		dsWantRoute(t, d, "fan", "loop2")
		e.wantDeaths(d.Headers, dsDeath{queue: "loop2", reason: "expired", exchange: "", count: 1, keys: []string{"loop2"}})
	}
	e.wantCounters(map[string]uint64{"discarded.expired": 5, "dropped.cycle": 5, "cycles": 7, "dead_lettered.expired": 2})
	want = append(want, map[string]string{"vhost": "/", "from": "loop2", "to": "loop2", "reason": "expired"})
	if got := dsCycles(h); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("cycle log lines %v, want %v", got, want)
	}
}
