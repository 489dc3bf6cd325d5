package mgmt

import (
	"net/http"

	"github.com/brokerd/brokerd/broker"
)

// GET /api/federation-links[/{vhost}]: brokerd has no federation, so
// there are no links: an empty list, as RabbitMQ's federation plugin
// answers without upstreams (any management user; a vhost that does not
// exist is 404). Telegraf's rabbitmq input asks it at every gather and
// logs an error for each 404.
func (s *Server) federationRoutes() {
	s.handle("GET /api/federation-links", management, func(u *broker.UserInfo, r *http.Request) (any, error) {
		return []map[string]any{}, nil
	})
	s.handle("GET /api/federation-links/{vhost}", management, func(u *broker.UserInfo, r *http.Request) (any, error) {
		return []map[string]any{}, nil
	})
}
