package auth

import (
	"regexp"
	"strings"
	"sync"
)

// TopicPermission holds a user's topic permissions on one exchange of a
// vhost: the write and read patterns a routing key must match to be
// published to, or bound from, that exchange when it is a topic exchange
// (RabbitMQ's topic authorisation). Patterns are unanchored regular
// expressions; "" is "^$" (only the empty routing key), as in RabbitMQ.
// A pattern may hold the variables {username} and {vhost}, replaced by the
// connection's user and vhost before it is matched (RabbitMQ's
// expand_topic_permission: a plain text replacement, nothing escaped).
//
// Never changed once made; safe for concurrent use (the compiled
// expansions are cached behind a lock).
type TopicPermission struct {
	// Write and Read are the patterns' sources.
	Write, Read string
	write, read *regexp.Regexp // nil when the source holds a variable

	mu       sync.Mutex
	expanded map[string]*regexp.Regexp // by expanded source; mu
}

// maxExpanded bounds the cache of compiled expansions of one permission:
// beyond it an expansion is compiled for each check.
const maxExpanded = 256

// NewTopicPermission compiles the two patterns; a bad one is a
// *base.InvalidError.
func NewTopicPermission(write, read string) (*TopicPermission, error) {
	p := &TopicPermission{Write: write, Read: read}
	for _, x := range []struct {
		src string
		dst **regexp.Regexp
	}{{write, &p.write}, {read, &p.read}} {
		re, err := regexp.Compile(topicSource(x.src))
		if err != nil {
			return nil, invalidf("invalid_regexp: %q: %s", x.src, strings.TrimPrefix(err.Error(), "error parsing regexp: "))
		}
		if !strings.Contains(x.src, "{") {
			*x.dst = re
		}
	}
	return p, nil
}

// topicSource is the regexp a topic pattern's source stands for.
func topicSource(src string) string {
	if src == "" {
		return "^$"
	}
	return src
}

// TopicVars are the values of a topic pattern's variables.
type TopicVars struct {
	Username, VHost string
}

// expand replaces the variables of src, as RabbitMQ's
// expand_topic_permission does.
func (v TopicVars) expand(src string) string {
	return strings.NewReplacer("{username}", v.Username, "{vhost}", v.VHost).Replace(src)
}

// Allows reports whether p lets a routing key be written (k Write) to or
// read (k Read) from the exchange, with vars for the patterns' variables.
// A pattern whose expansion does not compile allows nothing.
func (p *TopicPermission) Allows(k Access, routingKey string, vars TopicVars) bool {
	re, src := p.write, p.Write
	if k == Read {
		re, src = p.read, p.Read
	}
	if re == nil {
		re = p.compiled(vars.expand(topicSource(src)))
		if re == nil {
			return false
		}
	}
	return re.MatchString(routingKey)
}

// compiled returns the regexp of an expanded source, from the cache when
// it is there; nil when it does not compile.
func (p *TopicPermission) compiled(src string) *regexp.Regexp {
	p.mu.Lock()
	re, ok := p.expanded[src]
	p.mu.Unlock()
	if ok {
		return re
	}
	re, err := regexp.Compile(src)
	if err != nil {
		re = nil
	}
	p.mu.Lock()
	if p.expanded == nil {
		p.expanded = map[string]*regexp.Regexp{}
	}
	if len(p.expanded) < maxExpanded {
		p.expanded[src] = re
	}
	p.mu.Unlock()
	return re
}

// TopicPermissionInfo is a user's topic permissions on an exchange of a
// vhost: the sources of the write and read patterns.
type TopicPermissionInfo struct {
	User, VHost, Exchange, Write, Read string
}
