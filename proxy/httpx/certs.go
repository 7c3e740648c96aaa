package httpx

import (
	"crypto/tls"
	"crypto/x509"
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
// connections to peers: this node's certificate and the CA pool every
// node's certificate must chain to. Both are reloadable like server.tls
// (SIGHUP, POST /reload: Prepare): each new handshake — the listener's
// through GetConfigForClient, a peer client's through its dialer — reads
// the current ones; established connections keep their session.
type PeerTLS struct {
	Certs  *CertReloader
	Server *tls.Config // for the peer listener: client certificates required
	server atomic.Pointer[tls.Config]
	client atomic.Pointer[tls.Config] // for connections to peers
}

// NewPeerTLS loads cluster.tls.
func NewPeerTLS(t *config.PeerTLS) (*PeerTLS, error) {
	cert, ca, err := loadPeerTLS(t)
	if err != nil {
		return nil, err
	}
	pt := &PeerTLS{Certs: &CertReloader{}}
	pt.Server = &tls.Config{MinVersion: tls.VersionTLS12, GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		return pt.server.Load(), nil
	}}
	pt.install(cert, ca)
	return pt, nil
}

func loadPeerTLS(t *config.PeerTLS) (*tls.Certificate, *x509.CertPool, error) {
	cert, err := LoadCertificate(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("cluster.tls: %w", err)
	}
	ca, err := config.LoadCAPool(t.CAFile)
	if err != nil {
		return nil, nil, fmt.Errorf("cluster.tls.ca_file: %w", err)
	}
	return cert, ca, nil
}

// install makes cert and ca those of new handshakes.
func (pt *PeerTLS) install(cert *tls.Certificate, ca *x509.CertPool) {
	pt.Certs.Set(cert)
	pt.server.Store(&tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: pt.Certs.GetCertificate,
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca})
	pt.client.Store(&tls.Config{MinVersion: tls.VersionTLS12, GetClientCertificate: pt.Certs.GetClientCertificate, RootCAs: ca})
}

// Prepare reads t's files (a reload's cluster.tls) without installing
// them: install makes them current, so a reload installs them only
// once the rest of the configuration was applied.
func (pt *PeerTLS) Prepare(t *config.PeerTLS) (install func(), err error) {
	cert, ca, err := loadPeerTLS(t)
	if err != nil {
		return nil, err
	}
	return func() { pt.install(cert, ca) }, nil
}

// Client is the configuration of connections to peers now.
func (pt *PeerTLS) Client() *tls.Config { return pt.client.Load() }

// TLSDialer dials addr and completes a TLS handshake within timeout (or
// the request's remaining time, if shorter), with the configuration conf
// returns at that dial (a reloadable one; ServerName from addr when it
// has none), over the TCP connection wrap makes of the dialled one (nil:
// as dialled). fasthttp sees a plain connection, so requests need no
// https:// scheme.
func TLSDialer(addr string, conf func() *tls.Config, timeout time.Duration, wrap func(net.Conn) net.Conn) fasthttp.DialFuncWithTimeout {
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
		if wrap != nil {
			c = wrap(c)
		}
		tconn, err := Handshake(c, withServerName(conf(), addr), start.Add(d))
		if err != nil {
			return nil, fmt.Errorf("tls handshake with %s: %w", addr, err)
		}
		return tconn, nil
	}
}

// withServerName is tc, or a copy naming addr's host when tc names none.
func withServerName(tc *tls.Config, addr string) *tls.Config {
	if tc.ServerName != "" {
		return tc
	}
	tc = tc.Clone()
	tc.ServerName, _, _ = net.SplitHostPort(addr)
	return tc
}

// Handshake runs the client side of a TLS handshake on c, done by
// deadline; on failure c is closed. Peer and origin dialers share it.
func Handshake(c net.Conn, tc *tls.Config, deadline time.Time) (*tls.Conn, error) {
	tconn := tls.Client(c, tc)
	_ = c.SetDeadline(deadline)
	if err := tconn.Handshake(); err != nil {
		_ = c.Close()
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	return tconn, nil
}
