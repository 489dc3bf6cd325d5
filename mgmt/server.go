package mgmt

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/cluster"
	"github.com/brokerd/brokerd/internal/ratelog"
)

// Options configures a Server. Zero fields take the defaults noted.
type Options struct {
	// Broker is the broker managed. Required.
	Broker *broker.Broker
	// Logger receives operational messages; slog.Default() if nil.
	Logger *slog.Logger
	// Version is brokerd's version, shown in /api/overview.
	Version string
	// Listeners are the process's listeners (AMQP, AMQPS, the management
	// API's HTTP and HTTPS, the metrics port), shown in /api/overview and
	// checked by the health checks port-listener, protocol-listener and
	// certificate-expiration (health.go).
	Listeners []Listener
	// MaxBody bounds a request body (a declaration, a policy, a publish),
	// except a definitions import's. Default 1 MiB.
	MaxBody int64
	// MaxDefinitionsBody bounds the body of a definitions import (POST
	// /api/definitions, an administrator's: an export of a large broker).
	// Default 64 MiB.
	MaxDefinitionsBody int64
	// BodyTimeout and MinBodyRate bound the time a request body may
	// take: BodyTimeout, plus one second per MinBodyRate bytes received.
	// A body later than that is refused (408) and its connection closed.
	// Defaults 10s and 64 KiB/s (a 64 MiB import may take 17 minutes).
	BodyTimeout time.Duration
	MinBodyRate int64
	// MaxConnections bounds the HTTP connections open at once over every
	// listener; more wait to be accepted. Default DefaultMaxConnections().
	MaxConnections int
	// AllowedHosts are the host names, besides localhost, *.localhost,
	// IP addresses and the machine's host name, that requests may name
	// in their Host header; "*" allows any (and gives up the protection
	// against DNS rebinding).
	AllowedHosts []string
	// FrameMax is the AMQP frame_max: a declaration or binding whose
	// method frame would be larger is refused, as over AMQP, and policies,
	// users, vhosts and permissions are bounded by it too. Default 131072.
	FrameMax int
	// LoginFailureDelay is how long a refused login waits before its 401,
	// as amqp.ServerConfig.LoginFailureDelay (default 1s; negative:
	// none).
	LoginFailureDelay time.Duration
	// AuthMechanisms are the SASL mechanisms AMQP logins may use
	// (amqp.ServerConfig.Mechanisms), which a node's auth_mechanisms
	// show. Default PLAIN and AMQPLAIN.
	AuthMechanisms []string
	// MaxGetBytes bounds what one POST .../get collects: once its
	// messages (bodies, properties and some overhead each) reach it, no
	// more are fetched, whatever the count asked (RabbitMQ has no bound;
	// a huge count on a deep queue would hold it all in memory). The
	// first message is always returned. Default 64 MiB.
	MaxGetBytes int64
	// Metrics, if set, serves GET /metrics, without authentication, as
	// RabbitMQ's prometheus plugin serves it (package metrics builds it).
	// nil: no /metrics.
	Metrics http.Handler
	// Daemon, if set, tells what the daemon knows of itself (overview.go:
	// the overview's node_status, /api/environment); it is called for each
	// request that shows it, from any goroutine. nil: neither is served.
	Daemon func() DaemonInfo
	// Node is what /api/nodes reports of the process (nodes.go).
	Node NodeOptions
	// Cluster, if set, returns what this cluster node knows of the
	// cluster (package cluster): the node and cluster names, and every
	// member for /api/nodes and /api/cluster (cluster.go). It is called
	// for each request that shows it, from any goroutine. nil: a single
	// node.
	Cluster func() cluster.Status
	// Shovels, if set, is the shovel engine /api/shovels reports and
	// restarts (shovels.go). nil: no shovels are listed.
	Shovels Shovels
	// RatesMode is RabbitMQ's management.rates_mode: "basic" (the
	// default) samples every object's counters every SampleInterval and
	// shows message rates (rates.go); "none" keeps no samples and shows
	// counts only.
	RatesMode string
	// SampleInterval is RabbitMQ's collect_statistics_interval: how
	// often the rates' samples are taken. Default and least 5s: the
	// finest level kept is a sample per 5s.
	SampleInterval time.Duration
	// Clock is the rates' clock; time.Now if nil. SampleTicks, if set,
	// replaces the sampler's ticker: a sample is taken for each value
	// received. Tests set both.
	Clock       func() time.Time
	SampleTicks <-chan time.Time
}

// Listener is a listener of the process, as /api/overview lists it.
type Listener struct {
	// Protocol is RabbitMQ's name of the listener's protocol: "amqp",
	// "amqp/ssl", "http", "https" or "http/prometheus".
	Protocol string
	Addr     net.Addr
	// CertFile and CAFile are a TLS listener's certificate and CA files
	// (PEM), read by the health check certificate-expiration at each
	// request, as RabbitMQ reads them; "" for a plain listener.
	CertFile, CAFile string
}

// Server serves the management HTTP API. Safe for concurrent use.
type Server struct {
	opts     Options
	b        *broker.Broker
	log      *slog.Logger
	rt       router
	srv      *http.Server
	conns    *connLimit
	hosts    map[string]bool // allowed host names (hostAllowed)
	cop      *http.CrossOriginProtection
	loginLog *ratelog.Limiter
	// loginDelay waits out a refused login's delay; a test replaces it.
	loginDelay func(r *http.Request, d time.Duration)
	// started is when the node started (Options.Node.Started): uptime.
	started time.Time
	// rates samples the counters (nil: rates_mode none); its goroutine
	// runs until ratesStop is closed and closes ratesDone.
	rates     *sampler
	ratesStop chan struct{}
	ratesDone chan struct{}
	stopRates sync.Once
}

// New builds a Server; Serve starts it on a listener.
func New(opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxBody <= 0 {
		opts.MaxBody = 1 << 20
	}
	if opts.MaxDefinitionsBody <= 0 {
		opts.MaxDefinitionsBody = 64 << 20
	}
	if opts.BodyTimeout <= 0 {
		opts.BodyTimeout = 10 * time.Second
	}
	if opts.MinBodyRate <= 0 {
		opts.MinBodyRate = 64 << 10
	}
	if opts.MaxConnections <= 0 {
		opts.MaxConnections = DefaultMaxConnections()
	}
	if opts.FrameMax <= 0 {
		opts.FrameMax = 131072
	}
	if opts.LoginFailureDelay == 0 {
		opts.LoginFailureDelay = time.Second
	}
	if opts.MaxGetBytes <= 0 {
		opts.MaxGetBytes = 64 << 20
	}
	if opts.RatesMode == "" {
		opts.RatesMode = "basic"
	}
	opts.SampleInterval = max(opts.SampleInterval, 5*time.Second)
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	s := &Server{opts: opts, b: opts.Broker, log: opts.Logger,
		hosts:      allowedHosts(opts.AllowedHosts),
		cop:        http.NewCrossOriginProtection(),
		loginLog:   ratelog.New(opts.Logger, slog.LevelWarn, "management login refused", ratelog.Interval),
		loginDelay: waitLoginDelay,
		started:    opts.Node.Started,
		conns: &connLimit{slots: make(chan struct{}, opts.MaxConnections),
			log: ratelog.New(opts.Logger, slog.LevelWarn, "management connections at mgmt.max_connections; new ones wait", ratelog.Interval)},
	}
	if s.started.IsZero() {
		s.started = time.Now()
	}
	if opts.RatesMode != "none" {
		s.rates = newSampler(s.b, opts.SampleInterval, opts.Clock, func() nodeStats { st, _ := s.readNodeStats(); return st })
		s.ratesStop, s.ratesDone = make(chan struct{}), make(chan struct{})
		go s.rates.run(opts.SampleTicks, s.ratesStop, s.ratesDone)
	}
	s.routes()
	s.srv = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(opts.Logger.Handler(), slog.LevelDebug),
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateClosed || st == http.StateHijacked {
				s.conns.release()
			}
		},
	}
	return s
}

// Serve serves HTTP on l until Shutdown; it returns http.ErrServerClosed
// then. The connections of every listener count against
// Options.MaxConnections together.
func (s *Server) Serve(l net.Listener) error {
	return s.srv.Serve(&limitListener{Listener: l, lim: s.conns, done: make(chan struct{})})
}

// Shutdown stops accepting and waits for requests in progress until ctx
// ends.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	s.loginLog.Stop()
	s.conns.log.Stop()
	s.stopRates.Do(func() {
		if s.rates != nil {
			close(s.ratesStop)
			<-s.ratesDone
		}
	})
	return err
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("Vary", "accept, accept-encoding, origin")
	gw := &guardedWriter{ResponseWriter: w}
	if r.Body != nil && r.Body != http.NoBody {
		gw.body = s.newBodyReader(w, r)
		r.Body = gw.body
	}
	w = gw
	if !s.hostAllowed(r.Host) {
		s.writeError(w, r, hostRefused(r.Host))
		return
	}
	if err := s.cop.Check(r); err != nil {
		s.writeError(w, r, crossOriginRefused(err))
		return
	}
	s.rt.serve(w, r, func() { s.writeError(w, r, notFound()) }, func(allow []string) {
		if slices.Contains(allow, http.MethodGet) {
			allow = append([]string{http.MethodHead}, allow...)
		}
		w.Header().Set("Allow", strings.Join(append(allow, http.MethodOptions), ", "))
		w.WriteHeader(http.StatusMethodNotAllowed) // no body, as RabbitMQ
	})
}

// A handler gets the authenticated user and the request; it returns the
// value to send as JSON (nil: 204 No Content) or an error.
type handlerFunc func(u *broker.UserInfo, r *http.Request) (any, error)

// access is what a handler requires of the user's tags. Every endpoint
// needs a management user (any of the management tags); vhost-scoped ones
// also access to the vhost.
type access int

const (
	management access = iota
	// policymaker is RabbitMQ's is_authorized_policies: the policymaker
	// tag and the vhost's permissions, or administrator; refused as "User
	// not authorised to access object" either way.
	policymaker
	monitoring
	administrator
)

// notAuthorisedObject is RabbitMQ's refusal of a policy to a user who is
// not a policymaker with permissions in the vhost.
const notAuthorisedObject = "User not authorised to access object"

// A precheck refuses a request from its route and user alone, before its
// body is read: the permission the operation needs on the resource the
// path names.
type precheck func(u *broker.UserInfo, r *http.Request) error

// routeOption adjusts a route registered with handle.
type routeOption func(*routeOpts)

type routeOpts struct {
	pre   []precheck
	large bool // the body may be Options.MaxDefinitionsBody
}

// checked runs fn before the body is read.
func checked(fn precheck) routeOption { return func(o *routeOpts) { o.pre = append(o.pre, fn) } }

// largeBody lets the route's body be Options.MaxDefinitionsBody.
func largeBody(o *routeOpts) { o.large = true }

// handle registers a handler for pattern ("METHOD /path/{wild}"); the
// same path with a trailing slash is served too, as RabbitMQ does.
// Routes are matched in registration order. The user is authenticated
// and authorized (tags, the vhost, the route's prechecks) from the
// request's headers; only then may a PUT's or POST's body be read, if it
// is JSON and within its limit (admitBody).
func (s *Server) handle(pattern string, need access, h handlerFunc, opts ...routeOption) {
	var ro routeOpts
	for _, o := range opts {
		o(&ro)
	}
	method, _, _ := strings.Cut(pattern, " ")
	takesBody := method == http.MethodPut || method == http.MethodPost
	fn := func(w http.ResponseWriter, r *http.Request) {
		u, err := s.authenticate(r)
		if err == nil {
			err = authorize(u, need)
		}
		if err == nil {
			if v := r.PathValue("vhost"); v != "" && strings.Contains(pattern, "{vhost}") {
				denied := "User not authorised to access virtual host"
				if need == policymaker {
					denied = notAuthorisedObject
				}
				err = s.authorizeVHost(u, r, v, denied)
			}
		}
		for _, pre := range ro.pre {
			if err == nil {
				err = pre(u, r)
			}
		}
		if err == nil && takesBody {
			err = s.admitBody(r, ro.large)
		}
		if err == nil && method == http.MethodGet {
			var rq rateQuery
			if rq, err = parseRates(r); err == nil {
				r = r.WithContext(context.WithValue(r.Context(), rateQueryKey{}, rq))
			}
		}
		var out any
		if err == nil {
			out, err = h(u, r)
		}
		if l, ok := out.([]map[string]any); ok && err == nil {
			out, err = shapeList(r, l)
		}
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		writeResult(w, r, out)
	}
	s.rt.add(pattern, fn)
}

// onChannel reports a precheck's refusal as a channel saw it, as a get's
// (channelError).
func onChannel(pre precheck) precheck {
	return func(u *broker.UserInfo, r *http.Request) error {
		err := pre(u, r)
		if ae, ok := err.(*amqp.Error); ok {
			return channelError{ae}
		}
		return err
	}
}

// mayAccess is a precheck: the user's access (broker.Configure, Write or
// Read) to the resource (kind "queue" or "exchange") named by the path's
// name wildcard (an exchange's amq.default is the default exchange).
func (s *Server) mayAccess(access, kind, wildcard string) precheck {
	return func(u *broker.UserInfo, r *http.Request) error {
		name := r.PathValue(wildcard)
		if kind == "exchange" {
			name = exchangeName(name)
		}
		return s.checkAccess(u, r.PathValue("vhost"), access, kind, name)
	}
}

// checkAccess refuses what the operation's broker.Direct would refuse for
// want of access: no permissions in the vhost at all (an
// *broker.AccessError, as OpenDirect's), or not the access to the
// resource (the channel's *amqp.Error).
func (s *Server) checkAccess(u *broker.UserInfo, vhost, access, kind, name string) error {
	if !s.canAccessVHost(u, vhost) {
		return &broker.AccessError{Msg: fmt.Sprintf("access to vhost '%s' refused for user '%s'", vhost, u.Name)}
	}
	if aerr := s.b.CheckAccess(u.Name, vhost, access, kind, name); aerr != nil {
		return aerr
	}
	return nil
}

// created is a handler result: 201 Created with no body (a PUT that made
// something new).
type created struct{}

// createdAt is a handler result: 201 Created with a Location (a path
// under /api) and a JSON body (a POST that started something).
type createdAt struct {
	location string
	body     any
}

// noContent is a handler result: 204 No Content.
type noContent struct{}

func writeResult(w http.ResponseWriter, r *http.Request, out any) {
	switch x := out.(type) {
	case status:
		writeJSON(w, x.code, x.body)
		return
	case location:
		w.Header().Set("Location", locationURL(x))
		w.WriteHeader(http.StatusCreated)
		return
	case created:
		w.WriteHeader(http.StatusCreated)
		return
	case createdAt:
		w.Header().Set("Location", x.location)
		writeJSON(w, http.StatusCreated, x.body)
		return
	case noContent, nil:
		w.WriteHeader(http.StatusNoContent)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // reasons quote Erlang terms: <<"abc">>
	if err := enc.Encode(v); err != nil {
		status = http.StatusInternalServerError
		buf.Reset()
		enc.Encode(apiError{Error: "internal_server_error", Reason: err.Error()})
	}
	body := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(body)
}

// apiError is RabbitMQ's error body.
type apiError struct {
	Error  string `json:"error"`
	Reason string `json:"reason"`
}

// httpError is an error with its HTTP status and RabbitMQ's error word.
type httpError struct {
	status int
	word   string
	reason string
}

func (e *httpError) Error() string { return e.reason }

func badRequest(format string, args ...any) error {
	return &httpError{http.StatusBadRequest, "bad_request", fmt.Sprintf(format, args...)}
}

func notFound() error { return &httpError{http.StatusNotFound, "Object Not Found", "Not Found"} }

func notAuthorized(reason string) error {
	return &httpError{http.StatusUnauthorized, "not_authorized", reason}
}

// notAuthorised is RabbitMQ 3.10's refusal of a logged-in user who lacks
// a tag or an object's access: 401 too, spelled so.
func notAuthorised(reason string) error {
	return &httpError{http.StatusUnauthorized, "not_authorised", reason}
}

// vhostNotFound is a write into a vhost that does not exist.
func vhostNotFound() error { return &httpError{http.StatusNotFound, "not_found", "vhost_not_found"} }

// writeError maps err onto RabbitMQ's status codes and bodies.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var he *httpError
	var ie *broker.InvalidError
	var ae *amqp.Error
	var acc *broker.AccessError
	var tooLarge *bodyTooLarge
	var slow *bodyTimeout
	var ce channelError
	switch {
	case errors.As(err, &he):
	case errors.As(err, &ce):
		he = amqpHTTPError(ce.e)
		he.reason = ce.e.Text
	case errors.As(err, &tooLarge) && tooLarge.alarm:
		he = &httpError{http.StatusServiceUnavailable, "service_unavailable", tooLarge.Error()}
	case errors.As(err, &tooLarge): // 400, as RabbitMQ's
		he = &httpError{http.StatusBadRequest, "bad_request", tooLarge.Error()}
	case errors.As(err, &slow):
		he = &httpError{http.StatusRequestTimeout, "request_timeout", fmt.Sprintf("%s: a body must arrive within %s plus a second per %d bytes (mgmt.body_timeout, mgmt.min_body_rate)",
			slow.Error(), s.opts.BodyTimeout, s.opts.MinBodyRate)}
	case errors.Is(err, broker.ErrNotFound):
		he = notFound().(*httpError)
	case errors.As(err, &ie):
		he = &httpError{http.StatusBadRequest, "bad_request", ie.Msg}
	case errors.As(err, &acc): // no permissions in the vhost: RabbitMQ's direct connection refused
		he = &httpError{http.StatusUnauthorized, "not_authorised", "Access refused."}
	case errors.As(err, &ae):
		he = amqpHTTPError(ae)
	default:
		s.log.Error("management request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		he = &httpError{http.StatusInternalServerError, "internal_server_error", err.Error()}
	}
	if he.status == http.StatusUnauthorized && he.word == "not_authorized" {
		w.Header().Set("WWW-Authenticate", `Basic realm="RabbitMQ Management"`)
		if he.reason == "" { // no credentials: RabbitMQ sends no body
			w.WriteHeader(he.status)
			return
		}
	}
	writeJSON(w, he.status, apiError{Error: he.word, Reason: he.reason})
}

// amqpHTTPError maps a refusal of a management operation as RabbitMQ's
// management plugin does (rabbit_mgmt_util:direct_request): 404 for
// NOT_FOUND, 401 "Access refused." for ACCESS_REFUSED, 400 otherwise, with
// the text without its reply name ("inequivalent arg ..."). (A get and the
// aliveness test report the channel's text, reply name included: see
// channelError.)
func amqpHTTPError(e *amqp.Error) *httpError {
	reason := e.Text
	if _, rest, ok := strings.Cut(reason, " - "); ok && amqp.ReplyName(e.Code) != "" {
		reason = rest
	}
	switch e.Code {
	case amqp.NotFound:
		return &httpError{http.StatusNotFound, "not_found", reason}
	case amqp.AccessRefused:
		return &httpError{http.StatusUnauthorized, "not_authorised", "Access refused."}
	case amqp.InternalError:
		return &httpError{http.StatusInternalServerError, "internal_server_error", reason}
	}
	return &httpError{http.StatusBadRequest, "bad_request", reason}
}

// authenticate checks the request's basic auth credentials
// (Broker.Login: the password, the loopback rule, the source's budget of
// failed logins). A refusal is logged through an aggregating logger and
// answered Options.LoginFailureDelay after the request arrived, whatever
// the reason, as an AMQP login's is.
func (s *Server) authenticate(r *http.Request) (*broker.UserInfo, error) {
	start := time.Now()
	name, pass, ok := r.BasicAuth()
	if !ok {
		return nil, notAuthorized("")
	}
	// The peer as a *net.TCPAddr, for the loopback-only rule (a nil
	// address is not loopback) and the failed-login budget.
	var remote net.Addr
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		remote = net.TCPAddrFromAddrPort(ap)
	}
	u, err := s.b.Login(name, pass, remote)
	if err != nil {
		s.loginLog.Event("remote", r.RemoteAddr, "user", name, "path", r.URL.Path, "reason", err.Error())
		if d := s.opts.LoginFailureDelay - time.Since(start); d > 0 {
			s.loginDelay(r, d)
		}
		return nil, notAuthorized("Login failed")
	}
	return &u, nil
}

// waitLoginDelay waits d, or until the client goes.
func waitLoginDelay(r *http.Request, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
	}
}

func hasTag(u *broker.UserInfo, tags ...string) bool {
	for _, t := range tags {
		if slices.Contains(u.Tags, t) {
			return true
		}
	}
	return false
}

// authorize checks the user's tags for an endpoint, as RabbitMQ's
// rabbit_mgmt_util:is_authorized_* do.
func authorize(u *broker.UserInfo, need access) error {
	if !hasTag(u, "management", "policymaker", "monitoring", "administrator") {
		return notAuthorised("Not management user")
	}
	switch need {
	case policymaker:
		if !hasTag(u, "policymaker", "administrator") {
			return notAuthorised(notAuthorisedObject)
		}
	case monitoring:
		if !hasTag(u, "monitoring", "administrator") {
			return notAuthorised("Not monitor")
		}
	case administrator:
		if !hasTag(u, "administrator") {
			return notAuthorised("Not administrator user")
		}
	}
	return nil
}

// authorizeVHost checks that the user may reach vhost's objects: it
// exists and the user has permissions in it, or is an administrator
// (RabbitMQ's is_authorized_vhost). A monitoring user sees every vhost's
// name, totals and connections, but not the objects of a vhost it has no
// permissions in.
// denied is the refusal's reason.
func (s *Server) authorizeVHost(u *broker.UserInfo, r *http.Request, vhost, denied string) error {
	if s.b.VHost(vhost) == nil {
		if r.Method == http.MethodPut || r.Method == http.MethodPost {
			return vhostNotFound()
		}
		return notFound()
	}
	if hasTag(u, "administrator") {
		return nil
	}
	if !s.canAccessVHost(u, vhost) {
		return notAuthorised(denied)
	}
	return nil
}
