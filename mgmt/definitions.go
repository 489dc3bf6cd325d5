package mgmt

import (
	"net/http"
	"strings"

	"github.com/brokerd/brokerd/broker"
)

// Definitions: the broker's topology as RabbitMQ's definitions file
// (rabbitmqctl export_definitions, GET /api/definitions), so a file
// exported from RabbitMQ imports into brokerd and back.
//
// Export lists users (with their password hashes and limits), vhosts
// (with their limits), permissions, topic permissions, vhost limits (as
// RabbitMQ's "vhost-limits" parameters),
// policies, operator policies (as RabbitMQ's "operator_policy"
// parameters), runtime parameters (shovels), global parameters (with
// cluster_name as /api/overview reports it), and the durable exchanges,
// queues and bindings; transient and exclusive objects, the default
// exchange and the amq.* ones are not definitions. A vhost's export (GET /api/definitions/{vhost}) has only its
// policies, parameters, queues, exchanges and bindings, without the vhost
// field of the objects that RabbitMQ omits there.
//
// Import creates or updates users, vhosts, permissions, operator policies
// (parameters of component operator_policy), runtime parameters of the
// components brokerd has (shovel: each checked as a PUT of it is, started
// once the import is durable), global parameters (but RabbitMQ's
// cluster_name and internal_cluster_id, which name a RabbitMQ cluster),
// policies, queues, exchanges and bindings, all of them or none
// (broker.ImportDefinitions: the whole file is checked first, then applied
// in one store batch; RabbitMQ's import stops at the first failure and
// keeps what came before it).
// Objects that exist already are left as they are when equivalent; a
// queue or exchange declared differently is refused, as a redeclaration
// would be. Vhost and user limits and topic permissions are imported and
// exported as RabbitMQ 3.10 has them (importtenancy.go). What brokerd
// cannot apply — parameters of other components (federation), unknown policy
// keys — refuses the file: the 400 lists every problem found, each naming
// its object (importdefs.go), and nothing is imported.

func (s *Server) definitionRoutes() {
	s.handle("GET /api/definitions", administrator, s.exportDefinitions)
	s.handle("POST /api/definitions", administrator, s.importDefinitions, largeBody)
	s.handle("GET /api/definitions/{vhost}", administrator, s.exportDefinitions)
	s.handle("POST /api/definitions/{vhost}", administrator, s.importDefinitions, largeBody)
}

// definitions is the file's layout, as exported (an import reads it into
// imported, importdefs.go).
type definitions struct {
	RabbitVersion    string           `json:"rabbit_version,omitempty"`
	RabbitMQVersion  string           `json:"rabbitmq_version,omitempty"`
	ProductName      string           `json:"product_name,omitempty"`
	ProductVersion   string           `json:"product_version,omitempty"`
	Users            []defUser        `json:"users,omitempty"`
	VHosts           []defVHost       `json:"vhosts,omitempty"`
	Permissions      []defPermission  `json:"permissions,omitempty"`
	TopicPermissions []any            `json:"topic_permissions,omitempty"`
	Parameters       []defParameter   `json:"parameters"`
	GlobalParameters []map[string]any `json:"global_parameters,omitempty"`
	Policies         []defPolicy      `json:"policies"`
	Queues           []defQueue       `json:"queues"`
	Exchanges        []defExchange    `json:"exchanges"`
	Bindings         []defBinding     `json:"bindings"`
}

type defUser struct {
	Name             string         `json:"name"`
	PasswordHash     string         `json:"password_hash"`
	HashingAlgorithm string         `json:"hashing_algorithm,omitempty"`
	Tags             any            `json:"tags"`
	Limits           map[string]any `json:"limits"`
}

type defVHost struct {
	Name        string        `json:"name"`
	Description string        `json:"description,omitempty"`
	Tags        any           `json:"tags,omitempty"`
	Metadata    *defVHostMeta `json:"metadata,omitempty"`
	Limits      any           `json:"limits,omitempty"`
}

type defVHostMeta struct {
	Description      string `json:"description,omitempty"`
	Tags             any    `json:"tags,omitempty"`
	DefaultQueueType string `json:"default_queue_type,omitempty"`
}

type defPermission struct {
	User      string `json:"user"`
	VHost     string `json:"vhost"`
	Configure string `json:"configure"`
	Write     string `json:"write"`
	Read      string `json:"read"`
}

type defParameter struct {
	Value     any    `json:"value"` // a defPolicyBody for an operator policy, a vhost's limits, the JSON of others
	VHost     string `json:"vhost,omitempty"`
	Component string `json:"component"`
	Name      string `json:"name"`
}

type defPolicyBody struct {
	Pattern    string         `json:"pattern"`
	Definition map[string]any `json:"definition"`
	Priority   any            `json:"priority"`
	ApplyTo    string         `json:"apply-to"`
}

type defPolicy struct {
	VHost      string         `json:"vhost"`
	Name       string         `json:"name"`
	Pattern    string         `json:"pattern"`
	ApplyTo    string         `json:"apply-to"`
	Definition map[string]any `json:"definition"`
	Priority   any            `json:"priority"`
}

type defQueue struct {
	Name       string         `json:"name"`
	VHost      string         `json:"vhost,omitempty"`
	Durable    *bool          `json:"durable"`
	AutoDelete bool           `json:"auto_delete"`
	Arguments  map[string]any `json:"arguments"`
}

type defExchange struct {
	Name       string         `json:"name"`
	VHost      string         `json:"vhost,omitempty"`
	Type       string         `json:"type"`
	Durable    *bool          `json:"durable"`
	AutoDelete bool           `json:"auto_delete"`
	Internal   bool           `json:"internal"`
	Arguments  map[string]any `json:"arguments"`
}

type defBinding struct {
	Source          string         `json:"source"`
	VHost           string         `json:"vhost,omitempty"`
	Destination     string         `json:"destination"`
	DestinationType string         `json:"destination_type"`
	RoutingKey      string         `json:"routing_key"`
	Arguments       map[string]any `json:"arguments"`
}

func boolPtr(b bool) *bool { return &b }

func (s *Server) exportDefinitions(u *broker.UserInfo, r *http.Request) (any, error) {
	one := r.PathValue("vhost")
	d := definitions{RabbitVersion: s.opts.Version, Parameters: []defParameter{}, Policies: []defPolicy{},
		Queues: []defQueue{}, Exchanges: []defExchange{}, Bindings: []defBinding{}}
	vhosts := []string{one}
	if one == "" {
		d.RabbitMQVersion, d.ProductName, d.ProductVersion = s.opts.Version, "brokerd", s.opts.Version
		vhosts = nil
		for _, ui := range s.b.Users() {
			tags := ui.Tags
			if tags == nil {
				tags = []string{}
			}
			limits := map[string]any{}
			if l, ok := s.b.UserLimitsOf(ui.Name); ok {
				limits = limitsJSON(l)
			}
			d.Users = append(d.Users, defUser{Name: ui.Name, PasswordHash: ui.PasswordHash, HashingAlgorithm: ui.HashingAlgorithm, Tags: tags, Limits: limits})
		}
		for _, v := range s.b.VHosts() {
			l, _ := s.b.VHostLimitsOf(v.Name)
			dv := defVHost{Name: v.Name, Limits: limitPairs(l)} // as rabbitmqctl export_definitions

			if v.Description != "" || len(v.Tags) > 0 || v.DefaultQueueType != "" {
				dv.Metadata = &defVHostMeta{Description: v.Description, Tags: v.Tags, DefaultQueueType: v.DefaultQueueType}
			}
			d.VHosts = append(d.VHosts, dv)
			vhosts = append(vhosts, v.Name)
		}
		for _, p := range s.b.Permissions() {
			d.Permissions = append(d.Permissions, defPermission(p))
		}
		d.TopicPermissions, d.GlobalParameters = []any{}, s.globalParameters()
		for _, p := range s.b.TopicPermissions() {
			d.TopicPermissions = append(d.TopicPermissions, topicPermissionJSON(p))
		}
	}
	// In a vhost's export the objects carry no vhost (policies and
	// parameters do), as RabbitMQ's.
	vh := func(v string) string {
		if one != "" {
			return ""
		}
		return v
	}
	for _, v := range vhosts {
		if l, _ := s.b.VHostLimitsOf(v); len(l) > 0 {
			d.Parameters = append(d.Parameters, defParameter{Component: vhostLimitsComponent, VHost: v, Name: "limits", Value: limitsJSON(l)})
		}
		for _, p := range s.b.OperatorPolicies(v) {
			d.Parameters = append(d.Parameters, defParameter{Component: "operator_policy", VHost: v, Name: p.Name,
				Value: defPolicyBody{Pattern: p.Pattern, Definition: p.Definition, Priority: p.Priority, ApplyTo: p.ApplyTo}})
		}
		for _, p := range s.b.Parameters(v, "") {
			d.Parameters = append(d.Parameters, defParameter{Component: p.Component, VHost: v, Name: p.Name, Value: p.Value})
		}
		for _, p := range s.b.Policies(v) {
			d.Policies = append(d.Policies, defPolicy{VHost: v, Name: p.Name, Pattern: p.Pattern, ApplyTo: p.ApplyTo, Definition: p.Definition, Priority: p.Priority})
		}
		for _, q := range s.b.Queues(v) {
			if q.Durable && !q.Exclusive {
				d.Queues = append(d.Queues, defQueue{Name: q.Name, VHost: vh(v), Durable: boolPtr(true), AutoDelete: q.AutoDelete, Arguments: tableJSON(q.Arguments)})
			}
		}
		for _, x := range s.b.Exchanges(v) {
			if x.Durable && x.Name != "" && !strings.HasPrefix(x.Name, "amq.") {
				d.Exchanges = append(d.Exchanges, defExchange{Name: x.Name, VHost: vh(v), Type: x.Type, Durable: boolPtr(true),
					AutoDelete: x.AutoDelete, Internal: x.Internal, Arguments: tableJSON(x.Arguments)})
			}
		}
		durableQ := map[string]bool{}
		for _, q := range d.Queues {
			if q.VHost == vh(v) {
				durableQ[q.Name] = true
			}
		}
		durableX := map[string]bool{}
		for _, x := range s.b.Exchanges(v) {
			durableX[x.Name] = x.Durable
		}
		for _, b := range s.b.Bindings(v) {
			dest := durableQ[b.Destination]
			if b.DestinationType == "exchange" {
				dest = durableX[b.Destination]
			}
			if b.Source != "" && durableX[b.Source] && dest {
				d.Bindings = append(d.Bindings, defBinding{Source: b.Source, VHost: vh(v), Destination: b.Destination,
					DestinationType: b.DestinationType, RoutingKey: b.RoutingKey, Arguments: tableJSON(b.Arguments)})
			}
		}
	}
	return d, nil
}

func (s *Server) importDefinitions(u *broker.UserInfo, r *http.Request) (any, error) {
	limit := s.opts.MaxDefinitionsBody
	if b, ok := r.Body.(*bodyReader); ok && b.limit > 0 {
		limit = b.limit
	}
	im, err := s.decodeImport(r.Body, limit)
	if err != nil {
		return nil, err
	}
	if err := s.importDefs(im, r.PathValue("vhost")); err != nil {
		return nil, err
	}
	s.log.Info("definitions imported", "by", u.Name, "vhost", r.PathValue("vhost"),
		"users", len(im.users), "vhosts", len(im.vhosts), "queues", len(im.queues), "exchanges", len(im.exchanges), "bindings", len(im.bindings))
	return noContent{}, nil
}
