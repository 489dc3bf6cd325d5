package mgmt

import (
	"net/http"

	"github.com/brokerd/brokerd/broker"
)

// Vhosts, users and permissions.

func (s *Server) accessRoutes() {
	s.handle("GET /api/vhosts", management, s.listVHosts)
	s.handle("GET /api/vhosts/{vhost}", management, s.getVHost)
	s.handle("GET /api/permissions", administrator, s.listPermissions)
}

func vhostJSON(v broker.VHostInfo) map[string]any {
	tags := v.Tags
	if tags == nil {
		tags = []string{}
	}
	return map[string]any{
		"name": v.Name, "description": v.Description, "tags": tags,
		"default_queue_type": orDefault(v.DefaultQueueType, "classic"), "tracing": false,
		"metadata": map[string]any{"description": v.Description, "tags": tags},
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
	for _, v := range s.vhostsFor(u, "") {
		visible[v] = true
	}
	out := []map[string]any{}
	for _, v := range s.b.VHosts() {
		if visible[v.Name] {
			out = append(out, s.withVHostTotals(vhostJSON(v)))
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

func (s *Server) getVHost(u *broker.UserInfo, r *http.Request) (any, error) {
	for _, v := range s.b.VHosts() {
		if v.Name == r.PathValue("vhost") {
			return s.withVHostTotals(vhostJSON(v)), nil
		}
	}
	return nil, notFound()
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
