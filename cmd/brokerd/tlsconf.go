package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sync/atomic"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/config"
)

// tlsSource is a TLS listener's configuration that SIGHUP can replace:
// the listener's tls.Config hands each new handshake the current one
// (GetConfigForClient), so a renewed certificate, CA bundle or
// verify_peer applies to the next client without a restart, and the
// connections open keep theirs. Safe for concurrent use.
type tlsSource struct {
	cur atomic.Pointer[tls.Config]
}

// newTLSSource loads t's files.
func newTLSSource(t config.TLS) (*tlsSource, error) {
	c, err := loadTLS(t)
	if err != nil {
		return nil, err
	}
	s := &tlsSource{}
	s.cur.Store(c)
	return s, nil
}

// reload loads t's files again; on an error the current configuration
// stays.
func (s *tlsSource) reload(t config.TLS) error {
	c, err := loadTLS(t)
	if err != nil {
		return err
	}
	s.cur.Store(c)
	return nil
}

// config is what the listener is given.
func (s *tlsSource) config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.cur.Load(), nil
		},
	}
}

// loadTLS reads a listener's certificate, key and client CA bundle.
func loadTLS(t config.TLS) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("load TLS certificate: %w", err)
	}
	c := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read TLS CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("read TLS CA file %s: it holds no PEM certificate", t.CAFile)
		}
		c.ClientCAs = pool
	}
	if t.VerifyPeer {
		c.ClientAuth = tls.RequireAndVerifyClientCert
		if !t.FailIfNoPeerCert {
			c.ClientAuth = tls.VerifyClientCertIfGiven
		}
	}
	return c, nil
}

// certLogin is where SASL EXTERNAL takes a user name from.
func certLogin(a config.Auth) amqp.CertLogin {
	return amqp.CertLogin{From: a.SSLCertLoginFrom, SANType: a.SSLCertLoginSANType, SANIndex: a.SSLCertLoginSANIndex}
}
