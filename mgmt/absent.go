package mgmt

import (
	"net/http"

	"github.com/brokerd/brokerd/broker"
)

// Endpoints of things brokerd does not have — vhost and user limits, topic
// permissions — answer as RabbitMQ answers when there are none: an empty
// list for a collection, 404 for one object, each with RabbitMQ's
// authorisation (user limits and topic permissions: administrator; vhost
// limits: any management user, for the vhosts it sees), and 404 for a vhost or user that does not
// exist. Tools that read them (monitors, definitions exporters) see an empty broker rather than a missing API.
// Setting any of them is not served: a definitions import that holds them
// is refused (importdefs.go).

func (s *Server) absentRoutes() {
	none := func(u *broker.UserInfo, r *http.Request) (any, error) { return []map[string]any{}, nil }
	one := func(u *broker.UserInfo, r *http.Request) (any, error) { return nil, notFound() }
	ofUser := func(u *broker.UserInfo, r *http.Request) (any, error) {
		if _, ok := s.b.User(r.PathValue("user")); !ok {
			return nil, notFound()
		}
		return []map[string]any{}, nil
	}
	s.handle("GET /api/vhost-limits", management, none)
	s.handle("GET /api/vhost-limits/{vhost}", management, none)
	s.handle("GET /api/user-limits", administrator, none)
	s.handle("GET /api/user-limits/{user}", administrator, ofUser)
	s.handle("GET /api/topic-permissions", administrator, none)
	s.handle("GET /api/topic-permissions/{vhost}/{user}", administrator, one)
	s.handle("GET /api/vhosts/{vhost}/topic-permissions", administrator, none)
	s.handle("GET /api/users/{user}/topic-permissions", administrator, ofUser)
}
