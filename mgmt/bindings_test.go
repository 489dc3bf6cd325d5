package mgmt_test

import (
	"net/url"
	"testing"
)

// Bindings are named in paths by RabbitMQ's properties key: the routing
// key quoted (quote_plus, then "~" as %7E), so that "~" alone can stand
// for the empty key. Each binding's key, Location and DELETE name that
// binding and no other; the values are RabbitMQ 3.10.8's.
func TestBindingPropertiesKeys(t *testing.T) {
	a := startAPI(t)
	a.must(201, "PUT", "/queues/%2F/q", nil)
	a.must(201, "PUT", "/exchanges/%2F/x", map[string]any{"type": "direct"})
	want := []struct{ key, props, location string }{
		{"", "~", "q/~"},
		{"~", "%7E", "q/%257E"},
		{"a b", "a+b", "q/a%2Bb"},
		{"#", "%23", "q/%2523"},
		{"a~b", "a%7Eb", "q/a%257Eb"},
		{"a+b", "a%2Bb", "q/a%252Bb"},
		{"x%y", "x%25y", "q/x%2525y"},
		{"é/x", "%C3%A9%2Fx", "q/%25C3%25A9%252Fx"},
	}
	for _, w := range want {
		r := a.must(201, "POST", "/bindings/%2F/e/x/q/q", map[string]any{"routing_key": w.key})
		if loc := r.header.Get("Location"); loc != w.location {
			t.Errorf("binding %q: Location %q, want %q", w.key, loc, w.location)
		}
	}
	props := map[string]string{}
	for _, b := range a.must(200, "GET", "/bindings/%2F/e/x/q/q", nil).list(t) {
		props[b["routing_key"].(string)] = b["properties_key"].(string)
	}
	for _, w := range want {
		if props[w.key] != w.props {
			t.Errorf("binding %q: properties_key %q, want %q", w.key, props[w.key], w.props)
		}
	}
	// The key as a client writes it unquoted names the binding too.
	if b := a.must(200, "GET", "/bindings/%2F/e/x/q/q/a%20b", nil).object(t); b["routing_key"] != "a b" {
		t.Errorf("GET a%%20b: %v", b)
	}
	a.must(404, "GET", "/bindings/%2F/e/x/q/q/~~", nil)

	// Deleting by each properties key removes that binding only.
	left := len(want)
	for _, w := range want[1:] {
		a.must(204, "DELETE", "/bindings/%2F/e/x/q/q/"+url.PathEscape(w.props), nil)
		left--
		keys := map[string]bool{}
		for _, b := range a.must(200, "GET", "/bindings/%2F/e/x/q/q", nil).list(t) {
			keys[b["routing_key"].(string)] = true
		}
		if keys[w.key] || len(keys) != left || !keys[""] {
			t.Fatalf("after deleting %q (%s): bindings %v", w.key, w.props, keys)
		}
	}
	a.must(204, "DELETE", "/bindings/%2F/e/x/q/q/~", nil)
	if l := a.must(200, "GET", "/bindings/%2F/e/x/q/q", nil).list(t); len(l) != 0 {
		t.Errorf("bindings left %v", l)
	}
}

// The default exchange's bindings cannot be deleted: 401 "Access
// refused." as RabbitMQ answers (the unbind's ACCESS_REFUSED), not a 500.
func TestDeleteDefaultExchangeBinding(t *testing.T) {
	a := startAPI(t)
	a.must(201, "PUT", "/queues/%2F/q", nil)
	a.must(200, "GET", "/bindings/%2F/e/amq.default/q/q/q", nil)
	wantError(t, a.do("DELETE", "/bindings/%2F/e/amq.default/q/q/q", nil), 401, "not_authorised", "Access refused.")
	a.must(200, "GET", "/bindings/%2F/e/amq.default/q/q/q", nil)
}
