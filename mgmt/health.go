package mgmt

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/brokerd/brokerd/broker"
)

// RabbitMQ's health checks (rabbit_mgmt_wm_health_check_*), beside the
// alarms check and the aliveness test (overview.go): 200 {"status":"ok"}
// when the check passes, 503 {"status":"failed","reason":...} when it
// fails, with each check's own fields.
//
// port-listener, protocol-listener, virtual-hosts and
// certificate-expiration need a management user, as RabbitMQ's; is-in-
// service, ready-to-accept-clients and below-node-connection-limit need
// none: RabbitMQ serves them without authentication, for load balancers
// and orchestrators that hold no credentials.
func (s *Server) healthRoutes() {
	s.handle("GET /api/health/checks/port-listener/{port}", management, s.healthPortListener)
	s.handle("GET /api/health/checks/protocol-listener/{protocol}", management, s.healthProtocolListener)
	s.handle("GET /api/health/checks/virtual-hosts", management, s.healthVirtualHosts)
	s.handle("GET /api/health/checks/certificate-expiration/{within}/{unit}", management, s.healthCertificates)
	s.open("GET /api/health/checks/is-in-service", s.healthServing("this rabbit node is not currently available to serve"))
	s.open("GET /api/health/checks/ready-to-accept-clients", s.healthServing("node is not accepting client connections"))
	s.open("GET /api/health/checks/below-node-connection-limit", s.healthConnectionLimit)
}

// open registers a handler served without authentication (the Host
// check and the rest of ServeHTTP's still apply).
func (s *Server) open(pattern string, h func(r *http.Request) any) {
	s.rt.add(pattern, func(w http.ResponseWriter, r *http.Request) {
		// A probe must see each answer afresh, as RabbitMQ's no-cache
		// headers on these checks say.
		w.Header().Set("Cache-Control", "no-cache, no-store, must-revalidate")
		writeResult(w, r, h(r))
	})
}

// healthFailed is a check's 503: status failed, the reason and fields.
func healthFailed(reason string, fields map[string]any) status {
	body := map[string]any{"status": "failed", "reason": reason}
	for k, v := range fields {
		body[k] = v
	}
	return status{http.StatusServiceUnavailable, body}
}

// healthPortListener passes when a listener of the process listens on
// the port.
func (s *Server) healthPortListener(u *broker.UserInfo, r *http.Request) (any, error) {
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil {
		return nil, badRequest("Invalid port")
	}
	ports := []int{}
	for _, l := range s.opts.Listeners {
		_, p := hostPort(l.Addr)
		if p == port {
			return map[string]any{"status": "ok", "port": port}, nil
		}
		ports = append(ports, p)
	}
	return healthFailed("No active listener", map[string]any{"missing": port, "ports": ports}), nil
}

// healthProtocolListener passes when a listener of the process serves
// the protocol, named as RabbitMQ names it or by one of RabbitMQ's
// aliases (protocolAliases).
func (s *Server) healthProtocolListener(u *broker.UserInfo, r *http.Request) (any, error) {
	proto := strings.ToLower(r.PathValue("protocol"))
	if p, ok := protocolAliases[proto]; ok {
		proto = p
	}
	protos := []string{}
	for _, l := range s.opts.Listeners {
		if l.Protocol == proto {
			return map[string]any{"status": "ok", "protocol": proto}, nil
		}
		protos = append(protos, l.Protocol)
	}
	return healthFailed("No active listener", map[string]any{"missing": proto, "protocols": protos}), nil
}

// protocolAliases are RabbitMQ's other names of the protocols
// (rabbit_mgmt_wm_health_check_protocol_listener:normalize_protocol),
// those of the protocols brokerd serves or may be asked about; a name
// not here is compared as it is (lower-cased). RabbitMQ names the
// Prometheus listener "http/prometheus" and has no alias for it.
var protocolAliases = map[string]string{
	"amqp091": "amqp", "amqp0.9.1": "amqp", "amqp0-9-1": "amqp", "amqp0_9_1": "amqp",
	"amqp10": "amqp", "amqp1.0": "amqp", "amqp1-0": "amqp", "amqp1_0": "amqp",
	"amqps": "amqp/ssl",
	"http1": "http", "http1.1": "http", "http_api": "http", "management": "http", "management_ui": "http", "ui": "http",
	"cli": "clustering", "distribution": "clustering",
	"mqtt3.1": "mqtt", "mqtt3.1.1": "mqtt", "mqtt31": "mqtt", "mqtt311": "mqtt", "mqtt3_1": "mqtt", "mqtt3_1_1": "mqtt",
	"mqtts": "mqtt/ssl", "mqtt+tls": "mqtt/ssl", "mqtt+ssl": "mqtt/ssl",
	"stomp1.0": "stomp", "stomp1.1": "stomp", "stomp1.2": "stomp", "stomp10": "stomp", "stomp11": "stomp",
	"stomp12": "stomp", "stomp1_0": "stomp", "stomp1_1": "stomp", "stomp1_2": "stomp",
	"stomps": "stomp/ssl", "stomp+tls": "stomp/ssl", "stomp+ssl": "stomp/ssl",
}

// healthVirtualHosts passes when every vhost runs. A brokerd vhost has
// no process of its own to stop or crash (RabbitMQ's per-vhost
// supervisor): each exists in the broker and is served as long as the
// broker is, so the check passes whenever the API answers; it lists no
// vhost as down.
func (s *Server) healthVirtualHosts(u *broker.UserInfo, r *http.Request) (any, error) {
	return map[string]any{"status": "ok"}, nil
}

// Seconds per certificate-expiration unit, as RabbitMQ's (a month is a
// twelfth of a 365-day year).
var expirationUnits = map[string]time.Duration{
	"days":   24 * time.Hour,
	"weeks":  7 * 24 * time.Hour,
	"months": 365 * 24 * time.Hour / 12,
	"years":  365 * 24 * time.Hour,
}

// healthCertificates fails when a certificate in a TLS listener's
// certificate or CA file expires within the window (or is not valid yet,
// or the file holds something else, as RabbitMQ reports it); a process
// without TLS listener passes.
func (s *Server) healthCertificates(u *broker.UserInfo, r *http.Request) (any, error) {
	n, err := strconv.Atoi(r.PathValue("within"))
	if err != nil {
		return nil, badRequest("Invalid expiration value.")
	}
	unit, ok := expirationUnits[strings.ToLower(r.PathValue("unit"))]
	if !ok {
		return nil, badRequest("Time unit not recognised. Supported units: days, weeks, months, years.")
	}
	now := time.Now()
	// Far past or future bounds saturate rather than overflow.
	var deadline time.Time
	switch w := time.Duration(n); {
	case w > 0 && w > (1<<62)/unit:
		deadline = time.Unix(1<<62, 0)
	case w < 0 && -w > (1<<62)/unit:
		deadline = time.Unix(-1<<62, 0)
	default:
		deadline = now.Add(w * unit)
	}
	expiring := []map[string]any{}
	for _, l := range s.opts.Listeners {
		if l.CertFile == "" {
			continue
		}
		certs := expiringCerts(l.CertFile, now, deadline)
		cas := expiringCerts(l.CAFile, now, deadline)
		if len(certs) == 0 && len(cas) == 0 {
			continue
		}
		host, port := hostPort(l.Addr)
		expiring = append(expiring, map[string]any{
			"node": s.node(), "protocol": l.Protocol, "interface": host, "port": port,
			"certfile": l.CertFile, "cacertfile": l.CAFile,
			"certfile_expires_on": certs, "cacertfile_expires_on": cas,
		})
	}
	if len(expiring) > 0 {
		return healthFailed("Certificates expiring", map[string]any{"expired": expiring}), nil
	}
	return map[string]any{"status": "ok"}, nil
}

// expiringCerts lists, for the PEM file at path ("" none), the expiry
// ("2006-01-02 15:04:05" UTC) of each certificate that expires before
// deadline, and a reason for each entry that is no valid certificate: a
// certificate not valid yet, another PEM type, a file without PEM or
// that cannot be read.
func expiringCerts(path string, now, deadline time.Time) []string {
	out := []string{}
	if path == "" {
		return out
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return append(out, fmt.Sprintf("read %s: %v", path, err))
	}
	found := false
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		found = true
		if b.Type != "CERTIFICATE" {
			out = append(out, fmt.Sprintf("The certificate file provided contains a %s entry", b.Type))
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		switch {
		case err != nil:
			out = append(out, fmt.Sprintf("parse certificate: %v", err))
		case c.NotBefore.After(now):
			out = append(out, "Certificate is not yet valid")
		case c.NotAfter.Before(deadline):
			a := c.NotAfter.UTC()
			// RabbitMQ's format: the hour unpadded.
			out = append(out, fmt.Sprintf("%d-%02d-%02d %d:%02d:%02d", a.Year(), a.Month(), a.Day(), a.Hour(), a.Minute(), a.Second()))
		}
	}
	if !found {
		out = append(out, "The certificate file provided does not contain any PEM entry.")
	}
	return out
}

// healthServing is is-in-service and ready-to-accept-clients: they pass
// while the AMQP server accepts connections (not past the start of a
// shutdown), failing with reason. Without an AMQP server (Options.Node)
// the broker the API answers for serves.
func (s *Server) healthServing(reason string) func(r *http.Request) any {
	return func(r *http.Request) any {
		if a := s.opts.Node.AMQP; a != nil && !a.Accepting() {
			return healthFailed(reason, nil)
		}
		return map[string]any{"status": "ok"}
	}
}

// healthConnectionLimit passes while the AMQP connections open are
// fewer than limits.max_connections; limit is "infinity" without one,
// as RabbitMQ's connection_max.
func (s *Server) healthConnectionLimit(r *http.Request) any {
	var conns, limit int
	if a := s.opts.Node.AMQP; a != nil {
		conns, limit = a.Connections(), a.MaxConnections()
	} else {
		conns = len(s.b.Connections(""))
	}
	if limit == 0 {
		return map[string]any{"status": "ok", "limit": "infinity", "connections": conns}
	}
	if conns < limit {
		return map[string]any{"status": "ok", "limit": limit, "connections": conns}
	}
	return healthFailed("node connection limit is reached", map[string]any{"limit": limit, "connections": conns})
}
