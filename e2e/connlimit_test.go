package e2e

import (
	"bufio"
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

// connRequest sends one GET on c and reads its answer.
func connRequest(t *testing.T, c net.Conn, br *bufio.Reader, path string) (*http.Response, string) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: example.com\r\n\r\n", path); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s body: %v", path, err)
	}
	return resp, string(body)
}

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

	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", listen)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c, bufio.NewReader(c)
	}
	c1, r1 := dial()
	c2, r2 := dial()
	for i, cr := range []struct {
		c net.Conn
		r *bufio.Reader
	}{{c1, r1}, {c2, r2}} {
		if resp, _ := connRequest(t, cr.c, cr.r, "/limit/held"); resp.StatusCode != http.StatusOK {
			t.Fatalf("held connection %d: status %d", i+1, resp.StatusCode)
		}
	}
	eventually(t, "two connections open", func() bool { return adminValue(t, admin, "shield_connections_open") == 2 })

	c3, r3 := dial()
	resp, body := connRequest(t, c3, r3, "/limit/refused")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" || !resp.Close ||
		!strings.Contains(body, "connection limit") {
		t.Fatalf("third connection: %d %v %q, want 503 with Retry-After: 1 and Connection: close", resp.StatusCode, resp.Header, body)
	}
	if _, err := r3.ReadByte(); err == nil {
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

	_ = c1.Close()
	eventually(t, "one connection open", func() bool { return adminValue(t, admin, "shield_connections_open") == 1 })
	c4, r4 := dial()
	if resp, _ := connRequest(t, c4, r4, "/limit/after"); resp.StatusCode != http.StatusOK {
		t.Fatalf("a connection after one closed: status %d", resp.StatusCode)
	}
	if resp, _ := connRequest(t, c2, r2, "/limit/held"); resp.StatusCode != http.StatusOK {
		t.Fatalf("the held connection's second request: status %d", resp.StatusCode)
	}
	if got := adminValue(t, admin, "shield_connections_refused_total"); got != 1 {
		t.Fatalf("shield_connections_refused_total = %v after, want 1", got)
	}

	// A reload moves the limit: with c2 and c4 held, a third connection
	// is served once the file says 3.
	if err := os.WriteFile(path, []byte(conf(3)), 0o600); err != nil {
		t.Fatal(err)
	}
	sh.signal(t, syscall.SIGHUP)
	eventually(t, "the reloaded limit", func() bool { return adminValue(t, admin, "shield_connections_max") == 3 })
	c5, r5 := dial()
	if resp, _ := connRequest(t, c5, r5, "/limit/reloaded"); resp.StatusCode != http.StatusOK {
		t.Fatalf("a third connection under the reloaded limit: status %d", resp.StatusCode)
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
