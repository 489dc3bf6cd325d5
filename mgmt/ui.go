package mgmt

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
)

// uiFiles is the management web UI: static HTML, CSS and JavaScript
// modules with no build step. The pages call the JSON API under /api with
// the credentials the user logs in with; the files themselves carry no
// secrets, so they are served without authentication, as RabbitMQ serves
// its UI.
//
//go:embed ui
var uiFiles embed.FS

// uiRoutes serves the UI: "/" is its page, "/ui/{file}" its scripts and
// styles. The handlers only read the embedded files, so they are safe for
// concurrent use.
func (s *Server) uiRoutes() {
	sub, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		panic("mgmt: embedded ui directory missing: " + err.Error())
	}
	serve := func(w http.ResponseWriter, r *http.Request, name string) {
		if _, err := fs.Stat(sub, name); err != nil || path.Clean(name) != name {
			s.writeError(w, r, notFound())
			return
		}
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'")
		w.Header().Set("X-Frame-Options", "DENY")
		http.ServeFileFS(w, r, sub, name)
	}
	s.rt.add("GET /", func(w http.ResponseWriter, r *http.Request) { serve(w, r, "index.html") })
	s.rt.add("GET /ui/{file}", func(w http.ResponseWriter, r *http.Request) {
		if f := r.PathValue("file"); f != "index.html" {
			serve(w, r, f)
			return
		}
		http.Redirect(w, r, "/", http.StatusMovedPermanently)
	})
}
