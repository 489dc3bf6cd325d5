package mgmt

import (
	"errors"
	"net/http"

	"github.com/brokerd/brokerd/broker"
)

// Shovels, as RabbitMQ's rabbitmq_shovel_management (rabbit_shovel_mgmt),
// for monitoring users, over the vhosts the user may access:
//
//	GET    /api/shovels                              every shovel's status
//	GET    /api/shovels/{vhost}                      a vhost's
//	GET    /api/shovels/vhost/{vhost}/{name}         a list of that one (RabbitMQ
//	                                                 answers a list here too)
//	DELETE /api/shovels/vhost/{vhost}/{name}         deletes it: clears its
//	                                                 parameter, which stops it
//	DELETE /api/shovels/vhost/{vhost}/{name}/restart reconnects it
//
// A shovel that is not running is 404 for the DELETEs. The rows come from
// Options.Shovels (the shovel engine, wired by cmd/brokerd); without it
// there are none.

// Shovels is the shovel engine as the API reads it; *shovel.Manager
// satisfies it through a small adapter (cmd/brokerd). Safe for concurrent
// use.
type Shovels interface {
	// Status lists every shovel, sorted by vhost then name.
	Status() []ShovelStatus
	// Restart reconnects a shovel; false if there is none of that name.
	Restart(vhost, name string) bool
}

// ShovelStatus is one shovel's row: its vhost and name, and Row, what
// the API shows of it (marshalled to JSON as it is: RabbitMQ's fields,
// shovel.Status).
type ShovelStatus struct {
	VHost, Name string
	Row         any
}

func (s *Server) shovelRoutes() {
	s.handle("GET /api/shovels", monitoring, s.listShovels)
	s.handle("GET /api/shovels/{vhost}", monitoring, s.listShovels)
	s.handle("GET /api/shovels/vhost/{vhost}/{name}", monitoring, s.listShovels)
	s.handle("DELETE /api/shovels/vhost/{vhost}/{name}", monitoring, s.deleteShovel)
	s.handle("DELETE /api/shovels/vhost/{vhost}/{name}/restart", monitoring, s.restartShovel)
}

// shovels returns the shovels of the vhosts u may access (one vhost's if
// vhost is set), and of name if it is set.
func (s *Server) shovels(u *broker.UserInfo, vhost, name string) []ShovelStatus {
	if s.opts.Shovels == nil {
		return nil
	}
	visible := map[string]bool{}
	for _, v := range s.vhostsFor(u, vhost) {
		visible[v] = true
	}
	var out []ShovelStatus
	for _, st := range s.opts.Shovels.Status() {
		if visible[st.VHost] && (name == "" || st.Name == name) {
			out = append(out, st)
		}
	}
	return out
}

func (s *Server) listShovels(u *broker.UserInfo, r *http.Request) (any, error) {
	out := []any{}
	for _, st := range s.shovels(u, r.PathValue("vhost"), r.PathValue("name")) {
		out = append(out, st.Row)
	}
	return out, nil
}

func (s *Server) deleteShovel(u *broker.UserInfo, r *http.Request) (any, error) {
	vhost, name := r.PathValue("vhost"), r.PathValue("name")
	if len(s.shovels(u, vhost, name)) == 0 {
		return nil, notFound()
	}
	if err := s.b.ClearParameter(vhost, "shovel", name); err != nil {
		if errors.Is(err, broker.ErrNotFound) {
			return nil, notFound()
		}
		return nil, err
	}
	return noContent{}, nil
}

func (s *Server) restartShovel(u *broker.UserInfo, r *http.Request) (any, error) {
	vhost, name := r.PathValue("vhost"), r.PathValue("name")
	if len(s.shovels(u, vhost, name)) == 0 || !s.opts.Shovels.Restart(vhost, name) {
		return nil, notFound()
	}
	return noContent{}, nil
}
