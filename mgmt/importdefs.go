package mgmt

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker"
)

// imported is a definitions file as the import holds it: names as
// strings, and the JSON of what decodes into interface values (arguments,
// policy definitions, priorities) kept as text until its object is
// imported, one at a time, so that the import holds about the file's size
// however the file is made up (decodeImport).
type imported struct {
	users       []importUser
	vhosts      []importVHost
	permissions []defPermission
	topicPerms  []importTopicPerm
	globals     []importGlobal
	parameters  []importParameter
	policies    []importPolicy
	queues      []importQueue
	exchanges   []importExchange
	bindings    []importBinding
	// problems are the elements that did not decode (a field of the
	// wrong form), each named; they are reported with the rest.
	problems []string
}

type importUser struct {
	Name             string          `json:"name"`
	PasswordHash     string          `json:"password_hash"`
	HashingAlgorithm string          `json:"hashing_algorithm"`
	Tags             json.RawMessage `json:"tags"`
	Limits           json.RawMessage `json:"limits"`
}

type importVHost struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Tags        json.RawMessage `json:"tags"`
	Metadata    *struct {
		Description      string          `json:"description"`
		Tags             json.RawMessage `json:"tags"`
		DefaultQueueType string          `json:"default_queue_type"`
	} `json:"metadata"`
	Limits json.RawMessage `json:"limits"`
}

// importGlobal is a global parameter (RabbitMQ's cluster_name,
// internal_cluster_id, ...).
type importGlobal struct {
	Name  string          `json:"name"`
	Value json.RawMessage `json:"value"`
}

// importParameter is a runtime parameter: an operator policy
// (component operator_policy, its value the policy), or a parameter of a
// component the broker has (shovel).
type importParameter struct {
	Value     json.RawMessage `json:"value"`
	VHost     string          `json:"vhost"`
	Component string          `json:"component"`
	Name      string          `json:"name"`
}

// importPolicyValue is an operator_policy parameter's value.
type importPolicyValue struct {
	Pattern    string          `json:"pattern"`
	Definition json.RawMessage `json:"definition"`
	Priority   json.RawMessage `json:"priority"`
	ApplyTo    string          `json:"apply-to"`
}

type importPolicy struct {
	VHost      string          `json:"vhost"`
	Name       string          `json:"name"`
	Pattern    string          `json:"pattern"`
	ApplyTo    string          `json:"apply-to"`
	Definition json.RawMessage `json:"definition"`
	Priority   json.RawMessage `json:"priority"`
}

type importQueue struct {
	Name       string          `json:"name"`
	VHost      string          `json:"vhost"`
	Durable    *jsonBool       `json:"durable"`
	AutoDelete jsonBool        `json:"auto_delete"`
	Arguments  json.RawMessage `json:"arguments"`
}

// lavinDelayedType is the type LavinMQ exports its delayed exchanges
// under (with x-delayed-type among their arguments, as the plugin's), and
// imports as x-delayed-message: so does brokerd.
const lavinDelayedType = "x-delayed-exchange"

type importExchange struct {
	Name       string          `json:"name"`
	VHost      string          `json:"vhost"`
	Type       string          `json:"type"`
	Durable    *jsonBool       `json:"durable"`
	AutoDelete jsonBool        `json:"auto_delete"`
	Internal   jsonBool        `json:"internal"`
	Arguments  json.RawMessage `json:"arguments"`
}

type importBinding struct {
	Source          string          `json:"source"`
	VHost           string          `json:"vhost"`
	Destination     string          `json:"destination"`
	DestinationType string          `json:"destination_type"`
	RoutingKey      string          `json:"routing_key"`
	Arguments       json.RawMessage `json:"arguments"`
}

// decodeImport reads a definitions file from r: an object whose lists are
// read an element at a time (importDecoder), each at most eight frames'
// worth of JSON, and the whole at most twice the body's limit in memory.
// Keys brokerd does not read are skipped without being held.
func (s *Server) decodeImport(r io.Reader, bodyLimit int64) (*imported, error) {
	d := newImportDecoder(r, 8*int64(s.opts.FrameMax), s.opts.FrameMax/2, 2*bodyLimit)
	t, err := d.token()
	if err != nil {
		return nil, err
	}
	if t != json.Delim('{') {
		return nil, failedToParse()
	}
	var im imported
	for d.more() {
		t, err := d.token()
		if err != nil {
			return nil, err
		}
		key, _ := t.(string)
		switch key {
		case "users":
			err = decodeList(d, key, &im.users, &im.problems)
		case "vhosts":
			err = decodeList(d, key, &im.vhosts, &im.problems)
		case "permissions":
			err = decodeList(d, key, &im.permissions, &im.problems)
		case "topic_permissions":
			err = decodeList(d, key, &im.topicPerms, &im.problems)
		case "global_parameters":
			err = decodeList(d, key, &im.globals, &im.problems)
		case "parameters":
			err = decodeList(d, key, &im.parameters, &im.problems)
		case "policies":
			err = decodeList(d, key, &im.policies, &im.problems)
		case "queues":
			err = decodeList(d, key, &im.queues, &im.problems)
		case "exchanges":
			err = decodeList(d, key, &im.exchanges, &im.problems)
		case "bindings":
			err = decodeList(d, key, &im.bindings, &im.problems)
		default: // versions, product, what RabbitMQ adds
			err = d.skip()
		}
		if err != nil {
			return nil, err
		}
	}
	if t, err := d.token(); err != nil || t != json.Delim('}') {
		return nil, failedToParse()
	}
	if err := d.end(); err != nil {
		return nil, err
	}
	return &im, nil
}

// rawTags decodes a tags field: a comma-separated string or a list of
// strings; absent or null is nil.
func rawTags(raw json.RawMessage) ([]string, bool, error) {
	var v any
	if len(raw) > 0 {
		if err := decodeJSON(raw, &v); err != nil {
			return nil, false, err
		}
	}
	if v == nil {
		return nil, false, nil
	}
	tags, ok := tagList(v)
	if !ok {
		return nil, true, errors.New("tags must be a string or a list of strings")
	}
	return tags, true, nil
}

// rawObject decodes an object field (arguments, a definition); absent or
// null is nil.
func rawObject(raw json.RawMessage, field string) (map[string]any, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var m map[string]any
	if err := decodeJSON(raw, &m); err != nil {
		return nil, fmt.Errorf("%s must be an object", field)
	}
	return m, nil
}

// rawValue decodes a scalar field (a priority); absent is nil.
func rawValue(raw json.RawMessage) any {
	var v any
	if len(raw) > 0 {
		decodeJSON(raw, &v) // already checked to be JSON
	}
	return v
}

// ignoredGlobals are the global parameters that only name a RabbitMQ
// cluster: an export always has internal_cluster_id. They configure
// nothing here (brokerd's configuration names its cluster), so they are
// not imported; other global parameters are.
var ignoredGlobals = map[string]bool{"cluster_name": true, "internal_cluster_id": true}

// maxProblems bounds the problems a refusal lists.
const maxProblems = 100

// importDefs imports im whole, or refuses it whole (broker.ImportDefinitions);
// into (when set) is the vhost every object goes to, whatever its own
// vhost field says, and then the file's users, vhosts, permissions and
// global parameters are not imported (as RabbitMQ's vhost import). The
// refusal lists every problem found in the file: what does not convert
// (arguments, tags), what brokerd does not support, and what the broker
// refuses (CheckDefinitions).
func (s *Server) importDefs(im *imported, into string) error {
	problems := append([]string(nil), im.problems...)
	problem := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	vhostOf := func(v string) string {
		if into != "" {
			return into
		}
		if v == "" {
			return "/"
		}
		return v
	}
	var d broker.Definitions
	if into == "" {
		for _, du := range im.users {
			what := fmt.Sprintf("user '%s'", du.Name)
			tags, _, err := rawTags(du.Tags)
			if err != nil {
				problem("%s: tags: %s", what, err)
				continue
			}
			if l, err := rawLimits(du.Limits); err != nil {
				problem("%s: limits: %s", what, err)
			} else if len(l) > 0 {
				d.UserLimits = append(d.UserLimits, broker.LimitsInfo{Owner: du.Name, Limits: l})
			}
			spec := broker.UserSpec{Name: du.Name, PasswordHash: du.PasswordHash, HashingAlgorithm: du.HashingAlgorithm, Tags: tags}
			if err := s.checkUser(spec); err != nil {
				problem("%s: %s", what, errReason(err))
				continue
			}
			d.Users = append(d.Users, spec)
		}
		for _, dv := range im.vhosts {
			what := fmt.Sprintf("vhost '%s'", dv.Name)
			info := broker.VHostInfo{Name: dv.Name, Description: dv.Description}
			rawT := dv.Tags
			if dv.Metadata != nil {
				info.Description, info.DefaultQueueType = dv.Metadata.Description, dv.Metadata.DefaultQueueType
				rawT = dv.Metadata.Tags
			}
			tags, hasTags, _ := rawTags(rawT) // tags that are not strings are dropped
			info.Tags = tags
			if l, err := rawLimits(dv.Limits); err != nil {
				problem("%s: limits: %s", what, err)
			} else if len(l) > 0 && !im.hasVHostLimits(dv.Name) {
				// RabbitMQ reads a vhost's limits from its vhost-limits
				// parameter only; a file with them here alone gets them.
				d.VHostLimits = append(d.VHostLimits, broker.LimitsInfo{Owner: dv.Name, Limits: l})
			}
			if err := s.checkVHost(info); err != nil {
				problem("%s: %s", what, errReason(err))
				continue
			}
			d.VHosts = append(d.VHosts, broker.DefVHost{Info: info, Metadata: dv.Metadata != nil || dv.Description != "" || hasTags})
		}
		for _, p := range im.permissions {
			if err := s.checkStored("the permissions", len(p.User)+len(p.VHost)+len(p.Configure)+len(p.Write)+len(p.Read)); err != nil {
				problem("permissions of user '%s' in vhost '%s': %s", p.User, p.VHost, errReason(err))
				continue
			}
			d.Permissions = append(d.Permissions, broker.PermissionInfo(p))
		}
		for _, tp := range im.topicPerms {
			d.TopicPermissions = append(d.TopicPermissions, broker.TopicPermissionInfo(tp))
		}
		for _, g := range im.globals {
			if ignoredGlobals[g.Name] {
				continue
			}
			if len(g.Value) == 0 {
				problem("global parameter '%s': no value", g.Name)
				continue
			}
			d.GlobalParameters = append(d.GlobalParameters, broker.GlobalParameter{Name: g.Name, Value: g.Value})
		}
	}
	for _, p := range im.parameters {
		what := fmt.Sprintf("parameter '%s' of component '%s' in vhost '%s'", p.Name, p.Component, vhostOf(p.VHost))
		if p.Component == vhostLimitsComponent {
			if l, err := p.vhostLimits(); err != nil {
				problem("%s: %s", what, err)
			} else {
				d.VHostLimits = append(d.VHostLimits, broker.LimitsInfo{Owner: vhostOf(p.VHost), Limits: l})
			}
			continue
		}
		if p.Component != "operator_policy" {
			if len(p.Value) == 0 {
				problem("parameter '%s' of component '%s' in vhost '%s': no value", p.Name, p.Component, vhostOf(p.VHost))
				continue
			}
			// Checked by the broker: its component's validator.
			d.Parameters = append(d.Parameters, broker.Parameter{VHost: vhostOf(p.VHost), Component: p.Component, Name: p.Name, Value: p.Value})
			continue
		}
		var pv importPolicyValue
		if err := decodeJSON(p.Value, &pv); err != nil {
			problem("operator policy '%s' in vhost '%s': value must be an object", p.Name, vhostOf(p.VHost))
			continue
		}
		pol, err := s.importPolicy(p.Name, vhostOf(p.VHost), pv.Pattern, pv.ApplyTo, pv.Definition, pv.Priority)
		if err != nil {
			problem("operator policy '%s' in vhost '%s': %s", p.Name, vhostOf(p.VHost), errReason(err))
			continue
		}
		d.OperatorPolicies = append(d.OperatorPolicies, pol)
	}
	for _, p := range im.policies {
		pol, err := s.importPolicy(p.Name, vhostOf(p.VHost), p.Pattern, p.ApplyTo, p.Definition, p.Priority)
		if err != nil {
			problem("policy '%s' in vhost '%s': %s", p.Name, vhostOf(p.VHost), errReason(err))
			continue
		}
		d.Policies = append(d.Policies, pol)
	}
	args := func(raw json.RawMessage) (amqp.Table, error) {
		m, err := rawObject(raw, "arguments")
		if err != nil {
			return nil, err
		}
		t, err := tableFromJSON(m)
		if err != nil {
			return nil, fmt.Errorf("arguments: %w", err)
		}
		return t, nil
	}
	for _, q := range im.queues {
		what := fmt.Sprintf("queue '%s' in vhost '%s'", q.Name, vhostOf(q.VHost))
		a, err := args(q.Arguments)
		if err == nil {
			err = s.checkMethod(&amqp.QueueDeclare{Queue: q.Name, Arguments: a})
		}
		if err != nil {
			problem("%s: %s", what, errReason(err))
			continue
		}
		d.Queues = append(d.Queues, broker.DefQueue{VHost: vhostOf(q.VHost), Name: q.Name,
			Durable: q.Durable == nil || bool(*q.Durable), AutoDelete: bool(q.AutoDelete), Arguments: a})
	}
	for _, x := range im.exchanges {
		what := fmt.Sprintf("exchange '%s' in vhost '%s'", x.Name, vhostOf(x.VHost))
		if x.Type == lavinDelayedType {
			x.Type = "x-delayed-message"
		}
		a, err := args(x.Arguments)
		if err == nil {
			err = s.checkMethod(&amqp.ExchangeDeclare{Exchange: x.Name, Type: x.Type, Arguments: a})
		}
		if err != nil {
			problem("%s: %s", what, errReason(err))
			continue
		}
		d.Exchanges = append(d.Exchanges, broker.DefExchange{VHost: vhostOf(x.VHost), Name: x.Name, Type: x.Type,
			Durable: x.Durable == nil || bool(*x.Durable), AutoDelete: bool(x.AutoDelete), Internal: bool(x.Internal), Arguments: a})
	}
	for _, b := range im.bindings {
		what := fmt.Sprintf("binding from '%s' to %s '%s' in vhost '%s'", b.Source, b.DestinationType, b.Destination, vhostOf(b.VHost))
		a, err := args(b.Arguments)
		if err == nil {
			kind := "q"
			if b.DestinationType == "exchange" {
				kind = "e"
			}
			err = s.checkMethod(bindMethod(kind, b.Source, b.Destination, b.RoutingKey, a, true))
		}
		if err != nil {
			problem("%s: %s", what, errReason(err))
			continue
		}
		d.Bindings = append(d.Bindings, broker.DefBinding{VHost: vhostOf(b.VHost), Source: b.Source, Destination: b.Destination,
			DestinationType: b.DestinationType, RoutingKey: b.RoutingKey, Arguments: a})
	}
	var err error
	if len(problems) > 0 {
		err = s.b.CheckDefinitions(&d) // what the broker would refuse too, for one complete list
	} else {
		err = s.b.ImportDefinitions(&d)
	}
	var de *broker.DefinitionsError
	if errors.As(err, &de) {
		problems = append(problems, de.Problems...)
	} else if err != nil {
		return err
	}
	if len(problems) > 0 {
		return refused(problems)
	}
	return nil
}

// importPolicy converts a policy of the file, checked as a PUT of it is.
func (s *Server) importPolicy(name, vhost, pattern, applyTo string, rawDef, rawPriority json.RawMessage) (broker.Policy, error) {
	def, err := rawObject(rawDef, "definition")
	if err != nil {
		return broker.Policy{}, err
	}
	body := policyBody{Pattern: &pattern, Definition: def, Priority: rawValue(rawPriority), ApplyTo: applyTo}
	pol, err := body.policy(name)
	if err == nil {
		err = s.checkPolicy(pol)
	}
	pol.VHost = vhost
	return pol, err
}

// refused is the 400 of a definitions file refused whole: every problem,
// at most maxProblems of them.
func refused(problems []string) error {
	n := len(problems)
	if n > maxProblems {
		problems = append(problems[:maxProblems:maxProblems], fmt.Sprintf("and %d more", n-maxProblems))
	}
	return badRequest("definitions refused, nothing imported (%d problems): %s", n, strings.Join(problems, "; "))
}

// errReason is the text of a refusal for a problem line: an API error's
// reason, an AMQP error's text.
func errReason(err error) string {
	var he *httpError
	var ie *broker.InvalidError
	var ae *amqp.Error
	switch {
	case errors.As(err, &he):
		return he.reason
	case errors.As(err, &ie):
		return ie.Msg
	case errors.As(err, &ae):
		return ae.Text
	}
	return err.Error()
}

// emptyJSON reports whether raw is absent, null, {} or [].
func emptyJSON(raw json.RawMessage) bool {
	switch strings.Join(strings.Fields(string(raw)), "") {
	case "", "null", "{}", "[]":
		return true
	}
	return false
}
