package amqp

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"net"
	"net/url"
	"strings"
	"testing"
)

// certWith returns a certificate as parsing would, with a subject of the
// given RDNs (in certificate order) and the SANs.
func certWith(t *testing.T, rdns pkix.RDNSequence, dns []string, ips []net.IP, emails []string, uris []*url.URL) *x509.Certificate {
	t.Helper()
	raw, err := asn1.Marshal(rdns)
	if err != nil {
		t.Fatal(err)
	}
	return &x509.Certificate{RawSubject: raw, DNSNames: dns, IPAddresses: ips, EmailAddresses: emails, URIs: uris}
}

func atv(oid asn1.ObjectIdentifier, v string) pkix.AttributeTypeAndValue {
	return pkix.AttributeTypeAndValue{Type: oid, Value: v}
}

// The names SASL EXTERNAL logs in as, as rabbit_ssl:peer_cert_auth_name
// takes them: the subject in rabbit_cert_info's RFC 4514 form (last RDN
// first, its attribute names, multi-valued RDNs joined with + in their (DER-sorted) order, special
// characters escaped, unknown attributes as dotted OIDs), the CNs joined
// with ",", or the n-th SAN of a type.
func TestCertLoginUserName(t *testing.T) {
	var (
		c   = asn1.ObjectIdentifier{2, 5, 4, 6}
		o   = asn1.ObjectIdentifier{2, 5, 4, 10}
		ou  = asn1.ObjectIdentifier{2, 5, 4, 11}
		cn  = asn1.ObjectIdentifier{2, 5, 4, 3}
		dc  = asn1.ObjectIdentifier{0, 9, 2342, 19200300, 100, 1, 25}
		odd = asn1.ObjectIdentifier{1, 2, 3, 4}
	)
	subject := pkix.RDNSequence{
		{atv(c, "SE")},
		{atv(dc, "example")},
		{atv(o, "Acme, Inc.")},
		{atv(ou, "ops"), atv(odd, "x")},
		{atv(cn, " alice#1 ")},
		{atv(cn, "a+b")},
	}
	u, _ := url.Parse("spiffe://example.org/alice")
	cert := certWith(t, subject, []string{"one.example", "alice"}, []net.IP{net.IPv4(10, 0, 0, 7)}, []string{"alice@example.org"}, []*url.URL{u})
	tests := []struct {
		cl      CertLogin
		want    string
		wantErr string
	}{
		{CertLogin{}, `CN=a\+b,CN=\ alice#1\ ,1.2.3.4=x+OU=ops,O=Acme\, Inc.,DC=example,C=SE`, ""},
		{CertLogin{From: CertLoginDN}, `CN=a\+b,CN=\ alice#1\ ,1.2.3.4=x+OU=ops,O=Acme\, Inc.,DC=example,C=SE`, ""},
		{CertLogin{From: CertLoginCN}, " alice#1 ,a+b", ""},
		{CertLogin{From: CertLoginSAN}, "one.example", ""},
		{CertLogin{From: CertLoginSANAlt, SANType: "dns", SANIndex: 1}, "alice", ""},
		{CertLogin{From: CertLoginSAN, SANType: "dns", SANIndex: 2}, "", "none at index 2"},
		{CertLogin{From: CertLoginSAN, SANType: "ip"}, "10.0.0.7", ""},
		{CertLogin{From: CertLoginSAN, SANType: "email"}, "alice@example.org", ""},
		{CertLogin{From: CertLoginSAN, SANType: "uri"}, "spiffe://example.org/alice", ""},
		{CertLogin{From: CertLoginSAN, SANType: "other_name"}, "", "unsupported"},
		{CertLogin{From: "serial"}, "", "unsupported"},
	}
	for _, tt := range tests {
		got, err := tt.cl.UserName(cert)
		if got != tt.want || (err == nil) != (tt.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("%+v: %q, %v; want %q, error %q", tt.cl, got, err, tt.want, tt.wantErr)
		}
	}
	// No CN: no name.
	noCN := certWith(t, pkix.RDNSequence{{atv(o, "Acme")}}, nil, nil, nil, nil)
	if _, err := (CertLogin{From: CertLoginCN}).UserName(noCN); err == nil || !strings.Contains(err.Error(), "no name found") {
		t.Errorf("no CN: %v", err)
	}
	// Control and non-ASCII bytes are escaped as \XX, as RabbitMQ shows them.
	esc := certWith(t, pkix.RDNSequence{{atv(cn, "é\x01~")}}, nil, nil, nil, nil)
	if got, _ := (CertLogin{}).UserName(esc); got != `CN=\C3\A9\01\7E` {
		t.Errorf("escaped DN %q", got)
	}
}
