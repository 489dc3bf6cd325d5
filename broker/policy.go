package broker

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/brokerd/brokerd/overflow"
)

// Policy is a vhost-wide rule that sets queue (and exchange) behaviour by
// name pattern, as RabbitMQ's policies do (SPEC §6, reference §3).
type Policy struct {
	Name     string
	Pattern  string // regular expression, unanchored
	ApplyTo  string // all (default), queues, exchanges, classic_queues, quorum_queues
	Priority int
	// Definition maps policy keys to values: strings, or numbers as int,
	// int64 or integral float64 (JSON numbers).
	Definition map[string]any

	re *regexp.Regexp
}

// Policy keys and whether they apply to queues or exchanges.
var policyKeys = map[string]string{
	"dead-letter-exchange":    "queue",
	"dead-letter-routing-key": "queue",
	"dead-letter-strategy":    "queue",
	"message-ttl":             "queue",
	"expires":                 "queue",
	"max-length":              "queue",
	"max-length-bytes":        "queue",
	"overflow":                "queue",
	"delivery-limit":          "queue",
	"consumer-timeout":        "queue",
	"alternate-exchange":      "exchange",
}

// PolicyError is a policy refused at set time; Msg is the reason in
// RabbitMQ's words.
type PolicyError = InvalidError

func policyErr(format string, args ...any) error { return invalidf(format, args...) }

// policyInt reads an integer policy value (JSON numbers arrive as float64).
func policyInt(v any) (int64, bool) {
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

// validatePolicy checks a policy as RabbitMQ's rabbit_policies validators
// do, with their texts.
func validatePolicy(p *Policy) error {
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
	if len(p.Definition) == 0 {
		return policyErr("no policy provided")
	}
	// As rabbit_policy: known keys' values first, then unknown keys; in
	// key order, so the error reported is stable.
	keys := slices.Sorted(maps.Keys(p.Definition))
	var unknown []string
	for _, k := range keys {
		if _, ok := policyKeys[k]; !ok {
			unknown = append(unknown, "{"+erlTerm(k)+","+erlTerm(p.Definition[k])+"}")
		} else if err := validatePolicyValue(k, p.Definition[k]); err != nil {
			return err
		}
	}
	if len(unknown) > 0 {
		return policyErr("[%s] are not recognised policy settings", strings.Join(unknown, ","))
	}
	return nil
}

// erlTerm renders a policy value as RabbitMQ's messages print the decoded
// JSON term (Erlang ~p): strings as binaries, <<"x">>.
func erlTerm(v any) string {
	switch x := v.(type) {
	case string:
		return "<<" + erlString(x) + ">>"
	case nil:
		return "null"
	case float64:
		if n, ok := policyInt(x); ok {
			return strconv.FormatInt(n, 10)
		}
		return strconv.FormatFloat(x, 'g', -1, 64)
	}
	return fmt.Sprint(v)
}

func validatePolicyValue(k string, v any) error {
	str := func() (string, bool) { s, ok := v.(string); return s, ok }
	num := func(min int64, what string) error {
		n, ok := policyInt(v)
		if !ok || n < min {
			return policyErr("%s is not a valid %s", erlTerm(v), what)
		}
		return nil
	}
	switch k {
	case "message-ttl":
		return num(0, "message TTL")
	case "expires":
		return num(1, "queue expiry")
	case "max-length":
		return num(0, "maximum length")
	case "max-length-bytes":
		return num(0, "maximum length in bytes")
	case "delivery-limit":
		return num(math.MinInt64, "delivery limit")
	case "consumer-timeout":
		return num(0, "consumer timeout")
	case "overflow":
		s, _ := str()
		if _, err := overflow.ParseMode(s); err != nil {
			return policyErr("%s is not a valid overflow value", erlTerm(v))
		}
	case "dead-letter-exchange":
		if _, ok := str(); !ok {
			return policyErr("%s is not a valid dead letter exchange name", erlTerm(v))
		}
	case "dead-letter-routing-key":
		if _, ok := str(); !ok {
			return policyErr("%s is not a valid dead letter routing key", erlTerm(v))
		}
	case "dead-letter-strategy":
		if s, _ := str(); s != "at-most-once" && s != "at-least-once" {
			return policyErr("%s is not a valid dead letter strategy", erlTerm(v))
		}
	case "alternate-exchange":
		if _, ok := str(); !ok {
			return policyErr("%s is not a valid alternate exchange name", erlTerm(v))
		}
	}
	return nil
}

// appliesToQueue reports whether p matches queue q (P1): pattern, apply-to,
// and every key a queue key.
func (p *Policy) appliesToQueue(name, qtype string) bool {
	switch p.ApplyTo {
	case "all", "queues":
	case "classic_queues":
		if qtype != queueClassic {
			return false
		}
	case "quorum_queues":
		if qtype != queueQuorum {
			return false
		}
	default:
		return false
	}
	for k := range p.Definition {
		if policyKeys[k] != "queue" {
			return false
		}
	}
	return p.re.MatchString(name)
}

func (p *Policy) appliesToExchange(name string) bool {
	if p.ApplyTo != "all" && p.ApplyTo != "exchanges" {
		return false
	}
	return p.re.MatchString(name)
}

// bestPolicy returns the highest-priority policy matching (ties broken by
// name, so the choice is stable).
func bestPolicy(ps []*Policy, match func(*Policy) bool) *Policy {
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

// sortedPolicies returns a vhost's policies by name.
func sortedPolicies(m map[string]*Policy) []*Policy {
	out := make([]*Policy, 0, len(m))
	for _, p := range m {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *Policy) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// policyDef is a policy's stored JSON document (see metacodec.go).
type policyDef struct {
	Pattern    string         `json:"pattern"`
	ApplyTo    string         `json:"apply-to"`
	Priority   int            `json:"priority"`
	Definition map[string]any `json:"definition"`
}

// SetPolicy adds or replaces a policy of vhost and applies it at once to
// existing queues and exchanges: limits are re-checked (drop-head may evict
// now), the dead letter exchange switches, waiting dead letters are retried.
// An invalid policy is refused with a *PolicyError and changes nothing.
func (b *Broker) SetPolicy(vhost string, p Policy) error {
	v := b.VHost(vhost)
	if v == nil {
		return notFoundf("no vhost '%s'", vhost)
	}
	p.Definition = maps.Clone(p.Definition)
	if err := validatePolicy(&p); err != nil {
		return err
	}
	v.policyMu.Lock()
	defer v.policyMu.Unlock()
	v.mu.Lock()
	old := v.policies[p.Name]
	v.policies[p.Name] = &p
	var mb metaBatch
	mb.putPolicy(vhost, &p)
	w := b.startMeta(&mb)
	v.mu.Unlock()
	if err := w.wait(); err != nil {
		v.restorePolicy(p.Name, old)
		b.applyPolicies(v) // a queue declared meanwhile may have taken it
		return err
	}
	b.applyPolicies(v)
	v.topoGen.Add(1)
	return nil
}

// ClearPolicy removes a policy; queues fall back to their arguments (or the
// next matching policy) at once.
func (b *Broker) ClearPolicy(vhost, name string) error {
	v := b.VHost(vhost)
	if v == nil {
		return notFoundf("no vhost '%s'", vhost)
	}
	v.policyMu.Lock()
	defer v.policyMu.Unlock()
	v.mu.Lock()
	old := v.policies[name]
	if old == nil {
		v.mu.Unlock()
		return notFoundf("no policy '%s' in vhost '%s'", name, vhost)
	}
	delete(v.policies, name)
	var mb metaBatch
	mb.deletePolicy(vhost, name)
	w := b.startMeta(&mb)
	v.mu.Unlock()
	if err := w.wait(); err != nil {
		v.restorePolicy(name, old)
		b.applyPolicies(v)
		return err
	}
	b.applyPolicies(v)
	v.topoGen.Add(1)
	return nil
}

// restorePolicy undoes a policy change the store failed to take (the
// policy was never applied to queues). Caller holds v.policyMu, so no other
// change came in between.
func (v *VHost) restorePolicy(name string, old *Policy) {
	v.mu.Lock()
	if old != nil {
		v.policies[name] = old
	} else {
		delete(v.policies, name)
	}
	v.mu.Unlock()
}

// Policies returns the policies of vhost, by name.
func (b *Broker) Policies(vhost string) []Policy {
	v := b.VHost(vhost)
	if v == nil {
		return nil
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	var out []Policy
	for _, p := range sortedPolicies(v.policies) {
		c := *p
		c.Definition = maps.Clone(p.Definition)
		out = append(out, c)
	}
	return out
}

// policyForQueueLocked returns the policy that applies to a queue. Caller
// holds v.mu.
func (v *VHost) policyForQueueLocked(name, qtype string) *Policy {
	return bestPolicy(sortedPolicies(v.policies), func(p *Policy) bool { return p.appliesToQueue(name, qtype) })
}

// applyPolicyLocked sets x's policy alternate exchange from the policies
// ps of its vhost (sorted by name). Caller holds v.mu.
func (x *Exchange) applyPolicyLocked(ps []*Policy) {
	x.policyAE, x.hasPolicyAE = "", false
	if p := bestPolicy(ps, func(p *Policy) bool { return p.appliesToExchange(x.Name) }); p != nil {
		if ae, ok := p.Definition["alternate-exchange"].(string); ok {
			x.policyAE, x.hasPolicyAE = ae, true
		}
	}
}

// applyPolicies recomputes every queue's and exchange's effective settings
// in v and applies the changes. Callers hold v.policyMu (or are alone, at
// recovery).
func (b *Broker) applyPolicies(v *VHost) {
	v.mu.Lock()
	ps := sortedPolicies(v.policies)
	for _, x := range v.exchanges {
		x.applyPolicyLocked(ps)
	}
	type change struct {
		q   *Queue
		cfg queueConfig
	}
	var changes []change
	for _, q := range v.queues {
		p := bestPolicy(ps, func(p *Policy) bool { return p.appliesToQueue(q.Name, q.qtype) })
		changes = append(changes, change{q, resolveQueueConfig(q.qtype, q.Args, p)})
	}
	v.mu.Unlock()
	for _, c := range changes {
		c.q.setConfig(c.cfg)
	}
}

// setConfig installs new effective settings and applies what changes at
// once. Message deadlines already set are not recomputed (B38).
func (q *Queue) setConfig(cfg queueConfig) {
	q.locked(func(t *txn) {
		if q.isDeleted() {
			return
		}
		old := q.cfg.Swap(&cfg)
		q.vhost.b.noteConsumerTimeout(cfg.consumerTimeout)
		if old.expires != cfg.expires {
			q.touchLocked()
		}
		q.enforceLimitsLocked(t)
		q.retryBacklogLocked(t)
	})
}

// retryBacklogs retries the waiting dead letters of every queue in v, after
// a topology change that may have given them a route (an exchange declared,
// a binding added, a policy changed).
func (b *Broker) retryBacklogs(v *VHost) {
	v.topoGen.Add(1)
	b.retryBacklogsIfChanged(v)
}

// retryBacklogsIfChanged retries the backlogs that may succeed now: the
// topology changed since their last try, or a target was full then.
func (b *Broker) retryBacklogsIfChanged(v *VHost) {
	if v.waiting.Load() == 0 {
		return
	}
	gen := v.topoGen.Load()
	v.mu.RLock()
	qs := make([]*Queue, 0, len(v.queues))
	for _, q := range v.queues {
		qs = append(qs, q)
	}
	v.mu.RUnlock()
	for _, q := range qs {
		q.mu.Lock()
		worth := q.backlogLen() > 0 && (q.backlogGen != gen || q.backlogFull)
		q.mu.Unlock()
		if worth {
			q.locked(func(t *txn) {
				q.backlogGen, q.backlogFull = gen, false
				q.retryBacklogLocked(t)
			})
		}
	}
}
