package mgmt

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/brokerd/brokerd/broker"
)

// Runtime parameters and global parameters, as RabbitMQ's
// /api/parameters and /api/global-parameters (rabbit_mgmt_wm_parameter,
// rabbit_mgmt_wm_global_parameter):
//
//	GET    /api/parameters[/{component}[/{vhost}]]   list (policymaker: the
//	                                                 vhosts the user may access)
//	GET    /api/parameters/{component}/{vhost}/{name} {"value","vhost","component","name"}
//	PUT    ... {"value": JSON}                        201 new, 204 replaced; 400
//	                                                 "Validation failed\n\n<reason>\n"
//	                                                 for a value the component refuses
//	                                                 or a component brokerd has not
//	DELETE ...                                        204; 404 if there is none
//	GET    /api/global-parameters[/{name}]            {"name","value"} (administrator)
//	PUT    /api/global-parameters/{name} {"value"}    any JSON, not validated
//	DELETE /api/global-parameters/{name}
//
// Parameters of the components the broker has (broker.Options.Components:
// brokerd's "shovel") are served, and a vhost's limits as RabbitMQ keeps
// them, its "vhost-limits" parameter named "limits" (the same limits as
// /api/vhost-limits; setting or clearing them this way takes an
// administrator, as there); policies and operator policies have their own
// endpoints and are not listed here. Global parameters are
// stored as given, except cluster_name: on a cluster node it is the
// [cluster] name, as /api/overview reports it, listed read-only; setting
// or clearing it is refused, since brokerd's configuration names the
// cluster (RabbitMQ's PUT of it renames the cluster).

func (s *Server) parameterRoutes() {
	s.handle("GET /api/parameters", policymaker, s.listParameters)
	s.handle("GET /api/parameters/{component}", policymaker, s.listParameters)
	s.handle("GET /api/parameters/{component}/{vhost}", policymaker, s.listParameters)
	s.handle("GET /api/parameters/{component}/{vhost}/{name}", policymaker, s.getParameter)
	s.handle("PUT /api/parameters/{component}/{vhost}/{name}", policymaker, s.putParameter)
	s.handle("DELETE /api/parameters/{component}/{vhost}/{name}", policymaker, s.deleteParameter)
	s.handle("GET /api/global-parameters", administrator, s.listGlobalParameters)
	s.handle("GET /api/global-parameters/{name}", administrator, s.getGlobalParameter)
	s.handle("PUT /api/global-parameters/{name}", administrator, s.putGlobalParameter)
	s.handle("DELETE /api/global-parameters/{name}", administrator, s.deleteGlobalParameter)
}

func parameterJSON(p broker.Parameter) map[string]any {
	return map[string]any{"value": p.Value, "vhost": p.VHost, "component": p.Component, "name": p.Name}
}

func (s *Server) listParameters(u *broker.UserInfo, r *http.Request) (any, error) {
	out := []map[string]any{}
	component := r.PathValue("component")
	for _, v := range s.vhostsFor(u, r.PathValue("vhost")) {
		if component == "" || component == vhostLimitsComponent {
			if l, ok := s.b.VHostLimitsOf(v); ok && len(l) > 0 {
				out = append(out, vhostLimitsParameter(v, l))
			}
		}
		for _, p := range s.b.Parameters(v, component) {
			out = append(out, parameterJSON(p))
		}
	}
	return out, nil
}

// vhostLimitsParameter is vhost's limits as its vhost-limits parameter.
func vhostLimitsParameter(vhost string, l map[string]int64) map[string]any {
	return map[string]any{"value": limitsJSON(l), "vhost": vhost, "component": vhostLimitsComponent, "name": "limits"}
}

func (s *Server) getParameter(u *broker.UserInfo, r *http.Request) (any, error) {
	vhost, component, name := r.PathValue("vhost"), r.PathValue("component"), r.PathValue("name")
	if component == vhostLimitsComponent {
		if l, ok := s.b.VHostLimitsOf(vhost); ok && len(l) > 0 && name == "limits" {
			return vhostLimitsParameter(vhost, l), nil
		}
		return nil, notFound()
	}
	v, ok := s.b.LookupParameter(vhost, component, name)
	if !ok {
		return nil, notFound()
	}
	return parameterJSON(broker.Parameter{VHost: vhost, Component: component, Name: name, Value: v}), nil
}

// putVHostLimitsParameter replaces vhost's limits by value (RabbitMQ's
// vhost-limits parameter named "limits").
func (s *Server) putVHostLimitsParameter(u *broker.UserInfo, vhost, name string, value json.RawMessage) (any, error) {
	if !hasTag(u, "administrator") {
		return nil, notAuthorised("Not administrator user")
	}
	if name != "limits" {
		return nil, validationFailed("a vhost's limits are its parameter named 'limits'")
	}
	l, err := rawLimits(value)
	if err != nil {
		return nil, validationFailed(err.Error())
	}
	old, _ := s.b.VHostLimitsOf(vhost)
	existed := len(old) > 0
	if err := s.b.SetVHostLimits(vhost, l); err != nil {
		return nil, limitError(err, true)
	}
	if existed {
		return noContent{}, nil
	}
	return created{}, nil
}

// valueBody is the body of a PUT of a parameter: its value. RabbitMQ's
// clients send the component, vhost and name too; the path says them.
type valueBody struct {
	Value json.RawMessage `json:"value"`
}

func readValue(r *http.Request) (json.RawMessage, error) {
	var body valueBody
	if err := readJSON(r, &body); err != nil {
		return nil, err
	}
	if len(body.Value) == 0 {
		return nil, badRequest("[{key_missing,value}]")
	}
	return body.Value, nil
}

func (s *Server) putParameter(u *broker.UserInfo, r *http.Request) (any, error) {
	vhost, component, name := r.PathValue("vhost"), r.PathValue("component"), r.PathValue("name")
	value, err := readValue(r)
	if err != nil {
		return nil, err
	}
	if component == vhostLimitsComponent {
		return s.putVHostLimitsParameter(u, vhost, name, value)
	}
	_, existed := s.b.LookupParameter(vhost, component, name)
	if err := s.b.SetParameter(vhost, component, name, value); err != nil {
		var ie *broker.InvalidError
		switch {
		case errors.As(err, &ie):
			return nil, validationFailed(ie.Msg)
		case errors.Is(err, broker.ErrNotFound):
			return nil, vhostNotFound()
		}
		return nil, err
	}
	if existed {
		return noContent{}, nil
	}
	return created{}, nil
}

func (s *Server) deleteParameter(u *broker.UserInfo, r *http.Request) (any, error) {
	if vhost, component := r.PathValue("vhost"), r.PathValue("component"); component == vhostLimitsComponent {
		if !hasTag(u, "administrator") {
			return nil, notAuthorised("Not administrator user")
		}
		if l, ok := s.b.VHostLimitsOf(vhost); !ok || len(l) == 0 || r.PathValue("name") != "limits" {
			return nil, notFound()
		}
		if err := s.b.ClearVHostLimit(vhost, ""); err != nil {
			return nil, limitError(err, true)
		}
		return noContent{}, nil
	}
	if err := s.b.ClearParameter(r.PathValue("vhost"), r.PathValue("component"), r.PathValue("name")); err != nil {
		if errors.Is(err, broker.ErrNotFound) {
			return nil, notFound()
		}
		return nil, err
	}
	return noContent{}, nil
}

// clusterNameParameter is the global parameter brokerd derives from its
// configuration.
const clusterNameParameter = "cluster_name"

// globalParameters are the stored global parameters by name, with
// cluster_name on a cluster node. RabbitMQ 3.10 lists cluster_name only
// once it has been set (rabbitmqctl set_cluster_name); a brokerd cluster's
// name is set, in its configuration, and a single node has none.
func (s *Server) globalParameters() []map[string]any {
	out := []map[string]any{}
	st, cluster := s.clusterStatus()
	for _, g := range s.b.GlobalParameters() {
		if g.Name == clusterNameParameter {
			continue // never stored (refused, not imported)
		}
		if cluster && g.Name > clusterNameParameter {
			out = append(out, clusterNameJSON(st.Cluster))
			cluster = false
		}
		out = append(out, map[string]any{"name": g.Name, "value": g.Value})
	}
	if cluster {
		out = append(out, clusterNameJSON(st.Cluster))
	}
	return out
}

func clusterNameJSON(name string) map[string]any {
	return map[string]any{"name": clusterNameParameter, "value": name}
}

func (s *Server) listGlobalParameters(u *broker.UserInfo, r *http.Request) (any, error) {
	return s.globalParameters(), nil
}

func (s *Server) getGlobalParameter(u *broker.UserInfo, r *http.Request) (any, error) {
	for _, g := range s.globalParameters() {
		if g["name"] == r.PathValue("name") {
			return g, nil
		}
	}
	return nil, notFound()
}

// errClusterNameSet refuses a change of cluster_name.
func errClusterNameSet() error {
	return badRequest("cluster_name is brokerd's [cluster] name, set in its configuration file")
}

func (s *Server) putGlobalParameter(u *broker.UserInfo, r *http.Request) (any, error) {
	name := r.PathValue("name")
	value, err := readValue(r)
	if err != nil {
		return nil, err
	}
	if name == clusterNameParameter {
		return nil, errClusterNameSet()
	}
	_, existed := s.b.LookupGlobalParameter(name)
	if err := s.b.SetGlobalParameter(name, value); err != nil {
		var ie *broker.InvalidError
		if errors.As(err, &ie) {
			return nil, validationFailed(ie.Msg)
		}
		return nil, err
	}
	if existed {
		return noContent{}, nil
	}
	return created{}, nil
}

func (s *Server) deleteGlobalParameter(u *broker.UserInfo, r *http.Request) (any, error) {
	name := r.PathValue("name")
	if name == clusterNameParameter {
		return nil, errClusterNameSet()
	}
	if err := s.b.ClearGlobalParameter(name); err != nil {
		if errors.Is(err, broker.ErrNotFound) {
			return nil, notFound()
		}
		return nil, err
	}
	return noContent{}, nil
}
