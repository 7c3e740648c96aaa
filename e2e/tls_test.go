package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// tlsClient trusts the given CAs and counts the certificates it is shown.
func tlsClient(seen *sync.Map, cas ...*testCA) *http.Client {
	pool := x509.NewCertPool()
	for _, ca := range cas {
		pool.AppendCertsFromPEM(ca.CertPEM)
	}
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			MaxIdleConnsPerHost: 4,
			TLSClientConfig: &tls.Config{RootCAs: pool, VerifyConnection: func(cs tls.ConnectionState) error {
				if seen != nil {
					v, _ := seen.LoadOrStore(cs.PeerCertificates[0].Subject.CommonName, new(atomic.Int64))
					v.(*atomic.Int64).Add(1)
				}
				return nil
			}},
		},
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestPublicListenerTLS: server.tls makes the public listener HTTPS
// (curl --cacert works; X-Forwarded-Proto reaches the origin as https).
// Under load, the certificate files are replaced and reloaded, by POST
// /reload and by SIGHUP: zero failed requests, and new connections get
// the new certificate.
func TestPublicListenerTLS(t *testing.T) {
	t.Parallel()
	ng := startNginx(t, "75s", "", "")
	ca1, ca2 := newTestCA(t, "listener-one"), newTestCA(t, "listener-two")
	c1, k1 := ca1.issue(t, "first", "127.0.0.1")
	c2, k2 := ca2.issue(t, "second", "127.0.0.1")
	c3, k3 := ca1.issue(t, "third", "127.0.0.1")
	dir := t.TempDir()
	certFile, keyFile := dir+"/cert.pem", dir+"/key.pem"
	copyFile(t, c1, certFile)
	copyFile(t, k1, keyFile)
	listen, admin := freeAddr(t), freeAddr(t)
	sh := startShieldWith(t, admin, shieldYAML(listen, admin, fmt.Sprintf(`servers: [%q]`, ng.addr),
		fmt.Sprintf("server: { tls: { cert_file: %q, key_file: %q, min_version: \"1.2\" } }\n", certFile, keyFile)))

	// curl, as a user would.
	out, err := exec.Command("curl", "-sS", "--cacert", ca1.File, "https://"+listen+"/curl").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "/curl proto=https") {
		t.Fatalf("curl --cacert: %v: %s", err, out)
	}
	// Plain HTTP to the TLS listener is refused.
	if r, err := doHTTP(newClient(), http.MethodGet, "http://"+listen+"/plain"); err == nil && r.status == http.StatusOK {
		t.Errorf("plain HTTP on the TLS listener answered 200")
	}

	var seen sync.Map
	var tally loadTally
	stop := make(chan struct{})
	// Keep-alive clients plus clients that open a new connection each
	// time (so handshakes happen throughout the reloads).
	keep := tlsClient(&seen, ca1, ca2)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				c := keep
				if w%2 == 1 {
					c = tlsClient(&seen, ca1, ca2)
				}
				r, err := doHTTP(c, http.MethodGet, fmt.Sprintf("https://%s/t/%d/%d", listen, w, i))
				tally.add(r.status, err, r.header.Get("Cache-Status"))
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	counted := func(cn string) int64 {
		v, ok := seen.Load(cn)
		if !ok {
			return 0
		}
		return v.(*atomic.Int64).Load()
	}
	eventually(t, "handshakes with the first certificate", func() bool { return counted("first") > 5 })
	copyFile(t, c2, certFile)
	copyFile(t, k2, keyFile)
	if r, err := doHTTP(newClient(), http.MethodPost, "http://"+admin+"/reload"); err != nil || r.status != http.StatusOK {
		t.Fatalf("POST /reload: %v %v", r, err)
	}
	eventually(t, "handshakes with the second certificate", func() bool { return counted("second") > 5 })
	copyFile(t, c3, certFile)
	copyFile(t, k3, keyFile)
	sh.signal(t, syscall.SIGHUP)
	eventually(t, "handshakes with the third certificate (SIGHUP)", func() bool { return counted("third") > 5 })
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	t.Logf("TLS listener under two certificate reloads: %s; handshakes first=%d second=%d third=%d",
		&tally, counted("first"), counted("second"), counted("third"))
	if tally.failed != 0 {
		t.Errorf("failed requests across the reloads: %s", &tally)
	}
}

// TestClusterPeerTLS: three static nodes whose peers talk mutual TLS.
// Keys owned by other nodes are forwarded (and answered) over TLS; a
// client without a certificate signed by cluster.tls.ca_file is refused
// at the handshake, before the secret is even looked at.
func TestClusterPeerTLS(t *testing.T) {
	t.Parallel()
	ng := startNginx(t, "75s", "", "")
	ca := newTestCA(t, "peers")
	type node struct{ id, listen, admin, peer, cert, key string }
	var nodes []node
	for i := range 3 {
		id := fmt.Sprintf("n%d", i)
		c, k := ca.issue(t, id, "127.0.0.1")
		nodes = append(nodes, node{id, freeAddr(t), freeAddr(t), freeAddr(t), c, k})
	}
	var peers []string
	for _, n := range nodes {
		peers = append(peers, fmt.Sprintf("{ id: %s, addr: %q }", n.id, n.peer))
	}
	for _, n := range nodes {
		extra := fmt.Sprintf(`cluster:
  node_id: %s
  listen: %s
  secret: %q
  membership: static
  peers: [%s]
  transport: mux
  tls: { cert_file: %q, key_file: %q, ca_file: %q }
`, n.id, n.peer, clusterSecret, strings.Join(peers, ", "), n.cert, n.key, ca.File)
		startShieldWith(t, n.admin, shieldYAML(n.listen, n.admin, fmt.Sprintf(`servers: [%q]`, ng.addr), extra))
	}
	c := newClient()
	for i := range 60 {
		r, err := doHTTP(c, http.MethodGet, fmt.Sprintf("http://%s/peer/%d", nodes[0].listen, i))
		if err != nil || r.status != http.StatusOK {
			t.Fatalf("request %d via n0: %v %v", i, r, err)
		}
	}
	ok := metricSum(t, nodes[0].admin, "shield_peer_requests_total", map[string]string{"outcome": "ok"})
	bad := metricSum(t, nodes[0].admin, "shield_peer_requests_total", map[string]string{"outcome": "error"})
	t.Logf("60 keys via n0: %v forwarded to owners over mutual TLS, %v peer errors", ok, bad)
	if ok < 10 || bad != 0 {
		t.Errorf("peer forwards ok=%v error=%v, want ≥ 10 and 0", ok, bad)
	}
	// cluster.transport: mux — its connections run over the same
	// mutual TLS.
	if r, err := doHTTP(newClient(), http.MethodGet, "http://"+nodes[0].admin+"/metrics"); err != nil ||
		!strings.Contains(string(r.body), "\nshield_peer_mux_connections 2\n") {
		t.Errorf("n0's multiplexed peer connections: want 2 (%v)", err)
	}

	// Without a client certificate, or with one from another CA: refused.
	other := newTestCA(t, "intruder")
	oc, ok2 := other.issue(t, "intruder", "127.0.0.1")
	intruder, err := tls.LoadX509KeyPair(oc, ok2)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM)
	for name, certs := range map[string][]tls.Certificate{"no client certificate": nil, "certificate from another CA": {intruder}} {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", nodes[1].peer,
			&tls.Config{RootCAs: pool, Certificates: certs, ServerName: "127.0.0.1"})
		if err == nil {
			// TLS 1.3 reports the server's refusal on the first read.
			_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
			_, _ = fmt.Fprintf(conn, "GET /x HTTP/1.1\r\nHost: x\r\nShield-Auth: %s\r\n\r\n", clusterSecret)
			buf := make([]byte, 64)
			n, rerr := conn.Read(buf)
			conn.Close()
			if rerr == nil {
				t.Errorf("%s: peer listener answered %q", name, buf[:n])
			}
		}
	}
	// Plain HTTP with the right secret: refused too.
	if r, err := doHTTP(c, http.MethodGet, "http://"+nodes[1].peer+"/x", "Shield-Auth", clusterSecret); err == nil && r.status < 400 {
		t.Errorf("plain HTTP to the TLS peer listener: %v", r)
	}
}

// peerCertCN dials a peer listener as a client presenting client (nil:
// none) and trusting cas, sends one request so that a TLS 1.3 server's
// verdict on the client certificate arrives, and returns the common name
// of the certificate the listener presented.
func peerCertCN(addr string, client *tls.Certificate, cas ...*testCA) (string, error) {
	pool := x509.NewCertPool()
	for _, ca := range cas {
		pool.AppendCertsFromPEM(ca.CertPEM)
	}
	cfg := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}
	if client != nil {
		cfg.Certificates = []tls.Certificate{*client}
	}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	cn := conn.ConnectionState().PeerCertificates[0].Subject.CommonName
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := fmt.Fprintf(conn, "GET /x HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return cn, err
	}
	buf := make([]byte, 64)
	if _, err := conn.Read(buf); err != nil {
		return cn, err
	}
	return cn, nil
}

// TestClusterPeerTLSReload: cluster.tls reloads like server.tls. Two
// static nodes talk mutual TLS with certificates from CA one; the files
// are rotated in place to a CA two certificate (the CA file a bundle of
// both), then to CA two alone, each step applied by POST /reload on both
// nodes. After each step the peer listeners present the new certificate
// to a new connection (the old one no more), keys owned by the other
// node are still forwarded with no peer error — after the last step a
// forward needs the new client certificate and CA on both sides, since
// the reload closed the idle peer connections — and once CA one is gone a
// client with a CA one certificate is refused.
func TestClusterPeerTLSReload(t *testing.T) {
	t.Parallel()
	ng := startNginx(t, "75s", "", "")
	ca1, ca2 := newTestCA(t, "rotate-one"), newTestCA(t, "rotate-two")
	dir := t.TempDir()
	type node struct{ id, listen, admin, peer, cert, key, ca string }
	var nodes []node
	for i := range 2 {
		id := fmt.Sprintf("n%d", i)
		n := node{id, freeAddr(t), freeAddr(t), freeAddr(t),
			dir + "/" + id + "-cert.pem", dir + "/" + id + "-key.pem", dir + "/" + id + "-ca.pem"}
		c, k := ca1.issue(t, id+"-one", "127.0.0.1")
		copyFile(t, c, n.cert)
		copyFile(t, k, n.key)
		copyFile(t, ca1.File, n.ca)
		nodes = append(nodes, n)
	}
	var peers []string
	for _, n := range nodes {
		peers = append(peers, fmt.Sprintf("{ id: %s, addr: %q }", n.id, n.peer))
	}
	for _, n := range nodes {
		extra := fmt.Sprintf(`cluster:
  node_id: %s
  listen: %s
  secret: %q
  membership: static
  peers: [%s]
  tls: { cert_file: %q, key_file: %q, ca_file: %q }
`, n.id, n.peer, clusterSecret, strings.Join(peers, ", "), n.cert, n.key, n.ca)
		startShieldWith(t, n.admin, shieldYAML(n.listen, n.admin, fmt.Sprintf(`servers: [%q]`, ng.addr), extra))
	}
	c := newClient()
	// forwards asks 40 new keys through each node and returns how many
	// were forwarded to the other; any peer error fails the test.
	forwards := func(step string) float64 {
		t.Helper()
		total := 0.0
		for _, n := range nodes {
			before := metricSum(t, n.admin, "shield_peer_requests_total", map[string]string{"outcome": "ok"})
			for i := range 40 {
				r, err := doHTTP(c, http.MethodGet, fmt.Sprintf("http://%s/rot/%s/%s/%d", n.listen, step, n.id, i))
				if err != nil || r.status != http.StatusOK {
					t.Fatalf("%s: request %d via %s: %v %v", step, i, n.id, r, err)
				}
			}
			ok := metricSum(t, n.admin, "shield_peer_requests_total", map[string]string{"outcome": "ok"}) - before
			bad := metricSum(t, n.admin, "shield_peer_requests_total", map[string]string{"outcome": "error"})
			if ok < 5 || bad != 0 {
				t.Errorf("%s: via %s, %v keys forwarded ok and %v peer errors in all, want ≥ 5 and 0", step, n.id, ok, bad)
			}
			total += ok
		}
		return total
	}
	// presents checks the certificate each peer listener shows a new
	// connection (the client trusting both CAs, with a CA two certificate).
	cc, ck := ca2.issue(t, "test-client-two", "127.0.0.1")
	client2, err := tls.LoadX509KeyPair(cc, ck)
	if err != nil {
		t.Fatal(err)
	}
	presents := func(step, suffix string) {
		t.Helper()
		for _, n := range nodes {
			cn, err := peerCertCN(n.peer, &client2, ca1, ca2)
			if err != nil || cn != n.id+suffix {
				t.Errorf("%s: %s's peer listener presented %q (%v), want %q", step, n.id, cn, err, n.id+suffix)
			}
		}
	}
	reload := func(step string) {
		t.Helper()
		for _, n := range nodes {
			r, err := doHTTP(c, http.MethodPost, "http://"+n.admin+"/reload")
			if err != nil || r.status != http.StatusOK {
				t.Fatalf("%s: POST /reload on %s: %v %v", step, n.id, r, err)
			}
		}
	}

	t.Logf("CA one: %v keys forwarded", forwards("one"))
	// The CA file names CA one only: a CA two client is refused.
	if _, err := peerCertCN(nodes[0].peer, &client2, ca1); err == nil {
		t.Errorf("CA one only: a client with a CA two certificate was served")
	}

	// Step 1: CA bundle, certificates from CA two.
	bundle := append(append([]byte{}, ca1.CertPEM...), ca2.CertPEM...)
	for _, n := range nodes {
		c, k := ca2.issue(t, n.id+"-two", "127.0.0.1")
		copyFile(t, c, n.cert)
		copyFile(t, k, n.key)
		if err := os.WriteFile(n.ca, bundle, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	reload("bundle")
	presents("bundle", "-two")
	t.Logf("CA bundle, CA two certificates: %v keys forwarded", forwards("bundle"))

	// Step 2: CA two alone.
	for _, n := range nodes {
		copyFile(t, ca2.File, n.ca)
	}
	reload("two")
	presents("two", "-two")
	t.Logf("CA two alone: %v keys forwarded", forwards("two"))
	c1, k1 := ca1.issue(t, "test-client-one", "127.0.0.1")
	client1, err := tls.LoadX509KeyPair(c1, k1)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if _, err := peerCertCN(n.peer, &client1, ca1, ca2); err == nil {
			t.Errorf("CA two alone: %s's peer listener served a client with a CA one certificate", n.id)
		}
	}

	// A reload whose cluster.tls does not load is rejected, and the
	// running certificates stay.
	if err := os.WriteFile(nodes[0].cert, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r, err := doHTTP(c, http.MethodPost, "http://"+nodes[0].admin+"/reload"); err != nil || r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "cluster.tls") {
		t.Errorf("reload with a broken cluster.tls.cert_file: %v %v, want 400 naming cluster.tls", r, err)
	}
	presents("after a rejected reload", "-two")
}
