package mgmt

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// router matches requests to routes by path segments, each unescaped on
// its own: RabbitMQ's paths carry names with "/" in them as %2F (the
// default vhost is %2F), which net/http.ServeMux unescapes before
// splitting. A trailing slash is ignored. A path no route has is 404; a
// path some route has for other methods is 405 with Allow.
type router struct{ routes []route }

type route struct {
	method   string
	segments []string // literal, or "{name}" for a wildcard
	h        http.HandlerFunc
}

// add registers h for pattern "METHOD /path/{wildcard}/...".
func (rt *router) add(pattern string, h http.HandlerFunc) {
	method, path, _ := strings.Cut(pattern, " ")
	rt.routes = append(rt.routes, route{method: method, segments: strings.Split(strings.Trim(path, "/"), "/"), h: h})
}

// splitPath returns the unescaped segments of r's path, or false if a
// segment's escaping is malformed.
func splitPath(r *http.Request) ([]string, bool) {
	segs := strings.Split(strings.Trim(r.URL.EscapedPath(), "/"), "/")
	for i, s := range segs {
		u, err := url.PathUnescape(s)
		if err != nil {
			return nil, false
		}
		segs[i] = u
	}
	return segs, true
}

func (rt *route) match(segs []string) map[string]string {
	if len(segs) != len(rt.segments) {
		return nil
	}
	vals := map[string]string{}
	for i, p := range rt.segments {
		if strings.HasPrefix(p, "{") {
			vals[p[1:len(p)-1]] = segs[i]
		} else if p != segs[i] {
			return nil
		}
	}
	return vals
}

// serve dispatches r; notFound and notAllowed write those replies.
func (rt *router) serve(w http.ResponseWriter, r *http.Request, notFound func(), notAllowed func(allow []string)) {
	segs, ok := splitPath(r)
	if !ok {
		notFound()
		return
	}
	var allow []string
	for i := range rt.routes {
		x := &rt.routes[i]
		vals := x.match(segs)
		if vals == nil {
			continue
		}
		if x.method != r.Method && !(x.method == http.MethodGet && r.Method == http.MethodHead) {
			if !slices.Contains(allow, x.method) {
				allow = append(allow, x.method)
			}
			continue
		}
		for k, v := range vals {
			r.SetPathValue(k, v)
		}
		x.h(w, r)
		return
	}
	if len(allow) > 0 {
		notAllowed(allow)
		return
	}
	notFound()
}
