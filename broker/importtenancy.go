package broker

import (
	"fmt"
	"maps"

	"github.com/brokerd/brokerd/broker/auth"
	"github.com/brokerd/brokerd/broker/defs"
)

// importTenancy is what a definitions import does to limits and topic
// permissions: each vhost's, user's and user-in-vhost's set as the import
// leaves it.
type importTenancy struct {
	vlimits map[string]limitSet
	ulimits map[string]limitSet
	topics  map[permKey]topicPerms
	// topicRecords are the records of the topic permissions the file
	// sets, found when planned (authMu keeps b.topicPerms as it was) so
	// that apply, under the vhosts' locks, need not take Broker.mu.
	topicRecords []defs.TopicPerm
}

// planTenancy checks the file's limits and topic permissions against the
// broker and the file, and computes what they become. Caller holds
// authMu.
func (p *importPlan) planTenancy(vhostKnown func(string) bool) {
	b, d := p.b, p.d
	t := importTenancy{vlimits: map[string]limitSet{}, ulimits: map[string]limitSet{}, topics: map[permKey]topicPerms{}}
	b.mu.RLock()
	defer b.mu.RUnlock()
	for _, l := range d.VHostLimits {
		what := fmt.Sprintf("limits of vhost '%s'", l.Owner)
		if !vhostKnown(l.Owner) {
			p.problem("%s: no vhost '%s' in the broker or the file", what, l.Owner)
			continue
		}
		if err := checkLimitNames("limits", l.Limits, LimitMaxConnections, LimitMaxQueues); err != nil {
			p.problem("%s: %s", what, errText(err))
			continue
		}
		t.vlimits[l.Owner] = maps.Clone(l.Limits)
	}
	for _, l := range d.UserLimits {
		what := fmt.Sprintf("limits of user '%s'", l.Owner)
		if !p.users[l.Owner] {
			p.problem("%s: no user '%s' in the broker or the file", what, l.Owner)
			continue
		}
		if err := checkLimitNames("user-limits", l.Limits, LimitMaxConnections, LimitMaxChannels); err != nil {
			p.problem("%s: %s", what, errText(err))
			continue
		}
		cur, ok := t.ulimits[l.Owner]
		if !ok {
			cur = maps.Clone(b.userLimits[l.Owner])
			if cur == nil {
				cur = limitSet{}
			}
		}
		maps.Copy(cur, l.Limits)
		t.ulimits[l.Owner] = cur
	}
	for _, tp := range d.TopicPermissions {
		what := fmt.Sprintf("topic permissions of user '%s' in vhost '%s' on exchange '%s'", tp.User, tp.VHost, tp.Exchange)
		switch {
		case !p.users[tp.User]:
			p.problem("%s: no user '%s' in the broker or the file", what, tp.User)
			continue
		case !vhostKnown(tp.VHost):
			p.problem("%s: no vhost '%s' in the broker or the file", what, tp.VHost)
			continue
		}
		perm, err := auth.NewTopicPermission(tp.Write, tp.Read)
		if err != nil {
			p.problem("%s: %s", what, errText(err))
			continue
		}
		k := permKey{user: tp.User, vhost: tp.VHost}
		cur, ok := t.topics[k]
		if !ok {
			cur = maps.Clone(b.topicPerms[k])
			if cur == nil {
				cur = topicPerms{}
			}
		}
		cur[tp.Exchange] = perm
		t.topics[k] = cur
		t.topicRecords = append(t.topicRecords, defs.TopicPerm{VHost: tp.VHost, User: tp.User, Exchange: tp.Exchange, Write: tp.Write, Read: tp.Read})
	}
	p.tenancy = t
}

// checkQueueLimits refuses an import whose new queues would take a vhost
// past its max-queues as it is before the import, with RabbitMQ's text
// (rabbit_definitions validate_limits). Caller holds the locks (lock).
func (p *importPlan) checkQueueLimits(newQueues map[string]map[string]*DefQueue) {
	for vhost, qs := range newQueues {
		t := p.targets[vhost]
		if t == nil || t.created || len(qs) == 0 {
			continue
		}
		l := t.v.limits.Load()
		if l == nil {
			continue
		}
		limit, ok := l.get(LimitMaxQueues)
		if !ok {
			continue
		}
		have := int64(len(t.v.topo.Queues))
		if limit == 0 {
			have = 0 // RabbitMQ reports none for a limit of 0
		}
		if limit == 0 || have+int64(len(qs)) > limit {
			p.problem("Adding %d queue(s) to virtual host \"%s\" would exceed the limit of %d queue(s).\n\nThis virtual host currently has %d queue(s) defined.\n\nImport aborted!",
				len(qs), vhost, limit, have)
		}
	}
}

// applyTenancy adds the records of the import's limits and topic
// permissions to its batch. Caller holds the vhosts' locks (not
// Broker.mu, which is never taken under them).
func (p *importPlan) applyTenancy() {
	for vhost, l := range p.tenancy.vlimits {
		if len(l) == 0 {
			p.mb.Delete(defs.VHostLimitsKey(vhost))
		} else {
			p.mb.Put(defs.EncodeVHostLimits(defs.Limits{Owner: vhost, Limits: l}))
		}
	}
	for user, l := range p.tenancy.ulimits {
		if len(l) > 0 {
			p.mb.Put(defs.EncodeUserLimits(defs.Limits{Owner: user, Limits: l}))
		}
	}
	for _, d := range p.tenancy.topicRecords {
		p.mb.Put(defs.EncodeTopicPerm(d))
	}
}

// publishTenancy installs the import's limits and topic permissions.
// Caller holds b.mu.
func (p *importPlan) publishTenancy() {
	b := p.b
	for vhost, l := range p.tenancy.vlimits {
		v := b.vhosts[vhost]
		if v == nil {
			continue
		}
		if len(l) == 0 {
			v.limits.Store(nil)
		} else {
			v.limits.Store(&l)
		}
	}
	for user, l := range p.tenancy.ulimits {
		if len(l) > 0 {
			b.userLimits[user] = l
		}
	}
	for k, tp := range p.tenancy.topics {
		b.setTopicPermsLocked(k, tp)
	}
}
