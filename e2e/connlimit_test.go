package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shield-proxy/shield/config"
)

// adminValue is an unlabelled metric's sample from admin's /metrics
// (failing t when it is absent).
func adminValue(t *testing.T, admin, metric string) float64 {
	t.Helper()
	r, err := doHTTP(newClient(), http.MethodGet, "http://"+admin+"/metrics")
	if err != nil || r.status != http.StatusOK {
		t.Fatalf("GET /metrics: %v %v", r, err)
	}
	return mustPlain(t, []byte(r.body), metric)
}

// TestConnectionLimit: with server.max_connections: 2, two clients that
// hold their keep-alive connections are served; a third connection is
// answered 503 (Retry-After, closed) without reaching the handler,
// counted and logged, while the admin listener still answers; once one
// of the two closes, a new connection is served, and the other's
// connection was never disturbed. A reload to 3 admits a third.
func TestConnectionLimit(t *testing.T) {
	t.Parallel()
	originAddr := freeAddr(t)
	origin := startProcess(t, "demo-origin", binPath(t, "demo-origin"), "-listen", originAddr)
	origin.waitReady(t, "http://"+originAddr+"/__origin/stats")
	listen, admin := freeAddr(t), freeAddr(t)
	conf := func(n int) string {
		return shieldYAML(listen, admin, fmt.Sprintf(`servers: ["%s"]`, originAddr), fmt.Sprintf("server: { max_connections: %d }\n", n))
	}
	path := writeFile(t, "shield.yaml", conf(2))
	sh := startProcess(t, "shield", binPath(t, "shield"), "-config", path)
	sh.waitReady(t, "http://"+admin+"/readyz")
	if got := adminValue(t, admin, "shield_connections_max"); got != 2 {
		t.Fatalf("shield_connections_max = %v, want 2", got)
	}

	// get is one GET on k, which must answer.
	get := func(k *keepAliveConn, path string) result {
		t.Helper()
		r, err := k.get(path)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	k1, k2 := dialKeepAlive(t, listen), dialKeepAlive(t, listen)
	for i, k := range []*keepAliveConn{k1, k2} {
		if r := get(k, "/limit/held"); r.status != http.StatusOK {
			t.Fatalf("held connection %d: status %d", i+1, r.status)
		}
	}
	eventually(t, "two connections open", func() bool { return adminValue(t, admin, "shield_connections_open") == 2 })

	k3 := dialKeepAlive(t, listen)
	r := get(k3, "/limit/refused")
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") != "1" || !r.closing ||
		!strings.Contains(string(r.body), "connection limit") {
		t.Fatalf("third connection: %d %v %q, want 503 with Retry-After: 1 and Connection: close", r.status, r.header, r.body)
	}
	if _, err := k3.br.ReadByte(); err == nil {
		t.Fatal("the refused connection stayed open")
	}
	if got := adminValue(t, admin, "shield_connections_refused_total"); got != 1 {
		t.Fatalf("shield_connections_refused_total = %v, want 1", got)
	}
	if got := metricSum(t, admin, "shield_requests_total", map[string]string{"route": "r"}); got != 2 {
		t.Fatalf("shield_requests_total = %v, want 2: the refused connection's request must not reach the handler", got)
	}
	eventually(t, "the refusal logged", func() bool {
		return strings.Contains(sh.stderr.String(), "server.max_connections reached")
	})

	_ = k1.c.Close()
	eventually(t, "one connection open", func() bool { return adminValue(t, admin, "shield_connections_open") == 1 })
	if r := get(dialKeepAlive(t, listen), "/limit/after"); r.status != http.StatusOK {
		t.Fatalf("a connection after one closed: status %d", r.status)
	}
	if r := get(k2, "/limit/held"); r.status != http.StatusOK {
		t.Fatalf("the held connection's second request: status %d", r.status)
	}
	if got := adminValue(t, admin, "shield_connections_refused_total"); got != 1 {
		t.Fatalf("shield_connections_refused_total = %v after, want 1", got)
	}

	// A reload moves the limit: with two connections held, a third connection
	// is served once the file says 3.
	if err := os.WriteFile(path, []byte(conf(3)), 0o600); err != nil {
		t.Fatal(err)
	}
	sh.signal(t, syscall.SIGHUP)
	eventually(t, "the reloaded limit", func() bool { return adminValue(t, admin, "shield_connections_max") == 3 })
	if r := get(dialKeepAlive(t, listen), "/limit/reloaded"); r.status != http.StatusOK {
		t.Fatalf("a third connection under the reloaded limit: status %d", r.status)
	}
}

// TestConnectionLimitReleases: every way a connection ends gives its
// place back, on the shared listener (HTTP/1.1 and HTTP/2 sorted on one
// port) in cleartext (h2c) and over TLS: with server.max_connections: 3,
// twenty connections one after another — HTTP/1.1 and HTTP/2 by curl,
// many HTTP/2 requests on one Go client connection, and (h2c) a
// connection whose first line is neither protocol's — all end with no
// connection counted open, and a new connection is still served. A leak
// would refuse everything once three had leaked.
func TestConnectionLimitReleases(t *testing.T) {
	t.Parallel()
	for _, useTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "h2c", true: "tls"}[useTLS], func(t *testing.T) {
			t.Parallel()
			h := newH2Env(t, useTLS, with(func(c *config.Config) { c.Server.MaxConnections = 3 }))
			admin := h.cfg.Admin
			for i := range 20 {
				if a := h.curl(fmt.Sprintf("/release/%d", i), i%2 == 0); a.status != http.StatusOK {
					t.Fatalf("connection %d: status %d", i, a.status)
				}
			}
			cl := h.client()
			for i := range 10 {
				r, err := cl.Get(h.base() + fmt.Sprintf("/release/go/%d", i))
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, r.Body)
				_ = r.Body.Close()
				if r.StatusCode != http.StatusOK || r.ProtoMajor != 2 {
					t.Fatalf("Go client request %d: %d over %s", i, r.StatusCode, r.Proto)
				}
			}
			cl.CloseIdleConnections()
			if !useTLS {
				c, err := net.Dial("tcp", h.cfg.Listen)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = c.Write([]byte("NOT A REQUEST LINE\r\n\r\n"))
				_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
				_, _ = io.Copy(io.Discard, c) // the listener closes it
				_ = c.Close()
			}
			eventually(t, "no connection counted open", func() bool { return adminValue(t, admin, "shield_connections_open") == 0 })
			if got := adminValue(t, admin, "shield_connections_refused_total"); got != 0 {
				t.Fatalf("shield_connections_refused_total = %v, want 0 (one connection at a time)", got)
			}
			if a := h.curl("/release/after", false); a.status != http.StatusOK {
				t.Fatalf("a connection after the others: status %d", a.status)
			}
		})
	}
}
