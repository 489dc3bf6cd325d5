package broker

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/brokerd/brokerd/broker/defs"
	"github.com/brokerd/brokerd/broker/policy"
	"github.com/brokerd/brokerd/broker/queue"
)

// Policy is a vhost-wide rule that sets queue (and exchange) behaviour by
// name pattern (package policy).
type Policy = policy.Policy

// PolicyError is a policy refused at set time; Msg is the reason in
// RabbitMQ's words.
type PolicyError = InvalidError

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
	if err := policy.Validate(&p, k.operator); err != nil {
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
	if err := w.Wait(); err != nil {
		v.restorePolicy(k, p.Name, old)
		b.applyPolicies(v) // a queue declared meanwhile may have taken it
		return fmt.Errorf("set %s '%s' in vhost '%s': %w", k.what, p.Name, vhost, err)
	}
	b.applyPolicies(v)
	v.TopoGen.Add(1)
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
	if err := w.Wait(); err != nil {
		v.restorePolicy(k, name, old)
		b.applyPolicies(v)
		return fmt.Errorf("clear %s '%s' in vhost '%s': %w", k.what, name, vhost, err)
	}
	b.applyPolicies(v)
	v.TopoGen.Add(1)
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
		for _, p := range policy.Sorted(v.policiesLocked(k)) {
			c := *p
			c.VHost = v.Name
			c.Definition = maps.Clone(p.Definition)
			out = append(out, c)
		}
		v.mu.RUnlock()
	}
	return out
}

// policyForQueueLocked returns the policies that apply to a queue, nil when
// none does. Caller holds v.mu.
func (v *VHost) policyForQueueLocked(name, qtype string) *policy.QueuePolicies {
	return policy.ForQueue(policy.Sorted(v.policies), policy.Sorted(v.opPolicies), name, qtype)
}

// applyPolicies recomputes every queue's and exchange's effective settings
// in v and applies the changes. Callers hold v.policyMu (or are alone, at
// recovery).
func (b *Broker) applyPolicies(v *VHost) {
	v.mu.Lock()
	ps, ops := policy.Sorted(v.policies), policy.Sorted(v.opPolicies)
	for _, x := range v.topo.Exchanges {
		x.ApplyPolicy(ps)
	}
	type change struct {
		q  *queue.Queue
		qp *policy.QueuePolicies
	}
	var changes []change
	for _, q := range v.topo.Queues {
		changes = append(changes, change{q, policy.ForQueue(ps, ops, q.Name, q.Type)})
	}
	v.mu.Unlock()
	for _, c := range changes {
		c.q.ApplyPolicy(c.qp)
	}
}
