package mgmt

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/brokerd/brokerd/internal/ratelog"
)

// MetricsServer serves GET /metrics alone ([metrics] listen): Prometheus's
// port, apart from the management API. A cluster node's management
// listener is forwarded to the leader; this one is served by each node,
// with its own metrics. Like the API's /metrics it needs no
// authentication; its connections are bounded and its requests timed out
// as the API's are.
type MetricsServer struct {
	srv   *http.Server
	conns *connLimit
}

// NewMetricsServer returns a server of h on /metrics, with at most
// maxConns connections open (DefaultMaxConnections when 0).
func NewMetricsServer(h http.Handler, log *slog.Logger, maxConns int) *MetricsServer {
	if maxConns <= 0 {
		maxConns = DefaultMaxConnections()
	}
	s := &MetricsServer{conns: &connLimit{slots: make(chan struct{}, maxConns),
		log: ratelog.New(log, slog.LevelWarn, "metrics connections at their bound; new ones wait", ratelog.Interval)}}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "only GET /metrics is served here", http.StatusNotFound)
	})
	s.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      time.Minute,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateClosed || st == http.StateHijacked {
				s.conns.release()
			}
		},
	}
	return s
}

// Serve serves on l until Shutdown; it returns http.ErrServerClosed then.
func (s *MetricsServer) Serve(l net.Listener) error {
	return s.srv.Serve(&limitListener{Listener: l, lim: s.conns, done: make(chan struct{})})
}

// Shutdown stops accepting and waits for scrapes in progress until ctx
// ends.
func (s *MetricsServer) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	s.conns.log.Stop()
	return err
}
