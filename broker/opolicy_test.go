// Tests of operator policies and their merge with user policies.

package broker_test

// Tests of operator policies (reference §2 last paragraph, §3 P2, P4, P5):
// ports of RabbitMQ's policy_SUITE operator cases, the merge of a user
// policy with an operator policy, priorities, clearing, durability and
// validation. Set through the broker's API, observed over amqp091-go;
// the tl* helpers are in ttl_helpers_test.go.

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
)

func opSet(t testing.TB, b *brokertest.Instance, p broker.Policy) {
	t.Helper()
	if err := b.Broker.SetOperatorPolicy("/", p); err != nil {
		t.Fatalf("set operator policy %q: %v", p.Name, err)
	}
}

func opClear(t testing.TB, b *brokertest.Instance, name string) {
	t.Helper()
	if err := b.Broker.ClearOperatorPolicy("/", name); err != nil {
		t.Fatalf("clear operator policy %q: %v", name, err)
	}
}

// opWant checks the policy, the operator policy and the effective policy
// definition a queue shows (numbers compared by value, whatever their Go
// type).
func opWant(t testing.TB, b *brokertest.Instance, q, policy, opPolicy string, eff map[string]any) {
	t.Helper()
	st := tlQueueStats(t, b, q)
	if st.Policy != policy || st.OperatorPolicy != opPolicy {
		t.Fatalf("queue %q: policy %q, operator policy %q; want %q, %q", q, st.Policy, st.OperatorPolicy, policy, opPolicy)
	}
	if got, want := fmt.Sprint(st.EffectivePolicyDefinition), fmt.Sprint(eff); got != want || (eff == nil) != (st.EffectivePolicyDefinition == nil) {
		t.Fatalf("queue %q: effective policy definition %v, want %v", q, st.EffectivePolicyDefinition, eff)
	}
}

// policy_SUITE:operator_policy_ttl: the operator policy's message TTL of
// 1 ms beats the user policy's 100000 ms (the lower wins): the 50
// messages are gone once 1 ms has passed.
func TestOperatorPolicyTTL(t *testing.T) {
	t.Parallel()
	for _, qtype := range tlQueueTypes {
		t.Run(qtype, func(t *testing.T) {
			t.Parallel()
			clk := brokertest.NewClock()
			b := brokertest.Start(t, brokertest.Config{Clock: clk})
			ch := b.Session(t)
			const q = "policy_ttl-queue"
			tlSetPolicy(t, b, broker.Policy{Name: "ttl-policy", Pattern: q, Definition: map[string]any{"message-ttl": 100000}})
			opSet(t, b, broker.Policy{Name: "ttl-policy-op", Pattern: q, Definition: map[string]any{"message-ttl": 1}})
			ch.Declare(q, nil, brokertest.Type(qtype), brokertest.Durable)
			opWant(t, b, q, "ttl-policy", "ttl-policy-op", map[string]any{"message-ttl": 1})
			for i := range 50 {
				ch.PublishBodies(q, fmt.Sprint(i))
			}
			clk.Advance(2 * time.Millisecond)
			tlSettleTimers(b)
			ch.WantDrain(q)
			if n := b.Broker.Stats().Discarded["expired"]; n != 50 {
				t.Fatalf("%d expired, want 50", n)
			}
		})
	}
}

// policy_SUITE:operator_retroactive_policy_ttl and
// operator_retroactive_policy_publish_ttl: an operator TTL set on a queue
// that holds messages does not expire them (their deadlines were fixed at
// enqueue, B38); messages published after it do expire. RabbitMQ expires
// only at the head, so its suite still lists 75 messages; brokerd expires
// anywhere (SPEC §3 beyond), so the 25 new ones go and the 50 old stay.
func TestOperatorPolicyRetroactiveTTL(t *testing.T) {
	t.Parallel()
	for _, qtype := range tlQueueTypes {
		t.Run(qtype, func(t *testing.T) {
			t.Parallel()
			clk := brokertest.NewClock()
			b := brokertest.Start(t, brokertest.Config{Clock: clk})
			ch := b.Session(t)
			const q = "policy_ttl-queue"
			ch.Declare(q, nil, brokertest.Type(qtype), brokertest.Durable)
			var old []string
			for i := range 50 {
				old = append(old, fmt.Sprint("old", i))
			}
			ch.PublishBodies(q, old...)
			opSet(t, b, broker.Policy{Name: "ttl-policy-op", Pattern: q, Definition: map[string]any{"message-ttl": 1}})
			opWant(t, b, q, "", "ttl-policy-op", map[string]any{"message-ttl": 1})
			for i := range 25 {
				ch.PublishBodies(q, fmt.Sprint("new", i))
			}
			clk.Advance(50 * time.Millisecond)
			tlSettleTimers(b)
			tlWantReady(t, b, q, 50)
			ch.WantDrain(q, old...)
			if n := b.Broker.Stats().Discarded["expired"]; n != 25 {
				t.Fatalf("%d expired, want 25 (the messages published after the policy)", n)
			}
		})
	}
}

// policy_SUITE:overflow_policies (RabbitMQ 3.13+): the operator policy's
// overflow wins over the user policy's. A classic queue's x-overflow
// argument still wins over both; a quorum queue's loses (P5).
func TestOperatorPolicyOverflow(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t)
	tlSetPolicy(t, b, broker.Policy{Name: "policy", Pattern: "^ov", Definition: map[string]any{"overflow": "drop-head", "max-length": 1}})
	opSet(t, b, broker.Policy{Name: "op_policy", Pattern: "^ov", Definition: map[string]any{"overflow": "reject-publish"}})
	for _, tc := range []struct {
		q, qtype, arg string
		acks          string
		left          []string
	}{
		{"ov-c", "classic", "", "+-", []string{"P1"}},
		{"ov-q", "quorum", "", "+-", []string{"P1"}},
		{"ov-c-arg", "classic", "drop-head", "++", []string{"P2"}}, // argument wins
		{"ov-q-arg", "quorum", "drop-head", "+-", []string{"P1"}},  // policy wins
	} {
		var args amqp091.Table
		if tc.arg != "" {
			args = amqp091.Table{"x-overflow": tc.arg}
		}
		ch.Declare(tc.q, args, brokertest.Type(tc.qtype))
		opWant(t, b, tc.q, "policy", "op_policy", map[string]any{"max-length": 1, "overflow": "reject-publish"})
		if acks := tlPubAcks(t, ch, "", tc.q, "P1", "P2"); acks != tc.acks {
			t.Errorf("%s: confirms %s, want %s", tc.q, acks, tc.acks)
		}
		ch.WantDrain(tc.q, tc.left...)
	}
	// Cleared, the user policy's drop-head is back at once.
	opClear(t, b, "op_policy")
	opWant(t, b, "ov-c", "policy", "", map[string]any{"max-length": 1, "overflow": "drop-head"})
	if acks := tlPubAcks(t, ch, "", "ov-c", "P3", "P4"); acks != "++" {
		t.Fatalf("ov-c after clearing the operator policy: confirms %s, want ++", acks)
	}
	ch.WantDrain("ov-c", "P4")
}

// P4: a user policy and an operator policy on one queue merge key by key
// (the live RabbitMQ 3.10.8 showed this effective definition for these
// two policies); clearing either kind restores at once what remains, and
// re-setting one re-checks the limit at once.
func TestOperatorPolicyMerge(t *testing.T) {
	t.Parallel()
	for _, qtype := range tlQueueTypes {
		t.Run(qtype, func(t *testing.T) {
			t.Parallel()
			b := brokertest.Start(t, brokertest.Config{})
			ch := b.Session(t)
			ch.DeclareExchange("dlx", "fanout", nil)
			ch.Declare("dlq", nil)
			ch.Bind("dlq", "", "dlx", nil)
			user := map[string]any{"max-length": 10, "message-ttl": 1000000, "dead-letter-exchange": "dlx"}
			op := map[string]any{"max-length": 5, "message-ttl": 100000000, "expires": 60000000}
			tlSetPolicy(t, b, broker.Policy{Name: "u", Pattern: "^m$", Definition: user})
			opSet(t, b, broker.Policy{Name: "o", Pattern: "^m$", Definition: op})
			ch.Declare("m", nil, brokertest.Type(qtype))
			opWant(t, b, "m", "u", "o", map[string]any{"dead-letter-exchange": "dlx", "expires": 60000000, "max-length": 5, "message-ttl": 1000000})

			pub := func(from, to int) {
				t.Helper()
				for i := from; i <= to; i++ {
					ch.PublishBodies("m", fmt.Sprint(i))
				}
			}
			pub(1, 7) // the operator's 5, dead-lettering through the user's DLX
			tlWantReady(t, b, "m", 5)
			tlEventuallyReady(t, b, "dlq", 2)

			opClear(t, b, "o")
			opWant(t, b, "m", "u", "", user)
			pub(8, 12) // the user's 10
			tlWantReady(t, b, "m", 10)

			opSet(t, b, broker.Policy{Name: "o", Pattern: "^m$", Definition: op})
			// Re-checked at once; evicting past the page window waits
			// for the store reads it needs.
			tlEventuallyReady(t, b, "m", 5)
			tlEventuallyReady(t, b, "dlq", 7)

			tlClearPolicy(t, b, "u")
			opWant(t, b, "m", "", "o", op)
			pub(13, 13) // the operator's 5, no DLX any more
			tlEventuallyReady(t, b, "m", 5)
			brokertest.Eventually(t, "one message discarded for maxlen", func() bool { return b.Broker.Stats().Discarded["maxlen"] == 1 })
			tlWantReady(t, b, "dlq", 7)

			opClear(t, b, "o")
			opWant(t, b, "m", "", "", nil)
			pub(14, 20) // no limit
			tlWantReady(t, b, "m", 12)
		})
	}
}

// P4, P5: delivery-limit merges with the negative rule (either negative:
// the higher), then meets the argument by the same rule. A user policy's
// -1 (unlimited) and an operator policy's 1 give 1.
func TestOperatorPolicyDeliveryLimit(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t)
	tlSetPolicy(t, b, broker.Policy{Name: "u", Pattern: "^dl", Definition: map[string]any{"delivery-limit": -1}})
	opSet(t, b, broker.Policy{Name: "o", Pattern: "^dl", Definition: map[string]any{"delivery-limit": 1}})
	ch.Declare("dl", nil, brokertest.Type("quorum"))
	opWant(t, b, "dl", "u", "o", map[string]any{"delivery-limit": 1})
	ch.PublishBodies("dl", "m")
	// Delivered twice (no x-delivery-count, then 1), then over the limit.
	for i, want := range []int64{-1, 1} {
		d := ch.Get("dl")
		if got := tlDeliveryCount(t, d); got != want {
			t.Fatalf("delivery %d: x-delivery-count %d, want %d", i+1, got, want)
		}
		if err := d.Reject(true); err != nil {
			t.Fatal(err)
		}
		ch.Sync()
	}
	ch.WantDrain("dl")
	if n := b.Broker.Stats().Discarded["delivery_limit"]; n != 1 {
		t.Fatalf("discarded delivery_limit %d, want 1", n)
	}
}

// P2: among operator policies the highest priority wins, independently of
// the user policies; a change of priority switches a queue at once; an
// operator policy with a key the queue's type does not support does not
// apply to it (P1), and apply-to selects queue types.
func TestOperatorPolicyPriority(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t)
	tlSetPolicy(t, b, broker.Policy{Name: "user", Pattern: "^prio", Priority: 100, Definition: map[string]any{"max-length": 50}})
	opSet(t, b, broker.Policy{Name: "o-low", Pattern: "^prio", Priority: 1, Definition: map[string]any{"max-length": 1}})
	opSet(t, b, broker.Policy{Name: "o-high", Pattern: "^prio", Priority: 5, Definition: map[string]any{"max-length": 3}})
	opSet(t, b, broker.Policy{Name: "o-neg", Pattern: "^prio", Priority: -5, Definition: map[string]any{"max-length": 0}})
	// quorum-only key: classic queues skip it.
	opSet(t, b, broker.Policy{Name: "o-mem", Pattern: "^prio", Priority: 20, Definition: map[string]any{"max-in-memory-length": 5, "max-length": 4}})
	opSet(t, b, broker.Policy{Name: "o-cq", Pattern: "^prio", Priority: 10, ApplyTo: "quorum_queues", Definition: map[string]any{"max-length": 2}})
	ch.Declare("prio-c", nil)
	ch.Declare("prio-q", nil, brokertest.Type("quorum"))
	opWant(t, b, "prio-c", "user", "o-high", map[string]any{"max-length": 3})
	opWant(t, b, "prio-q", "user", "o-mem", map[string]any{"max-in-memory-length": 5, "max-length": 4})
	ch.PublishBodies("prio-c", "1", "2", "3", "4", "5")
	tlWantReady(t, b, "prio-c", 3)

	opSet(t, b, broker.Policy{Name: "o-low", Pattern: "^prio", Priority: 30, Definition: map[string]any{"max-length": 1}})
	opWant(t, b, "prio-c", "user", "o-low", map[string]any{"max-length": 1})
	opWant(t, b, "prio-q", "user", "o-low", map[string]any{"max-length": 1})
	tlWantReady(t, b, "prio-c", 1)
	opClear(t, b, "o-low")
	opWant(t, b, "prio-c", "user", "o-high", map[string]any{"max-length": 3})
	opWant(t, b, "prio-q", "user", "o-mem", map[string]any{"max-in-memory-length": 5, "max-length": 4})
	opClear(t, b, "o-mem")
	opWant(t, b, "prio-q", "user", "o-cq", map[string]any{"max-length": 2})
	opClear(t, b, "o-high")
	opClear(t, b, "o-cq")
	opWant(t, b, "prio-c", "user", "o-neg", map[string]any{"max-length": 0})
	tlWantReady(t, b, "prio-c", 0)
}

// P5: the merged policy value meets the queue's argument as a user
// policy's would: limits and TTLs by minimum.
func TestOperatorPolicyArguments(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t)
	opSet(t, b, broker.Policy{Name: "o", Pattern: "^arg", Definition: map[string]any{"max-length": 5}})
	for _, tc := range []struct {
		q    string
		arg  int32
		want int
	}{{"arg-lower", 2, 2}, {"arg-higher", 8, 5}} {
		ch.Declare(tc.q, amqp091.Table{"x-max-length": tc.arg})
		opWant(t, b, tc.q, "", "o", map[string]any{"max-length": 5})
		ch.PublishBodies(tc.q, "1", "2", "3", "4", "5", "6", "7", "8", "9")
		tlWantReady(t, b, tc.q, tc.want)
	}
}

// A user policy and an operator policy are durable: after a restart both
// are listed as set and still apply to the recovered queue. On the
// selected store and, if that is not it, on the disk store.
func TestOperatorPolicySurvivesRestart(t *testing.T) {
	t.Parallel()
	backends := []brokertest.Backend{nil}
	if brokertest.Selected(t).Name() != brokertest.Disk().Name() {
		backends = append(backends, brokertest.Disk())
	}
	for _, be := range backends {
		name := "selected"
		if be != nil {
			name = be.Name()
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := brokertest.Start(t, brokertest.Config{Backend: be})
			ch := b.Session(t)
			user := broker.Policy{Name: "same", Pattern: "^dur", ApplyTo: "queues", Priority: 7,
				Definition: map[string]any{"max-length": 3, "dead-letter-exchange": "", "dead-letter-routing-key": "dlq"}}
			op := broker.Policy{Name: "same", Pattern: "^dur-", ApplyTo: "all", Priority: -2,
				Definition: map[string]any{"max-length": 1, "expires": 3600000}}
			tlSetPolicy(t, b, user)
			opSet(t, b, op)
			ch.Declare("dlq", nil, brokertest.Durable)
			ch.Declare("dur-q", nil, brokertest.Durable)
			before := [2][]broker.Policy{b.Broker.Policies("/"), b.Broker.OperatorPolicies("/")}
			b.Restart()
			after := [2][]broker.Policy{b.Broker.Policies("/"), b.Broker.OperatorPolicies("/")}
			show := func(ps []broker.Policy) string {
				var out []string
				for _, p := range ps {
					out = append(out, fmt.Sprintf("%s|%s|%s|%s|%d|%v", p.VHost, p.Name, p.Pattern, p.ApplyTo, p.Priority, p.Definition))
				}
				return fmt.Sprint(out)
			}
			for i, kind := range []string{"policies", "operator policies"} {
				if show(after[i]) != show(before[i]) || len(after[i]) != 1 {
					t.Fatalf("%s after restart: %s, before: %s", kind, show(after[i]), show(before[i]))
				}
			}
			p := after[1][0]
			if p.VHost != "/" || p.Name != "same" || p.Pattern != "^dur-" || p.ApplyTo != "all" || p.Priority != -2 ||
				fmt.Sprint(p.Definition) != "map[expires:3600000 max-length:1]" {
				t.Fatalf("operator policy after restart: %+v", p)
			}
			opWant(t, b, "dur-q", "same", "same", map[string]any{"dead-letter-exchange": "", "dead-letter-routing-key": "dlq", "expires": 3600000, "max-length": 1})
			ch = b.Session(t)
			ch.PublishBodies("dur-q", "P1", "P2")
			ch.WantDrain("dur-q", "P2")
			tlWantDeadLetters(t, b, ch, "dlq", "dur-q", "maxlen", "P1")

			// Cleared, it stays cleared.
			opClear(t, b, "same")
			b.Restart()
			if ops := b.Broker.OperatorPolicies("/"); len(ops) != 0 {
				t.Fatalf("operator policies after clear and restart: %+v", ops)
			}
			opWant(t, b, "dur-q", "same", "", user.Definition)
		})
	}
}

// Operator policies take only RabbitMQ's operator keys; values are
// validated as in user policies, with RabbitMQ's texts (checked on the
// live RabbitMQ 3.10.8, except overflow and queue-version, which 3.10
// refuses in operator policies and 3.13+ accepts); a refused set changes
// nothing. Missing vhosts and policies wrap ErrNotFound.
func TestOperatorPolicyValidation(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, brokertest.Config{})
	ch := b.Session(t)
	ch.Declare("v", nil)
	opSet(t, b, broker.Policy{Name: "v", Pattern: "^v$", Definition: map[string]any{"max-length": 5}})
	for _, tc := range []struct {
		def  map[string]any
		text string
	}{
		{nil, "no policy provided"},
		{map[string]any{"dead-letter-exchange": "x"}, `[{<<"dead-letter-exchange">>,<<"x">>}] are not recognised policy settings`},
		{map[string]any{"dead-letter-routing-key": "x"}, `[{<<"dead-letter-routing-key">>,<<"x">>}] are not recognised policy settings`},
		{map[string]any{"queue-mode": "lazy"}, `[{<<"queue-mode">>,<<"lazy">>}] are not recognised policy settings`},
		{map[string]any{"alternate-exchange": "a"}, `[{<<"alternate-exchange">>,<<"a">>}] are not recognised policy settings`},
		{map[string]any{"consumer-timeout": 5}, `[{<<"consumer-timeout">>,5}] are not recognised policy settings`},
		{map[string]any{"ha-mode": "all"}, `[{<<"ha-mode">>,<<"all">>}] are not recognised policy settings`},
		{map[string]any{"foo": 1}, `[{<<"foo">>,1}] are not recognised policy settings`},
		{map[string]any{"max-length": "x", "foo": 1}, `<<"x">> is not a valid maximum length`},
		{map[string]any{"message-ttl": -1}, "-1 is not a valid message TTL"},
		{map[string]any{"expires": 0}, "0 is not a valid queue expiry"},
		{map[string]any{"max-length-bytes": -1}, "-1 is not a valid maximum length in bytes"},
		{map[string]any{"max-in-memory-bytes": -1}, "-1 is not a valid maximum memory in bytes"},
		{map[string]any{"delivery-limit": 0.5}, "0.5 is not a valid delivery limit"},
		{map[string]any{"overflow": "bad"}, `<<"bad">> is not a valid overflow value`},
		{map[string]any{"queue-version": 3}, "3 is not a valid queue-version value"},
	} {
		err := b.Broker.SetOperatorPolicy("/", broker.Policy{Name: "v", Pattern: "^v$", Definition: tc.def})
		var pe *broker.PolicyError
		if !errors.As(err, &pe) || pe.Error() != tc.text {
			t.Errorf("definition %v: error %v (%T), want *broker.PolicyError %q", tc.def, err, err, tc.text)
		}
	}
	if ops := b.Broker.OperatorPolicies("/"); len(ops) != 1 || fmt.Sprint(ops[0].Definition) != "map[max-length:5]" {
		t.Fatalf("operator policies after refused sets: %+v", ops)
	}
	opWant(t, b, "v", "", "v", map[string]any{"max-length": 5})
	for _, def := range []map[string]any{
		{"expires": 1, "message-ttl": 0, "max-length": 0, "max-length-bytes": 0},
		{"max-in-memory-length": 5, "max-in-memory-bytes": 5},
		{"delivery-limit": 5}, {"delivery-limit": -1},
		{"overflow": "reject-publish"}, {"queue-version": 2},
	} {
		if err := b.Broker.SetOperatorPolicy("/", broker.Policy{Name: "ok", Pattern: "^nothing$", Definition: def}); err != nil {
			t.Errorf("definition %v refused: %v", def, err)
		}
	}
	// A pattern or apply-to RabbitMQ refuses.
	for _, p := range []broker.Policy{
		{Name: "bad", Pattern: "(", Definition: map[string]any{"max-length": 1}},
		{Name: "bad", Pattern: "x", ApplyTo: "streams-and-more", Definition: map[string]any{"max-length": 1}},
		{Name: "", Pattern: "x", Definition: map[string]any{"max-length": 1}},
	} {
		var pe *broker.PolicyError
		if err := b.Broker.SetOperatorPolicy("/", p); !errors.As(err, &pe) {
			t.Errorf("%+v: error %v, want a *broker.PolicyError", p, err)
		}
	}

	for what, err := range map[string]error{
		"set in unknown vhost":   b.Broker.SetOperatorPolicy("nohost", broker.Policy{Name: "x", Pattern: "x", Definition: map[string]any{"max-length": 1}}),
		"clear in unknown vhost": b.Broker.ClearOperatorPolicy("nohost", "v"),
		"clear absent":           b.Broker.ClearOperatorPolicy("/", "absent"),
		"clear a user policy":    b.Broker.ClearOperatorPolicy("/", "user-only"),
	} {
		if !errors.Is(err, broker.ErrNotFound) {
			t.Errorf("%s: %v, want ErrNotFound", what, err)
		}
	}
	if ops := b.Broker.OperatorPolicies("nohost"); ops != nil {
		t.Errorf("operator policies of an unknown vhost: %+v", ops)
	}
}

// A user policy and an operator policy may share a name; each kind is
// listed apart, per vhost by name, or for vhost "" every vhost's by vhost
// then name, with VHost filled in (the Policy's own VHost is ignored when
// set).
func TestOperatorPolicyListing(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, brokertest.Config{Broker: broker.Options{VHosts: []string{"/", "b-vhost", "a-vhost"}}})
	def := map[string]any{"max-length": 1}
	for _, vh := range []string{"b-vhost", "/", "a-vhost"} {
		for _, n := range []string{"z", "same", "a"} {
			if err := b.Broker.SetOperatorPolicy(vh, broker.Policy{VHost: "elsewhere", Name: n, Pattern: "x", Definition: def}); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Broker.SetPolicy(vh, broker.Policy{Name: "same", Pattern: "y", Definition: def}); err != nil {
			t.Fatal(err)
		}
	}
	names := func(ps []broker.Policy) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.VHost+"|"+p.Name+"|"+p.Pattern)
		}
		return out
	}
	for _, tc := range []struct {
		got  []broker.Policy
		want []string
	}{
		{b.Broker.OperatorPolicies(""), []string{"/|a|x", "/|same|x", "/|z|x", "a-vhost|a|x", "a-vhost|same|x", "a-vhost|z|x", "b-vhost|a|x", "b-vhost|same|x", "b-vhost|z|x"}},
		{b.Broker.OperatorPolicies("a-vhost"), []string{"a-vhost|a|x", "a-vhost|same|x", "a-vhost|z|x"}},
		{b.Broker.Policies(""), []string{"/|same|y", "a-vhost|same|y", "b-vhost|same|y"}},
		{b.Broker.Policies("b-vhost"), []string{"b-vhost|same|y"}},
	} {
		if got := names(tc.got); !slices.Equal(got, tc.want) {
			t.Errorf("listed %q, want %q", got, tc.want)
		}
	}
	// Listed definitions are copies.
	ps := b.Broker.OperatorPolicies("/")
	maps.Copy(ps[0].Definition, map[string]any{"max-length": 99})
	if got := b.Broker.OperatorPolicies("/")[0].Definition; !reflect.DeepEqual(got, def) {
		t.Fatalf("definition changed through a listing: %v", got)
	}
	// Clearing the user policy leaves the operator policy of that name.
	tlClearPolicy(t, b, "same")
	if got := names(b.Broker.OperatorPolicies("/")); !slices.Equal(got, []string{"/|a|x", "/|same|x", "/|z|x"}) {
		t.Fatalf("operator policies after clearing the user policy: %q", got)
	}
}
