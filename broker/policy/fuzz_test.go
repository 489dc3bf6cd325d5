package policy_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"reflect"
	"testing"

	"github.com/brokerd/brokerd/broker/base"
	"github.com/brokerd/brokerd/broker/policy"
)

// FuzzValidateDefinition feeds Validate any JSON document as a definition,
// decoded as the management API decodes one (with or without UseNumber),
// with any pattern and apply-to, as a user or an operator policy. Validate
// never panics and refuses only with a *base.InvalidError; its answer does
// not depend on map order; a policy it accepts matches queues and
// exchanges without panicking; and a user policy merged with an operator
// policy that were both accepted is itself a valid user policy, holding
// every key of either.
func FuzzValidateDefinition(f *testing.F) {
	for _, seed := range []string{
		`{"max-length": 5}`,
		`{"max-length": -1, "foo": 1}`,
		`{"message-ttl": 1.0e3, "expires": 1, "overflow": "reject-publish-dlx"}`,
		`{"delivery-limit": -5, "queue-version": 2, "max-in-memory-bytes": 0}`,
		`{"dead-letter-exchange": "dlx", "dead-letter-routing-key": "k", "dead-letter-strategy": "at-least-once"}`,
		`{"ha-mode": "nodes", "ha-params": ["a", 66], "ha-sync-mode": "manual"}`,
		`{"ha-mode": "exactly", "ha-params": 2, "ha-sync-batch-size": 0}`,
		`{"ha-promote-on-failure": "always"}`,
		`{"max-age": "7D", "stream-max-segment-size-bytes": 3000000001}`,
		`{"queue-master-locator": "x", "queue-mode": "lazy", "x": {"a": [1.5, null, true]}}`,
		`{"alternate-exchange": "ae", "consumer-timeout": 100000000000000000000}`,
		`{}`,
		`[]`,
		`null`,
	} {
		f.Add([]byte(seed), "^q", "", false, false)
		f.Add([]byte(seed), ".*", "queues", true, true)
	}
	f.Add([]byte(`{"max-length": 1}`), "(", "all", false, false)
	f.Add([]byte(`{"max-length": 1}`), "", "streams", true, false)
	f.Fuzz(func(t *testing.T, doc []byte, pattern, applyTo string, useNumber, operator bool) {
		decode := func() map[string]any {
			d := json.NewDecoder(bytes.NewReader(doc))
			if useNumber {
				d.UseNumber()
			}
			var def map[string]any
			if d.Decode(&def) != nil {
				return nil
			}
			return def
		}
		def := decode()
		if def == nil && !bytes.Equal(bytes.TrimSpace(doc), []byte("null")) {
			return
		}
		p := policy.Policy{Name: "p", Pattern: pattern, ApplyTo: applyTo, Definition: def}
		err := policy.Validate(&p, operator)
		var ie *base.InvalidError
		if err != nil && !errors.As(err, &ie) {
			t.Fatalf("Validate: %v (%T), want a *base.InvalidError", err, err)
		}
		// The same document, decoded again (new maps, new iteration
		// order), gets the same answer.
		again := policy.Policy{Name: "p", Pattern: pattern, ApplyTo: applyTo, Definition: decode()}
		if err2 := policy.Validate(&again, operator); (err == nil) != (err2 == nil) || (err != nil && err.Error() != err2.Error()) {
			t.Fatalf("Validate twice: %v, then %v", err, err2)
		}
		if err != nil {
			return
		}
		for _, qtype := range []string{policy.QueueClassic, policy.QueueQuorum, policy.QueueStream} {
			p.AppliesToQueue("q", qtype)
		}
		p.AppliesToExchange("q")

		// Merge it with a user or operator policy made of the keys both
		// kinds take.
		other := policy.Policy{Name: "o", Definition: map[string]any{"max-length": 3, "delivery-limit": -1, "overflow": "drop-head", "expires": 60000}}
		if err := policy.Validate(&other, !operator); err != nil {
			t.Fatal(err)
		}
		qp := &policy.QueuePolicies{User: &p, Operator: &other}
		if operator {
			qp = &policy.QueuePolicies{User: &other, Operator: &p}
		}
		eff := policy.EffectiveDefinition(qp)
		for k := range maps.Keys(qp.User.Definition) {
			if _, ok := eff[k]; !ok {
				t.Fatalf("effective %v lacks the user policy's %q", eff, k)
			}
		}
		for k := range maps.Keys(qp.Operator.Definition) {
			if _, ok := eff[k]; !ok {
				t.Fatalf("effective %v lacks the operator policy's %q", eff, k)
			}
		}
		if len(eff) > len(qp.User.Definition)+len(qp.Operator.Definition) {
			t.Fatalf("effective %v has keys of neither policy", eff)
		}
		merged := policy.Policy{Name: "m", Definition: eff}
		if err := policy.Validate(&merged, false); err != nil {
			t.Fatalf("effective definition %v of valid policies is invalid: %v", eff, err)
		}
		// With no operator policy the effective definition is the user's.
		if got := policy.EffectiveDefinition(&policy.QueuePolicies{User: qp.User}); !reflect.DeepEqual(got, qp.User.Definition) {
			t.Fatalf("effective definition of a user policy alone: %v, want %v", got, qp.User.Definition)
		}
	})
}
