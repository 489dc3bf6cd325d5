package mgmt

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

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
	topicPerms  int
	parameters  []importParameter
	policies    []importPolicy
	queues      []importQueue
	exchanges   []importExchange
	bindings    []importBinding
}

type importUser struct {
	Name             string          `json:"name"`
	PasswordHash     string          `json:"password_hash"`
	HashingAlgorithm string          `json:"hashing_algorithm"`
	Tags             json.RawMessage `json:"tags"`
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
}

type importParameter struct {
	Value struct {
		Pattern    string          `json:"pattern"`
		Definition json.RawMessage `json:"definition"`
		Priority   json.RawMessage `json:"priority"`
		ApplyTo    string          `json:"apply-to"`
	} `json:"value"`
	VHost     string `json:"vhost"`
	Component string `json:"component"`
	Name      string `json:"name"`
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
	Durable    *bool           `json:"durable"`
	AutoDelete bool            `json:"auto_delete"`
	Arguments  json.RawMessage `json:"arguments"`
}

type importExchange struct {
	Name       string          `json:"name"`
	VHost      string          `json:"vhost"`
	Type       string          `json:"type"`
	Durable    *bool           `json:"durable"`
	AutoDelete bool            `json:"auto_delete"`
	Internal   bool            `json:"internal"`
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
	add := func(list string, dst func() any) func(i int) error {
		return func(i int) error { return d.object(elemName(list, i), dst()) }
	}
	for d.more() {
		t, err := d.token()
		if err != nil {
			return nil, err
		}
		key, _ := t.(string)
		switch key {
		case "users":
			err = d.list(key, add(key, func() any { im.users = append(im.users, importUser{}); return &im.users[len(im.users)-1] }))
		case "vhosts":
			err = d.list(key, add(key, func() any { im.vhosts = append(im.vhosts, importVHost{}); return &im.vhosts[len(im.vhosts)-1] }))
		case "permissions":
			err = d.list(key, add(key, func() any {
				im.permissions = append(im.permissions, defPermission{})
				return &im.permissions[len(im.permissions)-1]
			}))
		case "topic_permissions":
			err = d.list(key, func(i int) error { im.topicPerms++; return d.skip() })
		case "parameters":
			err = d.list(key, add(key, func() any {
				im.parameters = append(im.parameters, importParameter{})
				return &im.parameters[len(im.parameters)-1]
			}))
		case "policies":
			err = d.list(key, add(key, func() any { im.policies = append(im.policies, importPolicy{}); return &im.policies[len(im.policies)-1] }))
		case "queues":
			err = d.list(key, add(key, func() any { im.queues = append(im.queues, importQueue{}); return &im.queues[len(im.queues)-1] }))
		case "exchanges":
			err = d.list(key, add(key, func() any {
				im.exchanges = append(im.exchanges, importExchange{})
				return &im.exchanges[len(im.exchanges)-1]
			}))
		case "bindings":
			err = d.list(key, add(key, func() any {
				im.bindings = append(im.bindings, importBinding{})
				return &im.bindings[len(im.bindings)-1]
			}))
		default: // versions, product, global_parameters, what RabbitMQ adds
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

// importDefs imports im; into (when set) is the vhost every object goes
// to, whatever its own vhost field says.
func (s *Server) importDefs(im *imported, into string) error {
	vhostOf := func(v string) string {
		if into != "" {
			return into
		}
		if v == "" {
			return "/"
		}
		return v
	}
	if into == "" {
		for _, du := range im.users {
			what := fmt.Sprintf("user '%s'", du.Name)
			tags, _, err := rawTags(du.Tags)
			if err != nil {
				return importError(what, err)
			}
			spec := broker.UserSpec{Name: du.Name, PasswordHash: du.PasswordHash, HashingAlgorithm: du.HashingAlgorithm, Tags: tags}
			if err := s.checkUser(spec); err != nil {
				return importError(what, err)
			}
			if err := s.b.PutUser(spec); err != nil {
				return importError(what, err)
			}
		}
		for _, dv := range im.vhosts {
			what := fmt.Sprintf("vhost '%s'", dv.Name)
			info := broker.VHostInfo{Name: dv.Name, Description: dv.Description}
			rawT := dv.Tags
			if dv.Metadata != nil {
				info.Description, info.DefaultQueueType = dv.Metadata.Description, dv.Metadata.DefaultQueueType
				rawT = dv.Metadata.Tags
			}
			tags, hasTags, err := rawTags(rawT)
			if err != nil && hasTags {
				err = nil // as before: tags that are not strings are dropped
			}
			info.Tags = tags
			if _, exists := s.vhostInfo(dv.Name); exists && dv.Metadata == nil && dv.Description == "" && !hasTags {
				continue // nothing to change: keep its metadata
			}
			if err := s.checkVHost(info); err != nil {
				return importError(what, err)
			}
			if err := s.b.PutVHost(info); err != nil {
				return importError(what, err)
			}
		}
		for _, p := range im.permissions {
			what := fmt.Sprintf("permissions of user '%s' in vhost '%s'", p.User, p.VHost)
			if err := s.checkStored("the permissions", len(p.User)+len(p.VHost)+len(p.Configure)+len(p.Write)+len(p.Read)); err != nil {
				return importError(what, err)
			}
			if err := s.b.SetPermissions(p.User, p.VHost, p.Configure, p.Write, p.Read); err != nil {
				return importError(what, err)
			}
		}
		if im.topicPerms > 0 {
			s.log.Warn("definitions import: topic permissions are not supported; skipped", "count", im.topicPerms)
		}
	}
	for _, p := range im.parameters {
		if p.Component != "operator_policy" {
			s.log.Warn("definitions import: parameter of an unsupported component skipped", "component", p.Component, "name", p.Name, "vhost", p.VHost)
			continue
		}
		what := fmt.Sprintf("operator policy '%s' in vhost '%s'", p.Name, vhostOf(p.VHost))
		def, err := rawObject(p.Value.Definition, "definition")
		if err != nil {
			return importError(what, err)
		}
		body := policyBody{Pattern: &p.Value.Pattern, Definition: def, Priority: rawValue(p.Value.Priority), ApplyTo: p.Value.ApplyTo}
		pol, err := body.policy(p.Name)
		if err == nil {
			err = s.checkPolicy(pol)
		}
		if err == nil {
			err = s.b.SetOperatorPolicy(vhostOf(p.VHost), pol)
		}
		if err != nil {
			return importError(what, err)
		}
	}
	for _, p := range im.policies {
		what := fmt.Sprintf("policy '%s' in vhost '%s'", p.Name, vhostOf(p.VHost))
		def, err := rawObject(p.Definition, "definition")
		if err != nil {
			return importError(what, err)
		}
		body := policyBody{Pattern: &p.Pattern, Definition: def, Priority: rawValue(p.Priority), ApplyTo: p.ApplyTo}
		pol, err := body.policy(p.Name)
		if err == nil {
			err = s.checkPolicy(pol)
		}
		if err == nil {
			err = s.b.SetPolicy(vhostOf(p.VHost), pol)
		}
		if err != nil {
			return importError(what, err)
		}
	}
	// Queues, exchanges and bindings are declared as the broker itself,
	// with every permission (RabbitMQ's import checks none either).
	declare := func(vhost, what string, m amqp.Method) error {
		if err := s.checkMethod(m); err != nil {
			return importError(what, err)
		}
		d, err := s.b.OpenDirect("", vhost)
		if err != nil {
			return importError(what, err)
		}
		defer d.Close()
		if _, aerr := d.Do(m); aerr != nil {
			return importError(what, aerr)
		}
		return nil
	}
	args := func(raw json.RawMessage) (amqp.Table, error) {
		m, err := rawObject(raw, "arguments")
		if err != nil {
			return nil, err
		}
		return tableFromJSON(m)
	}
	for _, q := range im.queues {
		what := fmt.Sprintf("queue '%s' in vhost '%s'", q.Name, vhostOf(q.VHost))
		a, err := args(q.Arguments)
		if err != nil {
			return importError(what, err)
		}
		m := &amqp.QueueDeclare{Queue: q.Name, Durable: q.Durable == nil || *q.Durable, AutoDelete: q.AutoDelete, Arguments: a}
		if err := declare(vhostOf(q.VHost), what, m); err != nil {
			return err
		}
	}
	for _, x := range im.exchanges {
		what := fmt.Sprintf("exchange '%s' in vhost '%s'", x.Name, vhostOf(x.VHost))
		a, err := args(x.Arguments)
		if err != nil {
			return importError(what, err)
		}
		m := &amqp.ExchangeDeclare{Exchange: x.Name, Type: x.Type, Durable: x.Durable == nil || *x.Durable,
			AutoDelete: x.AutoDelete, Internal: x.Internal, Arguments: a}
		if err := declare(vhostOf(x.VHost), what, m); err != nil {
			return err
		}
	}
	for _, b := range im.bindings {
		what := fmt.Sprintf("binding from '%s' to %s '%s' in vhost '%s'", b.Source, b.DestinationType, b.Destination, vhostOf(b.VHost))
		a, err := args(b.Arguments)
		if err != nil {
			return importError(what, err)
		}
		kind := "q"
		if b.DestinationType == "exchange" {
			kind = "e"
		}
		m := bindMethod(kind, b.Source, b.Destination, b.RoutingKey, a, true)
		if err := declare(vhostOf(b.VHost), what, m); err != nil {
			return err
		}
	}
	return nil
}
