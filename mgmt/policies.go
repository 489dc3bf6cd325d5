package mgmt

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/brokerd/brokerd/broker"
)

// Policies and operator policies, as RabbitMQ's /api/policies and
// /api/operator-policies guard them: any management user lists those of
// its vhosts; one policy needs policymaker, one operator policy
// administrator.

func (s *Server) policyRoutes() {
	up := policyKind{}
	s.handle("GET /api/policies", management, up.list(s))
	s.handle("GET /api/policies/{vhost}", management, up.list(s))
	s.handle("GET /api/policies/{vhost}/{name}", policymaker, up.get(s))
	s.handle("PUT /api/policies/{vhost}/{name}", policymaker, up.put(s))
	s.handle("DELETE /api/policies/{vhost}/{name}", policymaker, up.del(s))
	op := policyKind{operator: true}
	s.handle("GET /api/operator-policies", management, op.list(s))
	s.handle("GET /api/operator-policies/{vhost}", management, op.list(s))
	s.handle("GET /api/operator-policies/{vhost}/{name}", administrator, op.get(s))
	s.handle("PUT /api/operator-policies/{vhost}/{name}", administrator, op.put(s))
	s.handle("DELETE /api/operator-policies/{vhost}/{name}", administrator, op.del(s))
}

// policyKind serves operator policies with the code of policies.
type policyKind struct{ operator bool }

func (k policyKind) policies(s *Server, vhost string) []broker.Policy {
	if k.operator {
		return s.b.OperatorPolicies(vhost)
	}
	return s.b.Policies(vhost)
}

func (k policyKind) list(s *Server) handlerFunc {
	return func(u *broker.UserInfo, r *http.Request) (any, error) {
		out := []map[string]any{}
		for _, v := range s.vhostsFor(u, r.PathValue("vhost")) {
			for _, p := range k.policies(s, v) {
				out = append(out, policyJSON(v, p))
			}
		}
		return out, nil
	}
}

func (k policyKind) get(s *Server) handlerFunc {
	return func(u *broker.UserInfo, r *http.Request) (any, error) {
		vhost := r.PathValue("vhost")
		for _, p := range k.policies(s, vhost) {
			if p.Name == r.PathValue("name") {
				return policyJSON(vhost, p), nil
			}
		}
		return nil, notFound()
	}
}

func (k policyKind) put(s *Server) handlerFunc {
	return func(u *broker.UserInfo, r *http.Request) (any, error) {
		var body policyBody
		if err := readJSON(r, &body); err != nil {
			return nil, err
		}
		vhost, name := r.PathValue("vhost"), r.PathValue("name")
		p, err := body.policy(name)
		if err != nil {
			return nil, err
		}
		if err := s.checkPolicy(p); err != nil {
			return nil, err
		}
		existed := false
		for _, old := range k.policies(s, vhost) {
			existed = existed || old.Name == name
		}
		set := s.b.SetPolicy
		if k.operator {
			set = s.b.SetOperatorPolicy
		}
		if err := set(vhost, p); err != nil {
			var ie *broker.InvalidError
			if errors.As(err, &ie) && k.operator { // not HTML-escaped there (RabbitMQ 3.10)
				return nil, badRequest("Validation failed\n\n%s\n", ie.Msg)
			}
			return nil, policyError(err)
		}
		if existed {
			return noContent{}, nil
		}
		return created{}, nil
	}
}

func (k policyKind) del(s *Server) handlerFunc {
	return func(u *broker.UserInfo, r *http.Request) (any, error) {
		clear := s.b.ClearPolicy
		if k.operator {
			clear = s.b.ClearOperatorPolicy
		}
		if err := clear(r.PathValue("vhost"), r.PathValue("name")); err != nil {
			if errors.Is(err, broker.ErrNotFound) {
				return nil, notFound()
			}
			return nil, err
		}
		return noContent{}, nil
	}
}

func policyJSON(vhost string, p broker.Policy) map[string]any {
	def := p.Definition
	if def == nil {
		def = map[string]any{}
	}
	return map[string]any{
		"vhost": vhost, "name": p.Name, "pattern": p.Pattern, "apply-to": p.ApplyTo,
		"definition": def, "priority": p.Priority,
	}
}

type policyBody struct {
	Pattern    *string        `json:"pattern"`
	Definition map[string]any `json:"definition"`
	Priority   any            `json:"priority"`
	ApplyTo    string         `json:"apply-to"`
}

// validationFailed is RabbitMQ's 400 for a refused policy: its validator's
// message, HTML-escaped as RabbitMQ's management plugin sends it.
func validationFailed(msg string) error {
	return badRequest("Validation failed\n\n%s\n", htmlEscaper.Replace(msg))
}

var htmlEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

func (body *policyBody) policy(name string) (broker.Policy, error) {
	if body.Pattern == nil {
		return broker.Policy{}, badRequest("[{key_missing,pattern}]")
	}
	if body.Definition == nil {
		return broker.Policy{}, badRequest("[{key_missing,definition}]")
	}
	p := broker.Policy{Name: name, Pattern: *body.Pattern, ApplyTo: body.ApplyTo, Definition: body.Definition}
	switch v := body.Priority.(type) {
	case nil:
	case json.Number:
		n, err := v.Int64()
		if err != nil {
			return p, validationFailed(fmt.Sprintf("priority should be a number, actually was %s", v))
		}
		p.Priority = int(n)
	case string: // RabbitMQ takes digits in a string
		n, err := strconv.Atoi(v)
		if err != nil {
			return p, validationFailed(fmt.Sprintf("priority should be a number, actually was <<\"%s\">>", v))
		}
		p.Priority = n
	default:
		return p, validationFailed(fmt.Sprintf("priority should be a number, actually was %v", v))
	}
	return p, nil
}

// policyError maps a refused policy onto RabbitMQ's reply.
func policyError(err error) error {
	var ie *broker.InvalidError
	if errors.As(err, &ie) {
		return validationFailed(ie.Msg)
	}
	return err
}
