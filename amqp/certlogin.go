package amqp

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"fmt"
	"strings"
)

// SASL mechanisms the server knows (ServerConfig.Mechanisms).
const (
	MechanismPLAIN    = "PLAIN"
	MechanismAMQPLAIN = "AMQPLAIN"
	// MechanismEXTERNAL logs a client in as the user its verified TLS
	// certificate names (CertLogin), without a password: RabbitMQ's
	// rabbitmq_auth_mechanism_ssl.
	MechanismEXTERNAL = "EXTERNAL"
)

// Where CertLogin takes a user name from (CertLogin.From).
const (
	CertLoginDN     = "distinguished_name"
	CertLoginCN     = "common_name"
	CertLoginSAN    = "subject_alternative_name"
	CertLoginSANAlt = "subject_alt_name" // an alias of CertLoginSAN, as RabbitMQ's
)

// CertLogin says which name of a client certificate SASL EXTERNAL logs in
// as: RabbitMQ's ssl_cert_login_from, ssl_cert_login_san_type and
// ssl_cert_login_san_index, with their meanings (rabbit_ssl
// peer_cert_auth_name). The zero value takes the distinguished name.
type CertLogin struct {
	// From is CertLoginDN (default: the subject in RabbitMQ's RFC 4514
	// form, most specific RDN first, "CN=alice,O=Example,C=SE"),
	// CertLoginCN (the subject's common names, joined with "," when there
	// are several) or CertLoginSAN (a subject alternative name).
	From string
	// SANType is the kind of subject alternative name CertLoginSAN takes:
	// "dns" (default), "ip", "email" or "uri".
	SANType string
	// SANIndex is which of the names of that kind, counted from 0, in
	// certificate order.
	SANIndex int
}

// UserName returns the user name cert stands for, or an error saying why
// it names none. cert must have been verified (the TLS handshake did).
func (cl CertLogin) UserName(cert *x509.Certificate) (string, error) {
	switch cl.From {
	case "", CertLoginDN:
		var rdns pkix.RDNSequence
		if _, err := asn1.Unmarshal(cert.RawSubject, &rdns); err != nil {
			return "", fmt.Errorf("parse certificate subject: %w", err)
		}
		return formatDN(rdns), nil
	case CertLoginCN:
		var rdns pkix.RDNSequence
		if _, err := asn1.Unmarshal(cert.RawSubject, &rdns); err != nil {
			return "", fmt.Errorf("parse certificate subject: %w", err)
		}
		var cns []string
		for _, rdn := range rdns {
			for _, atv := range rdn {
				if atv.Type.Equal(oidCommonName) {
					cns = append(cns, fmt.Sprint(atv.Value))
				}
			}
		}
		if len(cns) == 0 {
			return "", errors.New("no name found: the certificate's subject has no CN")
		}
		return strings.Join(cns, ","), nil
	case CertLoginSAN, CertLoginSANAlt:
		var names []string
		switch cl.SANType {
		case "", "dns":
			names = cert.DNSNames
		case "ip":
			for _, ip := range cert.IPAddresses {
				names = append(names, ip.String())
			}
		case "email":
			names = cert.EmailAddresses
		case "uri":
			for _, u := range cert.URIs {
				names = append(names, u.String())
			}
		default:
			return "", fmt.Errorf("unsupported subject alternative name type %q", cl.SANType)
		}
		if cl.SANIndex < 0 || cl.SANIndex >= len(names) {
			return "", fmt.Errorf("no name found: the certificate has %d subject alternative names of type %s, none at index %d", len(names), cl.SANType, cl.SANIndex)
		}
		return names[cl.SANIndex], nil
	}
	return "", fmt.Errorf("unsupported ssl_cert_login_from %q", cl.From)
}

var (
	oidCommonName = asn1.ObjectIdentifier{2, 5, 4, 3}
	// rdnNames are the attribute names rabbit_cert_info:format_rdn uses;
	// other attributes are written as their dotted OID.
	rdnNames = map[string]string{
		"2.5.4.4":                    "SN",
		"2.5.4.42":                   "GIVENNAME",
		"2.5.4.43":                   "INITIALS",
		"2.5.4.44":                   "GENERATIONQUALIFIER",
		"2.5.4.3":                    "CN",
		"2.5.4.7":                    "L",
		"2.5.4.8":                    "ST",
		"2.5.4.10":                   "O",
		"2.5.4.11":                   "OU",
		"2.5.4.12":                   "TITLE",
		"2.5.4.6":                    "C",
		"2.5.4.5":                    "SERIALNUMBER",
		"2.5.4.65":                   "PSEUDONYM",
		"0.9.2342.19200300.100.1.25": "DC",
		"1.2.840.113549.1.9.1":       "EMAILADDRESS",
		"2.5.4.9":                    "STREET",
		"0.9.2342.19200300.100.1.1":  "UID",
	}
)

// formatDN writes a subject as RabbitMQ does (rabbit_cert_info
// format_rdn_sequence): RDNs last to first, joined with ",", the
// attributes of a multi-valued RDN joined with "+", values escaped as
// RFC 4514 asks and, as RabbitMQ does for display, every byte below 32 or
// from 126 up as \XX.
func formatDN(rdns pkix.RDNSequence) string {
	var b strings.Builder
	for i := len(rdns) - 1; i >= 0; i-- {
		if i < len(rdns)-1 {
			b.WriteByte(',')
		}
		for j, atv := range rdns[i] {
			if j > 0 {
				b.WriteByte('+')
			}
			name, ok := rdnNames[atv.Type.String()]
			if !ok {
				name = atv.Type.String()
			}
			b.WriteString(name)
			b.WriteByte('=')
			escapeRDNValue(&b, fmt.Sprint(atv.Value))
		}
	}
	return b.String()
}

// escapeRDNValue is rabbit_cert_info:escape_rdn_value over the bytes of s.
func escapeRDNValue(b *strings.Builder, s string) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case i == 0 && (c == ' ' || c == '#'):
			b.WriteByte('\\')
			b.WriteByte(c)
		case i == len(s)-1 && c == ' ':
			b.WriteString(`\ `)
		case c == '"' || c == '+' || c == ',' || c == ';' || c == '<' || c == '>' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 32 || c >= 126:
			fmt.Fprintf(b, `\%02X`, c)
		default:
			b.WriteByte(c)
		}
	}
}
