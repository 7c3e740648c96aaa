package httpx

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shield-proxy/shield/config"
)

// testCA signs node certificates for 127.0.0.1 into files.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string // the CA's PEM
}

var serial int64

func writePEM(t *testing.T, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial++
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &testCA{cert: cert, key: key, file: filepath.Join(t.TempDir(), name+".pem")}
	writePEM(t, ca.file, "CERTIFICATE", der)
	return ca
}

// issue writes a certificate for 127.0.0.1 (server and client use) and
// its key, and returns the files and the serial number.
func (ca *testCA) issue(t *testing.T) (certFile, keyFile string, sn int64) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial++
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "node"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		KeyUsage: x509.KeyUsageDigitalSignature, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "PRIVATE KEY", kder)
	return certFile, keyFile, serial
}

func servedSerial(t *testing.T, r *CertReloader) int64 {
	t.Helper()
	c, _ := r.GetCertificate(nil)
	cc, _ := r.GetClientCertificate(nil)
	if c == nil || c != cc {
		t.Fatalf("server certificate %p, client certificate %p: want the same one", c, cc)
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf.SerialNumber.Int64()
}

// TestCertReloader: a reload replaces the certificate new handshakes
// get; a pair that does not load names its files and keeps the previous
// one; PublicTLS follows min_version.
func TestCertReloader(t *testing.T) {
	ca := newTestCA(t, "ca")
	c1, k1, sn1 := ca.issue(t)
	c2, k2, sn2 := ca.issue(t)
	r, err := NewCertReloader(c1, k1)
	if err != nil || servedSerial(t, r) != sn1 {
		t.Fatalf("NewCertReloader: %v", err)
	}
	if err := r.Load(c2, k1); err == nil || !strings.Contains(err.Error(), c2) || !strings.Contains(err.Error(), k1) {
		t.Errorf("mismatched pair: %v, want an error naming both files", err)
	}
	if got := servedSerial(t, r); got != sn1 {
		t.Errorf("after a failed load: serial %d, want %d kept", got, sn1)
	}
	if err := r.Load(c2, k2); err != nil || servedSerial(t, r) != sn2 {
		t.Errorf("reload: %v, serial %d, want %d", err, servedSerial(t, r), sn2)
	}
	if _, err := NewCertReloader(filepath.Join(t.TempDir(), "none.pem"), k1); err == nil {
		t.Error("a missing file loaded")
	}
	if v := PublicTLS(&config.ListenerTLS{MinVersion: "1.3"}, r).MinVersion; v != tls.VersionTLS13 {
		t.Errorf("min_version 1.3: %x", v)
	}
	if v := PublicTLS(&config.ListenerTLS{}, r).MinVersion; v != tls.VersionTLS12 {
		t.Errorf("default min_version: %x", v)
	}
}

// peerListener serves pt.Server on 127.0.0.1 and answers "ok" on each
// connection whose handshake succeeds.
func peerListener(t *testing.T, pt *PeerTLS) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	tln := tls.NewListener(ln, pt.Server)
	go func() {
		for {
			c, err := tln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				if err := c.(*tls.Conn).Handshake(); err == nil {
					_, _ = c.Write([]byte("ok"))
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// dialPeer dials addr with pt's client side and reads the answer.
func dialPeer(addr string, pt *PeerTLS) (string, error) {
	c, err := TLSDialer(addr, pt.Client, 2*time.Second, nil)("", 0)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	return string(b), err
}

// TestPeerTLS: two nodes of one CA complete a mutual handshake through
// TLSDialer (ServerName from the address); a node of another CA is
// refused; after Prepare's install moves the listener's node to the other
// CA, that node is accepted and the first refused.
func TestPeerTLS(t *testing.T) {
	caA, caB := newTestCA(t, "a"), newTestCA(t, "b")
	node := func(ca *testCA) *config.PeerTLS {
		c, k, _ := ca.issue(t)
		return &config.PeerTLS{CertFile: c, KeyFile: k, CAFile: ca.file}
	}
	server, err := NewPeerTLS(node(caA))
	if err != nil {
		t.Fatal(err)
	}
	addr := peerListener(t, server)
	clientA, err := NewPeerTLS(node(caA))
	if err != nil {
		t.Fatal(err)
	}
	clientB, err := NewPeerTLS(node(caB))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := dialPeer(addr, clientA); err != nil || got != "ok" {
		t.Fatalf("same CA: %q, %v; want ok", got, err)
	}
	if got, err := dialPeer(addr, clientB); err == nil && got == "ok" {
		t.Error("a node of another CA was accepted")
	}
	install, err := server.Prepare(node(caB))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := dialPeer(addr, clientA); err != nil || got != "ok" {
		t.Errorf("prepared but not installed: %q, %v; want the old CA still in force", got, err)
	}
	install()
	if got, err := dialPeer(addr, clientB); err != nil || got != "ok" {
		t.Errorf("after install, the new CA's node: %q, %v; want ok", got, err)
	}
	if got, err := dialPeer(addr, clientA); err == nil && got == "ok" {
		t.Error("after install, the old CA's node was accepted")
	}
	if _, err := server.Prepare(&config.PeerTLS{CertFile: "/nonexistent", KeyFile: "/nonexistent", CAFile: caA.file}); err == nil ||
		!strings.Contains(err.Error(), "cluster.tls") {
		t.Errorf("a reload with missing files: %v, want a cluster.tls error", err)
	}
	if _, err := NewPeerTLS(&config.PeerTLS{}); err == nil {
		t.Error("NewPeerTLS with no files succeeded")
	}
}

// TestTLSDialerFailures: a closed port, and a server that is not TLS,
// fail the dial with an error that names the address.
func TestTLSDialerFailures(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
			c.Close()
		}
	}()
	conf := func() *tls.Config { return &tls.Config{MinVersion: tls.VersionTLS12} }
	wrapped := 0 // the handshake runs over what wrap made of the dialled connection
	wrap := func(c net.Conn) net.Conn { wrapped++; return c }
	if _, err := TLSDialer(addr, conf, time.Second, wrap)("", 0); err == nil || !strings.Contains(err.Error(), addr) {
		t.Errorf("plain-text server: %v, want a handshake error naming %s", err, addr)
	}
	ln.Close()
	if _, err := TLSDialer(addr, conf, time.Second, wrap)("", 0); err == nil {
		t.Error("closed port: dialed")
	}
	if wrapped != 1 {
		t.Errorf("wrap called %d times, want once (the connection that was dialled)", wrapped)
	}
	named := &tls.Config{ServerName: "example.test"}
	if withServerName(named, addr) != named {
		t.Error("a configured ServerName was replaced")
	}
	if got := withServerName(&tls.Config{}, addr).ServerName; got != "127.0.0.1" {
		t.Errorf("ServerName from %s = %q", addr, got)
	}
}
