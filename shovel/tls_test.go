package shovel_test

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
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/brokerd/brokerd/broker/brokertest"
	"github.com/brokerd/brokerd/shovel"
)

// tlsListen serves inst's AMQP server on a TLS listener too, with a
// self-signed certificate for 127.0.0.1, and returns its address and the
// certificate's PEM file.
func tlsListen(t *testing.T, inst *brokertest.Instance) (addr, caFile string) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	caFile = filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	srv := inst.Server()
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(ln)
	}()
	t.Cleanup(func() { ln.Close(); <-served })
	return ln.Addr().String(), caFile
}

// TestShovelTLS connects to an amqps:// destination verified with the
// URI's cacertfile, or not verified (verify=verify_none), and refuses an
// unverifiable one.
func TestShovelTLS(t *testing.T) {
	a, b := brokertest.Start(t, brokertest.Config{}), brokertest.Start(t, brokertest.Config{})
	sa, sb := a.Session(t), b.Session(t)
	sa.Declare("src", nil)
	addr, ca := tlsListen(t, b)
	m := manager(t, shovel.Options{})
	for i, uri := range []string{
		"amqps://guest:guest@" + addr + "/?cacertfile=" + url.QueryEscape(ca),
		"amqps://guest:guest@" + addr + "/?verify=verify_none",
	} {
		m.Start("/", "tls", def(t, map[string]any{"src-uri": a.URL, "src-queue": "src", "dest-uri": uri, "dest-queue": "dst"}))
		waitState(t, m, "/", "tls", shovel.StateRunning)
		publishN(sa, "src", i, 1)
		wantBodies(t, consume(t, sb, "dst", 1), i)
		settled(t, a, "src")
	}
	m.Start("/", "tls", def(t, map[string]any{"src-uri": a.URL, "src-queue": "src",
		"dest-uri": "amqps://guest:guest@" + addr + "/", "dest-queue": "dst"}))
	brokertest.Eventually(t, "a refused certificate", func() bool {
		return strings.Contains(status(m, "/", "tls").Reason, "certificate")
	})
}
