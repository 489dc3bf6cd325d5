package transport

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"log/slog"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
)

// testCA issues node certificates (server and client) for 127.0.0.1.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &testCA{cert: cert, key: key, pool: x509.NewCertPool()}
	ca.pool.AddCert(cert)
	return ca
}

// nodeTLS returns a node's mutual TLS configuration: a certificate for
// both roles from ca, trusting trust.
func (ca *testCA) nodeTLS(t *testing.T, node string, trust *testCA) *tls.Config {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: node},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		RootCAs:      trust.pool, ClientCAs: trust.pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13,
	}
}

// With mutual TLS, nodes whose certificates the cluster's CA issued
// exchange messages; a node with a certificate from another CA is
// refused (both sides say so), and so is a plain TCP caller. A TLS
// configuration that does not require client certificates is refused by
// New.
func TestMutualTLS(t *testing.T) {
	ca, other := newTestCA(t, "cluster CA"), newTestCA(t, "other CA")
	configs := map[string]*tls.Config{}
	for _, name := range []string{"n1", "n2", "n3"} {
		configs[name] = ca.nodeTLS(t, name, ca)
	}
	c := newCluster(t, clusterOpts{n: 3, tune: func(cfg *Config) { cfg.TLS = configs[cfg.Name] }})
	c.connected(t)
	a, b, third := c.nodes[0], c.nodes[1], c.nodes[2]
	heartbeat(a, b, 1)
	heartbeat(b, a, 2)
	b.awaitMarker(t, 1, 1)
	a.awaitMarker(t, 1, 2)

	// A caller speaking plain TCP: n2's first refusal, logged at once.
	conn, err := net.Dial("tcp", b.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	frame := hello{version: protocolVersion, stream: streamSmall, id: 1, cluster: "test", from: "n1", to: "n2"}.append(appendHeader(nil, frameHello, 0, 0))
	putLength(frame)
	if _, err := conn.Write(frame); err != nil {
		t.Fatal(err)
	}
	b.log.await(t, "refused an inter-node connection", "TLS handshake", conn.LocalAddr().String())

	// n3 comes back with a certificate of another CA, trusting only it.
	configs["n3"] = other.nodeTLS(t, "n3", other)
	c.restart(t, third)
	a.log.await(t, "refused an inter-node connection", "TLS handshake")
	third.log.await(t, "cannot connect to a peer", "TLS handshake", "certificate")
	if st := third.tr.Stats(); st.Connects != 0 {
		t.Fatalf("n3 connected with a foreign certificate: %+v", st)
	}

	plain := configs["n1"].Clone()
	plain.ClientAuth = tls.VerifyClientCertIfGiven
	_, err = New(Config{Cluster: "c", Name: "x", ID: 1, Listen: "127.0.0.1:0", Handler: func(uint64, *pb.Message) {}, TLS: plain, Logger: slog.New(newLogRec(t))})
	if err == nil || !strings.Contains(err.Error(), "must be mutual") {
		t.Fatalf("New with a TLS config not requiring client certificates: %v", err)
	}
}
