package policy

import (
	"encoding/json"
	"reflect"
	"testing"
)

// erlFloat prints as Erlang's ~p does. Every want was printed by the erl
// of the RabbitMQ 3.10.8 install on this machine:
// io:format("~p~n", [[1.0, 100.0, ...]]).
func TestErlFloat(t *testing.T) {
	for _, tc := range []struct {
		f    float64
		want string
	}{
		{1.0, "1.0"}, {100.0, "100.0"}, {1000.0, "1.0e3"}, {1.5, "1.5"},
		{0.001, "0.001"}, {0.0001, "0.0001"}, {1.0e-5, "1.0e-5"},
		{123456.0, "123456.0"}, {1.25e20, "1.25e20"}, {-2.5, "-2.5"},
		{1.0e15, "1.0e15"}, {1.0e16, "1.0e16"}, {12345678901234567.0, "1.2345678901234568e16"},
		{0.1, "0.1"}, {10.0, "10.0"}, {1.0e300, "1.0e300"}, {5.0e-324, "5.0e-324"},
		{9007199254740992.0, "9.007199254740992e15"}, {9007199254740990.0, "9007199254740990.0"},
		{9007199254740994.0, "9.007199254740994e15"}, {123456789012345.0, "123456789012345.0"},
		{1234567890123456.0, "1234567890123456.0"}, {0.000123, "1.23e-4"}, {1.5e-7, "1.5e-7"},
		{123.456, "123.456"}, {2.0e16, "2.0e16"}, {1.1e16, "1.1e16"},
		{12345678901234.5, "12345678901234.5"}, {0.00012345, "1.2345e-4"},
		{1.0e4, "1.0e4"}, {1.0e5, "1.0e5"}, {1.2e4, "1.2e4"}, {1.23e6, "1.23e6"},
		{1.234e7, "1.234e7"}, {0, "0.0"},
	} {
		if got := erlFloat(tc.f); got != tc.want {
			t.Errorf("erlFloat(%v) = %s, want %s", tc.f, got, tc.want)
		}
	}
}

// erlTerm prints decoded JSON as RabbitMQ's validation messages do (texts
// from the live RabbitMQ 3.10.8's HTTP API).
func TestErlTerm(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want string
	}{
		{"x", `<<"x">>`},
		{`a"b`, `<<"a\"b">>`},
		{nil, "null"},
		{true, "true"},
		{float64(5), "5"},
		{json.Number("5"), "5"},
		{json.Number("1.0"), "1.0"},
		{json.Number("1e3"), "1.0e3"},
		{json.Number("1.0e20"), "1.0e20"},
		{json.Number("100000000000000000000"), "100000000000000000000"},
		{[]any{float64(1)}, "[1]"},
		{[]any{float64(65), float64(66)}, `"AB"`},
		{[]any{}, "[]"},
		{[]any{"a", 1}, `[<<"a">>,1]`},
		{map[string]any{"a": float64(1)}, `#{<<"a">> => 1}`},
	} {
		if got := erlTerm(tc.v); got != tc.want {
			t.Errorf("erlTerm(%#v) = %s, want %s", tc.v, got, tc.want)
		}
	}
}

// effectiveDefinition is rabbit_policy:merge_operator_definitions with
// rabbit_policies:merge_policy_value (reference P4).
func TestEffectiveDefinition(t *testing.T) {
	pol := func(def map[string]any) *Policy { return &Policy{Definition: def} }
	for _, tc := range []struct {
		name     string
		user, op map[string]any
		want     map[string]any
	}{
		{"none", nil, nil, nil},
		{"user only", map[string]any{"max-length": 1}, nil, map[string]any{"max-length": 1}},
		{"operator only", nil, map[string]any{"expires": 5}, map[string]any{"expires": 5}},
		// The live RabbitMQ 3.10.8's effective_policy_definition for
		// these two policies.
		{"live", map[string]any{"max-length": 10, "message-ttl": 1000, "dead-letter-exchange": "dlx"},
			map[string]any{"max-length": 5, "message-ttl": 100000, "expires": 60000},
			map[string]any{"dead-letter-exchange": "dlx", "expires": 60000, "max-length": 5, "message-ttl": 1000}},
		{"min", map[string]any{"max-length-bytes": 7, "max-in-memory-length": 1, "max-in-memory-bytes": 9, "expires": 3},
			map[string]any{"max-length-bytes": 8, "max-in-memory-length": 2, "max-in-memory-bytes": 4, "expires": 30},
			map[string]any{"max-length-bytes": 7, "max-in-memory-length": 1, "max-in-memory-bytes": 4, "expires": 3}},
		{"delivery-limit min", map[string]any{"delivery-limit": 5}, map[string]any{"delivery-limit": 3}, map[string]any{"delivery-limit": 3}},
		// A negative (unlimited) value: the higher, the limit (4.x: "choose
		// the more conservative value").
		{"delivery-limit user unlimited", map[string]any{"delivery-limit": -1}, map[string]any{"delivery-limit": 3}, map[string]any{"delivery-limit": 3}},
		{"delivery-limit operator unlimited", map[string]any{"delivery-limit": 3}, map[string]any{"delivery-limit": -1}, map[string]any{"delivery-limit": 3}},
		{"delivery-limit both unlimited", map[string]any{"delivery-limit": -5}, map[string]any{"delivery-limit": -1}, map[string]any{"delivery-limit": -1}},
		{"operator wins", map[string]any{"overflow": "drop-head", "queue-version": 1}, map[string]any{"overflow": "reject-publish", "queue-version": 2},
			map[string]any{"overflow": "reject-publish", "queue-version": 2}},
		// RabbitMQ 4.3 (rabbit_quorum_queue merge_policy_value): the
		// operator's type, the higher minimum, the lower maximum.
		{"delayed retry", map[string]any{"delayed-retry-type": "all", "delayed-retry-min": 100, "delayed-retry-max": 9000},
			map[string]any{"delayed-retry-type": "failed", "delayed-retry-min": 500, "delayed-retry-max": 5000},
			map[string]any{"delayed-retry-type": "failed", "delayed-retry-min": 500, "delayed-retry-max": 5000}},
		{"json numbers", map[string]any{"message-ttl": json.Number("20")}, map[string]any{"message-ttl": float64(100)}, map[string]any{"message-ttl": json.Number("20")}},
	} {
		qp := &QueuePolicies{}
		if tc.user != nil {
			qp.User = pol(tc.user)
		}
		if tc.op != nil {
			qp.Operator = pol(tc.op)
		}
		if tc.user == nil && tc.op == nil {
			qp = nil
		}
		if got := EffectiveDefinition(qp); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
