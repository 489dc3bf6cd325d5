package policy

import (
	"cmp"
	"regexp"
	"slices"

	"github.com/brokerd/brokerd/broker/base"
)

// Policy is a vhost-wide rule that sets queue (and exchange) behaviour by
// name pattern, as RabbitMQ's policies do (SPEC §6, reference §3). The
// same type carries operator policies (operator.go).
//
// A Policy matches names only once Validate has accepted it (Validate
// compiles its pattern); after that it is read-only, and safe to read from
// several goroutines.
type Policy struct {
	// VHost is the policy's vhost, filled in by broker's Policies and
	// OperatorPolicies; its SetPolicy and SetOperatorPolicy ignore it.
	VHost    string
	Name     string
	Pattern  string // regular expression, unanchored
	ApplyTo  string // all (default), queues, exchanges, classic_queues, quorum_queues
	Priority int
	// Definition maps policy keys (keys.go) to values: strings,
	// booleans, lists, or numbers as Go integers, integral float64 or
	// json.Number.
	Definition map[string]any

	re *regexp.Regexp
}

func policyErr(format string, args ...any) error { return base.Invalidf(format, args...) }

// Validate checks a policy as RabbitMQ's rabbit_policy validation does,
// with its texts; operator selects the operator policies' keys. It
// compiles p's pattern and sets an empty ApplyTo to "all"; an invalid
// policy is a *base.InvalidError.
func Validate(p *Policy, operator bool) error {
	if p.Name == "" {
		return policyErr("policy name must not be empty")
	}
	re, err := regexp.Compile(p.Pattern)
	if err != nil {
		return policyErr("invalid pattern %q: %s", p.Pattern, err)
	}
	p.re = re
	switch p.ApplyTo {
	case "":
		p.ApplyTo = "all"
	case "all", "queues", "exchanges", "classic_queues", "quorum_queues":
	default:
		return policyErr("%q is not a valid apply-to value", p.ApplyTo)
	}
	return validateDefinition(p.Definition, operator)
}

// AppliesToQueue reports whether p matches queue q (P1): pattern, apply-to,
// and every key supported by the queue's type. A key that configures
// exchanges does not stop a policy from applying to queues, as in
// RabbitMQ: it is ignored there.
func (p *Policy) AppliesToQueue(name, qtype string) bool {
	switch p.ApplyTo {
	case "all", "queues":
	case "classic_queues":
		if qtype != QueueClassic {
			return false
		}
	case "quorum_queues":
		if qtype != QueueQuorum {
			return false
		}
	default:
		return false
	}
	for k := range p.Definition {
		pk := policyKeys[k]
		if (qtype == QueueQuorum && pk.notQuorum) || (qtype != QueueQuorum && pk.notClassic) {
			return false
		}
	}
	return p.re.MatchString(name)
}

// AppliesToExchange reports whether p matches exchange name: pattern and
// apply-to.
func (p *Policy) AppliesToExchange(name string) bool {
	if p.ApplyTo != "all" && p.ApplyTo != "exchanges" {
		return false
	}
	return p.re.MatchString(name)
}

// Best returns the highest-priority policy matching (ties broken by
// name, so the choice is stable; RabbitMQ leaves it undefined), nil when
// none does.
func Best(ps []*Policy, match func(*Policy) bool) *Policy {
	var best *Policy
	for _, p := range ps {
		if !match(p) {
			continue
		}
		if best == nil || p.Priority > best.Priority || (p.Priority == best.Priority && p.Name < best.Name) {
			best = p
		}
	}
	return best
}

// Sorted returns a vhost's policies of one kind by name, in a new slice.
func Sorted(m map[string]*Policy) []*Policy {
	out := make([]*Policy, 0, len(m))
	for _, p := range m {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *Policy) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// QueuePolicies are the policies in force on one queue (P2): the user
// policy and the operator policy of highest priority that apply to it,
// each nil when none does.
type QueuePolicies struct{ User, Operator *Policy }

// ForQueue picks a queue's policies among ps and ops (sorted by name);
// nil when none applies.
func ForQueue(ps, ops []*Policy, name, qtype string) *QueuePolicies {
	match := func(p *Policy) bool { return p.AppliesToQueue(name, qtype) }
	qp := &QueuePolicies{User: Best(ps, match), Operator: Best(ops, match)}
	if qp.User == nil && qp.Operator == nil {
		return nil
	}
	return qp
}
