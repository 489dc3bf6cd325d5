package mgmt_test

import (
	"testing"
)

// A monitoring user sees every vhost's name, totals and connections, but
// reaches the objects of a vhost only with permissions there, as in
// RabbitMQ 3.10 (is_authorized_vhost: only administrators bypass it);
// with policymaker too it still may not set policies in such a vhost. An
// administrator without permissions reads everything.
func TestMonitoringUserNeedsVHostPermissions(t *testing.T) {
	a := startAPI(t)
	a.must(201, "PUT", "/vhosts/private", nil)
	a.must(201, "PUT", "/queues/private/secret", map[string]any{"durable": true})
	a.must(201, "PUT", "/exchanges/private/x", map[string]any{"type": "direct"})
	a.must(201, "POST", "/bindings/private/e/x/q/secret", map[string]any{"routing_key": "k"})
	a.must(201, "PUT", "/policies/private/keep", map[string]any{"pattern": "^secret$", "definition": map[string]any{"max-length": 5}})
	a.must(201, "PUT", "/users/mon", map[string]any{"password": "mon-pw", "tags": "monitoring"})
	a.must(201, "PUT", "/users/polmon", map[string]any{"password": "polmon-pw", "tags": "policymaker,monitoring"})
	a.must(201, "PUT", "/users/adm", map[string]any{"password": "adm-pw", "tags": "administrator"})

	const denied = "User not authorised to access virtual host"
	for _, path := range []string{
		"/queues/private", "/queues/private/secret", "/queues/private/secret/bindings",
		"/exchanges/private", "/exchanges/private/x", "/exchanges/private/x/bindings/source",
		"/bindings/private", "/bindings/private/e/x/q/secret", "/bindings/private/e/x/q/secret/k",
		"/policies/private", "/operator-policies/private", "/vhosts/private/connections", "/vhosts/private/channels",
		"/aliveness-test/private",
	} {
		wantError(t, a.as("mon", "mon-pw", "GET", path, nil), 401, "not_authorised", denied)
	}
	for _, l := range []string{"/queues", "/exchanges", "/bindings", "/policies"} {
		for _, o := range a.as("mon", "mon-pw", "GET", l, nil).list(t) {
			if o["vhost"] == "private" {
				t.Errorf("mon lists %s of vhost private: %v", l, o)
			}
		}
	}
	// What RabbitMQ shows a monitoring user of every vhost.
	if !hasName(a.as("mon", "mon-pw", "GET", "/vhosts", nil).list(t), "private") {
		t.Error("mon does not see vhost private in /vhosts")
	}
	if n := a.as("mon", "mon-pw", "GET", "/overview", nil).object(t)["object_totals"].(map[string]any)["queues"]; n != 1.0 {
		t.Errorf("mon's overview counts %v queues, want 1", n)
	}
	if r := a.as("mon", "mon-pw", "GET", "/consumers/private", nil); r.status != 200 {
		t.Errorf("mon's consumers of private: %d %s", r.status, r.body)
	}

	wantError(t, a.as("polmon", "polmon-pw", "PUT", "/policies/private/evil",
		map[string]any{"pattern": ".*", "definition": map[string]any{"max-length": 0}}), 401, "not_authorised", "")
	wantError(t, a.as("polmon", "polmon-pw", "DELETE", "/policies/private/keep", nil), 401, "not_authorised", "")
	a.must(404, "GET", "/policies/private/evil", nil)
	a.must(200, "GET", "/policies/private/keep", nil)

	a.as("adm", "adm-pw", "GET", "/queues/private/secret", nil).object(t)
	if l := a.as("adm", "adm-pw", "GET", "/queues", nil).list(t); !hasName(l, "secret") {
		t.Errorf("adm's queues %v", l)
	}
}

func hasName(l []map[string]any, name string) bool {
	for _, o := range l {
		if o["name"] == name {
			return true
		}
	}
	return false
}

// GET /api/vhosts/{name} is for administrators in RabbitMQ 3.10, even for
// a vhost the user has permissions in (the list shows the user's vhosts).
func TestGetVHostNeedsAdministrator(t *testing.T) {
	a := startAPI(t)
	a.must(201, "PUT", "/vhosts/orders", map[string]any{"description": "internal"})
	a.must(201, "PUT", "/users/ann", map[string]any{"password": "ann-pw", "tags": "management"})
	a.must(201, "PUT", "/users/mon", map[string]any{"password": "mon-pw", "tags": "monitoring"})
	a.must(201, "PUT", "/permissions/orders/ann", map[string]any{"configure": ".*", "write": ".*", "read": ".*"})
	wantError(t, a.as("ann", "ann-pw", "GET", "/vhosts/orders", nil), 401, "not_authorised", "Not administrator user")
	wantError(t, a.as("mon", "mon-pw", "GET", "/vhosts/orders", nil), 401, "not_authorised", "Not administrator user")
	if !hasName(a.as("ann", "ann-pw", "GET", "/vhosts", nil).list(t), "orders") {
		t.Error("ann does not list vhost orders")
	}
	a.must(200, "GET", "/vhosts/orders", nil)
}

// An operation the AMQP permissions refuse is 401 not_authorised as
// RabbitMQ 3.10 answers it: "Access refused." for declarations,
// deletions, purges and bindings (its direct_request), the channel's
// ACCESS_REFUSED text for a get and the aliveness test (its
// with_channel), and "Access refused." for a user with no permissions in
// the vhost at all (an administrator may reach the vhost's pages without
// them). None asks for credentials again (no WWW-Authenticate).
func TestAccessRefusedReplies(t *testing.T) {
	a := startAPI(t)
	a.must(201, "PUT", "/vhosts/orders", nil)
	a.must(201, "PUT", "/queues/orders/q", nil)
	a.must(201, "PUT", "/exchanges/orders/x", nil)
	a.must(201, "POST", "/bindings/orders/e/x/q/q", map[string]any{"routing_key": "k"})
	a.must(201, "PUT", "/users/ann", map[string]any{"password": "ann-pw", "tags": "management"})
	a.must(201, "PUT", "/permissions/orders/ann", map[string]any{"configure": "^$", "write": "^$", "read": "^$"})
	a.must(201, "PUT", "/users/adm", map[string]any{"password": "adm-pw", "tags": "administrator"})

	refused := func(r resp, reason string, exact bool) {
		t.Helper()
		wantError(t, r, 401, "not_authorised", reason)
		if got := r.object(t)["reason"]; exact && got != reason {
			t.Errorf("reason %q, want %q", got, reason)
		}
		if h := r.header.Get("WWW-Authenticate"); h != "" {
			t.Errorf("WWW-Authenticate %q on a refusal of a logged-in user", h)
		}
	}
	get := map[string]any{"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"}
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{"PUT", "/queues/orders/ann.q", map[string]any{}},
		{"DELETE", "/queues/orders/q", nil},
		{"DELETE", "/queues/orders/q/contents", nil},
		{"PUT", "/exchanges/orders/y", map[string]any{}},
		{"DELETE", "/exchanges/orders/x", nil},
		{"POST", "/bindings/orders/e/x/q/q", map[string]any{"routing_key": "k2"}},
		{"DELETE", "/bindings/orders/e/x/q/q/k", nil},
	} {
		refused(a.as("ann", "ann-pw", c.method, c.path, c.body), "Access refused.", true)
		refused(a.as("adm", "adm-pw", c.method, c.path, c.body), "Access refused.", true)
	}
	refused(a.as("ann", "ann-pw", "POST", "/queues/orders/q/get", get), "ACCESS_REFUSED - ", false)
	refused(a.as("ann", "ann-pw", "GET", "/aliveness-test/orders", nil), "ACCESS_REFUSED - ", false)
	refused(a.as("adm", "adm-pw", "POST", "/queues/orders/q/get", get), "Access refused.", true)
	refused(a.as("adm", "adm-pw", "GET", "/aliveness-test/orders", nil), "Access refused.", true)
	// Nothing of it happened.
	a.must(200, "GET", "/queues/orders/q", nil)
	a.must(200, "GET", "/exchanges/orders/x", nil)
	a.must(200, "GET", "/bindings/orders/e/x/q/q/k", nil)
	a.must(404, "GET", "/queues/orders/ann.q", nil)
}

// Policies as RabbitMQ 3.10 guards them: any management user lists the
// policies and operator policies of the vhosts it has permissions in; one
// policy (read, set, cleared) needs policymaker and the vhost's
// permissions, or administrator ("User not authorised to access object"
// either way); one operator policy needs administrator.
func TestPolicyAccess(t *testing.T) {
	a := startAPI(t)
	a.must(201, "PUT", "/vhosts/orders", nil)
	a.must(201, "PUT", "/policies/orders/p", map[string]any{"pattern": "^x$", "definition": map[string]any{"max-length": 1}})
	a.must(201, "PUT", "/operator-policies/orders/op", map[string]any{"pattern": "^x$", "definition": map[string]any{"max-length": 2}})
	all := map[string]any{"configure": ".*", "write": ".*", "read": ".*"}
	for _, u := range []struct{ name, tags string }{{"ann", "management"}, {"pm", "policymaker"}, {"pmx", "policymaker"}, {"adm", "administrator"}} {
		a.must(201, "PUT", "/users/"+u.name, map[string]any{"password": u.name + "-pw", "tags": u.tags})
	}
	a.must(201, "PUT", "/permissions/orders/ann", all)
	a.must(201, "PUT", "/permissions/orders/pm", all)
	as := func(user, method, path string, body any) resp {
		t.Helper()
		return a.as(user, user+"-pw", method, path, body)
	}
	def := map[string]any{"pattern": "^y$", "definition": map[string]any{"max-length": 3}}
	const object, vhost, admin = "User not authorised to access object", "User not authorised to access virtual host", "Not administrator user"

	for _, path := range []string{"/policies", "/policies/orders", "/operator-policies", "/operator-policies/orders"} {
		if l := as("ann", "GET", path, nil).list(t); len(l) != 1 || l[0]["vhost"] != "orders" {
			t.Errorf("ann's GET %s: %v", path, l)
		}
	}
	wantError(t, as("ann", "GET", "/policies/orders/p", nil), 401, "not_authorised", object)
	wantError(t, as("ann", "PUT", "/policies/orders/q", def), 401, "not_authorised", object)
	wantError(t, as("ann", "DELETE", "/policies/orders/p", nil), 401, "not_authorised", object)
	wantError(t, as("ann", "GET", "/operator-policies/orders/op", nil), 401, "not_authorised", admin)

	as("pm", "GET", "/policies/orders/p", nil).object(t)
	if r := as("pm", "PUT", "/policies/orders/q", def); r.status != 201 {
		t.Errorf("pm's PUT: %d %s", r.status, r.body)
	}
	wantError(t, as("pm", "PUT", "/operator-policies/orders/op2", def), 401, "not_authorised", admin)

	wantError(t, as("pmx", "GET", "/policies/orders", nil), 401, "not_authorised", vhost)
	wantError(t, as("pmx", "GET", "/policies/orders/p", nil), 401, "not_authorised", object)
	wantError(t, as("pmx", "PUT", "/policies/orders/r", def), 401, "not_authorised", object)
	if l := as("pmx", "GET", "/policies", nil).list(t); len(l) != 0 {
		t.Errorf("pmx lists policies of a vhost it has no permissions in: %v", l)
	}

	if r := as("adm", "PUT", "/policies/orders/s", def); r.status != 201 {
		t.Errorf("adm's PUT: %d %s", r.status, r.body)
	}
	if l := a.must(200, "GET", "/policies/orders", nil).list(t); len(l) != 3 {
		t.Errorf("policies %v, want p, q, s", l)
	}
}
