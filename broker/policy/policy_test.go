package policy_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/brokerd/brokerd/broker/base"
	"github.com/brokerd/brokerd/broker/policy"
)

// Tests of the pure policy functions. The behaviour they give live queues
// (SetPolicy, limits, dead-lettering) is tested through AMQP in package
// broker (policy_test.go, opolicy_test.go); RabbitMQ's texts for every key
// are in broker's TestPolicyValidation.

// valid returns p after Validate, failing the test if it is refused.
func valid(t *testing.T, p policy.Policy, operator bool) *policy.Policy {
	t.Helper()
	if err := policy.Validate(&p, operator); err != nil {
		t.Fatalf("Validate(%+v): %v", p, err)
	}
	return &p
}

// Validate refuses with a *base.InvalidError and RabbitMQ's text; the
// name, pattern and apply-to first, then the definition; operator policies
// take only their keys.
func TestValidate(t *testing.T) {
	def := map[string]any{"max-length": 1}
	for _, tc := range []struct {
		name     string
		p        policy.Policy
		operator bool
		err      string // "" valid
	}{
		{"valid", policy.Policy{Name: "p", Pattern: "^q$", Definition: def}, false, ""},
		{"empty pattern matches all", policy.Policy{Name: "p", Definition: def}, false, ""},
		{"no name", policy.Policy{Pattern: "x", Definition: def}, false, "policy name must not be empty"},
		{"no name before bad pattern", policy.Policy{Pattern: "(", ApplyTo: "x"}, false, "policy name must not be empty"},
		{"bad pattern", policy.Policy{Name: "p", Pattern: "(", Definition: def}, false,
			`invalid pattern "(": error parsing regexp: missing closing ): ` + "`(`"},
		{"bad apply-to", policy.Policy{Name: "p", ApplyTo: "streams", Definition: def}, false, `"streams" is not a valid apply-to value`},
		{"apply-to before definition", policy.Policy{Name: "p", ApplyTo: "x"}, false, `"x" is not a valid apply-to value`},
		{"no definition", policy.Policy{Name: "p"}, false, "no policy provided"},
		{"empty definition", policy.Policy{Name: "p", Definition: map[string]any{}}, false, "no policy provided"},
		{"bad value", policy.Policy{Name: "p", Definition: map[string]any{"expires": 0}}, false, "0 is not a valid queue expiry"},
		{"unknown keys in key order", policy.Policy{Name: "p", Definition: map[string]any{"zz": 1, "aa": "x", "max-length": 2}}, false,
			`[{<<"aa">>,<<"x">>},{<<"zz">>,1}] are not recognised policy settings`},
		{"values before unknown keys", policy.Policy{Name: "p", Definition: map[string]any{"aa": 1, "max-length": -1}}, false,
			"-1 is not a valid maximum length"},
		{"operator key", policy.Policy{Name: "p", Definition: map[string]any{"expires": 5, "overflow": "drop-head", "queue-version": 2}}, true, ""},
		{"user-only key in operator policy", policy.Policy{Name: "p", Definition: map[string]any{"dead-letter-exchange": "dlx"}}, true,
			`[{<<"dead-letter-exchange">>,<<"dlx">>}] are not recognised policy settings`},
		{"consumer-timeout only in user policies", policy.Policy{Name: "p", Definition: map[string]any{"consumer-timeout": 5}}, true,
			`[{<<"consumer-timeout">>,5}] are not recognised policy settings`},
		{"ha-* checked together", policy.Policy{Name: "p", Definition: map[string]any{"ha-mode": "exactly", "ha-params": 0}}, false,
			`ha-mode="exactly" takes an integer, 0 given`},
		{"ha-* valid", policy.Policy{Name: "p", Definition: map[string]any{"ha-mode": "nodes", "ha-params": []any{"a", "b"}, "ha-sync-mode": "manual"}}, false, ""},
		{"json.Number", policy.Policy{Name: "p", Definition: map[string]any{"message-ttl": json.Number("1000")}}, false, ""},
		{"json.Number not an integer", policy.Policy{Name: "p", Definition: map[string]any{"message-ttl": json.Number("1e3")}}, false,
			"1.0e3 is not a valid message TTL"},
		{"max-age", policy.Policy{Name: "p", Definition: map[string]any{"max-age": "7D"}}, false, ""},
		// Delayed retry: RabbitMQ 4.3.1's texts and pair checks, LavinMQ's
		// multiplier, brokerd's jitter.
		{"delayed retry", policy.Policy{Name: "p", Definition: map[string]any{"delayed-retry-type": "all", "delayed-retry-min": 1000,
			"delayed-retry-max": 30000, "delayed-retry-multiplier": 2, "delayed-retry-jitter": 0.25}}, false, ""},
		{"delayed retry LavinMQ", policy.Policy{Name: "p", Definition: map[string]any{"delayed-retry-min": 500, "delivery-limit": 5}}, false, ""},
		{"delayed retry bad type", policy.Policy{Name: "p", Definition: map[string]any{"delayed-retry-type": "some", "delayed-retry-min": 1}}, false,
			`<<"some">> is not a valid delayed retry type. Must be one of: all, failed, returned, disabled`},
		{"delayed retry min zero", policy.Policy{Name: "p", Definition: map[string]any{"delayed-retry-min": 0}}, false,
			"0 is not a valid delayed retry minimum delay. Must be a positive integer"},
		{"delayed retry min string", policy.Policy{Name: "p", Definition: map[string]any{"delayed-retry-min": "100"}}, false,
			`<<"100">> is not a valid delayed retry minimum delay. Must be a positive integer`},
		{"delayed retry max float", policy.Policy{Name: "p", Definition: map[string]any{"delayed-retry-max": 0.1}}, false,
			"0.1 is not a valid delayed retry maximum delay. Must be a positive integer"},
		{"delayed retry type needs min", policy.Policy{Name: "p", Definition: map[string]any{"delayed-retry-type": "failed"}}, false,
			"delayed-retry-min is required when delayed-retry-type is failed"},
		{"delayed retry disabled needs no min", policy.Policy{Name: "p", Definition: map[string]any{"delayed-retry-type": "disabled"}}, false, ""},
		{"delayed retry max below min", policy.Policy{Name: "p", Definition: map[string]any{"delayed-retry-min": 500, "delayed-retry-max": 100}}, false,
			"delayed-retry-max (100) must not be smaller than delayed-retry-min (500)"},
		{"delayed retry multiplier", policy.Policy{Name: "p", Definition: map[string]any{"delayed-retry-multiplier": 1.5}}, false,
			"1.5 is not a valid delayed retry multiplier. Must be a positive integer"},
		{"delayed retry jitter", policy.Policy{Name: "p", Definition: map[string]any{"delayed-retry-jitter": 2}}, false,
			"2 is not a valid delayed retry jitter. Must be a number from 0 to 1"},
		{"delayed retry in operator policy", policy.Policy{Name: "p", Definition: map[string]any{"delayed-retry-type": "returned", "delayed-retry-min": 5}}, true, ""},
		{"multiplier only in user policies", policy.Policy{Name: "p", Definition: map[string]any{"delayed-retry-multiplier": 2}}, true,
			`[{<<"delayed-retry-multiplier">>,2}] are not recognised policy settings`},
	} {
		p := tc.p
		err := policy.Validate(&p, tc.operator)
		if tc.err == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		var ie *base.InvalidError
		if !errors.As(err, &ie) || ie.Msg != tc.err {
			t.Errorf("%s: error %v (%T), want *base.InvalidError %q", tc.name, err, err, tc.err)
		}
	}
}

// Validate fills the default apply-to and leaves one given as it is.
func TestValidateApplyTo(t *testing.T) {
	for in, want := range map[string]string{"": "all", "all": "all", "queues": "queues", "exchanges": "exchanges",
		"classic_queues": "classic_queues", "quorum_queues": "quorum_queues"} {
		if p := valid(t, policy.Policy{Name: "p", ApplyTo: in, Definition: map[string]any{"max-length": 1}}, false); p.ApplyTo != want {
			t.Errorf("apply-to %q: %q after Validate, want %q", in, p.ApplyTo, want)
		}
	}
}

// P1: a policy applies to a queue by pattern (unanchored), apply-to and
// the keys the queue's type supports; to an exchange by pattern and
// apply-to, whatever its keys.
func TestAppliesTo(t *testing.T) {
	c, q := policy.QueueClassic, policy.QueueQuorum
	for _, tc := range []struct {
		name         string
		p            policy.Policy
		queue, qtype string
		queueWant    bool
		exchangeWant bool // for an exchange named queue
	}{
		{"all", policy.Policy{Pattern: "^o", Definition: map[string]any{"max-length": 1}}, "orders", c, true, true},
		{"unanchored", policy.Policy{Pattern: "der", Definition: map[string]any{"max-length": 1}}, "orders", q, true, true},
		{"no match", policy.Policy{Pattern: "^x", Definition: map[string]any{"max-length": 1}}, "orders", c, false, false},
		{"queues", policy.Policy{Pattern: ".", ApplyTo: "queues", Definition: map[string]any{"max-length": 1}}, "a", q, true, false},
		{"exchanges", policy.Policy{Pattern: ".", ApplyTo: "exchanges", Definition: map[string]any{"alternate-exchange": "ae"}}, "a", c, false, true},
		{"classic_queues on classic", policy.Policy{Pattern: ".", ApplyTo: "classic_queues", Definition: map[string]any{"max-length": 1}}, "a", c, true, false},
		{"classic_queues on quorum", policy.Policy{Pattern: ".", ApplyTo: "classic_queues", Definition: map[string]any{"max-length": 1}}, "a", q, false, false},
		{"quorum_queues on quorum", policy.Policy{Pattern: ".", ApplyTo: "quorum_queues", Definition: map[string]any{"max-length": 1}}, "a", q, true, false},
		{"quorum_queues on classic", policy.Policy{Pattern: ".", ApplyTo: "quorum_queues", Definition: map[string]any{"max-length": 1}}, "a", c, false, false},
		// A key the queue's type does not take keeps the policy off it.
		{"queue-mode on quorum", policy.Policy{Pattern: ".", Definition: map[string]any{"queue-mode": "lazy"}}, "a", q, false, true},
		{"queue-mode on classic", policy.Policy{Pattern: ".", Definition: map[string]any{"queue-mode": "lazy"}}, "a", c, true, true},
		{"ha-mode on quorum", policy.Policy{Pattern: ".", Definition: map[string]any{"ha-mode": "all"}}, "a", q, false, true},
		{"max-in-memory on classic", policy.Policy{Pattern: ".", Definition: map[string]any{"max-in-memory-length": 1}}, "a", c, false, true},
		{"max-in-memory on quorum", policy.Policy{Pattern: ".", Definition: map[string]any{"max-in-memory-length": 1}}, "a", q, true, true},
		{"stream key on classic", policy.Policy{Pattern: ".", Definition: map[string]any{"max-age": "1D"}}, "a", c, false, true},
		{"stream key on quorum", policy.Policy{Pattern: ".", Definition: map[string]any{"max-age": "1D"}}, "a", q, false, true},
		// An exchange key does not keep a policy off queues.
		{"alternate-exchange on a queue", policy.Policy{Pattern: ".", Definition: map[string]any{"alternate-exchange": "ae", "max-length": 1}}, "a", c, true, true},
	} {
		tc.p.Name = "p"
		p := valid(t, tc.p, false)
		if got := p.AppliesToQueue(tc.queue, tc.qtype); got != tc.queueWant {
			t.Errorf("%s: AppliesToQueue(%q, %s) = %v, want %v", tc.name, tc.queue, tc.qtype, got, tc.queueWant)
		}
		if got := p.AppliesToExchange(tc.queue); got != tc.exchangeWant {
			t.Errorf("%s: AppliesToExchange(%q) = %v, want %v", tc.name, tc.queue, got, tc.exchangeWant)
		}
	}
}

// P2: the highest priority wins, ties go to the lower name; Sorted orders
// by name; ForQueue picks a user and an operator policy independently.
func TestPriority(t *testing.T) {
	def := map[string]any{"max-length": 1}
	m := map[string]*policy.Policy{}
	for _, p := range []policy.Policy{
		{Name: "b", Pattern: "^q", Priority: 5, Definition: def},
		{Name: "a", Pattern: "^q", Priority: 5, Definition: def},
		{Name: "c", Pattern: "^q", Priority: 1, Definition: def},
		{Name: "d", Pattern: "^qq", Priority: 9, Definition: def},
		{Name: "e", Pattern: "^q", Priority: 100, ApplyTo: "exchanges", Definition: def},
		{Name: "f", Pattern: "^q", Priority: -1, Definition: def},
	} {
		m[p.Name] = valid(t, p, false)
	}
	ps := policy.Sorted(m)
	var names []string
	for _, p := range ps {
		names = append(names, p.Name)
	}
	if !slices.Equal(names, []string{"a", "b", "c", "d", "e", "f"}) {
		t.Fatalf("Sorted: %q", names)
	}
	if got := policy.Sorted(nil); got == nil || len(got) != 0 {
		t.Errorf("Sorted(nil) = %#v, want an empty slice", got)
	}
	best := func(queue string) string {
		if p := policy.Best(ps, func(p *policy.Policy) bool { return p.AppliesToQueue(queue, policy.QueueClassic) }); p != nil {
			return p.Name
		}
		return ""
	}
	for queue, want := range map[string]string{"q1": "a", "qq": "d", "x": ""} {
		if got := best(queue); got != want {
			t.Errorf("best policy for %q: %q, want %q", queue, got, want)
		}
	}
	// Ties are broken by name whatever the order of the slice.
	rev := slices.Clone(ps)
	slices.Reverse(rev)
	if p := policy.Best(rev, func(p *policy.Policy) bool { return p.Priority == 5 }); p == nil || p.Name != "a" {
		t.Errorf("tie in reverse order: %v, want a", p)
	}

	op := valid(t, policy.Policy{Name: "op", Pattern: "^q1$", Definition: map[string]any{"expires": 5}}, true)
	ops := []*policy.Policy{op}
	for _, tc := range []struct {
		queue    string
		user, op string
	}{
		{"q1", "a", "op"},
		{"q2", "a", ""},
		{"x", "", ""},
	} {
		qp := policy.ForQueue(ps, ops, tc.queue, policy.QueueQuorum)
		if tc.user == "" && tc.op == "" {
			if qp != nil {
				t.Errorf("ForQueue(%q) = %+v, want nil", tc.queue, qp)
			}
			continue
		}
		name := func(p *policy.Policy) string {
			if p == nil {
				return ""
			}
			return p.Name
		}
		if qp == nil || name(qp.User) != tc.user || name(qp.Operator) != tc.op {
			t.Errorf("ForQueue(%q) = %+v, want user %q operator %q", tc.queue, qp, tc.user, tc.op)
		}
	}
	if got := policy.ForQueue(nil, ops, "q1", policy.QueueClassic); got == nil || got.User != nil || got.Operator != op {
		t.Errorf("ForQueue with only an operator policy: %+v", got)
	}
}

// EffectiveDefinition leaves the policies' definitions as they were.
func TestEffectiveDefinitionCopies(t *testing.T) {
	user := valid(t, policy.Policy{Name: "u", Definition: map[string]any{"max-length": 10, "dead-letter-exchange": "dlx"}}, false)
	op := valid(t, policy.Policy{Name: "o", Definition: map[string]any{"max-length": 5}}, true)
	got := policy.EffectiveDefinition(&policy.QueuePolicies{User: user, Operator: op})
	if want := map[string]any{"max-length": 5, "dead-letter-exchange": "dlx"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("effective %v, want %v", got, want)
	}
	got["max-length"] = 0
	if user.Definition["max-length"] != 10 || op.Definition["max-length"] != 5 {
		t.Errorf("policies changed through the effective definition: %v, %v", user.Definition, op.Definition)
	}
	if got := policy.EffectiveDefinition(nil); got != nil {
		t.Errorf("EffectiveDefinition(nil) = %v", got)
	}
}

// Int reads what JSON decoders and Go callers give: integers of Go's
// types, integral float64s, json.Numbers written as integers.
func TestInt(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want int64
		ok   bool
	}{
		{5, 5, true}, {int64(-7), -7, true}, {int32(3), 3, true}, {float64(3), 3, true}, {float64(-2), -2, true},
		{1.5, 0, false}, {json.Number("42"), 42, true}, {json.Number("4.0"), 0, false}, {json.Number("1e3"), 0, false},
		{"5", 0, false}, {nil, 0, false}, {true, 0, false}, {uint8(1), 0, false},
		{float64(1 << 62), 0, false}, {float64(1<<62 - 1024), 1<<62 - 1024, true},
	} {
		if got, ok := policy.Int(tc.v); got != tc.want || ok != tc.ok {
			t.Errorf("Int(%#v) = %d, %v; want %d, %v", tc.v, got, ok, tc.want, tc.ok)
		}
	}
}

func TestRabbitTypeName(t *testing.T) {
	for qtype, want := range map[string]string{policy.QueueClassic: "rabbit_classic_queue", policy.QueueQuorum: "rabbit_quorum_queue", policy.QueueStream: "rabbit_stream_queue"} {
		if got := policy.RabbitTypeName(qtype); got != want {
			t.Errorf("RabbitTypeName(%q) = %q, want %q", qtype, got, want)
		}
	}
}
