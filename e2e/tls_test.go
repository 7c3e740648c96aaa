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
