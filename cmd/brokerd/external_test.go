// Tests of SASL EXTERNAL: login by TLS client certificate (RabbitMQ's
// rabbitmq_auth_mechanism_ssl), with certificates made here.

package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/amqp"
)

// client returns a client certificate signed by ca, with subject and DNS
// names (testCA is reload_test.go's).
func (ca *testCA) client(t *testing.T, subject pkix.Name, dnsNames ...string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      subject,
		DNSNames:     dnsNames,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

// startExternalDaemon starts brokerd with an amqps listener that verifies
// client certificates against ca (without requiring one), a management
// listener, the users admin (administrator) and alice, and the [auth]
// lines given. It returns the daemon and its amqps address.
func startExternalDaemon(t *testing.T, dir string, ca *testCA, auth string) (*daemon, string) {
	t.Helper()
	certFile, keyFile := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem")
	ca.issue(2, false, certFile, keyFile)
	cfg := `[amqp]
listen = "off"
[amqp.tls]
listen = "127.0.0.1:0"
cert_file = "` + certFile + `"
key_file = "` + keyFile + `"
ca_file = "` + ca.file + `"
verify_peer = true
fail_if_no_peer_cert = false
[mgmt]
listen = "127.0.0.1:0"
[auth]
login_failure_delay = "0s"
` + auth + `
[[users]]
name = "admin"
password = "admin"
tags = ["administrator"]
[[users]]
name = "alice"
password = "alicepw"
`
	cfgFile := filepath.Join(dir, "brokerd.toml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, dir, "-config", cfgFile, "-data", filepath.Join(dir, "data"))
	addr := strings.TrimSuffix(strings.TrimPrefix(d.url(), "amqp://guest:guest@"), "/")
	return d, addr
}

// dialExternal logs in to addr by SASL EXTERNAL with cert (none if nil).
func dialExternal(addr string, ca *testCA, cert *tls.Certificate) (*amqp091.Connection, error) {
	tc := &tls.Config{RootCAs: ca.pool, MinVersion: tls.VersionTLS12}
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	return amqp091.DialConfig("amqps://"+addr+"/", amqp091.Config{
		SASL:            []amqp091.Authentication{&amqp091.ExternalAuth{}},
		TLSClientConfig: tc,
	})
}

// rawLogin runs the handshake up to start-ok by hand, announcing
// authentication_failure_close (which amqp091-go does not, so a refusal
// reaches it as a hang-up): it returns the mechanisms connection.start
// offered and the server's answer to start-ok.
func rawLogin(t *testing.T, addr string, tc *tls.Config, mechanism, response string) (string, amqp.Method) {
	t.Helper()
	nc, err := tls.Dial("tcp", addr, tc)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := nc.Write(amqp.ProtocolHeader[:]); err != nil {
		t.Fatal(err)
	}
	fr := amqp.NewFrameReader(nc)
	read := func() amqp.Method {
		t.Helper()
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		m, err := amqp.DecodeMethod(f.Payload)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	start, ok := read().(*amqp.ConnectionStart)
	if !ok {
		t.Fatal("no connection.start")
	}
	props := amqp.Table{{Key: "capabilities", Value: amqp.Table{{Key: "authentication_failure_close", Value: true}}}}
	so := &amqp.ConnectionStartOk{ClientProperties: props, Mechanism: mechanism, Response: response, Locale: "en_US"}
	if _, err := nc.Write(amqp.AppendMethodFrame(nil, 0, so)); err != nil {
		t.Fatal(err)
	}
	return start.Mechanisms, read()
}

// wantRefused checks that m is connection.close with code and text.
func wantRefused(t *testing.T, m amqp.Method, code uint16, text string) {
	t.Helper()
	cl, ok := m.(*amqp.ConnectionClose)
	if !ok || cl.ReplyCode != code || cl.ReplyText != text {
		t.Fatalf("start-ok answered with %#v; want connection.close %d %q", m, code, text)
	}
}

const externalRefusal = "ACCESS_REFUSED - Login was refused using authentication mechanism EXTERNAL. For details see the broker logfile."

// adminGetJSON reads an API resource as admin.
func adminGetJSON(t *testing.T, url string, v any) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth("admin", "admin")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// With EXTERNAL enabled and ssl_cert_login_from = common_name, a client
// certificate signed by the CA logs its CN's user in, without a password;
// a certificate naming no user, and a client without a certificate, are
// refused as RabbitMQ refuses them (403 with authentication_failure_close);
// the node lists EXTERNAL among its auth_mechanisms; password logins go on
// over the same listener.
func TestExternalLoginCommonName(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := newTestCA(t, dir)
	d, addr := startExternalDaemon(t, dir, ca, `mechanisms = ["PLAIN", "AMQPLAIN", "EXTERNAL"]
ssl_cert_login_from = "common_name"`)

	alice := ca.client(t, pkix.Name{CommonName: "alice", Organization: []string{"Example"}})
	c, err := dialExternal(addr, ca, &alice)
	if err != nil {
		t.Fatalf("EXTERNAL login with alice's certificate: %v", err)
	}
	roundTrip(t, c)
	var conns []struct {
		User          string `json:"user"`
		AuthMechanism string `json:"auth_mechanism"`
		SSL           bool   `json:"ssl"`
	}
	adminGetJSON(t, d.mgmtURL()+"/api/connections", &conns)
	if len(conns) != 1 || conns[0].User != "alice" || conns[0].AuthMechanism != "EXTERNAL" || !conns[0].SSL {
		t.Fatalf("connections %+v; want alice's, by EXTERNAL over TLS", conns)
	}
	c.Close()

	var node []struct {
		AuthMechanisms []struct {
			Name    string `json:"name"`
			Enabled bool   `json:"enabled"`
		} `json:"auth_mechanisms"`
	}
	adminGetJSON(t, d.mgmtURL()+"/api/nodes", &node)
	got := ""
	for _, m := range node[0].AuthMechanisms {
		if m.Enabled {
			got += m.Name + " "
		}
	}
	if got != "PLAIN AMQPLAIN EXTERNAL " {
		t.Fatalf("enabled auth_mechanisms %q; want PLAIN AMQPLAIN EXTERNAL", got)
	}

	// A user the broker does not have.
	mallory := ca.client(t, pkix.Name{CommonName: "mallory"})
	if c, err := dialExternal(addr, ca, &mallory); err == nil {
		c.Close()
		t.Fatal("EXTERNAL login as an unknown user succeeded")
	} else if e := (*amqp091.Error)(nil); !errors.As(err, &e) || e.Code != amqp091.AccessRefused {
		t.Fatalf("unknown user: %v; want 403", err)
	}
	mechs, m := rawLogin(t, addr, &tls.Config{RootCAs: ca.pool, Certificates: []tls.Certificate{mallory}}, "EXTERNAL", "")
	if mechs != "PLAIN AMQPLAIN EXTERNAL" {
		t.Fatalf("connection.start offers %q", mechs)
	}
	wantRefused(t, m, 403, externalRefusal)
	// No certificate: offered EXTERNAL all the same, and refused.
	if c, err := dialExternal(addr, ca, nil); err == nil {
		c.Close()
		t.Fatal("EXTERNAL login without a certificate succeeded")
	}
	_, m = rawLogin(t, addr, &tls.Config{RootCAs: ca.pool}, "EXTERNAL", "")
	wantRefused(t, m, 403, externalRefusal)
	d.awaitLine("connection peer presented no TLS (x.509) certificate")

	// A password over the same listener, without a certificate.
	c, err = amqp091.DialTLS("amqps://alice:alicepw@"+addr+"/", &tls.Config{RootCAs: ca.pool, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatalf("PLAIN login over TLS: %v", err)
	}
	roundTrip(t, c)
	c.Close()
}

// With ssl_cert_login_from = subject_alternative_name the user is the
// SAN of ssl_cert_login_san_type at ssl_cert_login_san_index (from 0); the
// CN does not count (amqp's TestCertLoginUserName covers the other forms).
func TestExternalLoginSubjectAltName(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := newTestCA(t, dir)
	_, addr := startExternalDaemon(t, dir, ca, `mechanisms = ["EXTERNAL"]
ssl_cert_login_from = "subject_alternative_name"
ssl_cert_login_san_type = "dns"
ssl_cert_login_san_index = 1`)
	byIndex := ca.client(t, pkix.Name{CommonName: "mallory"}, "host.example", "alice")
	c, err := dialExternal(addr, ca, &byIndex)
	if err != nil {
		t.Fatalf("EXTERNAL login as the second DNS SAN: %v", err)
	}
	roundTrip(t, c)
	c.Close()
	// The CN names an existing user, but only the SAN counts; a
	// certificate with a single DNS name has none at index 1.
	for _, cert := range []tls.Certificate{
		ca.client(t, pkix.Name{CommonName: "alice"}, "alice"),
		ca.client(t, pkix.Name{CommonName: "alice"}, "alice", "nobody"),
	} {
		mechs, m := rawLogin(t, addr, &tls.Config{RootCAs: ca.pool, Certificates: []tls.Certificate{cert}}, "EXTERNAL", "")
		if mechs != "EXTERNAL" {
			t.Fatalf("connection.start offers %q; want EXTERNAL alone", mechs)
		}
		wantRefused(t, m, 403, externalRefusal)
	}
	// PLAIN is not offered: refused as RabbitMQ refuses a mechanism it has
	// but was not configured with.
	_, m := rawLogin(t, addr, &tls.Config{RootCAs: ca.pool}, "PLAIN", "\x00alice\x00alicepw")
	wantRefused(t, m, 503, "COMMAND_INVALID - invalid authentication mechanism 'PLAIN'")
}

// By default EXTERNAL is off: connection.start does not offer it, even on
// an amqps listener that verifies client certificates, so amqp091-go
// finds no mechanism to use, and a client that sends it anyway is told the
// mechanism is unknown, as by a RabbitMQ without the plugin.
func TestExternalLoginOffByDefault(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := newTestCA(t, dir)
	_, addr := startExternalDaemon(t, dir, ca, "")
	alice := ca.client(t, pkix.Name{CommonName: "alice"})
	if c, err := dialExternal(addr, ca, &alice); !errors.Is(err, amqp091.ErrSASL) {
		if err == nil {
			c.Close()
		}
		t.Fatalf("EXTERNAL login by default: %v; want %v", err, amqp091.ErrSASL)
	}
	mechs, m := rawLogin(t, addr, &tls.Config{RootCAs: ca.pool, Certificates: []tls.Certificate{alice}}, "EXTERNAL", "")
	if mechs != "PLAIN AMQPLAIN" {
		t.Fatalf("connection.start offers %q; want PLAIN AMQPLAIN", mechs)
	}
	wantRefused(t, m, 503, "COMMAND_INVALID - unknown authentication mechanism 'EXTERNAL'")
}
