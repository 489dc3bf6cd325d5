package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// testCA issues certificates for tests.
type testCA struct {
	t    *testing.T
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string // the CA certificate, PEM
	pool *x509.CertPool
}

func newTestCA(t *testing.T, dir string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "brokerd test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &testCA{t: t, cert: cert, key: key, file: filepath.Join(dir, "ca.pem"), pool: x509.NewCertPool()}
	ca.pool.AddCert(cert)
	writePEM(t, ca.file, "CERTIFICATE", der)
	return ca
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// issue writes a certificate with serial for 127.0.0.1 (a server's, or a
// client's) and its key to certFile and keyFile, and returns it loaded.
func (ca *testCA) issue(serial int64, client bool, certFile, keyFile string) tls.Certificate {
	t := ca.t
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: "brokerd test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	// Key first: the daemon may read the pair between the two writes.
	writePEM(t, keyFile+".new", "EC PRIVATE KEY", keyDER)
	writePEM(t, certFile+".new", "CERTIFICATE", der)
	os.Rename(keyFile+".new", keyFile)
	os.Rename(certFile+".new", certFile)
	c, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var httpsRE = regexp.MustCompile(`serving management HTTPS API.* addr=(\S+)`)

// The management API over HTTPS and AMQP over TLS, both with verify_peer:
// a client with a certificate from ca_file is served, one without is
// refused in the handshake. SIGHUP reloads the server certificate: the
// next handshake presents the new one.
func TestTLSClientCertificatesAndReload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := newTestCA(t, dir)
	srvCert, srvKey := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key")
	ca.issue(2, false, srvCert, srvKey)
	client := ca.issue(3, true, filepath.Join(dir, "client.pem"), filepath.Join(dir, "client.key"))
	tlsTable := "listen = \"127.0.0.1:0\"\ncert_file = \"" + srvCert + "\"\nkey_file = \"" + srvKey + "\"\nca_file = \"" + ca.file + "\"\nverify_peer = true\n"
	cfgFile := filepath.Join(dir, "brokerd.toml")
	cfg := "[amqp]\nlisten = \"off\"\n[amqp.tls]\n" + tlsTable + "[mgmt]\nlisten = \"off\"\n[mgmt.tls]\n" + tlsTable
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, dir, "-config", cfgFile, "-data", filepath.Join(dir, "data"))
	amqps := strings.Replace(d.url(), "amqp://", "amqps://", 1)
	d.awaitLine("serving management HTTPS API")
	api := "https://" + httpsRE.FindStringSubmatch(d.log())[1]

	get := func(certs []tls.Certificate) (*http.Response, error) {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.pool, Certificates: certs}}
		defer tr.CloseIdleConnections()
		req, _ := http.NewRequest("GET", api+"/api/overview", nil)
		req.SetBasicAuth("guest", "guest")
		return (&http.Client{Transport: tr}).Do(req)
	}
	res, err := get([]tls.Certificate{client})
	if err != nil {
		t.Fatalf("HTTPS with a client certificate: %v", err)
	}
	var ov map[string]any
	err = json.NewDecoder(res.Body).Decode(&ov)
	res.Body.Close()
	if err != nil || res.StatusCode != 200 || res.TLS.PeerCertificates[0].SerialNumber.Int64() != 2 {
		t.Fatalf("GET /api/overview over HTTPS: %d %v", res.StatusCode, err)
	}
	if res, err := get(nil); err == nil {
		res.Body.Close()
		t.Fatalf("HTTPS without a client certificate: %d, want a refused handshake", res.StatusCode)
	}

	c, err := amqp091.DialTLS(amqps, &tls.Config{RootCAs: ca.pool, Certificates: []tls.Certificate{client}})
	if err != nil {
		t.Fatalf("amqps with a client certificate: %v", err)
	}
	roundTrip(t, c)
	defer c.Close()
	if c, err := amqp091.DialTLS(amqps, &tls.Config{RootCAs: ca.pool}); err == nil {
		c.Close()
		t.Fatal("amqps without a client certificate was accepted")
	}

	// A renewed certificate in the same files.
	ca.issue(4, false, srvCert, srvKey)
	d.cmd.Process.Signal(syscall.SIGHUP)
	d.awaitLine("configuration reloaded")
	for _, l := range []string{"listener=amqps", "listener=https"} {
		if !strings.Contains(d.log(), "TLS certificate reloaded; new handshakes use it\" "+l) {
			t.Errorf("no reload line for %s:\n%s", l, d.log())
		}
	}
	res, err = get([]tls.Certificate{client})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if s := res.TLS.PeerCertificates[0].SerialNumber.Int64(); s != 4 {
		t.Errorf("HTTPS after SIGHUP presents certificate %d, want 4", s)
	}
	addr := strings.TrimPrefix(strings.Split(amqps, "@")[1], "")
	conn, err := tls.Dial("tcp", strings.TrimSuffix(addr, "/"), &tls.Config{RootCAs: ca.pool, Certificates: []tls.Certificate{client}})
	if err != nil {
		t.Fatal(err)
	}
	if s := conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64(); s != 4 {
		t.Errorf("amqps after SIGHUP presents certificate %d, want 4", s)
	}
	conn.Close()
	roundTrip(t, c) // the open connection keeps working

	d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// SIGHUP applies the log level and format and max_connections at run time,
// and names a changed setting that needs a restart.
func TestSIGHUPReloadsLevelFormatAndLimits(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "brokerd.toml")
	write := func(s string) {
		if err := os.WriteFile(cfgFile, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("[log]\nlevel = \"info\"\n")
	d := startDaemon(t, dir, "-config", cfgFile, "-listen", "127.0.0.1:0", "-mgmt-listen", "off", "-data", filepath.Join(dir, "data"))
	url := d.url()
	addr := strings.TrimSuffix(strings.Split(url, "@")[1], "/")
	c1, err := amqp091.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	// A connection that never speaks AMQP is logged at debug only.
	hangUp := func() string {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		nc.Close()
		return nc.LocalAddr().String()
	}

	write("[log]\nlevel = \"debug\"\nformat = \"json\"\n[limits]\nmax_connections = 1\n[storage]\nsync = \"interval\"\n")
	d.cmd.Process.Signal(syscall.SIGHUP)
	d.awaitLine("configuration reloaded")
	for _, want := range []string{
		`"msg":"reload: setting changed","key":"limits.max_connections","old":0,"new":1`,
		`"msg":"reload: setting changed","key":"log.format","old":"text","new":"json"`,
		`"msg":"reload: setting changed","key":"log.level","old":"info","new":"debug"`,
		`"msg":"reload: setting changed; it needs a restart to apply","key":"storage.sync","old":"fsync","new":"interval"`,
	} {
		if !strings.Contains(d.log(), want) {
			t.Errorf("no log line with %s", want)
		}
	}

	// max_connections = 1: c1 is open, a second connection is refused.
	if c2, err := amqp091.Dial(url); err == nil {
		c2.Close()
		t.Fatal("a second connection was accepted with max_connections = 1")
	}
	d.awaitLine("max_connections reached")
	c1.Close()
	d.awaitLine(`"msg":"connection closed"`)
	// At debug, in JSON.
	d.awaitLine(`"msg":"connection closed before it opened","remote":"` + hangUp() + `"`)

	d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// Each connection's open and close are logged at info with its peer, user,
// vhost and client-provided name.
func TestConnectionLogLines(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d := startDaemon(t, dir, "-listen", "127.0.0.1:0", "-mgmt-listen", "off", "-data", filepath.Join(dir, "data"))
	c, err := amqp091.DialConfig(d.url(), amqp091.Config{Properties: amqp091.Table{"connection_name": "orders-app"}})
	if err != nil {
		t.Fatal(err)
	}
	peer := c.LocalAddr().String()
	attrs := `remote=` + peer + ` user=guest vhost=/ name=orders-app`
	d.awaitLine(`msg="connection open" ` + attrs)
	c.Close()
	d.awaitLine(`msg="connection closed" ` + attrs)
	d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(); code != 0 {
		t.Fatalf("exit %d", code)
	}
}
