package mgmt_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker/brokertest"
	"github.com/brokerd/brokerd/mgmt"
)

// writeExpiringCert writes a self-signed PEM certificate valid from an
// hour ago until notAfter, and returns its file.
func writeExpiringCert(t *testing.T, notAfter time.Time) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "health"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: notAfter}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "cert.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// startHealthAPI starts a broker whose AMQP server has the connection
// limit maxConns, with an API listing its AMQP listener and the extra
// listeners.
func startHealthAPI(t *testing.T, maxConns int, extra ...mgmt.Listener) *api {
	t.Helper()
	inst := brokertest.Start(t, brokertest.Config{Server: amqp.ServerConfig{MaxConnections: maxConns}})
	addr, err := net.ResolveTCPAddr("tcp", inst.Addr)
	if err != nil {
		t.Fatal(err)
	}
	ls := append([]mgmt.Listener{{Protocol: "amqp", Addr: addr}}, extra...)
	a := &api{t: t, Instance: inst, opts: mgmt.Options{Listeners: ls, Node: mgmt.NodeOptions{AMQP: inst.Server()}}}
	a.serve()
	t.Cleanup(a.stopAPI)
	return a
}

// anonymous sends a GET without credentials.
func (a *api) anonymous(path string) resp {
	a.t.Helper()
	req, err := http.NewRequestWithContext(a.t.Context(), "GET", a.base+path, nil)
	if err != nil {
		a.t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		a.t.Fatal(err)
	}
	return resp{status: res.StatusCode, header: res.Header, body: b}
}

// port-listener and protocol-listener pass for a listener the process
// has, by port or by protocol (RabbitMQ's aliases too), and fail with
// the missing one and those there are; a port that is no number is 400.
func TestHealthListenerChecks(t *testing.T) {
	tlsAddr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 15671}
	a := startHealthAPI(t, 0, mgmt.Listener{Protocol: "https", Addr: tlsAddr})
	_, amqpPort, _ := net.SplitHostPort(a.Addr)
	port, _ := strconv.Atoi(amqpPort)

	r := a.must(200, "GET", "/health/checks/port-listener/"+amqpPort, nil).object(t)
	if r["status"] != "ok" || r["port"] != float64(port) {
		t.Errorf("port-listener %d: %v", port, r)
	}
	a.must(200, "GET", "/health/checks/port-listener/15671", nil)
	other := port + 1
	if other == 15671 {
		other++
	}
	r = a.must(503, "GET", "/health/checks/port-listener/"+strconv.Itoa(other), nil).object(t)
	if r["status"] != "failed" || r["reason"] != "No active listener" || r["missing"] != float64(other) ||
		fmt.Sprint(r["ports"]) != fmt.Sprint([]any{float64(port), float64(15671)}) {
		t.Errorf("port-listener %d: %v", other, r)
	}
	wantError(t, a.do("GET", "/health/checks/port-listener/amqp", nil), 400, "bad_request", "Invalid port")

	for proto, want := range map[string]string{"amqp": "amqp", "AMQP0-9-1": "amqp", "amqp091": "amqp", "https": "https"} {
		r := a.must(200, "GET", "/health/checks/protocol-listener/"+proto, nil).object(t)
		if r["status"] != "ok" || r["protocol"] != want {
			t.Errorf("protocol-listener %s: %v, want protocol %s", proto, r, want)
		}
	}
	r = a.must(503, "GET", "/health/checks/protocol-listener/amqps", nil).object(t)
	if r["status"] != "failed" || r["reason"] != "No active listener" || r["missing"] != "amqp/ssl" ||
		fmt.Sprint(r["protocols"]) != "[amqp https]" {
		t.Errorf("protocol-listener amqps: %v", r)
	}
	a.must(503, "GET", "/health/checks/protocol-listener/http", nil)

	// Management users only, as RabbitMQ's.
	if r := a.anonymous("/health/checks/port-listener/" + amqpPort); r.status != 401 {
		t.Errorf("port-listener without credentials: %d %s, want 401", r.status, r.body)
	}
}

// virtual-hosts passes (a brokerd vhost runs as long as the broker), for
// a management user.
func TestHealthVirtualHosts(t *testing.T) {
	a := startAPI(t)
	a.must(201, "PUT", "/vhosts/other", nil)
	if r := a.must(200, "GET", "/health/checks/virtual-hosts", nil).object(t); r["status"] != "ok" || len(r) != 1 {
		t.Errorf("virtual-hosts: %v", r)
	}
	if r := a.anonymous("/health/checks/virtual-hosts"); r.status != 401 {
		t.Errorf("virtual-hosts without credentials: %d %s, want 401", r.status, r.body)
	}
}

// certificate-expiration fails for a TLS listener whose certificate
// expires within the window, in RabbitMQ's units, and passes beyond it or
// without a TLS listener; a bad window or unit is 400.
func TestHealthCertificateExpiration(t *testing.T) {
	expires := time.Now().Add(10 * 24 * time.Hour).UTC().Truncate(time.Second)
	cert := writeExpiringCert(t, expires)
	tlsAddr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5671}
	a := startHealthAPI(t, 0, mgmt.Listener{Protocol: "amqp/ssl", Addr: tlsAddr, CertFile: cert, CAFile: cert})

	for _, ok := range []string{"9/days", "1/weeks", "1/DAYS", "0/months", "-1/years"} {
		if r := a.must(200, "GET", "/health/checks/certificate-expiration/"+ok, nil).object(t); r["status"] != "ok" {
			t.Errorf("certificate-expiration/%s: %v", ok, r)
		}
	}
	for _, failing := range []string{"11/days", "2/weeks", "1/months", "1/years"} {
		r := a.must(503, "GET", "/health/checks/certificate-expiration/"+failing, nil).object(t)
		list, _ := r["expired"].([]any)
		if r["status"] != "failed" || r["reason"] != "Certificates expiring" || len(list) != 1 {
			t.Fatalf("certificate-expiration/%s: %v", failing, r)
		}
		e := list[0].(map[string]any)
		on := fmt.Sprintf("%d-%02d-%02d %d:%02d:%02d", expires.Year(), expires.Month(), expires.Day(),
			expires.Hour(), expires.Minute(), expires.Second())
		if e["protocol"] != "amqp/ssl" || e["port"] != float64(5671) || e["interface"] != "127.0.0.1" ||
			e["certfile"] != cert || e["cacertfile"] != cert ||
			fmt.Sprint(e["certfile_expires_on"]) != "["+on+"]" || fmt.Sprint(e["cacertfile_expires_on"]) != "["+on+"]" {
			t.Errorf("certificate-expiration/%s: listener %v, want expiry %s", failing, e, on)
		}
	}
	wantError(t, a.do("GET", "/health/checks/certificate-expiration/ten/days", nil), 400, "bad_request", "Invalid expiration value.")
	wantError(t, a.do("GET", "/health/checks/certificate-expiration/1/fortnights", nil), 400, "bad_request",
		"Time unit not recognised. Supported units: days, weeks, months, years.")

	// Without a TLS listener nothing expires.
	plain := startHealthAPI(t, 0)
	plain.must(200, "GET", "/health/checks/certificate-expiration/100/years", nil)
}

// is-in-service and ready-to-accept-clients pass, without credentials as
// RabbitMQ's, while the AMQP server accepts connections, and fail once
// it stops (a shutdown's first step).
func TestHealthInService(t *testing.T) {
	a := startHealthAPI(t, 0)
	checks := map[string]string{
		"/health/checks/is-in-service":           "this rabbit node is not currently available to serve",
		"/health/checks/ready-to-accept-clients": "node is not accepting client connections",
	}
	for path := range checks {
		r := a.anonymous(path)
		if r.status != 200 || r.object(t)["status"] != "ok" {
			t.Errorf("%s: %d %s, want 200 ok", path, r.status, r.body)
		}
	}
	a.Server().StopAccepting()
	for path, reason := range checks {
		r := a.anonymous(path)
		if o := r.object(t); r.status != 503 || o["status"] != "failed" || o["reason"] != reason {
			t.Errorf("%s after StopAccepting: %d %s, want 503 %q", path, r.status, r.body, reason)
		}
	}
}

// below-node-connection-limit passes, without credentials as RabbitMQ's,
// while the AMQP connections are fewer than the limit, and fails at it;
// without a limit, the limit is "infinity".
func TestHealthBelowConnectionLimit(t *testing.T) {
	const path = "/health/checks/below-node-connection-limit"
	a := startHealthAPI(t, 1)
	r := a.anonymous(path)
	if o := r.object(t); r.status != 200 || o["status"] != "ok" || o["limit"] != float64(1) || o["connections"] != float64(0) {
		t.Errorf("no connection: %d %s", r.status, r.body)
	}
	c := a.Dial(t)
	defer c.Close()
	r = a.anonymous(path)
	if o := r.object(t); r.status != 503 || o["status"] != "failed" || o["reason"] != "node connection limit is reached" ||
		o["limit"] != float64(1) || o["connections"] != float64(1) {
		t.Errorf("at the limit: %d %s", r.status, r.body)
	}

	unlimited := startHealthAPI(t, 0)
	c2 := unlimited.Dial(t)
	defer c2.Close()
	r = unlimited.anonymous(path)
	if o := r.object(t); r.status != 200 || o["limit"] != "infinity" || o["connections"] != float64(1) {
		t.Errorf("no limit: %d %s", r.status, r.body)
	}
}
