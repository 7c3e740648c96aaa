package proxy

import (
	"crypto/tls"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/config"
)

// CertReloader serves a certificate that can be replaced while listeners
// run: tls.Config.GetCertificate reads the current one for each new
// handshake, so a reload changes what new connections get and drops none
// (connections already established keep their session).
type CertReloader struct {
	cert atomic.Pointer[tls.Certificate]
}

// NewCertReloader loads certFile/keyFile.
func NewCertReloader(certFile, keyFile string) (*CertReloader, error) {
	r := &CertReloader{}
	return r, r.Load(certFile, keyFile)
}

// Load reads certFile/keyFile and, if they load as a pair, makes them the
// certificate of new handshakes. On error the previous one stays.
func (r *CertReloader) Load(certFile, keyFile string) error {
	c, err := LoadCertificate(certFile, keyFile)
	if err != nil {
		return err
	}
	r.Set(c)
	return nil
}

// LoadCertificate reads a certificate and key pair without installing it,
// so a reload can check it and install it only with the rest of the
// configuration.
func LoadCertificate(certFile, keyFile string) (*tls.Certificate, error) {
	c, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: load %s / %s: %w", certFile, keyFile, err)
	}
	return &c, nil
}

// Set makes c the certificate of new handshakes.
func (r *CertReloader) Set(c *tls.Certificate) { r.cert.Store(c) }

// GetCertificate is for tls.Config.GetCertificate.
func (r *CertReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.cert.Load(), nil
}

// GetClientCertificate is for tls.Config.GetClientCertificate (peers
// present the same certificate as clients).
func (r *CertReloader) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return r.cert.Load(), nil
}

// PublicTLS is the public listener's TLS configuration for s.TLS.
func PublicTLS(t *config.ListenerTLS, certs *CertReloader) *tls.Config {
	v := uint16(tls.VersionTLS12)
	if t.MinVersion == "1.3" {
		v = tls.VersionTLS13
	}
	return &tls.Config{MinVersion: v, GetCertificate: certs.GetCertificate, NextProtos: []string{"http/1.1"}}
}

// PeerTLS holds the mutual-TLS settings of the peer listener and of
// connections to peers: this node's certificate (reloadable) and the CA
// every node's certificate must chain to.
type PeerTLS struct {
	Certs  *CertReloader
	Server *tls.Config // for the peer listener: client certificates required
	Client *tls.Config // for connections to peers
}

// NewPeerTLS loads cluster.tls.
func NewPeerTLS(t *config.PeerTLS) (*PeerTLS, error) {
	certs, err := NewCertReloader(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("cluster.tls: %w", err)
	}
	ca, err := config.LoadCAPool(t.CAFile)
	if err != nil {
		return nil, fmt.Errorf("cluster.tls.ca_file: %w", err)
	}
	return &PeerTLS{
		Certs: certs,
		Server: &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: certs.GetCertificate,
			ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca},
		Client: &tls.Config{MinVersion: tls.VersionTLS12, GetClientCertificate: certs.GetClientCertificate, RootCAs: ca},
	}, nil
}

// tlsDialer dials addr and completes a TLS handshake within timeout (or
// the request's remaining time, if shorter). fasthttp sees a plain
// connection, so requests need no https:// scheme.
func tlsDialer(addr string, tc *tls.Config, timeout time.Duration) fasthttp.DialFuncWithTimeout {
	if tc.ServerName == "" {
		tc = tc.Clone()
		tc.ServerName, _, _ = net.SplitHostPort(addr)
	}
	return func(_ string, remaining time.Duration) (net.Conn, error) {
		d := timeout
		if remaining > 0 && remaining < d {
			d = remaining
		}
		start := time.Now()
		c, err := fasthttp.DialTimeout(addr, d)
		if err != nil {
			return nil, err
		}
		tconn, err := handshake(c, tc, start.Add(d))
		if err != nil {
			return nil, fmt.Errorf("tls handshake with %s: %w", addr, err)
		}
		return tconn, nil
	}
}

// handshake runs the client side of a TLS handshake on c, done by
// deadline; on failure c is closed. Peer and origin dialers share it.
func handshake(c net.Conn, tc *tls.Config, deadline time.Time) (*tls.Conn, error) {
	tconn := tls.Client(c, tc)
	_ = c.SetDeadline(deadline)
	if err := tconn.Handshake(); err != nil {
		_ = c.Close()
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	return tconn, nil
}
