package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// writeSelfSigned writes a certificate for 127.0.0.1 and its key (PEM) to
// dir and returns their paths and a pool trusting the certificate.
func writeSelfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	return writeCert(t, dir, "cert", x509.ExtKeyUsageServerAuth)
}

// writeCert writes name.pem and name-key.pem (key.pem for "cert") in dir:
// a self-signed certificate for 127.0.0.1 with the given usages, its own
// CA, and returns a pool holding it.
func writeCert(t *testing.T, dir, name string, usages ...x509.ExtKeyUsage) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "brokerd test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           usages,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	if name == "cert" {
		keyFile = filepath.Join(dir, "key.pem")
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// The amqps listener serves AMQP over TLS with the configured certificate.
func TestTLSListener(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile, pool := writeSelfSigned(t, dir)
	cfgFile := filepath.Join(dir, "brokerd.toml")
	cfg := "[amqp]\nlisten = \"off\"\n[amqp.tls]\nlisten = \"127.0.0.1:0\"\ncert_file = \"" + certFile + "\"\nkey_file = \"" + keyFile + "\"\n"
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, dir, "-config", cfgFile, "-mgmt-listen", "off", "-data", filepath.Join(dir, "data"))
	url := strings.Replace(d.url(), "amqp://", "amqps://", 1)
	if !strings.Contains(d.log(), "listener=amqps") {
		t.Fatalf("no amqps listener logged:\n%s", d.log())
	}
	c, err := amqp091.DialTLS(url, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	roundTrip(t, c)
	c.Close()
	// A client that does not trust the certificate is refused by TLS.
	if c, err := amqp091.DialTLS(url, &tls.Config{RootCAs: x509.NewCertPool()}); err == nil {
		c.Close()
		t.Fatal("TLS handshake succeeded with an untrusted certificate")
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(); code != 0 {
		t.Fatalf("exit %d", code)
	}
}
