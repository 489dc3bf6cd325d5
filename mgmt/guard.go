package mgmt

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/brokerd/brokerd/broker"
)

// What a request must get past before its handler runs, against clients
// that are slow on purpose, lie about who they are, or are a browser
// someone else's page is driving:
//
//   - Host: only a loopback name (localhost, *.localhost), an IP address,
//     the machine's host name or a name in Options.AllowedHosts. A page
//     on a name its author controls can point that name at 127.0.0.1
//     (DNS rebinding) and then talk to the API as its own origin, with the
//     loopback-only guest; it cannot make the browser send a Host it does
//     not own. An IP address cannot be rebound: a page can reach one only
//     as its own origin.
//   - Cross-origin: a state-changing request (not GET, HEAD, OPTIONS) a
//     browser sends on behalf of another origin (Sec-Fetch-Site, Origin)
//     is refused (net/http's CrossOriginProtection): a form on another
//     site would otherwise carry the credentials a user gave the browser
//     for this one. Clients that are not browsers send neither header.
//   - Credentials, tags and the permissions the route needs are checked
//     from the headers (handle), before a byte of the body is read.
//   - A body must be JSON (Content-Type application/json; a form can send
//     only form and text types without a preflight), no larger than the
//     route's limit (Options.MaxBody; Options.MaxDefinitionsBody for a
//     definitions import; alarmBodyLimit while the memory alarm is raised,
//     refused with 503 then), and arrive in time: within
//     Options.BodyTimeout plus one second per Options.MinBodyRate bytes
//     received, so a client trickling a body is cut off while a large
//     import over a slow link is not.
//   - A reply to a request whose body was not read to its end closes the
//     connection (Connection: close) after reading for at most
//     unreadLinger what the client already sent, so that it sees the
//     reply rather than a reset: net/http would otherwise read up to 256
//     KiB of the unread body, without a deadline, before replying.

// alarmBodyLimit bounds a request body while the memory alarm is raised.
const alarmBodyLimit = 64 << 10

// unreadLinger is how long the server keeps reading an unwanted body
// after its reply before it closes the connection (net/http's own delay
// for that, rstAvoidanceDelay, is 500ms).
const unreadLinger = 500 * time.Millisecond

// guardedWriter is the ResponseWriter handlers write to: it closes the
// connection after a reply to a request whose body is not read to its
// end.
type guardedWriter struct {
	http.ResponseWriter
	body  *bodyReader // nil: the request has no body
	wrote bool
}

func (g *guardedWriter) WriteHeader(code int) {
	if !g.wrote {
		g.wrote = true
		if g.body != nil && !g.body.eof {
			g.Header().Set("Connection", "close")
			g.body.abandon()
		}
	}
	g.ResponseWriter.WriteHeader(code)
}

func (g *guardedWriter) Write(p []byte) (int, error) {
	if !g.wrote {
		g.WriteHeader(http.StatusOK)
	}
	return g.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection.
func (g *guardedWriter) Unwrap() http.ResponseWriter { return g.ResponseWriter }

// bodyReader is a request body with a deadline that moves as it arrives
// (Options.BodyTimeout plus one second per Options.MinBodyRate bytes read)
// and a size limit (set by admitBody). Used by the request's goroutine
// only.
type bodyReader struct {
	rc    io.ReadCloser
	ctl   *http.ResponseController
	start time.Time
	grace time.Duration
	rate  int64 // bytes per second
	n     int64 // bytes read
	limit int64 // 0: not admitted yet (no handler reads it before)
	alarm bool  // limit is alarmBodyLimit, for the memory alarm
	eof   bool
}

func (s *Server) newBodyReader(w http.ResponseWriter, r *http.Request) *bodyReader {
	b := &bodyReader{rc: r.Body, ctl: http.NewResponseController(w), start: time.Now(),
		grace: s.opts.BodyTimeout, rate: s.opts.MinBodyRate}
	b.ctl.SetReadDeadline(b.deadline())
	return b
}

func (b *bodyReader) deadline() time.Time {
	return b.start.Add(b.grace + time.Duration(float64(b.n)/float64(b.rate)*float64(time.Second)))
}

func (b *bodyReader) Read(p []byte) (int, error) {
	if b.eof {
		return 0, io.EOF
	}
	if b.limit > 0 && b.n > b.limit {
		return 0, &bodyTooLarge{limit: b.limit, alarm: b.alarm}
	}
	if b.limit > 0 && int64(len(p)) > b.limit-b.n+1 {
		p = p[:b.limit-b.n+1]
	}
	b.ctl.SetReadDeadline(b.deadline())
	n, err := b.rc.Read(p)
	b.n += int64(n)
	if b.limit > 0 && b.n > b.limit {
		return n, &bodyTooLarge{limit: b.limit, alarm: b.alarm}
	}
	switch {
	case err == io.EOF:
		b.eof = true
		// No deadline while the handler works: net/http now reads the
		// connection in the background, and a timeout there would cancel
		// the request's context.
		b.ctl.SetReadDeadline(time.Time{})
	case errors.Is(err, os.ErrDeadlineExceeded):
		err = &bodyTimeout{n: b.n, took: time.Since(b.start)}
	}
	return n, err
}

func (b *bodyReader) Close() error { return b.rc.Close() }

// abandon gives up on the rest of the body: net/http reads what the client
// already sent for unreadLinger more, no longer, then closes.
func (b *bodyReader) abandon() {
	b.ctl.SetReadDeadline(time.Now().Add(unreadLinger))
}

// bodyTooLarge is a body over its route's limit.
type bodyTooLarge struct {
	limit int64
	alarm bool
}

func (e *bodyTooLarge) Error() string {
	if e.alarm {
		return fmt.Sprintf("memory alarm in effect: request bodies over %d bytes are refused until it clears", e.limit)
	}
	// RabbitMQ's words, and the limit.
	return fmt.Sprintf("Exceeded HTTP request body size limit (%d bytes)", e.limit)
}

// bodyTimeout is a body that did not arrive in time.
type bodyTimeout struct {
	n    int64
	took time.Duration
}

func (e *bodyTimeout) Error() string {
	return fmt.Sprintf("request body too slow: %d bytes in %s", e.n, e.took.Round(time.Millisecond))
}

// admitBody checks a request that may carry a body, once its sender is
// authorized and before the handler reads it: JSON, and within the
// route's size limit, which bounds the reads that follow.
func (s *Server) admitBody(r *http.Request, large bool) error {
	b, ok := r.Body.(*bodyReader)
	if !ok {
		return nil // no body
	}
	if ct := r.Header.Get("Content-Type"); !isJSON(ct) {
		if ct == "" {
			ct = "none"
		}
		return &httpError{http.StatusUnsupportedMediaType, "unsupported_media_type",
			fmt.Sprintf("a request body must be JSON, sent with Content-Type: application/json (this one's is %s)", ct)}
	}
	b.limit = s.opts.MaxBody
	if large {
		b.limit = s.opts.MaxDefinitionsBody
	}
	if slices.Contains(s.b.Alarms(), broker.AlarmMemory) && b.limit > alarmBodyLimit {
		b.limit, b.alarm = alarmBodyLimit, true
	}
	if r.ContentLength > b.limit {
		return &bodyTooLarge{limit: b.limit, alarm: b.alarm}
	}
	return nil
}

// isJSON reports whether a Content-Type is JSON: application/json or a
// +json type.
func isJSON(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")
}

// hostAllowed reports whether a request's Host may be served (see the
// comment at the top).
func (s *Server) hostAllowed(host string) bool {
	if host == "" {
		return true // HTTP/1.0 without a Host: no browser sends that
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	return s.hosts["*"] || s.hosts[host]
}

// allowedHosts is the set hostAllowed looks names up in.
func allowedHosts(extra []string) map[string]bool {
	m := map[string]bool{}
	if h, err := os.Hostname(); err == nil {
		m[strings.ToLower(h)] = true
	}
	for _, h := range extra {
		m[strings.ToLower(strings.TrimSuffix(h, "."))] = true
	}
	return m
}

func hostRefused(host string) error {
	return &httpError{http.StatusForbidden, "forbidden", fmt.Sprintf(
		"host name '%s' is not allowed: add it to mgmt.allowed_hosts, or use localhost or an IP address", host)}
}

func crossOriginRefused(err error) error {
	return &httpError{http.StatusForbidden, "forbidden", "cross-origin request refused: " + err.Error()}
}
