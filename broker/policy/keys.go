package policy

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/brokerd/brokerd/overflow"
)

// The keys a policy definition may hold, as RabbitMQ's policy validators
// register them (rabbit_policies, rabbit_mirror_queue_misc,
// rabbit_queue_location_validator), with their checks and texts, and the
// queue types each key lets a policy apply to (reference P1).
//
// brokerd acts on the keys of SPEC §6 (and consumer-timeout). The others
// are valid in RabbitMQ 3.10 for classic or quorum queues (or streams) but
// mean nothing here: mirroring (ha-*), queue-mode, queue-version, leader
// and master locators, in-memory limits, stream retention. They are
// accepted, validated as RabbitMQ validates them, shown in the policy and
// in a queue's effective definition, and otherwise ignored, so that a
// definitions file exported from RabbitMQ imports; a policy holding one
// applies to the queue types RabbitMQ would apply it to.
//
// Where RabbitMQ 3.10 and 4.x differ, brokerd follows 4.x (SPEC's rule):
// delivery-limit accepts negative values (unlimited), consumer-timeout is
// a key, classic queues take no max-in-memory-* policy, and operator
// policies may set overflow and queue-version (3.13+). The delayed retry
// keys are RabbitMQ 4.3.1's (delayed-retry-type, -min, -max, with its
// texts and its check of the pair in one policy) and LavinMQ's
// (delayed-retry-multiplier), plus brokerd's delayed-retry-jitter; they
// apply to classic queues too. Keys RabbitMQ added after 3.10 for
// features brokerd lacks (target-group-size,
// consumer-disconnected-timeout, stream filters) and plugin keys
// (federation-*, shards-*) are not recognised.

// policyKey describes one definition key.
type policyKey struct {
	// exchange: the key configures exchanges; it does not stop a policy
	// from applying to queues (RabbitMQ ignores it there).
	exchange bool
	// notClassic, notQuorum: a policy holding the key does not apply to
	// queues of that type (the types' unsupported_policies). Stream keys
	// have both: no brokerd queue takes them.
	notClassic, notQuorum bool
	// operator: allowed in operator policies
	// (rabbit_policies operator_policy_validator).
	operator bool
	// group is the RabbitMQ module that validates the key; modules run in
	// this order and the first error is reported.
	group validatorGroup
	// check validates the value alone; nil for keys validated together
	// (the ha-* group).
	check func(v any) error
}

type validatorGroup int

const (
	groupLocator  validatorGroup = iota // rabbit_queue_location_validator
	groupPolicies                       // rabbit_policies
	groupMirror                         // rabbit_mirror_queue_misc (ha-*)
)

// maxRetryDelay bounds delayed-retry-min and -max: ten years in ms, as
// a TTL (queue.MaxExpiration).
const maxRetryDelay = 315360000000

// maxStreamSegmentSize is RabbitMQ's ?MAX_STREAM_MAX_SEGMENT_SIZE.
const maxStreamSegmentSize = 3_000_000_000

var policyKeys = map[string]policyKey{
	// Keys brokerd acts on.
	"alternate-exchange":      {exchange: true, check: checkString("%s is not a valid alternate exchange name")},
	"dead-letter-exchange":    {check: checkString("%s is not a valid dead letter exchange name")},
	"dead-letter-routing-key": {check: checkString("%s is not a valid dead letter routing key")},
	// brokerd applies dead-letter-strategy and delivery-limit to classic
	// queues too (SPEC §2, §5 beyond); RabbitMQ does not.
	"dead-letter-strategy": {check: checkOneOf("%s is not a valid dead letter strategy", "at-most-once", "at-least-once")},
	"delivery-limit":       {operator: true, check: checkInt(math.MinInt64, math.MaxInt64, "%s is not a valid delivery limit")},
	"message-ttl":          {operator: true, check: checkInt(0, math.MaxInt64, "%s is not a valid message TTL")},
	"expires":              {operator: true, check: checkInt(1, math.MaxInt64, "%s is not a valid queue expiry")},
	"max-length":           {operator: true, check: checkInt(0, math.MaxInt64, "%s is not a valid maximum length")},
	"max-length-bytes":     {operator: true, check: checkInt(0, math.MaxInt64, "%s is not a valid maximum length in bytes")},
	"overflow":             {operator: true, check: checkOverflow},
	"consumer-timeout":     {check: checkInt(0, math.MaxInt64, "%s is not a valid consumer timeout")},
	// Delayed retry (broker/queue/retry.go): RabbitMQ 4.3.1's keys with
	// its texts (rabbit_quorum_queue:validate_policy0), allowed in
	// operator policies as there; LavinMQ's multiplier; brokerd's jitter.
	"delayed-retry-type": {operator: true, check: checkOneOf("%s is not a valid delayed retry type. Must be one of: all, failed, returned, disabled",
		"all", "failed", "returned", "disabled")},
	"delayed-retry-min":        {operator: true, check: checkInt(1, maxRetryDelay, "%s is not a valid delayed retry minimum delay. Must be a positive integer")},
	"delayed-retry-max":        {operator: true, check: checkInt(1, maxRetryDelay, "%s is not a valid delayed retry maximum delay. Must be a positive integer")},
	"delayed-retry-multiplier": {check: checkInt(1, math.MaxInt32, "%s is not a valid delayed retry multiplier. Must be a positive integer")},
	"delayed-retry-jitter":     {check: checkJitter},

	// Accepted and ignored (see above).
	"queue-version":        {operator: true, check: checkInt(1, 2, "%s is not a valid queue-version value")},
	"queue-mode":           {notQuorum: true, check: checkOneOf("%s is not a valid queue-mode value", "default", "lazy")},
	"max-in-memory-length": {notClassic: true, operator: true, check: checkInt(0, math.MaxInt64, "%s is not a valid maximum memory in bytes")},
	"max-in-memory-bytes":  {notClassic: true, operator: true, check: checkInt(0, math.MaxInt64, "%s is not a valid maximum memory in bytes")},
	"queue-leader-locator": {check: checkOneOf("%s is not a valid queue leader locator value", "client-local", "balanced", "random", "least-leaders")},
	"queue-master-locator": {notQuorum: true, group: groupLocator,
		check: checkOneOf("%s invalid queue-master-locator value", "client-local", "min-masters", "random")},
	"ha-mode":                {notQuorum: true, group: groupMirror},
	"ha-params":              {notQuorum: true, group: groupMirror},
	"ha-sync-mode":           {notQuorum: true, group: groupMirror},
	"ha-sync-batch-size":     {notQuorum: true, group: groupMirror},
	"ha-promote-on-shutdown": {notQuorum: true, group: groupMirror},
	"ha-promote-on-failure":  {notQuorum: true, group: groupMirror},
	// Stream keys.
	"max-age":                       {notClassic: true, notQuorum: true, check: checkMaxAge},
	"stream-max-segment-size-bytes": {notClassic: true, notQuorum: true, check: checkInt(0, maxStreamSegmentSize, "%s is not a valid segment size")},
	"initial-cluster-size":          {notClassic: true, notQuorum: true, check: checkInt(0, math.MaxInt64, "%s is not a valid cluster size")},
}

// validateDefinition checks a policy definition as RabbitMQ's
// rabbit_policy:validation0 does: each validator module checks the keys it
// registered (locator, then rabbit_policies in key order, then the ha-*
// group) and the first error wins; keys no module took are then refused
// together, in key order. operator restricts the keys to those operator
// policies allow.
func validateDefinition(def map[string]any, operator bool) error {
	if len(def) == 0 {
		return policyErr("no policy provided")
	}
	known := func(k string) (policyKey, bool) {
		pk, ok := policyKeys[k]
		return pk, ok && (!operator || pk.operator)
	}
	keys := slices.Sorted(maps.Keys(def))
	mirror := false
	for _, g := range []validatorGroup{groupLocator, groupPolicies} {
		for _, k := range keys {
			pk, ok := known(k)
			if ok && pk.group == groupMirror {
				mirror = true
			}
			if !ok || pk.group != g {
				continue
			}
			if err := pk.check(def[k]); err != nil {
				return err
			}
		}
	}
	if err := validateDelayedRetry(def); err != nil {
		return err
	}
	if mirror {
		if err := validateHA(def); err != nil {
			return err
		}
	}
	var unknown []string
	for _, k := range keys {
		if _, ok := known(k); !ok {
			unknown = append(unknown, "{"+erlTerm(k)+","+erlTerm(def[k])+"}")
		}
	}
	if len(unknown) > 0 {
		return policyErr("[%s] are not recognised policy settings", strings.Join(unknown, ","))
	}
	return nil
}

// checkInt accepts an integer in [min, max]. A Go float64 with an integral
// value counts as an integer (JSON numbers decoded without UseNumber); a
// json.Number must be written as an integer, as RabbitMQ's JSON decoder
// makes 1.0 a float.
func checkInt(min, max int64, format string) func(any) error {
	return func(v any) error {
		if n, ok := Int(v); ok && n >= min && n <= max {
			return nil
		}
		return policyErr(format, erlTerm(v))
	}
}

// checkString accepts any string.
func checkString(format string) func(any) error {
	return func(v any) error {
		if _, ok := v.(string); ok {
			return nil
		}
		return policyErr(format, erlTerm(v))
	}
}

// checkOneOf accepts one of the strings vals.
func checkOneOf(format string, vals ...string) func(any) error {
	return func(v any) error {
		if s, ok := v.(string); ok && slices.Contains(vals, s) {
			return nil
		}
		return policyErr(format, erlTerm(v))
	}
}

// checkJitter accepts delayed-retry-jitter: a number from 0 to 1, the
// largest fraction of a retry's delay taken off at random.
func checkJitter(v any) error {
	if f, ok := Float(v); ok && f >= 0 && f <= 1 {
		return nil
	}
	return policyErr("%s is not a valid delayed retry jitter. Must be a number from 0 to 1", erlTerm(v))
}

// validateDelayedRetry checks the delayed retry keys of one definition
// together, as RabbitMQ 4.3.1 does (validate_delayed_retry_constraints):
// an enabled type needs a minimum in the same policy, and a maximum is
// not below the minimum. Each value was checked alone before.
func validateDelayedRetry(def map[string]any) error {
	if t, ok := def["delayed-retry-type"].(string); ok && t != "disabled" {
		if _, ok := def["delayed-retry-min"]; !ok {
			return policyErr("delayed-retry-min is required when delayed-retry-type is %s", t)
		}
	}
	lo, lok := Int(def["delayed-retry-min"])
	hi, hok := Int(def["delayed-retry-max"])
	if lok && hok && hi < lo {
		return policyErr("delayed-retry-max (%d) must not be smaller than delayed-retry-min (%d)", hi, lo)
	}
	return nil
}

// Float reads a numeric policy value: an integer (Int) or any float64 or
// json.Number.
func Float(v any) (float64, bool) {
	if n, ok := Int(v); ok {
		return float64(n), true
	}
	switch n := v.(type) {
	case float64:
		return n, !math.IsNaN(n)
	case json.Number:
		f, err := n.Float64()
		return f, err == nil && !math.IsNaN(f)
	}
	return 0, false
}

func checkOverflow(v any) error {
	if s, ok := v.(string); ok {
		if _, err := overflow.ParseMode(s); err == nil {
			return nil
		}
	}
	return policyErr("%s is not a valid overflow value", erlTerm(v))
}

// checkMaxAge accepts what rabbit_amqqueue:check_max_age does: a positive
// integer followed by one unit of Y, M, D, h, m, s ("7D"). RabbitMQ fails
// with an internal error on a value that does not start with a digit or is
// not a string; brokerd refuses those with the same text as the others.
func checkMaxAge(v any) error {
	if s, ok := v.(string); ok {
		i := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		digits, unit := s[:i], s[i:]
		if strings.Trim(digits, "0") != "" && slices.Contains([]string{"Y", "M", "D", "h", "m", "s"}, unit) {
			return nil
		}
	}
	return policyErr("%s is not a valid max age", erlTerm(v))
}

// validateHA is rabbit_mirror_queue_misc:validate_policy: the ha-* keys
// are checked together, in a fixed order, with their own texts.
func validateHA(def map[string]any) error {
	get := func(k string) (any, bool) { v, ok := def[k]; return v, ok }
	mode, hasMode := get("ha-mode")
	if !hasMode {
		return policyErr("ha-mode must be specified to specify ha-params, ha-sync-mode or ha-promote-on-shutdown")
	}
	params, hasParams := get("ha-params")
	paramsTerm := "none"
	if hasParams {
		paramsTerm = erlTerm(params)
	}
	switch mode {
	case "all":
		if hasParams {
			return policyErr(`ha-mode="all" does not take parameters`)
		}
	case "exactly":
		if n, ok := Int(params); !hasParams || !ok || n <= 0 {
			return policyErr(`ha-mode="exactly" takes an integer, %s given`, paramsTerm)
		}
	case "nodes":
		l, ok := params.([]any)
		switch {
		case !hasParams || !ok:
			return policyErr(`ha-mode="nodes" takes a list, %s given`, paramsTerm)
		case len(l) == 0:
			return policyErr(`ha-mode="nodes" list must be non-empty`)
		}
		var bad []any
		for _, n := range l {
			if _, ok := n.(string); !ok {
				bad = append(bad, n)
			}
		}
		if len(bad) > 0 {
			return policyErr(`ha-mode="nodes" takes a list of strings, %s was not a string`, erlTerm(bad))
		}
	default:
		return policyErr("%s is not a valid ha-mode value", erlTerm(mode))
	}
	if v, ok := get("ha-sync-mode"); ok && v != "automatic" && v != "manual" {
		return policyErr(`ha-sync-mode must be "manual" or "automatic", got %s`, erlTerm(v))
	}
	if v, ok := get("ha-sync-batch-size"); ok {
		if n, isInt := Int(v); !isInt || n <= 0 {
			return policyErr("ha-sync-batch-size takes an integer greater than 0, %s given", erlTerm(v))
		}
	}
	for _, k := range []string{"ha-promote-on-shutdown", "ha-promote-on-failure"} {
		if v, ok := get(k); ok && v != "always" && v != "when-synced" {
			return policyErr(`%s must be "always" or "when-synced", got %s`, k, erlTerm(v))
		}
	}
	return nil
}

// Int reads an integer policy value: Go integers, a float64 with an
// integral value, or a json.Number written as an integer.
func Int(v any) (int64, bool) {
	switch n := v.(type) {
	case int:
		return int64(n), true
	case int64:
		return n, true
	case int32:
		return int64(n), true
	case float64:
		if n == math.Trunc(n) && !math.IsInf(n, 0) && math.Abs(n) < 1<<62 {
			return int64(n), true
		}
	case json.Number:
		i, err := n.Int64()
		return i, err == nil
	}
	return 0, false
}

// erlTerm renders a policy value as RabbitMQ's messages print the decoded
// JSON term (Erlang ~p): strings as binaries <<"x">>, floats in Erlang's
// shortest form (1.0e3), lists of printable character codes as strings,
// objects as maps #{<<"k">> => v}.
func erlTerm(v any) string {
	switch x := v.(type) {
	case string:
		return "<<" + erlString(x) + ">>"
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(x)
	case float64:
		if n, ok := Int(x); ok {
			return strconv.FormatInt(n, 10)
		}
		return erlFloat(x)
	case json.Number:
		if strings.ContainsAny(string(x), ".eE") {
			if f, err := x.Float64(); err == nil {
				return erlFloat(f)
			}
		}
		return string(x)
	case []any:
		return erlList(x)
	case map[string]any:
		parts := make([]string, 0, len(x))
		for _, k := range slices.Sorted(maps.Keys(x)) {
			parts = append(parts, erlTerm(k)+" => "+erlTerm(x[k]))
		}
		return "#{" + strings.Join(parts, ",") + "}"
	}
	return fmt.Sprint(v)
}

// erlString renders s as Erlang's ~p prints a string (broker's publish.go
// has the same one-liner for its texts).
func erlString(s string) string { return strconv.Quote(s) }

// erlList prints a list; ~p prints a non-empty list of printable character
// codes as a string.
func erlList(l []any) string {
	printable := len(l) > 0
	var sb strings.Builder
	for _, e := range l {
		n, ok := Int(e)
		if !ok || n < 32 || n > 126 {
			printable = false
			break
		}
		sb.WriteByte(byte(n))
	}
	if printable {
		return strconv.Quote(sb.String())
	}
	parts := make([]string, len(l))
	for i, e := range l {
		parts[i] = erlTerm(e)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// erlFloat prints f as Erlang's float_to_list(F, [short]) does: the
// shortest digits that read back as f, in plain notation ("123.5") or
// scientific ("1.0e-5"), whichever is shorter (plain on a tie), and always
// scientific from 2^53 up, where integers are no longer exact.
func erlFloat(f float64) string {
	if f == 0 {
		if math.Signbit(f) {
			return "-0.0"
		}
		return "0.0"
	}
	sign := ""
	if f < 0 {
		sign, f = "-", -f
	}
	// d.ddde±x: the shortest round-tripping digits and the exponent.
	s := strconv.FormatFloat(f, 'e', -1, 64)
	mant, expStr, _ := strings.Cut(s, "e")
	exp, _ := strconv.Atoi(expStr)
	digits := strings.Replace(mant, ".", "", 1)
	frac := digits[1:]
	if frac == "" {
		frac = "0"
	}
	sci := digits[:1] + "." + frac + "e" + strconv.Itoa(exp)
	var plain string
	switch {
	case exp < 0:
		plain = "0." + strings.Repeat("0", -exp-1) + digits
	case len(digits) <= exp+1:
		plain = digits + strings.Repeat("0", exp+1-len(digits)) + ".0"
	default:
		plain = digits[:exp+1] + "." + digits[exp+1:]
	}
	if f >= 1<<53 || len(sci) < len(plain) {
		return sign + sci
	}
	return sign + plain
}
