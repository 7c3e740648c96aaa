package upstream

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shield-proxy/shield/admission"
)

// TestPickAvoidsFailedServer: with one server refusing connections, every
// idempotent call still gets an answer (the retry goes to the other
// server), the dead server is ejected after its failures in a row and
// picks then avoid it; pick never returns the server it is told to avoid.
func TestPickAvoidsFailedServer(t *testing.T) {
	live := newTestOrigin(t)
	dead := closedAddr(t)
	r := newRegistry(t)
	o := r.update(t, parse(t, oneOrigin([]string{dead, live.addr()}), "o"))
	for i := range 30 {
		if code, f, _ := call(t, o, fmt.Sprintf("/k/%d", i)); code != 200 {
			t.Fatalf("call %d: %d %+v, want the live server's 200", i, code, f)
		}
	}
	h := r.Health()["o"]
	if len(h) != 2 || h[0].Name != dead || h[0].Errors == 0 || h[0].Ejects == 0 || h[0].Up || !h[1].Up {
		t.Fatalf("health: %+v, want %s ejected after its failures and the live server up", h, dead)
	}
	if st := r.Status(time.Now())[0]; st.Servers[0].Health != "ejected" || st.Servers[1].Health != "up" {
		t.Fatalf("status: %+v", st.Servers)
	}
	now := time.Now()
	for range 20 {
		if s := o.servers.pick(now, nil, nil); s.addr != live.addr() {
			t.Fatalf("picked the ejected server %s", s.addr)
		}
		if s := o.servers.pick(now, o.servers.servers[1], nil); s.addr != dead {
			t.Fatalf("a retry avoiding %s picked it again", live.addr())
		}
	}
}

// TestShuffleShardPick: with shuffle_shard set, a tenant's fetches go to
// its own servers only; the shard size is capped at the server count.
func TestShuffleShardPick(t *testing.T) {
	servers := make([]string, 6)
	for i := range servers {
		servers[i] = fmt.Sprintf("127.0.0.1:%d", 1+i) // never dialled
	}
	r := newRegistry(t)
	o := r.update(t, parse(t, oneOrigin(servers, "shuffle_shard: 2"), "o"))
	tenants, err := admission.NewTenants(admission.Config{Default: admission.Limits{Rate: 1, Burst: 1, MaxConcurrency: 1}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, tn := range []*admission.Tenant{nil, tenants.Default()} {
		seen := map[string]bool{}
		now := time.Now()
		for range 200 {
			seen[o.servers.pick(now, nil, tn).addr] = true
		}
		if len(seen) != 2 {
			t.Fatalf("tenant %v: picks spread over %d servers (%v), want its shard of 2", tn, len(seen), seen)
		}
	}
	if shardKey(nil) == shardKey(tenants.Default()) {
		t.Fatal("no tenant and the default class share a shard key")
	}
	// config refuses these; the registry clamps them all the same.
	for in, want := range map[int]int32{60: 6, -1: 0} {
		cfg := parse(t, oneOrigin(servers), "o")
		cfg.Origins["o"].ShuffleShard = in
		if o = r.update(t, cfg); o.servers.shard.Load() != want {
			t.Fatalf("shuffle_shard %d over 6 servers: shard %d, want %d", in, o.servers.shard.Load(), want)
		}
	}
}

// TestHealthChecks: failing checks take a server out of rotation and
// passing ones bring it back, each transition logged; the checks stop
// with the registry's context (TestMain's leak check).
func TestHealthChecks(t *testing.T) {
	o := newTestOrigin(t)
	o.status.Store(500)
	r := newRegistry(t)
	r.update(t, parse(t, oneOrigin([]string{o.addr()},
		"health_check: {path: /health, interval: 10ms, timeout: 5ms, healthy: 1, unhealthy: 1}", "host_header: origin.example.com"), "o"))
	down := func() bool { h := r.Health()["o"]; return len(h) == 1 && h[0].Down }
	waitUntil(t, "the server down", down)
	if st := r.Status(time.Now())[0].Servers[0]; st.Health != "down" {
		t.Fatalf("status: %+v", st)
	}
	if h, _ := o.host.Load().(string); h != "origin.example.com" {
		t.Errorf("health check Host %q, want host_header's", h)
	}
	o.status.Store(204)
	waitUntil(t, "the server up again", func() bool { return !down() })
	waitUntil(t, "both transitions logged", func() bool {
		l := r.log.String()
		return strings.Contains(l, "level=WARN msg=\"origin server health changed\"") && strings.Contains(l, "level=INFO msg=\"origin server health changed\"")
	})
}

// testCert is a self-signed certificate for 127.0.0.1 written to PEM
// files, usable as a server's, a client's and as the CA.
type testCert struct {
	tls               tls.Certificate
	certFile, keyFile string
}

func newTestCert(t testing.TB) testCert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "origin"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"origin.example.com"},
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	c := testCert{tls: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key},
		certFile: filepath.Join(dir, "cert.pem"), keyFile: filepath.Join(dir, "key.pem")}
	if err := os.WriteFile(c.certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestOriginTLS: https:// servers are verified against tls.ca_file (by
// IP, server_name or host_header), present tls.cert_file when asked, and
// a handshake that fails is a 502 counted and logged by kind.
func TestOriginTLS(t *testing.T) {
	cert := newTestCert(t)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TLS.PeerCertificates) == 0 {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		_, _ = w.Write([]byte("secret"))
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert.tls}, ClientAuth: tls.RequestClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	server := "https://" + srv.Listener.Addr().String()

	cases := []struct {
		name   string
		extra  []string
		status int    // 0: a failure
		kind   string // the logged kind of a failed handshake
	}{
		{"verified by ca_file", []string{"tls: {ca_file: " + cert.certFile + "}"}, 403, ""},
		{"client certificate", []string{"tls: {ca_file: " + cert.certFile + ", cert_file: " + cert.certFile + ", key_file: " + cert.keyFile + "}"}, 200, ""},
		{"server_name", []string{"tls: {ca_file: " + cert.certFile + ", server_name: origin.example.com}"}, 403, ""},
		{"host_header names the server", []string{"tls: {ca_file: " + cert.certFile + "}", "host_header: origin.example.com"}, 403, ""},
		{"insecure_skip_verify", []string{"tls: {insecure_skip_verify: true}"}, 403, ""},
		{"unknown authority", nil, 0, "unknown-authority"},
		{"hostname mismatch", []string{"tls: {ca_file: " + cert.certFile + ", server_name: other.example.com}"}, 0, "hostname-mismatch"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRegistry(t)
			o := r.update(t, parse(t, oneOrigin([]string{server}, tc.extra...), "o"))
			code, f, _ := call(t, o, "/x")
			if code != tc.status {
				t.Fatalf("%d %+v, want %d\n%s", code, f, tc.status, r.log.String())
			}
			errs := `shield_origin_tls_errors_total{origin="o",server="` + server + `"} `
			if tc.status != 0 {
				if !strings.Contains(r.scrape(), errs+"0\n") {
					t.Fatal("TLS errors counted on a good handshake")
				}
				return
			}
			if f.Status != 502 || f.Detail != "error" {
				t.Fatalf("failed handshake answered %+v, want 502 error", f)
			}
			if !strings.Contains(r.scrape(), errs+"1\n") { // a handshake error is not retried
				t.Errorf("TLS errors not counted:\n%s", r.scrape())
			}
			if l := r.log.String(); !strings.Contains(l, "origin TLS handshake failed") || !strings.Contains(l, "kind="+tc.kind) {
				t.Errorf("log lacks the handshake failure of kind %s:\n%s", tc.kind, l)
			}
		})
	}
	r := newRegistry(t)
	r.update(t, parse(t, oneOrigin([]string{server}, "tls: {insecure_skip_verify: true}"), "o"))
	if !strings.Contains(r.log.String(), "not verified (tls.insecure_skip_verify)") {
		t.Errorf("insecure_skip_verify not warned about: %s", r.log.String())
	}
}

// TestTLSErrorKind names each handshake failure for the log line.
func TestTLSErrorKind(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{x509.UnknownAuthorityError{}, "unknown-authority"},
		{x509.HostnameError{}, "hostname-mismatch"},
		{x509.CertificateInvalidError{}, "certificate-invalid"},
		{&tls.CertificateVerificationError{Err: errors.New("x")}, "certificate-verification"},
		{fmt.Errorf("handshake: %w", timeoutErr{}), "timeout"},
		{errors.New("remote error: tls: bad certificate"), "handshake"},
	} {
		if got := tlsErrorKind(tc.err); got != tc.want {
			t.Errorf("tlsErrorKind(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
