package mgmt

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/brokerd/brokerd/broker"
)

// Vhost limits, user limits and topic permissions (broker/tenancy.go),
// with RabbitMQ 3.10's shapes and authorisation (rabbit_mgmt_wm_limits,
// _limit, _user_limits, _user_limit, _topic_permission(s)):
//
//	GET    /api/vhost-limits[/{vhost}]             management, the vhosts it sees:
//	                                               [{"vhost","value":{name: n}}]
//	PUT    /api/vhost-limits/{vhost}/{name}        administrator, {"value": n}
//	DELETE /api/vhost-limits/{vhost}/{name}        administrator
//	GET    /api/user-limits[/{user}]               management (RabbitMQ's vhost_visible):
//	                                               [{"user","value":{name: n}}]
//	PUT    /api/user-limits/{user}/{name}          administrator, {"value": n}
//	DELETE /api/user-limits/{user}/{name}          administrator ("all": every limit)
//	GET    /api/topic-permissions                  administrator: [{"user","vhost","exchange","write","read"}]
//	GET    /api/topic-permissions/{vhost}/{user}   administrator; 404 when none
//	PUT    /api/topic-permissions/{vhost}/{user}   administrator, {"exchange","write","read"}
//	DELETE /api/topic-permissions/{vhost}/{user}[/{exchange}]
//	GET    /api/vhosts/{vhost}/topic-permissions, /api/users/{user}/topic-permissions
//
// A vhost without limits is left out of the lists, as in RabbitMQ.

func (s *Server) tenancyRoutes() {
	s.handle("GET /api/vhost-limits", management, s.listVHostLimits)
	s.handle("GET /api/vhost-limits/{vhost}", management, s.listVHostLimits)
	s.handle("PUT /api/vhost-limits/{vhost}/{name}", administrator, s.putVHostLimit)
	s.handle("DELETE /api/vhost-limits/{vhost}/{name}", administrator, s.deleteVHostLimit)
	s.handle("GET /api/user-limits", management, s.listUserLimits)
	s.handle("GET /api/user-limits/{user}", management, s.listUserLimits)
	s.handle("PUT /api/user-limits/{user}/{name}", administrator, s.putUserLimit)
	s.handle("DELETE /api/user-limits/{user}/{name}", administrator, s.deleteUserLimit)
	// {tvhost}: an unknown vhost is RabbitMQ's 400 vhost_or_user_not_found
	// on a PUT, as for permissions.
	s.handle("GET /api/topic-permissions", administrator, s.listTopicPermissions(""))
	s.handle("GET /api/topic-permissions/{tvhost}/{user}", administrator, s.getTopicPermission)
	s.handle("PUT /api/topic-permissions/{tvhost}/{user}", administrator, s.putTopicPermission)
	s.handle("DELETE /api/topic-permissions/{tvhost}/{user}", administrator, s.deleteTopicPermission)
	s.handle("DELETE /api/topic-permissions/{tvhost}/{user}/{exchange}", administrator, s.deleteTopicPermission)
	s.handle("GET /api/vhosts/{vhost}/topic-permissions", administrator, s.listTopicPermissions("vhost"))
	s.handle("GET /api/users/{user}/topic-permissions", administrator, s.listTopicPermissions("user"))
}

func limitsJSON(l map[string]int64) map[string]any {
	out := make(map[string]any, len(l))
	for k, v := range l {
		out[k] = v
	}
	return out
}

func (s *Server) listVHostLimits(u *broker.UserInfo, r *http.Request) (any, error) {
	one := r.PathValue("vhost")
	visible := map[string]bool{}
	for _, v := range s.visibleVHosts(u) {
		visible[v] = true
	}
	out := []map[string]any{}
	for _, l := range s.b.VHostLimits() {
		if (one == "" && visible[l.Owner]) || l.Owner == one {
			out = append(out, map[string]any{"vhost": l.Owner, "value": limitsJSON(l.Limits)})
		}
	}
	return out, nil
}

func (s *Server) listUserLimits(u *broker.UserInfo, r *http.Request) (any, error) {
	one := r.PathValue("user")
	if one != "" {
		if _, ok := s.b.User(one); !ok {
			return nil, notFound()
		}
	}
	out := []map[string]any{}
	for _, l := range s.b.UserLimits() {
		if one == "" || l.Owner == one {
			out = append(out, map[string]any{"user": l.Owner, "value": limitsJSON(l.Limits)})
		}
	}
	return out, nil
}

// limitValue reads a limit PUT's {"value": n}, refused as RabbitMQ
// refuses it: the key missing, or not an integer (its parameter
// validation's text; wrapped, as a vhost's limits are a runtime
// parameter: "Validation failed\n\n...\n").
func limitValue(r *http.Request, name string, wrapped bool) (int64, error) {
	var body struct {
		Value json.RawMessage `json:"value"`
	}
	if err := readJSON(r, &body); err != nil {
		return 0, err
	}
	if len(body.Value) == 0 {
		return 0, badRequest("[{key_missing,value}]")
	}
	v, err := limitInt(name, body.Value)
	if err != nil {
		return 0, limitRefused(err.Error(), wrapped)
	}
	return v, nil
}

// limitRefused is the 400 of a limit refused: for a vhost's wrapped
// as rabbit_runtime_parameters words it, for a user's bare.
func limitRefused(msg string, wrapped bool) error {
	if wrapped {
		return badRequest("Validation failed\n\n%s\n", msg)
	}
	return badRequest("%s", msg)
}

// limitInt is a limit's JSON value as an integer, or RabbitMQ's
// validation text.
func limitInt(name string, raw json.RawMessage) (int64, error) {
	var x any // not a json.Number: it would take the string "5" too
	if err := decodeJSON(raw, &x); err == nil {
		if n, ok := x.(json.Number); ok {
			if v, err := n.Int64(); err == nil {
				return v, nil
			}
		}
	}
	return 0, fmt.Errorf("%s should be a number, actually was %s", name, erlTerm(raw))
}

// erlTerm renders a JSON value roughly as Erlang's ~p prints its decoded
// term (strings as binaries), for validation texts.
func erlTerm(raw json.RawMessage) string {
	var v any
	if decodeJSON(raw, &v) != nil {
		return string(raw)
	}
	if s, ok := v.(string); ok {
		return fmt.Sprintf("<<%q>>", s)
	}
	return strings.TrimSpace(string(raw))
}

// limitError maps a broker refusal of a limit onto RabbitMQ's answers:
// an unknown vhost is 404 vhost_not_found, an unknown user 400
// no_such_user (RabbitMQ's reason is the term [no_such_user, NAME]).
func limitError(err error, vhost bool) error {
	var ie *broker.InvalidError
	switch {
	case errors.Is(err, broker.ErrNotFound) && vhost:
		return vhostNotFound()
	case errors.Is(err, broker.ErrNotFound):
		return badRequest("no_such_user")
	case errors.As(err, &ie):
		return limitRefused(ie.Msg, vhost)
	}
	return err
}

func (s *Server) putVHostLimit(u *broker.UserInfo, r *http.Request) (any, error) {
	name := r.PathValue("name")
	v, err := limitValue(r, name, true)
	if err != nil {
		return nil, err
	}
	if err := s.b.SetVHostLimit(r.PathValue("vhost"), name, v); err != nil {
		return nil, limitError(err, true)
	}
	return noContent{}, nil
}

func (s *Server) deleteVHostLimit(u *broker.UserInfo, r *http.Request) (any, error) {
	if err := s.b.ClearVHostLimit(r.PathValue("vhost"), r.PathValue("name")); err != nil {
		return nil, limitError(err, true)
	}
	return noContent{}, nil
}

func (s *Server) putUserLimit(u *broker.UserInfo, r *http.Request) (any, error) {
	name := r.PathValue("name")
	v, err := limitValue(r, name, false)
	if err != nil {
		return nil, err
	}
	if err := s.b.SetUserLimits(r.PathValue("user"), map[string]int64{name: v}); err != nil {
		return nil, limitError(err, false)
	}
	return noContent{}, nil
}

func (s *Server) deleteUserLimit(u *broker.UserInfo, r *http.Request) (any, error) {
	if err := s.b.ClearUserLimit(r.PathValue("user"), r.PathValue("name")); err != nil {
		return nil, limitError(err, false)
	}
	return noContent{}, nil
}

func topicPermissionJSON(p broker.TopicPermissionInfo) map[string]any {
	return map[string]any{"user": p.User, "vhost": p.VHost, "exchange": p.Exchange, "write": p.Write, "read": p.Read}
}

// listTopicPermissions lists them all (by ""), or a vhost's or a user's
// (by "vhost", "user"; an unknown user is 404).
func (s *Server) listTopicPermissions(by string) handlerFunc {
	return func(u *broker.UserInfo, r *http.Request) (any, error) {
		if by == "user" {
			if _, ok := s.b.User(r.PathValue("user")); !ok {
				return nil, notFound()
			}
		}
		out := []map[string]any{}
		for _, p := range s.b.TopicPermissions() {
			if by == "" || (by == "vhost" && p.VHost == r.PathValue("vhost")) || (by == "user" && p.User == r.PathValue("user")) {
				out = append(out, topicPermissionJSON(p))
			}
		}
		return out, nil
	}
}

// getTopicPermission is the user's topic permissions in the vhost, one
// object per exchange; 404 when there are none, as in RabbitMQ.
func (s *Server) getTopicPermission(u *broker.UserInfo, r *http.Request) (any, error) {
	out := []map[string]any{}
	for _, p := range s.b.TopicPermissions() {
		if p.VHost == r.PathValue("tvhost") && p.User == r.PathValue("user") {
			out = append(out, topicPermissionJSON(p))
		}
	}
	if len(out) == 0 {
		return nil, notFound()
	}
	return out, nil
}

func (s *Server) putTopicPermission(u *broker.UserInfo, r *http.Request) (any, error) {
	var body struct {
		Exchange *string `json:"exchange"`
		Write    *string `json:"write"`
		Read     *string `json:"read"`
	}
	if err := readJSON(r, &body); err != nil {
		return nil, err
	}
	vhost, user := r.PathValue("tvhost"), r.PathValue("user")
	_, userOK := s.b.User(user)
	if !userOK || s.b.VHost(vhost) == nil {
		return nil, badRequest("vhost_or_user_not_found")
	}
	var missing []string
	for _, f := range []struct {
		key string
		v   *string
	}{{"exchange", body.Exchange}, {"write", body.Write}, {"read", body.Read}} {
		if f.v == nil {
			missing = append(missing, "{key_missing,"+f.key+"}")
		}
	}
	if len(missing) > 0 {
		return nil, badRequest("[%s]", strings.Join(missing, ","))
	}
	if err := s.checkStored("the topic permissions", len(user)+len(vhost)+len(*body.Exchange)+len(*body.Write)+len(*body.Read)); err != nil {
		return nil, err
	}
	// 204 whether or not it existed, as RabbitMQ's (unlike permissions).
	if err := s.b.SetTopicPermissions(user, vhost, *body.Exchange, *body.Write, *body.Read); err != nil {
		var ie *broker.InvalidError
		switch {
		case errors.Is(err, broker.ErrNotFound):
			return nil, badRequest("vhost_or_user_not_found")
		case errors.As(err, &ie):
			return nil, badRequest("%s", ie.Msg)
		}
		return nil, err
	}
	return noContent{}, nil
}

// deleteTopicPermission clears the user's topic permissions in the vhost
// on the path's exchange, or on every exchange; 404 when it has none
// there at all (RabbitMQ's resource_exists).
func (s *Server) deleteTopicPermission(u *broker.UserInfo, r *http.Request) (any, error) {
	vhost, user, exchange := r.PathValue("tvhost"), r.PathValue("user"), r.PathValue("exchange")
	found := false
	for _, p := range s.b.TopicPermissions() {
		found = found || (p.VHost == vhost && p.User == user)
	}
	if !found {
		return nil, notFound()
	}
	if err := s.b.ClearTopicPermissions(user, vhost, exchange); err != nil {
		if errors.Is(err, broker.ErrNotFound) {
			return nil, notFound()
		}
		return nil, err
	}
	return noContent{}, nil
}
