package mgmt

import (
	"net/http"

	"github.com/brokerd/brokerd/broker"
)

// Endpoints of things brokerd does not have — runtime parameters (shovel,
// federation, ...), global parameters — answer as RabbitMQ answers when
// there are none: an empty list for a collection, 404 for one object,
// each with RabbitMQ's authorisation (parameters: policymaker; global
// parameters: administrator), and 404 for a vhost that does not exist.
// (Vhost and user limits and topic permissions are served: tenancy.go.) Tools that read them (rabbitmqadmin list parameters, monitors,
// definitions exporters) see an empty broker rather than a missing API.
// Setting any of them is not served: a definitions import that holds them
// is refused (importdefs.go).

func (s *Server) absentRoutes() {
	none := func(u *broker.UserInfo, r *http.Request) (any, error) { return []map[string]any{}, nil }
	one := func(u *broker.UserInfo, r *http.Request) (any, error) { return nil, notFound() }
	s.handle("GET /api/parameters", policymaker, none)
	s.handle("GET /api/parameters/{component}", policymaker, none)
	s.handle("GET /api/parameters/{component}/{vhost}", policymaker, none)
	s.handle("GET /api/parameters/{component}/{vhost}/{name}", policymaker, one)
	s.handle("GET /api/global-parameters", administrator, none)
	s.handle("GET /api/global-parameters/{name}", administrator, one)
}
