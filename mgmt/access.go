package mgmt

import (
	"errors"
	"net/http"
	"strings"

	"github.com/brokerd/brokerd/broker"
)

// Vhosts, users and permissions. Reading them needs administrator, except
// the list of the vhosts a user may see; changing them needs administrator.

func (s *Server) accessRoutes() {
	// {name}, not {vhost}: a PUT creates the vhost, which need not exist.
	s.handle("GET /api/vhosts", management, s.listVHosts)
	s.handle("GET /api/vhosts/{name}", administrator, s.getVHost) // RabbitMQ 3.10: administrators only
	s.handle("PUT /api/vhosts/{name}", administrator, s.putVHost)
	s.handle("DELETE /api/vhosts/{name}", administrator, s.deleteVHost)
	s.handle("GET /api/vhosts/{vhost}/permissions", administrator, s.listPermissionsOf("vhost"))

	s.handle("GET /api/users", administrator, s.listUsers)
	s.handle("GET /api/users/{name}", administrator, s.getUser)
	s.handle("PUT /api/users/{name}", administrator, s.putUser)
	s.handle("DELETE /api/users/{name}", administrator, s.deleteUser)
	s.handle("GET /api/users/{name}/permissions", administrator, s.listPermissionsOf("user"))

	// {pvhost}: an unknown vhost is RabbitMQ's 400 vhost_or_user_not_found
	// on a PUT, not the 404 of other vhost paths.
	s.handle("GET /api/permissions", administrator, s.listPermissions)
	s.handle("GET /api/permissions/{pvhost}/{user}", administrator, s.getPermission)
	s.handle("PUT /api/permissions/{pvhost}/{user}", administrator, s.putPermission)
	s.handle("DELETE /api/permissions/{pvhost}/{user}", administrator, s.deletePermission)
}

// tagList reads tags as RabbitMQ does: a comma-separated string or a list.
func tagList(v any) ([]string, bool) {
	switch t := v.(type) {
	case string:
		var out []string
		for _, tag := range strings.Split(t, ",") {
			if tag = strings.TrimSpace(tag); tag != "" {
				out = append(out, tag)
			}
		}
		return out, true
	case []any:
		var out []string
		for _, e := range t {
			tag, ok := e.(string)
			if !ok {
				return nil, false
			}
			out = append(out, tag)
		}
		return out, true
	}
	return nil, false
}

func vhostJSON(v broker.VHostInfo) map[string]any {
	tags := v.Tags
	if tags == nil {
		tags = []string{}
	}
	return map[string]any{
		"name": v.Name, "description": v.Description, "tags": tags,
		"default_queue_type": orDefault(v.DefaultQueueType, "undefined"), "tracing": false,
		"metadata":      map[string]any{"description": v.Description, "tags": tags},
		"cluster_state": map[string]any{node(): "running"},
	}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func (s *Server) listVHosts(u *broker.UserInfo, r *http.Request) (any, error) {
	visible := map[string]bool{}
	for _, v := range s.visibleVHosts(u) {
		visible[v] = true
	}
	out := []map[string]any{}
	for _, v := range s.b.VHosts() {
		if visible[v.Name] {
			m := s.withVHostTotals(vhostJSON(v))
			s.vhostRates(m, v.Name, rateQueryOf(r))
			out = append(out, m)
		}
	}
	return out, nil
}

// withVHostTotals adds a vhost's message totals, as RabbitMQ lists them.
func (s *Server) withVHostTotals(m map[string]any) map[string]any {
	var msgs, ready, unacked int
	for _, qi := range s.b.Queues(m["name"].(string)) {
		msgs += qi.Messages()
		ready += qi.Ready
		unacked += qi.Unacked
	}
	m["messages"], m["messages_ready"], m["messages_unacknowledged"] = msgs, ready, unacked
	return m
}

func (s *Server) vhostInfo(name string) (broker.VHostInfo, bool) {
	for _, v := range s.b.VHosts() {
		if v.Name == name {
			return v, true
		}
	}
	return broker.VHostInfo{}, false
}

func (s *Server) getVHost(u *broker.UserInfo, r *http.Request) (any, error) {
	name := r.PathValue("name")
	v, ok := s.vhostInfo(name)
	if !ok {
		return nil, notFound()
	}
	m := s.withVHostTotals(vhostJSON(v))
	s.vhostRates(m, v.Name, rateQueryOf(r))
	return m, nil
}

type vhostBody struct {
	Description      string `json:"description"`
	Tags             any    `json:"tags"`
	DefaultQueueType string `json:"default_queue_type"`
	// Tracing is RabbitMQ's firehose switch; brokerd has no firehose,
	// so only false (RabbitMQ's default) is taken.
	Tracing jsonBool `json:"tracing"`
}

func (s *Server) putVHost(u *broker.UserInfo, r *http.Request) (any, error) {
	var body vhostBody
	if err := readJSON(r, &body); err != nil {
		return nil, err
	}
	if body.Tracing {
		return nil, badRequest("tracing: brokerd has no message tracing (RabbitMQ's firehose); leave it out or false")
	}
	info := broker.VHostInfo{Name: r.PathValue("name"), Description: body.Description, DefaultQueueType: body.DefaultQueueType}
	if body.Tags != nil {
		tags, ok := tagList(body.Tags)
		if !ok {
			return nil, badRequest("tags: expected a string or a list of strings")
		}
		info.Tags = tags
	}
	if err := s.checkVHost(info); err != nil {
		return nil, err
	}
	_, existed := s.vhostInfo(info.Name)
	if err := s.b.PutVHost(info); err != nil {
		return nil, err
	}
	if existed {
		return noContent{}, nil
	}
	// RabbitMQ gives the creating user full permissions on a new vhost.
	if err := s.b.SetPermissions(u.Name, info.Name, ".*", ".*", ".*"); err != nil {
		return nil, err
	}
	return created{}, nil
}

func (s *Server) deleteVHost(u *broker.UserInfo, r *http.Request) (any, error) {
	if err := s.b.DeleteVHost(r.PathValue("name")); err != nil {
		if errors.Is(err, broker.ErrNotFound) {
			return nil, notFound()
		}
		return nil, err
	}
	return noContent{}, nil
}

func userJSON(ui broker.UserInfo) map[string]any {
	tags := ui.Tags
	if tags == nil {
		tags = []string{}
	}
	return map[string]any{
		"name": ui.Name, "password_hash": ui.PasswordHash, "hashing_algorithm": ui.HashingAlgorithm,
		"tags": tags, "limits": map[string]any{},
	}
}

// userJSONWithLimits is userJSON with the user's limits (RabbitMQ 3.10's
// "limits" of /api/users).
func (s *Server) userJSONWithLimits(ui broker.UserInfo) map[string]any {
	m := userJSON(ui)
	if l, ok := s.b.UserLimitsOf(ui.Name); ok {
		m["limits"] = limitsJSON(l)
	}
	return m
}

func (s *Server) listUsers(u *broker.UserInfo, r *http.Request) (any, error) {
	out := []map[string]any{}
	for _, ui := range s.b.Users() {
		out = append(out, s.userJSONWithLimits(ui))
	}
	return out, nil
}

func (s *Server) getUser(u *broker.UserInfo, r *http.Request) (any, error) {
	ui, ok := s.b.User(r.PathValue("name"))
	if !ok {
		return nil, notFound()
	}
	return s.userJSONWithLimits(ui), nil
}

type userBody struct {
	Password         *string `json:"password"`
	PasswordHash     *string `json:"password_hash"`
	HashingAlgorithm string  `json:"hashing_algorithm"`
	Tags             any     `json:"tags"`
}

// putUser creates or replaces a user. As RabbitMQ: tags are required (""
// for none); a password, or a password_hash with its hashing_algorithm,
// or neither (no password login).
func (s *Server) putUser(u *broker.UserInfo, r *http.Request) (any, error) {
	var body userBody
	if err := readJSON(r, &body); err != nil {
		return nil, err
	}
	if body.Tags == nil {
		return nil, badRequest("tags_not_present")
	}
	tags, ok := tagList(body.Tags)
	if !ok {
		return nil, badRequest("tags: expected a string or a list of strings")
	}
	spec := broker.UserSpec{Name: r.PathValue("name"), HashingAlgorithm: body.HashingAlgorithm, Tags: tags}
	if body.Password != nil {
		spec.Password = *body.Password
	}
	if body.PasswordHash != nil {
		spec.PasswordHash = *body.PasswordHash
	}
	if err := s.checkUser(spec); err != nil {
		return nil, err
	}
	_, existed := s.b.User(spec.Name)
	if err := s.b.PutUser(spec); err != nil {
		return nil, err
	}
	if existed {
		return noContent{}, nil
	}
	return created{}, nil
}

func (s *Server) deleteUser(u *broker.UserInfo, r *http.Request) (any, error) {
	if err := s.b.DeleteUser(r.PathValue("name")); err != nil {
		if errors.Is(err, broker.ErrNotFound) {
			return nil, notFound()
		}
		return nil, err
	}
	return noContent{}, nil
}

func permissionJSON(p broker.PermissionInfo) map[string]any {
	return map[string]any{"user": p.User, "vhost": p.VHost, "configure": p.Configure, "write": p.Write, "read": p.Read}
}

func (s *Server) listPermissions(u *broker.UserInfo, r *http.Request) (any, error) {
	out := []map[string]any{}
	for _, p := range s.b.Permissions() {
		out = append(out, permissionJSON(p))
	}
	return out, nil
}

func (s *Server) listPermissionsOf(by string) handlerFunc {
	return func(u *broker.UserInfo, r *http.Request) (any, error) {
		if by == "user" {
			if _, ok := s.b.User(r.PathValue("name")); !ok {
				return nil, notFound()
			}
		}
		out := []map[string]any{}
		for _, p := range s.b.Permissions() {
			if (by == "vhost" && p.VHost == r.PathValue("vhost")) || (by == "user" && p.User == r.PathValue("name")) {
				out = append(out, permissionJSON(p))
			}
		}
		return out, nil
	}
}

func (s *Server) getPermission(u *broker.UserInfo, r *http.Request) (any, error) {
	for _, p := range s.b.Permissions() {
		if p.VHost == r.PathValue("pvhost") && p.User == r.PathValue("user") {
			return permissionJSON(p), nil
		}
	}
	return nil, notFound()
}

type permissionBody struct {
	Configure *string `json:"configure"`
	Write     *string `json:"write"`
	Read      *string `json:"read"`
}

func (s *Server) putPermission(u *broker.UserInfo, r *http.Request) (any, error) {
	var body permissionBody
	if err := readJSON(r, &body); err != nil {
		return nil, err
	}
	var missing []string
	for _, f := range []struct {
		key string
		v   *string
	}{{"configure", body.Configure}, {"write", body.Write}, {"read", body.Read}} {
		if f.v == nil {
			missing = append(missing, "{key_missing,"+f.key+"}")
		}
	}
	if len(missing) > 0 {
		return nil, badRequest("[%s]", strings.Join(missing, ","))
	}
	vhost, user := r.PathValue("pvhost"), r.PathValue("user")
	if err := s.checkStored("the permissions", len(user)+len(vhost)+len(*body.Configure)+len(*body.Write)+len(*body.Read)); err != nil {
		return nil, err
	}
	existed := false
	for _, p := range s.b.Permissions() {
		existed = existed || (p.VHost == vhost && p.User == user)
	}
	if err := s.b.SetPermissions(user, vhost, *body.Configure, *body.Write, *body.Read); err != nil {
		if errors.Is(err, broker.ErrNotFound) {
			return nil, badRequest("vhost_or_user_not_found")
		}
		return nil, err
	}
	if existed {
		return noContent{}, nil
	}
	return created{}, nil
}

func (s *Server) deletePermission(u *broker.UserInfo, r *http.Request) (any, error) {
	if err := s.b.ClearPermissions(r.PathValue("user"), r.PathValue("pvhost")); err != nil {
		if errors.Is(err, broker.ErrNotFound) {
			return nil, notFound()
		}
		return nil, err
	}
	return noContent{}, nil
}
