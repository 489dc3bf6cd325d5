package mgmt_test

import "testing"

// Runtime parameters, limits and topic permissions answer as RabbitMQ
// answers when there are none: an empty list, 404 for one object or an
// unknown vhost or user.
func TestAbsentThingsAreEmpty(t *testing.T) {
	a := startAPI(t)
	for _, path := range []string{"/parameters", "/parameters/shovel", "/parameters/federation-upstream/%2F",
		"/vhost-limits", "/vhost-limits/%2F", "/user-limits", "/user-limits/guest",
		"/topic-permissions", "/vhosts/%2F/topic-permissions", "/users/guest/topic-permissions"} {
		r := a.must(200, "GET", path, nil)
		if string(r.body) != "[]" {
			t.Errorf("GET %s: %s, want []", path, r.body)
		}
	}
	for _, path := range []string{"/parameters/shovel/%2F/x", "/global-parameters/nope", "/topic-permissions/%2F/guest",
		"/parameters/shovel/nowhere", "/vhost-limits/nowhere", "/user-limits/nobody", "/users/nobody/topic-permissions"} {
		wantError(t, a.do("GET", path, nil), 404, "Object Not Found", "")
	}
	a.must(201, "PUT", "/users/pm", map[string]any{"password": "pw", "tags": "policymaker"})
	a.must(201, "PUT", "/permissions/%2F/pm", map[string]any{"configure": ".*", "write": ".*", "read": ".*"})
	if r := a.as("pm", "pw", "GET", "/parameters", nil); r.status != 200 {
		t.Errorf("policymaker GET /parameters: %d %s", r.status, r.body)
	}
	wantError(t, a.as("pm", "pw", "GET", "/topic-permissions", nil), 401, "not_authorised", "Not administrator user")
	if r := a.as("pm", "pw", "GET", "/vhost-limits", nil); r.status != 200 {
		t.Errorf("policymaker GET /vhost-limits: %d %s", r.status, r.body)
	}
}
