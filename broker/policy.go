package broker

import (
	"cmp"
	"fmt"
	"maps"
	"regexp"
	"slices"

	"github.com/brokerd/brokerd/broker/defs"
)

// Policy is a vhost-wide rule that sets queue (and exchange) behaviour by
// name pattern, as RabbitMQ's policies do (SPEC §6, reference §3). The
// same type carries operator policies (opolicy.go).
type Policy struct {
	// VHost is the policy's vhost, filled in by Policies and
	// OperatorPolicies; SetPolicy and SetOperatorPolicy ignore it.
	VHost    string
	Name     string
	Pattern  string // regular expression, unanchored
	ApplyTo  string // all (default), queues, exchanges, classic_queues, quorum_queues
	Priority int
	// Definition maps policy keys (policykeys.go) to values: strings,
	// booleans, lists, or numbers as Go integers, integral float64 or
	// json.Number.
	Definition map[string]any

	re *regexp.Regexp
}

// PolicyError is a policy refused at set time; Msg is the reason in
// RabbitMQ's words.
type PolicyError = InvalidError

func policyErr(format string, args ...any) error { return invalidf(format, args...) }

// validatePolicy checks a policy as RabbitMQ's rabbit_policy validation
// does, with its texts; operator selects the operator policies' keys.
func validatePolicy(p *Policy, operator bool) error {
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

// appliesToQueue reports whether p matches queue q (P1): pattern, apply-to,
// and every key supported by the queue's type. A key that configures
// exchanges does not stop a policy from applying to queues, as in
// RabbitMQ: it is ignored there.
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
		pk := policyKeys[k]
		if (qtype == queueQuorum && pk.notQuorum) || (qtype != queueQuorum && pk.notClassic) {
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
// name, so the choice is stable; RabbitMQ leaves it undefined).
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

// sortedPolicies returns a vhost's policies of one kind by name.
func sortedPolicies(m map[string]*Policy) []*Policy {
	out := make([]*Policy, 0, len(m))
	for _, p := range m {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *Policy) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// policyKind is one of a vhost's two sets of policies: the user policies
// (RabbitMQ's "policy" parameters) or the operator policies
// ("operator_policy").
type policyKind struct {
	operator bool
	meta     string // its records' key prefix (broker/defs)
	what     string // in messages
}

var (
	userPolicies     = &policyKind{meta: defs.PrefixPolicy, what: "policy"}
	operatorPolicies = &policyKind{operator: true, meta: defs.PrefixOperatorPolicy, what: "operator policy"}
)

// policiesLocked returns v's policies of kind k; nil (empty) for operator
// policies until one is set. Caller holds v.mu, shared at least.
func (v *VHost) policiesLocked(k *policyKind) map[string]*Policy {
	if k.operator {
		return v.opPolicies
	}
	return v.policies
}

// policiesForWriteLocked is policiesLocked, creating the operator policies'
// map. Caller holds v.mu exclusively.
func (v *VHost) policiesForWriteLocked(k *policyKind) map[string]*Policy {
	if k.operator && v.opPolicies == nil {
		v.opPolicies = make(map[string]*Policy)
	}
	return v.policiesLocked(k)
}

// SetPolicy adds or replaces a policy of vhost and applies it at once to
// existing queues and exchanges: limits are re-checked (drop-head may evict
// now), the dead letter exchange switches, waiting dead letters are retried.
// It returns once the policy is durable. An invalid policy is refused with
// a *PolicyError and changes nothing; an unknown vhost with an error
// wrapping ErrNotFound. Safe for concurrent use.
func (b *Broker) SetPolicy(vhost string, p Policy) error {
	return b.setPolicy(userPolicies, vhost, p)
}

// ClearPolicy removes a policy; queues fall back to their arguments (or the
// next matching policy) at once. A missing vhost or policy is an error
// wrapping ErrNotFound.
func (b *Broker) ClearPolicy(vhost, name string) error {
	return b.clearPolicy(userPolicies, vhost, name)
}

// Policies returns the policies of vhost by name, or, for vhost "", every
// vhost's, by vhost then name. An unknown vhost has none.
func (b *Broker) Policies(vhost string) []Policy {
	return b.listPolicies(userPolicies, vhost)
}

func (b *Broker) setPolicy(k *policyKind, vhost string, p Policy) error {
	v := b.VHost(vhost)
	if v == nil {
		return notFoundf("no vhost '%s'", vhost)
	}
	p.VHost = ""
	p.Definition = maps.Clone(p.Definition)
	if err := validatePolicy(&p, k.operator); err != nil {
		return err
	}
	// policyMu makes the change, its store write and its application to
	// the queues one step with respect to other policy changes.
	v.policyMu.Lock()
	defer v.policyMu.Unlock()
	v.mu.Lock()
	m := v.policiesForWriteLocked(k)
	old := m[p.Name]
	m[p.Name] = &p
	var mb defs.Batch
	mb.Put(defs.EncodePolicy(policyDefOf(k, vhost, &p)))
	w := b.startMeta(&mb)
	v.mu.Unlock()
	if err := w.wait(); err != nil {
		v.restorePolicy(k, p.Name, old)
		b.applyPolicies(v) // a queue declared meanwhile may have taken it
		return fmt.Errorf("set %s '%s' in vhost '%s': %w", k.what, p.Name, vhost, err)
	}
	b.applyPolicies(v)
	v.topoGen.Add(1)
	return nil
}

func (b *Broker) clearPolicy(k *policyKind, vhost, name string) error {
	v := b.VHost(vhost)
	if v == nil {
		return notFoundf("no vhost '%s'", vhost)
	}
	v.policyMu.Lock()
	defer v.policyMu.Unlock()
	v.mu.Lock()
	m := v.policiesForWriteLocked(k)
	old := m[name]
	if old == nil {
		v.mu.Unlock()
		return notFoundf("no %s '%s' in vhost '%s'", k.what, name, vhost)
	}
	delete(m, name)
	var mb defs.Batch
	mb.Delete(defs.PolicyKey(k.operator, vhost, name))
	w := b.startMeta(&mb)
	v.mu.Unlock()
	if err := w.wait(); err != nil {
		v.restorePolicy(k, name, old)
		b.applyPolicies(v)
		return fmt.Errorf("clear %s '%s' in vhost '%s': %w", k.what, name, vhost, err)
	}
	b.applyPolicies(v)
	v.topoGen.Add(1)
	return nil
}

// restorePolicy undoes a policy change the store failed to take (the
// policy was never applied to queues). Caller holds v.policyMu, so no other
// change came in between.
func (v *VHost) restorePolicy(k *policyKind, name string, old *Policy) {
	v.mu.Lock()
	m := v.policiesForWriteLocked(k)
	if old != nil {
		m[name] = old
	} else {
		delete(m, name)
	}
	v.mu.Unlock()
}

func (b *Broker) listPolicies(k *policyKind, vhost string) []Policy {
	var vs []*VHost
	if vhost != "" {
		if v := b.VHost(vhost); v != nil {
			vs = append(vs, v)
		}
	} else {
		b.mu.RLock()
		for _, v := range b.vhosts {
			vs = append(vs, v)
		}
		b.mu.RUnlock()
		slices.SortFunc(vs, func(a, b *VHost) int { return cmp.Compare(a.Name, b.Name) })
	}
	var out []Policy
	for _, v := range vs {
		v.mu.RLock()
		for _, p := range sortedPolicies(v.policiesLocked(k)) {
			c := *p
			c.VHost = v.Name
			c.Definition = maps.Clone(p.Definition)
			out = append(out, c)
		}
		v.mu.RUnlock()
	}
	return out
}

// queuePolicies are the policies in force on one queue (P2): the user
// policy and the operator policy of highest priority that apply to it,
// each nil when none does.
type queuePolicies struct{ user, op *Policy }

// queuePoliciesOf picks a queue's policies among ps and ops (sorted by
// name).
func queuePoliciesOf(ps, ops []*Policy, name, qtype string) *queuePolicies {
	match := func(p *Policy) bool { return p.appliesToQueue(name, qtype) }
	qp := &queuePolicies{user: bestPolicy(ps, match), op: bestPolicy(ops, match)}
	if qp.user == nil && qp.op == nil {
		return nil
	}
	return qp
}

// policyForQueueLocked returns the policies that apply to a queue, nil when
// none does. Caller holds v.mu.
func (v *VHost) policyForQueueLocked(name, qtype string) *queuePolicies {
	return queuePoliciesOf(sortedPolicies(v.policies), sortedPolicies(v.opPolicies), name, qtype)
}

// applyPolicyLocked sets x's policy alternate exchange from the policies
// ps of its vhost (sorted by name). Operator policies hold no exchange
// key. Caller holds v.mu.
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
	ps, ops := sortedPolicies(v.policies), sortedPolicies(v.opPolicies)
	for _, x := range v.exchanges {
		x.applyPolicyLocked(ps)
	}
	type change struct {
		q   *Queue
		cfg queueConfig
	}
	var changes []change
	for _, q := range v.queues {
		changes = append(changes, change{q, resolveQueueConfig(q.qtype, q.Args, queuePoliciesOf(ps, ops, q.Name, q.qtype))})
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
