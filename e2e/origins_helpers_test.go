package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// testCA is a certificate authority made by the test, for origin,
// listener and peer certificates.
type testCA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	CertPEM []byte
	File    string // CertPEM on disk
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &testCA{cert: cert, key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
	ca.File = writeFile(t, name+"-ca.pem", string(ca.CertPEM))
	return ca
}

// issue makes a leaf certificate for names (DNS names or IPs), usable as
// server and client, and writes it; it returns the cert and key paths.
func (ca *testCA) issue(t *testing.T, cn string, names ...string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, cn+".pem"), filepath.Join(dir, cn+"-key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// nginxBin is Debian's nginx (package nginx-light, installed by .ci/run).
const nginxBin = "/usr/sbin/nginx"

// nginxOrigin is one nginx started by the test on loopback.
type nginxOrigin struct {
	addr string
	p    *process
}

// startNginx runs nginx in the foreground with a throw-away config in a
// temp dir (pid, logs and temp paths there too). certFile/keyFile, when
// set, make it listen with TLS. Every location answers 200 with no-store
// so each request reaches it; /healthz answers 200.
func startNginx(t *testing.T, keepalive string, certFile, keyFile string) *nginxOrigin {
	t.Helper()
	if _, err := os.Stat(nginxBin); err != nil {
		t.Fatalf("nginx is required (%s; Debian package nginx-light): %v", nginxBin, err)
	}
	dir := t.TempDir()
	addr := freeAddr(t)
	listen := addr
	tlsLines := ""
	if certFile != "" {
		listen += " ssl"
		tlsLines = fmt.Sprintf("ssl_certificate %s;\n    ssl_certificate_key %s;", certFile, keyFile)
	}
	conf := fmt.Sprintf(`worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  keepalive_timeout %[2]s;
  default_type text/plain;
  server {
    listen %[3]s;
    %[4]s
    location = /healthz { return 200 "ok\n"; }
    location / {
      add_header Cache-Control no-store;
      return 200 "nginx %[5]s $uri proto=$http_x_forwarded_proto\n";
    }
  }
}
`, dir, keepalive, listen, tlsLines, addr)
	cf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(cf, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startProcess(t, "nginx "+addr, nginxBin, "-p", dir, "-c", cf, "-e", filepath.Join(dir, "error.log"), "-g", "daemon off;")
	// SIGTERM before startProcess's cleanup (cleanups run last first):
	// its SIGKILL would leave nginx's worker holding the output pipes.
	t.Cleanup(func() {
		if !p.exited() {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(exitTimeout):
			}
		}
	})
	scheme := "http"
	client := &http.Client{Timeout: time.Second}
	if certFile != "" {
		scheme = "https"
		client.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // readiness only
	}
	deadline := time.Now().Add(startTimeout)
	for {
		resp, err := client.Get(scheme + "://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			break
		}
		if p.exited() || time.Now().After(deadline) {
			t.Fatalf("nginx on %s not ready: %v", addr, err)
		}
		time.Sleep(pollInterval)
	}
	return &nginxOrigin{addr: addr, p: p}
}

// stop ends nginx (SIGQUIT would wait for keep-alive clients; SIGTERM is
// nginx's fast shutdown) and waits for it.
func (n *nginxOrigin) stop(t *testing.T) {
	t.Helper()
	n.p.terminate(t)
	n.p.wait(t)
}

// startShieldWith writes yaml and runs shield with it until admin /readyz.
func startShieldWith(t *testing.T, admin, yaml string) *process {
	t.Helper()
	path := writeFile(t, "shield.yaml", yaml)
	p := startProcess(t, "shield", binPath(t, "shield"), "-config", path)
	p.waitReady(t, "http://"+admin+"/readyz")
	return p
}

// loadTally counts a load run's answers.
type loadTally struct {
	mu       sync.Mutex
	total    int
	failed   int
	statuses map[int]int
	samples  []string // the first failures
}

func (l *loadTally) add(status int, err error, detail string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.statuses == nil {
		l.statuses = map[int]int{}
	}
	l.total++
	l.statuses[status]++
	if err != nil || status != http.StatusOK {
		l.failed++
		if len(l.samples) < 5 {
			l.samples = append(l.samples, fmt.Sprintf("%d %v %s", status, err, detail))
		}
	}
}

func (l *loadTally) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprintf("%d requests, %d failed (%.3f%% ok), statuses %v, first failures %q",
		l.total, l.failed, 100*l.okRatio(), l.statuses, l.samples)
}

func (l *loadTally) okRatio() float64 {
	if l.total == 0 {
		return 0
	}
	return float64(l.total-l.failed) / float64(l.total)
}

// runLoad sends GETs from workers until stop is closed; path(w, i) names
// each request, tally(path) picks where it is counted.
func runLoad(c *http.Client, base string, workers int, pace time.Duration, stop <-chan struct{},
	path func(w, i int) string, tally func(path string) *loadTally) *sync.WaitGroup {
	var wg sync.WaitGroup
	var n atomic.Int64
	for w := range workers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				p := path(w, i)
				r, err := doHTTP(c, http.MethodGet, base+p)
				tally(p).add(r.status, err, r.header.Get("Cache-Status"))
				n.Add(1)
				if pace > 0 {
					time.Sleep(pace)
				}
			}
		})
	}
	return &wg
}

// metricSum scrapes admin /metrics and sums metric's series with labels.
func metricSum(t *testing.T, admin, metric string, labels map[string]string) float64 {
	t.Helper()
	r, err := doHTTP(newClient(), http.MethodGet, "http://"+admin+"/metrics")
	if err != nil || r.status != http.StatusOK {
		t.Fatalf("GET /metrics: %v %v", r, err)
	}
	return promText(r.body).sum(metric, labels)
}

// shieldYAML is the config for these tests: one route to one origin whose
// settings are originYAML (an inline mapping's inside).
func shieldYAML(listen, admin, originYAML, extra string) string {
	return fmt.Sprintf(`listen: %s
admin: { listen: %s }
cache: { size: 32MiB, max_object_size: 1MiB }
log: { level: info }
origins:
  o: { %s }
routes:
  - { name: r, hosts: ["*"], origin: o }
%s`, listen, admin, originYAML, extra)
}
