// Tests of policies: matching, precedence and the keys they set.

package broker_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
)

// Tests of policies (SPEC §6 first bullet, reference §2 policy table and
// §3 P1–P6), set through the broker's internal API and observed through
// amqp091-go. Helpers (tl*) are in ttl_helpers_test.go; the TTL, expires,
// length and delivery-limit keys are also covered by their own tests in
// ttl_*_test.go and limits_test.go.

func tlPolicyOf(t testing.TB, b *brokertest.Instance, q string) string {
	t.Helper()
	return tlQueueStats(t, b, q).Policy
}

func tlWantPolicy(t testing.TB, b *brokertest.Instance, q, want string) {
	t.Helper()
	if got := tlPolicyOf(t, b, q); got != want {
		t.Fatalf("queue %q: policy %q, want %q", q, got, want)
	}
}

// P1, P2: the pattern is an unanchored regex; apply-to selects queue
// types or exchanges; the highest priority wins; a policy applies to
// queues declared before and after it.
func TestPolicyMatching(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t)
	ch.Declare("before-xordy", nil)
	set := func(p broker.Policy) { t.Helper(); tlSetPolicy(t, b, p) }
	set(broker.Policy{Name: "unanchored", Pattern: "ord", Definition: map[string]any{"max-length": 100}})
	set(broker.Policy{Name: "classic-only", Pattern: "^typed", ApplyTo: "classic_queues", Definition: map[string]any{"max-length": 100}})
	set(broker.Policy{Name: "quorum-only", Pattern: "^typed", ApplyTo: "quorum_queues", Definition: map[string]any{"max-length": 100}})
	set(broker.Policy{Name: "exchanges-only", Pattern: "^exq", ApplyTo: "exchanges", Definition: map[string]any{"max-length": 1}})
	set(broker.Policy{Name: "queues", Pattern: "^both", ApplyTo: "queues", Definition: map[string]any{"max-length": 100}})

	ch.Declare("xordy", nil)
	ch.Declare("zzz", nil)
	ch.Declare("typed-c", nil)
	ch.Declare("typed-q", nil, brokertest.Type("quorum"))
	ch.Declare("exq", nil)
	ch.Declare("both-c", nil)
	ch.Declare("both-q", nil, brokertest.Type("quorum"))
	for q, want := range map[string]string{
		"before-xordy": "unanchored", // existing queue, at once
		"xordy":        "unanchored",
		"zzz":          "",
		"typed-c":      "classic-only",
		"typed-q":      "quorum-only",
		"exq":          "",
		"both-c":       "queues",
		"both-q":       "queues",
	} {
		tlWantPolicy(t, b, q, want)
	}
	ch.PublishBodies("exq", "1", "2")
	tlWantReady(t, b, "exq", 2) // the exchanges policy's max-length does not apply

	// Priority: the highest wins, negatives allowed; raising another
	// policy's priority switches the queue at once (limits re-checked).
	set(broker.Policy{Name: "p-low", Pattern: "^prio", Priority: 1, Definition: map[string]any{"max-length": 1}})
	set(broker.Policy{Name: "p-high", Pattern: "^prio", Priority: 5, Definition: map[string]any{"max-length": 3}})
	set(broker.Policy{Name: "p-neg", Pattern: "^prio", Priority: -5, Definition: map[string]any{"max-length": 0}})
	ch.Declare("prio-q", nil)
	tlWantPolicy(t, b, "prio-q", "p-high")
	ch.PublishBodies("prio-q", "1", "2", "3", "4", "5")
	tlWantReady(t, b, "prio-q", 3)
	set(broker.Policy{Name: "p-low", Pattern: "^prio", Priority: 10, Definition: map[string]any{"max-length": 1}})
	tlWantPolicy(t, b, "prio-q", "p-low")
	tlWantReady(t, b, "prio-q", 1)
	tlClearPolicy(t, b, "p-low")
	tlWantPolicy(t, b, "prio-q", "p-high")
	tlClearPolicy(t, b, "p-high")
	tlWantPolicy(t, b, "prio-q", "p-neg")
	tlWantReady(t, b, "prio-q", 0)

	// A key that configures exchanges (alternate-exchange) does not stop
	// a policy from applying to queues: RabbitMQ 3.10 applies it and
	// ignores the key there (verified on the live node).
	set(broker.Policy{Name: "mixed", Pattern: "^mix", Priority: 10, Definition: map[string]any{"alternate-exchange": "ae", "max-length": 1}})
	set(broker.Policy{Name: "plain", Pattern: "^mix", Definition: map[string]any{"max-length": 2}})
	ch.Declare("mix-q", nil)
	tlWantPolicy(t, b, "mix-q", "mixed")
	ch.PublishBodies("mix-q", "1", "2", "3")
	tlWantReady(t, b, "mix-q", 1)

	// A key the queue's type does not support makes the whole policy not
	// apply to it (P1): the next one does. max-in-memory-length is
	// quorum-only, ha-mode classic-only.
	set(broker.Policy{Name: "mem", Pattern: "^typeonly", Priority: 10, Definition: map[string]any{"max-in-memory-length": 5, "max-length": 1}})
	set(broker.Policy{Name: "ha", Pattern: "^typeonly", Priority: 5, Definition: map[string]any{"ha-mode": "all", "max-length": 3}})
	set(broker.Policy{Name: "any", Pattern: "^typeonly", Definition: map[string]any{"max-length": 2}})
	ch.Declare("typeonly-c", nil)
	ch.Declare("typeonly-q", nil, brokertest.Type("quorum"))
	tlWantPolicy(t, b, "typeonly-c", "ha")
	tlWantPolicy(t, b, "typeonly-q", "mem")
	tlClearPolicy(t, b, "mem")
	tlClearPolicy(t, b, "ha")
	tlWantPolicy(t, b, "typeonly-c", "any")
	tlWantPolicy(t, b, "typeonly-q", "any")

	// Policies() lists them by name with apply-to defaulted to all.
	var names []string
	for _, p := range b.Broker.Policies("/") {
		names = append(names, p.Name)
		if p.VHost != "/" {
			t.Errorf("policy %s listed in vhost %q", p.Name, p.VHost)
		}
		if p.Name == "unanchored" && (p.ApplyTo != "all" || p.Pattern != "ord") {
			t.Errorf("policy unanchored listed as %+v", p)
		}
	}
	want := []string{"any", "classic-only", "exchanges-only", "mixed", "p-neg", "plain", "queues", "quorum-only", "unanchored"}
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("Policies() = %q, want %q", names, want)
	}
}

// Policy alternate-exchange applies to exchanges, declared before or after
// the policy; the exchange's argument wins; clearing the policy removes it;
// an apply-to queues policy doesn't touch exchanges.
func TestPolicyAlternateExchange(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t)
	for _, n := range []string{"ae", "ae2"} {
		ch.DeclareExchange(n, "fanout", nil)
		ch.Declare(n+"-q", nil)
		ch.Bind(n+"-q", "", n, nil)
	}
	ch.DeclareExchange("src-before", "direct", nil)
	ch.DeclareExchange("src-arg", "direct", amqp091.Table{"alternate-exchange": "ae2"})
	ch.DeclareExchange("srcq", "direct", nil)
	tlSetPolicy(t, b, broker.Policy{Name: "ae", Pattern: "^src-", ApplyTo: "exchanges", Definition: map[string]any{"alternate-exchange": "ae"}})
	tlSetPolicy(t, b, broker.Policy{Name: "ae-queues", Pattern: "^srcq$", ApplyTo: "queues", Definition: map[string]any{"alternate-exchange": "ae"}})
	ch.DeclareExchange("src-after", "direct", nil)

	pub := func(x string) { t.Helper(); ch.PublishAck(x, "nowhere", amqp091.Publishing{Body: []byte(x)}) }
	pub("src-before")
	pub("src-after")
	pub("src-arg")
	pub("srcq")
	ch.WantDrain("ae-q", "src-before", "src-after")
	ch.WantDrain("ae2-q", "src-arg")
	if n := b.Broker.Stats().Unroutable; n != 1 {
		t.Fatalf("unroutable %d, want 1 (srcq)", n)
	}

	tlClearPolicy(t, b, "ae")
	pub("src-before")
	pub("src-arg")
	ch.WantDrain("ae-q")
	ch.WantDrain("ae2-q", "src-arg")
}

// P6, SPEC §6: a DLX given only by policy applies to messages already
// unacked; changing it switches the DLX at once; clearing it disables it.
func TestPolicyDeadLetterExchangeSwitch(t *testing.T) {
	t.Parallel()
	for _, qtype := range tlQueueTypes {
		t.Run(qtype, func(t *testing.T) {
			t.Parallel()
			b := brokertest.Start(t, brokertest.Config{})
			ch := b.Session(t)
			for _, n := range []string{"dlx-a", "dlx-b"} {
				ch.DeclareExchange(n, "fanout", nil)
				ch.Declare(n+"-q", nil)
				ch.Bind(n+"-q", "", n, nil)
			}
			ch.Declare("p6", nil, brokertest.Type(qtype))
			ch.PublishBodies("p6", "M1", "M2", "M3", "M4")
			ds := make([]amqp091.Delivery, 4)
			for i := range ds {
				ds[i] = ch.Get("p6")
			}
			nack := func(i int) {
				t.Helper()
				if err := ds[i].Nack(false, false); err != nil {
					t.Fatal(err)
				}
				ch.Sync()
			}
			nack(0) // no DLX: dropped
			if n := b.Broker.Stats().Discarded["rejected"]; n != 1 {
				t.Fatalf("discarded rejected %d, want 1", n)
			}
			tlSetPolicy(t, b, broker.Policy{Name: "dlx", Pattern: "^p6$", Definition: map[string]any{"dead-letter-exchange": "dlx-a"}})
			nack(1)
			tlSetPolicy(t, b, broker.Policy{Name: "dlx", Pattern: "^p6$", Definition: map[string]any{"dead-letter-exchange": "dlx-b"}})
			nack(2)
			tlClearPolicy(t, b, "dlx")
			nack(3)
			tlWantDeadLetters(t, b, ch, "dlx-a-q", "p6", "rejected", "M2")
			tlWantDeadLetters(t, b, ch, "dlx-b-q", "p6", "rejected", "M3")
			if n := b.Broker.Stats().Discarded["rejected"]; n != 2 {
				t.Fatalf("discarded rejected %d, want 2", n)
			}
			ch.WantDrain("dlx-a-q") // nothing else reached either
			ch.WantDrain("dlx-b-q")
		})
	}
}

// P5: overflow — a classic queue's argument wins, a quorum queue's policy.
func TestPolicyPrecedenceOverflow(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t)
	tlSetPolicy(t, b, broker.Policy{Name: "drop", Pattern: "^ov-(c1|q1|q3)$", Definition: map[string]any{"overflow": "drop-head"}})
	tlSetPolicy(t, b, broker.Policy{Name: "reject", Pattern: "^ov-(c2|c3|q2)$", Definition: map[string]any{"overflow": "reject-publish"}})
	for _, tc := range []struct {
		q, qtype, arg string
		acks          string
		left          []string
	}{
		{"ov-c1", "classic", "reject-publish", "+-", []string{"P1"}}, // argument wins
		{"ov-c2", "classic", "drop-head", "++", []string{"P2"}},      // argument wins
		{"ov-c3", "classic", "", "+-", []string{"P1"}},               // policy alone
		{"ov-q1", "quorum", "reject-publish", "++", []string{"P2"}},  // policy wins
		{"ov-q2", "quorum", "drop-head", "+-", []string{"P1"}},       // policy wins
		{"ov-q3", "quorum", "reject-publish-dlx", "++", []string{"P2"}},
	} {
		args := amqp091.Table{"x-max-length": int32(1)}
		if tc.arg != "" {
			args["x-overflow"] = tc.arg
		}
		ch.Declare(tc.q, args, brokertest.Type(tc.qtype))
		if acks := tlPubAcks(t, ch, "", tc.q, "P1", "P2"); acks != tc.acks {
			t.Errorf("%s (x-overflow %q): confirms %s, want %s", tc.q, tc.arg, acks, tc.acks)
		}
		ch.WantDrain(tc.q, tc.left...)
	}
}

// P5: dead-letter-exchange and dead-letter-routing-key — the argument
// wins, key by key (an argument DLX with a policy DLRK gives both).
func TestPolicyPrecedenceDeadLetter(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t)
	ch.DeclareExchange("dlx-d", "direct", nil)
	for _, k := range []string{"k-arg", "k-pol", "orig"} {
		ch.Declare("dlq-"+k, nil)
		ch.Bind("dlq-"+k, k, "dlx-d", nil)
	}
	ch.DeclareExchange("dlx-pol", "fanout", nil)
	ch.Declare("dlq-pol-x", nil)
	ch.Bind("dlq-pol-x", "", "dlx-pol", nil)
	ch.DeclareExchange("in", "direct", nil)

	for _, tc := range []struct {
		q    string
		args amqp091.Table
		pol  map[string]any
		want string // dead-letter queue that gets the message
	}{
		{"dl-arg-x", amqp091.Table{"x-dead-letter-exchange": "dlx-d"},
			map[string]any{"dead-letter-exchange": "dlx-pol"}, "dlq-orig"},
		{"dl-arg-k", amqp091.Table{"x-dead-letter-exchange": "dlx-d", "x-dead-letter-routing-key": "k-arg"},
			map[string]any{"dead-letter-routing-key": "k-pol"}, "dlq-k-arg"},
		{"dl-mixed", amqp091.Table{"x-dead-letter-exchange": "dlx-d"},
			map[string]any{"dead-letter-exchange": "dlx-pol", "dead-letter-routing-key": "k-pol"}, "dlq-k-pol"},
		{"dl-pol", nil,
			map[string]any{"dead-letter-exchange": "dlx-d", "dead-letter-routing-key": "k-pol"}, "dlq-k-pol"},
		{"dl-pol-x", nil,
			map[string]any{"dead-letter-exchange": "dlx-pol"}, "dlq-pol-x"},
	} {
		t.Run(tc.q, func(t *testing.T) {
			ch := ch.With(t)
			tlSetPolicy(t, b, broker.Policy{Name: tc.q, Pattern: "^" + tc.q + "$", Definition: tc.pol})
			ch.Declare(tc.q, tc.args)
			ch.Bind(tc.q, "orig", "in", nil)
			ch.PublishAck("in", "orig", amqp091.Publishing{Body: []byte(tc.q)})
			if err := ch.Get(tc.q).Reject(false); err != nil {
				t.Fatal(err)
			}
			tlEventuallyReady(t, b, tc.want, 1)
			d := ch.Get(tc.want)
			if string(d.Body) != tc.q {
				t.Fatalf("%s got %q, want %q", tc.want, d.Body, tc.q)
			}
			tlWantDeath(t, d, tc.q, "rejected")
			for _, q := range []string{"dlq-k-arg", "dlq-k-pol", "dlq-orig", "dlq-pol-x"} {
				tlWantReady(t, b, q, 0)
			}
		})
	}
}

// P5: dead-letter-strategy — the argument wins (accepted on classic queues
// too, SPEC §2 beyond). At-least-once keeps an unroutable dead letter in
// the backlog; at-most-once drops it.
func TestPolicyPrecedenceStrategy(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t)
	for _, tc := range []struct {
		q, qtype, arg, pol string
		backlog            int
	}{
		{"st-c-arg-alo", "classic", "at-least-once", "at-most-once", 1},
		{"st-c-arg-amo", "classic", "at-most-once", "at-least-once", 0},
		{"st-q-arg-alo", "quorum", "at-least-once", "at-most-once", 1},
		{"st-q-arg-amo", "quorum", "at-most-once", "at-least-once", 0},
		{"st-q-pol-only", "quorum", "", "at-least-once", 1},
	} {
		tlSetPolicy(t, b, broker.Policy{Name: tc.q, Pattern: "^" + tc.q + "$", Definition: map[string]any{"dead-letter-strategy": tc.pol}})
		args := amqp091.Table{"x-dead-letter-exchange": "missing", "x-overflow": "reject-publish"}
		if tc.arg != "" {
			args["x-dead-letter-strategy"] = tc.arg
		}
		ch.Declare(tc.q, args, brokertest.Type(tc.qtype))
		ch.PublishBodies(tc.q, "m")
		if err := ch.Get(tc.q).Reject(false); err != nil {
			t.Fatal(err)
		}
		ch.Sync()
		if got := tlQueueStats(t, b, tc.q).DeadLetterBacklog; got != tc.backlog {
			t.Errorf("%s (argument %q, policy %q): backlog %d, want %d", tc.q, tc.arg, tc.pol, got, tc.backlog)
		}
	}
}

// Reference §2: invalid definitions are refused when set, with
// *broker.PolicyError and RabbitMQ's text (rabbit_policies validators,
// values printed as Erlang terms); nothing changes.
func TestPolicyValidation(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t)
	ch.Declare("v", nil)
	tlSetPolicy(t, b, broker.Policy{Name: "v", Pattern: "^v$", Definition: map[string]any{"max-length": 5}})
	for _, tc := range []struct {
		def  map[string]any
		text string
	}{
		{nil, "no policy provided"},
		{map[string]any{}, "no policy provided"},
		{map[string]any{"foo": "bar"}, `[{<<"foo">>,<<"bar">>}] are not recognised policy settings`},
		{map[string]any{"foo": 1, "max-length": 1}, `[{<<"foo">>,1}] are not recognised policy settings`},
		{map[string]any{"b": 1, "a": "x"}, `[{<<"a">>,<<"x">>},{<<"b">>,1}] are not recognised policy settings`},
		{map[string]any{"foo": 1, "max-length": -1}, "-1 is not a valid maximum length"}, // values first
		{map[string]any{"queue-type": "quorum"}, `[{<<"queue-type">>,<<"quorum">>}] are not recognised policy settings`},
		{map[string]any{"message-ttl": -1}, "-1 is not a valid message TTL"},
		{map[string]any{"message-ttl": "10"}, `<<"10">> is not a valid message TTL`},
		{map[string]any{"message-ttl": 1.5}, "1.5 is not a valid message TTL"},
		{map[string]any{"expires": 0}, "0 is not a valid queue expiry"},
		{map[string]any{"max-length": -1}, "-1 is not a valid maximum length"},
		{map[string]any{"max-length-bytes": -1}, "-1 is not a valid maximum length in bytes"},
		{map[string]any{"overflow": "drop-tail"}, `<<"drop-tail">> is not a valid overflow value`},
		{map[string]any{"overflow": 1}, "1 is not a valid overflow value"},
		{map[string]any{"dead-letter-exchange": 1}, "1 is not a valid dead letter exchange name"},
		{map[string]any{"dead-letter-routing-key": true}, "true is not a valid dead letter routing key"},
		{map[string]any{"dead-letter-strategy": "sometimes"}, `<<"sometimes">> is not a valid dead letter strategy`},
		{map[string]any{"delivery-limit": 0.1}, "0.1 is not a valid delivery limit"},
		{map[string]any{"delivery-limit": "5"}, `<<"5">> is not a valid delivery limit`},
		{map[string]any{"alternate-exchange": 1}, "1 is not a valid alternate exchange name"},
		{map[string]any{"consumer-timeout": -1}, "-1 is not a valid consumer timeout"},
		// Values as RabbitMQ prints the decoded JSON (texts from the live
		// RabbitMQ 3.10.8 HTTP API, as every row below).
		{map[string]any{"message-ttl": json.Number("1.0")}, "1.0 is not a valid message TTL"},
		{map[string]any{"max-length": json.Number("1e3")}, "1.0e3 is not a valid maximum length"},
		{map[string]any{"message-ttl": json.Number("1.0e20")}, "1.0e20 is not a valid message TTL"},
		{map[string]any{"max-length": nil}, "null is not a valid maximum length"},
		{map[string]any{"max-length": true}, "true is not a valid maximum length"},
		{map[string]any{"max-length": []any{1}}, "[1] is not a valid maximum length"},
		{map[string]any{"max-length": map[string]any{"a": 1}}, `#{<<"a">> => 1} is not a valid maximum length`},
		{map[string]any{"message-ttl": `a"b`}, `<<"a\"b">> is not a valid message TTL`},
		// Keys valid in RabbitMQ 3.10 that brokerd accepts and ignores
		// (policykeys.go), validated as RabbitMQ validates them.
		{map[string]any{"queue-version": 3}, "3 is not a valid queue-version value"},
		{map[string]any{"queue-version": "2"}, `<<"2">> is not a valid queue-version value`},
		{map[string]any{"queue-mode": "x"}, `<<"x">> is not a valid queue-mode value`},
		{map[string]any{"queue-mode": 5}, "5 is not a valid queue-mode value"},
		{map[string]any{"max-in-memory-length": -1}, "-1 is not a valid maximum memory in bytes"},
		{map[string]any{"max-in-memory-bytes": "a"}, `<<"a">> is not a valid maximum memory in bytes`},
		{map[string]any{"queue-leader-locator": "x"}, `<<"x">> is not a valid queue leader locator value`},
		{map[string]any{"initial-cluster-size": -1}, "-1 is not a valid cluster size"},
		{map[string]any{"stream-max-segment-size-bytes": 3000000001}, "3000000001 is not a valid segment size"},
		{map[string]any{"stream-max-segment-size-bytes": -1}, "-1 is not a valid segment size"},
		{map[string]any{"max-age": "0D"}, `<<"0D">> is not a valid max age`},
		{map[string]any{"max-age": "1x"}, `<<"1x">> is not a valid max age`},
		{map[string]any{"max-age": "10"}, `<<"10">> is not a valid max age`},
		{map[string]any{"max-age": "abc"}, `<<"abc">> is not a valid max age`}, // RabbitMQ: 500
		{map[string]any{"queue-master-locator": "x"}, `<<"x">> invalid queue-master-locator value`},
		{map[string]any{"queue-master-locator": 5}, "5 invalid queue-master-locator value"},
		{map[string]any{"ha-mode": "x"}, `<<"x">> is not a valid ha-mode value`},
		{map[string]any{"ha-mode": 5}, "5 is not a valid ha-mode value"}, // RabbitMQ: 500
		{map[string]any{"ha-mode": "all", "ha-params": 1}, `ha-mode="all" does not take parameters`},
		{map[string]any{"ha-mode": "exactly"}, `ha-mode="exactly" takes an integer, none given`},
		{map[string]any{"ha-mode": "exactly", "ha-params": 0}, `ha-mode="exactly" takes an integer, 0 given`},
		{map[string]any{"ha-mode": "exactly", "ha-params": "2"}, `ha-mode="exactly" takes an integer, <<"2">> given`},
		{map[string]any{"ha-mode": "nodes"}, `ha-mode="nodes" takes a list, none given`},
		{map[string]any{"ha-mode": "nodes", "ha-params": "a"}, `ha-mode="nodes" takes a list, <<"a">> given`},
		{map[string]any{"ha-mode": "nodes", "ha-params": []any{}}, `ha-mode="nodes" list must be non-empty`},
		{map[string]any{"ha-mode": "nodes", "ha-params": []any{"a", 1}}, `ha-mode="nodes" takes a list of strings, [1] was not a string`},
		{map[string]any{"ha-mode": "nodes", "ha-params": []any{65, 66}}, `ha-mode="nodes" takes a list of strings, "AB" was not a string`},
		{map[string]any{"ha-sync-mode": "automatic"}, "ha-mode must be specified to specify ha-params, ha-sync-mode or ha-promote-on-shutdown"},
		{map[string]any{"ha-promote-on-shutdown": "always"}, "ha-mode must be specified to specify ha-params, ha-sync-mode or ha-promote-on-shutdown"},
		{map[string]any{"ha-mode": "all", "ha-sync-mode": "x"}, `ha-sync-mode must be "manual" or "automatic", got <<"x">>`},
		{map[string]any{"ha-mode": "all", "ha-sync-batch-size": 0}, "ha-sync-batch-size takes an integer greater than 0, 0 given"},
		{map[string]any{"ha-mode": "all", "ha-sync-batch-size": "a"}, `ha-sync-batch-size takes an integer greater than 0, <<"a">> given`},
		{map[string]any{"ha-mode": "all", "ha-promote-on-shutdown": "x"}, `ha-promote-on-shutdown must be "always" or "when-synced", got <<"x">>`},
		{map[string]any{"ha-mode": "all", "ha-promote-on-failure": "x"}, `ha-promote-on-failure must be "always" or "when-synced", got <<"x">>`},
		// RabbitMQ's validator modules run in order: the locator's, then
		// rabbit_policies', then mirroring's.
		{map[string]any{"queue-master-locator": "x", "queue-mode": "x"}, `<<"x">> invalid queue-master-locator value`},
		{map[string]any{"ha-mode": "x", "queue-master-locator": "x"}, `<<"x">> invalid queue-master-locator value`},
		{map[string]any{"ha-mode": "x", "max-length": -1}, "-1 is not a valid maximum length"},
		{map[string]any{"max-length": -1, "queue-mode": "x"}, "-1 is not a valid maximum length"},
		{map[string]any{"queue-master-locator": "x", "foo": 1}, `<<"x">> invalid queue-master-locator value`},
		// Not keys in RabbitMQ 3.10 (or plugin keys).
		{map[string]any{"max-priority": 5}, `[{<<"max-priority">>,5}] are not recognised policy settings`},
		{map[string]any{"single-active-consumer": true}, `[{<<"single-active-consumer">>,true}] are not recognised policy settings`},
		{map[string]any{"max-segment-size": 5}, `[{<<"max-segment-size">>,5}] are not recognised policy settings`},
		{map[string]any{"federation-upstream-set": "all"}, `[{<<"federation-upstream-set">>,<<"all">>}] are not recognised policy settings`},
	} {
		err := b.Broker.SetPolicy("/", broker.Policy{Name: "v", Pattern: "^v$", Definition: tc.def})
		var pe *broker.PolicyError
		if !errors.As(err, &pe) {
			t.Errorf("definition %v: error %v (%T), want *broker.PolicyError", tc.def, err, err)
			continue
		}
		if pe.Error() != tc.text {
			t.Errorf("definition %v: %q, want %q", tc.def, pe.Error(), tc.text)
		}
	}
	// Nothing changed: the valid policy is still in force.
	ps := b.Broker.Policies("/")
	if len(ps) != 1 || fmt.Sprint(ps[0].Definition) != "map[max-length:5]" {
		t.Fatalf("policies after refused sets: %+v", ps)
	}
	tlWantPolicy(t, b, "v", "v")

	// Valid edge values.
	for _, def := range []map[string]any{
		{"message-ttl": 0},
		{"message-ttl": 315360000001}, // no 10-year cap for policies
		{"expires": 1},
		{"max-length": 0},
		{"max-length-bytes": 0},
		{"delivery-limit": -5},
		{"delivery-limit": 0},
		{"dead-letter-routing-key": "k"}, // needs no DLX in the policy
		{"dead-letter-exchange": ""},
		{"overflow": "reject-publish-dlx"},
		{"dead-letter-strategy": "at-least-once"},
		{"max-length": float64(3)},       // a JSON number
		{"max-length": json.Number("3")}, // a JSON number decoded with UseNumber
		// Accepted and ignored (texts and values checked on the live
		// RabbitMQ 3.10.8).
		{"queue-version": 1},
		{"queue-version": 2},
		{"queue-mode": "lazy"},
		{"queue-mode": "default"},
		{"max-in-memory-length": 5, "max-in-memory-bytes": 0},
		{"queue-leader-locator": "balanced"},
		{"queue-leader-locator": "client-local"},
		{"queue-master-locator": "min-masters"},
		{"queue-master-locator": "client-local"},
		{"queue-master-locator": "random"},
		{"ha-mode": "all"},
		{"ha-mode": "exactly", "ha-params": 2},
		{"ha-mode": "nodes", "ha-params": []any{"rabbit@a"}, "ha-sync-mode": "automatic", "ha-sync-batch-size": 5,
			"ha-promote-on-shutdown": "always", "ha-promote-on-failure": "when-synced"},
		{"max-age": "1D"},
		{"max-age": "10s"},
		{"stream-max-segment-size-bytes": 3000000000},
		{"initial-cluster-size": 3},
	} {
		if err := b.Broker.SetPolicy("/", broker.Policy{Name: "ok", Pattern: "^nothing$", Definition: def}); err != nil {
			t.Errorf("definition %v refused: %v", def, err)
		}
	}
	if err := b.Broker.ClearPolicy("/", "absent"); err == nil {
		t.Error("clearing an absent policy succeeded")
	}
}

// SPEC §6: policies are durable; after a restart they are listed and
// applied to the recovered queues.
func TestPolicySurvivesRestart(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t)
	tlSetPolicy(t, b, broker.Policy{Name: "lim", Pattern: "^dur", ApplyTo: "queues", Priority: 7,
		Definition: map[string]any{"max-length": 1, "dead-letter-exchange": "", "dead-letter-routing-key": "dlq"}})
	ch.Declare("dlq", nil, brokertest.Durable)
	ch.Declare("dur-q", nil, brokertest.Durable)
	b.Restart()
	ps := b.Broker.Policies("/")
	if len(ps) != 1 {
		t.Fatalf("policies after restart: %+v", ps)
	}
	p := ps[0]
	if p.Name != "lim" || p.Pattern != "^dur" || p.ApplyTo != "queues" || p.Priority != 7 ||
		fmt.Sprint(p.Definition) != "map[dead-letter-exchange: dead-letter-routing-key:dlq max-length:1]" {
		t.Fatalf("policy after restart: %+v", p)
	}
	tlWantPolicy(t, b, "dur-q", "lim")
	ch = b.Session(t)
	ch.PublishBodies("dur-q", "P1", "P2")
	ch.WantDrain("dur-q", "P2")
	tlWantDeadLetters(t, b, ch, "dlq", "dur-q", "maxlen", "P1")
}

// applyPolicies computes every queue's new config under v.mu, releases
// it, then installs them one queue at a time. Two policy changes racing
// install in either order per queue: a queue can keep the config computed
// from the older policy set (here: policy "b", priority 2, is in force but
// a queue still runs policy "a").
//
// Review finding R5 of an adversarial review of the broker's
// concurrency and store ordering; it failed before the fix.
func TestPolicyConcurrentChangesNoLostUpdate(t *testing.T) {
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t)
	const n = 300
	for i := range n {
		ch.Declare(fmt.Sprintf("q%d", i), nil)
	}
	pol := func(name string, prio int) broker.Policy {
		return broker.Policy{Name: name, Pattern: "^q", ApplyTo: "queues", Priority: prio,
			Definition: map[string]any{"max-length": 1000 + prio}}
	}
	for round := range 30 {
		_ = b.Broker.ClearPolicy("/", "a")
		_ = b.Broker.ClearPolicy("/", "b")
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); _ = b.Broker.SetPolicy("/", pol("a", 1)) }()
		go func() { defer wg.Done(); _ = b.Broker.SetPolicy("/", pol("b", 2)) }()
		wg.Wait()
		for i := range n {
			q := fmt.Sprintf("q%d", i)
			if st := tlQueueStats(t, b, q); st.Policy != "b" {
				t.Fatalf("round %d: queue %s runs policy %q while %q (higher priority) is in force", round, q, st.Policy, "b")
			}
		}
	}
}
