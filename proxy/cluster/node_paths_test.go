package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/proxy/httpx"
)

// TestIsShieldHeader: the peer protocol's fields are told by their
// prefix, in any case; the prefix alone or a near miss is not one.
func TestIsShieldHeader(t *testing.T) {
	for name, want := range map[string]bool{
		"Shield-Auth": true, "shield-generation": true, "SHIELD-TAGS": true, "Shield-X": true,
		"Shield-": false, "Shield": false, "Shieldx-Auth": false, "X-Shield-Auth": false, "": false, "Cache-Status": false,
	} {
		if got := IsShieldHeader([]byte(name)); got != want {
			t.Errorf("IsShieldHeader(%q) = %v, want %v", name, got, want)
		}
	}
	for _, h := range [][]byte{HTenant, HClientIP, HForwarded, HReadThrough, HTags, hShieldAuth, hShieldGeneration} {
		if !IsShieldHeader(h) {
			t.Errorf("%s is not told as a peer protocol field", h)
		}
	}
}

// TestPlainPeerClient: the HTTP client of a peer dials over TCP, sends no
// User-Agent of its own, refuses an answer above its MaxBody, and a dead
// peer fails fast.
func TestPlainPeerClient(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skip("no loopback TCP:", err)
	}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) == "/big" {
			ctx.SetBody(make([]byte, 2048))
			return
		}
		ctx.SetBodyString("ua=" + string(ctx.Request.Header.UserAgent()))
	}}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	hc := newPlainPeerClient(ln.Addr().String(), time.Second, 1024)
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("/x")
	req.Header.SetHost(ln.Addr().String())
	if err := hc.Do(req, resp); err != nil || string(resp.Body()) != "ua=shield-peer" {
		t.Fatalf("answer %q, %v; want the client's name as User-Agent", resp.Body(), err)
	}
	req.SetRequestURI("/big")
	if err := hc.Do(req, resp); !errors.Is(err, fasthttp.ErrBodyTooLarge) {
		t.Errorf("answer above MaxBody: %v", err)
	}

	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := dead.Addr().String()
	_ = dead.Close()
	start := time.Now()
	if conn, err := dialPlain(addr); err == nil {
		_ = conn.Close()
		t.Fatal("dialled a closed port")
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("a dead peer cost %v", d)
	}
}

// writeNodeCert writes a CA and a node certificate signed by it, and
// returns cluster.tls for them and the node certificate's serial.
func writeNodeCert(t *testing.T, serial int64) *config.PeerTLS {
	t.Helper()
	dir := t.TempDir()
	write := func(name, kind string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ca"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "node"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		KeyUsage: x509.KeyUsageDigitalSignature, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return &config.PeerTLS{CertFile: write("cert.pem", "CERTIFICATE", der), KeyFile: write("key.pem", "PRIVATE KEY", kder), CAFile: write("ca.pem", "CERTIFICATE", caDER)}
}

func servedSerial(t *testing.T, pt *httpx.PeerTLS) int64 {
	t.Helper()
	c, err := pt.Certs.GetCertificate(nil)
	if err != nil || c == nil {
		t.Fatalf("no certificate: %v", err)
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf.SerialNumber.Int64()
}

// TestPreparePeerTLSReload: a reload's cluster.tls is read without being
// installed; installing it makes its certificate and CA those of new
// handshakes and closes the idle connections to peers. Files that do
// not load are an error (nothing changes); a reload without cluster.tls,
// or of a node whose peers do not talk TLS, prepares nothing.
func TestPreparePeerTLSReload(t *testing.T) {
	pt, err := httpx.NewPeerTLS(writeNodeCert(t, 100))
	if err != nil {
		t.Fatal(err)
	}
	// The harness dials in memory (Options.Dial): the peers' TLS
	// settings are held, the connections stay plain.
	h := newHarness(t, setup{opts: func(o *Options) { o.TLS = pt }}, "a", "b")
	a := h.node("a")
	resp, ok := a.forward(t, "b", "/warm")
	if !ok {
		t.Fatal("forward failed")
	}
	fasthttp.ReleaseResponse(resp)
	hc := a.node.Peer("b").hc
	waitUntil(t, "an idle connection to b", func() bool { return hc.ConnsCount() == 1 })

	if in, err := a.node.PreparePeerTLS(nil); in != nil || err != nil {
		t.Errorf("no cluster.tls: install %v, err %v", in != nil, err)
	}
	if in, err := a.node.PreparePeerTLS(&config.PeerTLS{CertFile: "/nonexistent/cert.pem", KeyFile: "/nonexistent/key.pem", CAFile: "/nonexistent/ca.pem"}); in != nil || err == nil {
		t.Errorf("missing files: install %v, err %v", in != nil, err)
	}
	client := pt.Client()
	in, err := a.node.PreparePeerTLS(writeNodeCert(t, 200))
	if err != nil || in == nil {
		t.Fatalf("install %v, err %v", in != nil, err)
	}
	if servedSerial(t, pt) != 100 || pt.Client() != client {
		t.Fatal("prepared settings were installed before install")
	}
	in()
	if got := servedSerial(t, pt); got != 200 {
		t.Errorf("certificate after install: serial %d, want 200", got)
	}
	if pt.Client() == client {
		t.Error("client configuration not replaced")
	}
	if n := hc.ConnsCount(); n != 0 {
		t.Errorf("%d connections to b kept after install, want the idle ones closed", n)
	}

	// A node whose peers talk plain HTTP cannot turn TLS on by reload.
	h2 := newHarness(t, setup{}, "a", "b")
	if in, err := h2.node("a").node.PreparePeerTLS(writeNodeCert(t, 300)); in != nil || err != nil {
		t.Errorf("plain node: install %v, err %v", in != nil, err)
	}
}

// gauge reads a gauge of n's metrics set.
func (n *testNode) gauge(name string) float64 { return n.set.GetOrCreateGauge(name, nil).Get() }

// TestClusterGauges: the gauges follow the membership, the source's
// reachability, the multiplexed connections and the purge queues.
func TestClusterGauges(t *testing.T) {
	h := newHarness(t, muxSetup(nil, nil), "a", "b", "c")
	a, c := h.node("a"), h.node("c")
	if got := a.gauge(`shield_cluster_peers`); got != 3 {
		t.Errorf("peers %v, want 3", got)
	}
	if got, want := a.gauge(`shield_cluster_generation`), float64(a.m.View().Current.Generation()>>11); got != want {
		t.Errorf("generation %v, want %v", got, want)
	}
	h.setPeers([]*testNode{a}, "a", "b")
	if got := a.gauge(`shield_cluster_peers`); got != 2 {
		t.Errorf("peers after a leave %v, want 2", got)
	}
	if got, want := a.gauge(`shield_cluster_generation`), float64(a.m.View().Current.Generation()>>11); got != want {
		t.Errorf("generation after a change %v, want %v", got, want)
	}
	h.setPeers([]*testNode{a}, "a", "b", "c")

	if got := a.gauge(`shield_consul_reachable`); got != 1 {
		t.Errorf("reachable %v, want 1", got)
	}
	a.src.unreachable.Store(true)
	if got := a.gauge(`shield_consul_reachable`); got != 0 {
		t.Errorf("reachable %v with the source unreachable, want 0", got)
	}

	if got := a.gauge(`shield_peer_mux_connections`); got != 0 {
		t.Errorf("mux connections %v before any, want 0", got)
	}
	a.waitMux(t, "b")
	if got := a.gauge(`shield_peer_mux_connections`); got != 1 {
		t.Errorf("mux connections %v, want 1", got)
	}
	if got := a.gauge(`shield_purge_sync_pending`); got != 0 {
		t.Errorf("sync pending %v with static membership, want 0", got)
	}

	// A purge c cannot take (a never connected to it) waits in c's queue.
	if got := a.gauge(`shield_purge_queue_length`); got != 0 {
		t.Errorf("queue length %v, want 0", got)
	}
	h.net.down(c.addr)
	rec := NewPurge(url.Values{"url": {"http://example.test/q"}})
	a.local.plog.Add(rec)
	a.node.Deliver(rec, true)
	waitUntil(t, "the purge queued for c", func() bool { return a.gauge(`shield_purge_queue_length`) >= 1 })
}
