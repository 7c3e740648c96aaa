package e2e

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/internal/testenv"
)

// h2Env is a shield whose public listener speaks HTTP/2: over TLS (ALPN
// h2, server.http2's default) or cleartext with prior knowledge
// (server.h2c), in front of a demo origin.
type h2Env struct {
	*env
	tls    bool
	caFile string // the CA of the listener's certificate (TLS only)
}

func newH2Env(t *testing.T, useTLS bool, extra ...confOpt) *h2Env {
	t.Helper()
	h := &h2Env{tls: useTLS}
	opt := with(func(c *config.Config) { c.Server.H2C = true })
	if useTLS {
		ca := newTestCA(t, "h2")
		cert, key := ca.issue(t, "shield", "127.0.0.1")
		h.caFile = ca.File
		opt = with(func(c *config.Config) { c.Server.TLS = &config.ListenerTLS{CertFile: cert, KeyFile: key} })
	}
	h.env = newEnv(t, func(c *shieldConfig) { c.Extra = append(append(c.Extra, opt), extra...) })
	return h
}

func (h *h2Env) base() string {
	if h.tls {
		return "https://" + h.cfg.Listen
	}
	return "http://" + h.cfg.Listen
}

// client is a Go client that speaks HTTP/2 only: every request it sends
// multiplexes over one connection.
func (h *h2Env) client() *http.Client {
	var p http.Protocols
	tr := &http.Transport{DisableCompression: true, Protocols: &p}
	if h.tls {
		p.SetHTTP2(true)
		pool := x509.NewCertPool()
		pem, err := os.ReadFile(h.caFile)
		if err != nil {
			h.t.Fatal(err)
		}
		pool.AppendCertsFromPEM(pem)
		tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	} else {
		p.SetUnencryptedHTTP2(true)
	}
	h.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

// h2CurlAnswer is one answer curl printed with -i: interim heads and the
// final one, lower-cased field names.
type h2CurlAnswer struct {
	heads  []string // status lines, "HTTP/2 103", "HTTP/2 200"
	status int
	header http.Header // the final head's fields
	links  []string    // Link fields of 103 heads
	body   string
}

// curl runs curl as a user would, with HTTP/2 over TLS (--http2, the
// test CA) or with prior knowledge (--http2-prior-knowledge); args come
// before the URL. HTTP/1.1 when http1 is set.
func (h *h2Env) curl(path string, http1 bool, args ...string) h2CurlAnswer {
	h.t.Helper()
	cmd := []string{"-sS", "-i", "--max-time", "10"}
	switch {
	case http1:
		cmd = append(cmd, "--http1.1")
	case h.tls:
		cmd = append(cmd, "--http2")
	default:
		cmd = append(cmd, "--http2-prior-knowledge")
	}
	if h.tls {
		cmd = append(cmd, "--cacert", h.caFile)
	}
	cmd = append(append(cmd, args...), h.base()+path)
	out, err := exec.Command("curl", cmd...).Output()
	if err != nil {
		h.t.Fatalf("curl %.300s: %v\n%.2000s", strings.Join(cmd, " "), err, out)
	}
	return parseH2Curl(h.t, string(out))
}

func parseH2Curl(t *testing.T, out string) h2CurlAnswer {
	t.Helper()
	var a h2CurlAnswer
	rest := out
	for {
		head, after, ok := strings.Cut(rest, "\r\n\r\n")
		if !ok {
			t.Fatalf("curl output without a complete head:\n%s", out)
		}
		lines := strings.Split(head, "\r\n")
		a.heads = append(a.heads, strings.TrimSpace(lines[0]))
		f := strings.Fields(lines[0])
		if len(f) < 2 {
			t.Fatalf("curl status line %q", lines[0])
		}
		code, _ := strconv.Atoi(f[1])
		hdr := http.Header{}
		for _, l := range lines[1:] {
			k, v, _ := strings.Cut(l, ":")
			hdr.Add(k, strings.TrimSpace(v))
		}
		rest = after
		if code >= 200 {
			a.status, a.header, a.body = code, hdr, rest
			return a
		}
		a.links = append(a.links, hdr.Values("Link")...)
	}
}

// TestHTTP2RequestPath: curl over HTTP/2 — TLS with ALPN and cleartext
// with prior knowledge — gets what HTTP/1.1 gets from the same request
// path: a miss stored then a hit (Cache-Status), shared with HTTP/1.1
// clients; tenant admission (429); X-Forwarded-Proto and -For for the origin; the origin's 103
// Early Hints as a 103 on the stream; a Range answered 206 from the
// cache; HEAD; a purge that makes the next request a miss; a request body
// passed on and one over max_body_size refused 413; an object above
// max_object_size streamed; and concurrent streams of one connection
// coalesced into one origin fetch.
func TestHTTP2RequestPath(t *testing.T) {
	for _, useTLS := range []bool{true, false} {
		name := "h2c"
		if useTLS {
			name = "tls"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := newH2Env(t, useTLS, with(func(c *config.Config) { c.Server.MaxBodySize = 64 * config.KiB }), yamlSection(`tenants:
  identify: { header: X-Tenant }
  default: { rate: 10000, burst: 10000, max_concurrency: 256 }
  classes:
    starved: { rate: 1, burst: 1, max_concurrency: 4 }
`))
			proto, scheme := "HTTP/2", "http"
			if useTLS {
				scheme = "https"
			}

			a := h.curl("/h2/a", false)
			if a.heads[0] != proto+" 200" || !strings.Contains(a.header.Get("Cache-Status"), "fwd=miss") ||
				!strings.Contains(a.header.Get("Cache-Status"), "stored") {
				t.Fatalf("first GET over %s: %v Cache-Status %q, want 200 and a stored miss", proto, a.heads, a.header.Get("Cache-Status"))
			}
			b := h.curl("/h2/a", false)
			if !strings.HasPrefix(b.header.Get("Cache-Status"), "shield; hit") || b.body != a.body {
				t.Fatalf("second GET over HTTP/2: Cache-Status %q, same body %v; want a hit with the stored body", b.header.Get("Cache-Status"), b.body == a.body)
			}
			if h1 := h.curl("/h2/a", true); h1.heads[0] != "HTTP/1.1 200 OK" || !strings.HasPrefix(h1.header.Get("Cache-Status"), "shield; hit") || h1.body != a.body {
				t.Fatalf("HTTP/1.1 after HTTP/2: %v Cache-Status %q; want the same stored answer", h1.heads, h1.header.Get("Cache-Status"))
			}

			fwd := h.curl(target("/h2/fwd", "vary", "X-Forwarded-Proto,X-Forwarded-For"), false)
			var echo struct{ Vary map[string]string }
			if err := json.Unmarshal([]byte(fwd.body), &echo); err != nil {
				t.Fatalf("origin echo %q: %v", fwd.body, err)
			}
			if echo.Vary["X-Forwarded-Proto"] != scheme || echo.Vary["X-Forwarded-For"] != "127.0.0.1" {
				t.Errorf("origin saw X-Forwarded-Proto %q, X-Forwarded-For %q; want %q, 127.0.0.1", echo.Vary["X-Forwarded-Proto"], echo.Vary["X-Forwarded-For"], scheme)
			}

			hints := h.curl(target("/h2/hinted", "hints", "1"), false)
			if len(hints.heads) != 2 || hints.heads[0] != proto+" 103" || len(hints.links) != 1 ||
				hints.links[0] != "</style.css>; rel=preload; as=style" || hints.status != 200 {
				t.Errorf("Early Hints over HTTP/2: heads %v links %q, want a 103 with the origin's Link, then 200", hints.heads, hints.links)
			}

			r := h.curl("/h2/a", false, "-H", "Range: bytes=0-9")
			if r.status != 206 || r.body != a.body[:10] || r.header.Get("Content-Range") != fmt.Sprintf("bytes 0-9/%d", len(a.body)) ||
				!strings.HasPrefix(r.header.Get("Cache-Status"), "shield; hit") {
				t.Errorf("Range over HTTP/2: %d %q Content-Range %q Cache-Status %q", r.status, r.body, r.header.Get("Content-Range"), r.header.Get("Cache-Status"))
			}
			if hd := h.curl("/h2/a", false, "-I"); hd.status != 200 || hd.body != "" || hd.header.Get("Content-Length") != strconv.Itoa(len(a.body)) {
				t.Errorf("HEAD over HTTP/2: %d Content-Length %q body %q; want 200, %d, none", hd.status, hd.header.Get("Content-Length"), hd.body, len(a.body))
			}

			if res, err := doHTTP(newClient(), http.MethodPost, "http://"+h.cfg.Admin+"/purge?url="+h.base()+"/h2/a"); err != nil || res.status != 200 {
				t.Fatalf("purge: %v %v", res, err)
			}
			if p := h.curl("/h2/a", false); !strings.Contains(p.header.Get("Cache-Status"), "fwd=miss") || p.body == a.body {
				t.Errorf("after the purge: Cache-Status %q (same body %v), want a new fetch", p.header.Get("Cache-Status"), p.body == a.body)
			}

			// Tenant admission: the starved tenant's second request in a
			// second is refused, on HTTP/2 as on HTTP/1.1.
			h.curl("/h2/t1", false, "-H", "X-Tenant: starved")
			if rej := h.curl("/h2/t2", false, "-H", "X-Tenant: starved"); rej.status != 429 || rej.header.Get("Retry-After") == "" ||
				!strings.Contains(rej.header.Get("Cache-Status"), "detail=rejected") {
				t.Errorf("over its tenant rate over HTTP/2: %d Retry-After %q Cache-Status %q, want 429", rej.status, rej.header.Get("Retry-After"), rej.header.Get("Cache-Status"))
			}

			post := h.curl("/h2/post", false, "--data-binary", "hello")
			if post.status != 200 || !strings.Contains(post.header.Get("Cache-Status"), "fwd=method") {
				t.Errorf("POST over HTTP/2: %d Cache-Status %q", post.status, post.header.Get("Cache-Status"))
			}
			// curl reports the stream reset that follows a 413 sent before
			// the body was read (exit 92); Go's client returns the answer.
			big, err := h.client().Post(h.base()+"/h2/post", "text/plain", strings.NewReader(strings.Repeat("x", 100<<10)))
			if err != nil {
				t.Fatalf("POST of 100KiB over HTTP/2: %v", err)
			}
			_ = big.Body.Close()
			if big.StatusCode != 413 || big.ProtoMajor != 2 {
				t.Errorf("POST of 100KiB over HTTP/2 (max_body_size 64KiB): %s %d, want HTTP/2 413", big.Proto, big.StatusCode)
			}
			large := h.curl(target("/h2/large", "size", strconv.Itoa(3<<20)), false)
			if large.status != 200 || len(large.body) != 3<<20 || !strings.Contains(large.header.Get("Cache-Status"), "too-large") {
				t.Errorf("3MiB object over HTTP/2: %d, %d bytes, Cache-Status %q; want it streamed whole, uncached", large.status, len(large.body), large.header.Get("Cache-Status"))
			}

			// Twenty streams of one connection ask for a slow URL at once:
			// one origin fetch, every stream answered with it.
			c := h.client()
			u := h.base() + target("/h2/slow", "delay", "300")
			var wg sync.WaitGroup
			bodies := make([]string, 20)
			for i := range bodies {
				wg.Go(func() {
					res, err := c.Get(u)
					if err != nil {
						t.Errorf("stream %d: %v", i, err)
						return
					}
					var buf bytes.Buffer
					_, _ = buf.ReadFrom(res.Body)
					_ = res.Body.Close()
					if res.ProtoMajor != 2 || res.StatusCode != 200 {
						t.Errorf("stream %d: %s %d, want HTTP/2 200", i, res.Proto, res.StatusCode)
					}
					bodies[i] = buf.String()
				})
			}
			wg.Wait()
			for i, body := range bodies {
				if body != bodies[0] {
					t.Errorf("stream %d got %q, stream 0 %q: one fetch should answer all", i, body, bodies[0])
				}
			}
			if n := originCount(t, h.env, "/h2/slow"); n != 1 {
				t.Errorf("origin fetched /h2/slow %d times for 20 concurrent streams, want 1 (coalesced)", n)
			}
		})
	}
}

// originCount is how many requests the demo origin answered for path.
func originCount(t *testing.T, e *env, path string) int {
	t.Helper()
	r, err := doHTTP(newClient(), http.MethodGet, "http://"+e.originAddr+"/__origin/stats")
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		ByPath map[string]int `json:"by_path"`
	}
	if err := json.Unmarshal(r.body, &st); err != nil {
		t.Fatalf("origin stats %q: %v", r.body, err)
	}
	return st.ByPath[path]
}

// h2loadBin finds h2load (Debian package nghttp2-client; .ci/run
// installs it).
func h2loadBin(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("h2load")
	if err != nil {
		testenv.Missing(t, "h2load not installed: apt-get install nghttp2-client (.ci/run does)")
	}
	return p
}

var (
	h2loadDone   = regexp.MustCompile(`requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored`)
	h2loadStatus = regexp.MustCompile(`status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx`)
	h2loadRate   = regexp.MustCompile(`finished in ([^,]+), ([\d.]+) req/s`)
)

// TestHTTP2Load: h2load, 10 connections with up to 100 streams each and
// 5000 requests of a cached URL, over TLS and over h2c: every request
// answered 2xx.
func TestHTTP2Load(t *testing.T) {
	bin := h2loadBin(t)
	for _, useTLS := range []bool{true, false} {
		name := "h2c"
		if useTLS {
			name = "tls"
		}
		t.Run(name, func(t *testing.T) {
			h := newH2Env(t, useTLS)
			if a := h.curl("/load", false); a.status != 200 {
				t.Fatalf("warm-up: %d", a.status)
			}
			const n = 5000
			out, err := exec.Command(bin, "-n", strconv.Itoa(n), "-c", "10", "-m", "100", "-t", "1", h.base()+"/load").CombinedOutput()
			if err != nil {
				t.Fatalf("h2load: %v\n%s", err, out)
			}
			done, status, rate := h2loadDone.FindStringSubmatch(string(out)), h2loadStatus.FindStringSubmatch(string(out)), h2loadRate.FindStringSubmatch(string(out))
			if done == nil || status == nil || rate == nil {
				t.Fatalf("h2load output not understood:\n%s", out)
			}
			t.Logf("h2load over %s, -n %d -c 10 -m 100: %s, %s req/s; %s", name, n, rate[1], rate[2], status[0])
			if done[4] != strconv.Itoa(n) || status[1] != strconv.Itoa(n) {
				t.Errorf("h2load: %s; %s — want all %d succeeded and 2xx\n%s", done[0], status[0], n, out)
			}
			if c := originCount(t, h.env, "/load"); c != 1 {
				t.Errorf("origin answered /load %d times, want 1 (the rest are hits)", c)
			}
		})
	}
}

// h2specBin is h2spec, built by `make h2spec` from the pinned tools
// module tools/h2spec: $H2SPEC_BIN, which `make test-e2e` sets (the
// cached binary's name carries a digest of the tools module).
func h2specBin(t *testing.T) string {
	t.Helper()
	path := os.Getenv("H2SPEC_BIN")
	if path == "" {
		testenv.Missing(t, "H2SPEC_BIN is not set: run the e2e suite with `make test-e2e`, or set it to the binary `make h2spec` builds")
		return ""
	}
	if fi, err := os.Stat(path); err != nil || fi.IsDir() {
		testenv.Missing(t, "h2spec not found at %s (H2SPEC_BIN): run `make h2spec`", path)
	}
	return path
}

// TestH2Spec runs h2spec (every generic and HTTP/2 case) against shield
// over TLS and over h2c: no failure. Three cases pass only through
// shield's own work around Go's HTTP/2 server (proxy/listener's read
// filter, and the h2c sort of a first line): 6.5.3 (a setting named
// twice in one SETTINGS frame), 8.1.2.2 (connection-specific fields, TE
// other than trailers) and, over h2c, 3.5 (an invalid preface).
func TestH2Spec(t *testing.T) {
	bin := h2specBin(t)
	for _, useTLS := range []bool{true, false} {
		name := "h2c"
		if useTLS {
			name = "tls"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := newH2Env(t, useTLS)
			host, port, _ := net.SplitHostPort(h.cfg.Listen)
			report := filepath.Join(t.TempDir(), "h2spec.xml")
			args := []string{"-h", host, "-p", port, "-j", report}
			if useTLS {
				args = append(args, "-t", "-k")
			}
			out, _ := exec.Command(bin, args...).CombinedOutput() // exits 1 on any failure
			b, err := os.ReadFile(report)
			if err != nil {
				t.Fatalf("h2spec wrote no report: %v\n%s", err, out)
			}
			var suites struct {
				Suites []struct {
					Package string `xml:"package,attr"`
					Cases   []struct {
						Name    string    `xml:"classname,attr"`
						Failure *struct{} `xml:"failure"`
						Error   *struct{} `xml:"error"`
						Skipped *struct{} `xml:"skipped"`
					} `xml:"testcase"`
				} `xml:"testsuite"`
			}
			if err := xml.Unmarshal(b, &suites); err != nil {
				t.Fatalf("h2spec report: %v", err)
			}
			total, passed := 0, 0
			for _, s := range suites.Suites {
				for _, c := range s.Cases {
					total++
					id := s.Package + ": " + c.Name
					switch {
					case c.Failure == nil && c.Error == nil && c.Skipped == nil:
						passed++
					default:
						t.Errorf("h2spec over %s: %s failed", name, id)
					}
				}
			}
			t.Logf("h2spec over %s: %d cases, %d passed", name, total, passed)
			if total < 140 {
				t.Errorf("h2spec ran %d cases, want the full suite (145)\n%s", total, out)
			}
		})
	}
}

// TestHTTP2Drain: SIGTERM with an HTTP/2 request in flight — the stream
// is answered (the connection gets a GOAWAY, not a reset), then shield
// exits 0.
func TestHTTP2Drain(t *testing.T) {
	t.Parallel()
	h := newH2Env(t, true)
	c := h.client()
	type answer struct {
		proto  string
		status int
		err    error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := c.Get(h.base() + target("/h2/drain", "delay", "800"))
		if err != nil {
			done <- answer{err: err}
			return
		}
		_ = res.Body.Close()
		done <- answer{res.Proto, res.StatusCode, nil}
	}()
	eventually(t, "the HTTP/2 request to reach the origin", func() bool { return h.stats().InFlight == 1 })
	h.shield.terminate(t)
	if a := <-done; a.err != nil || a.status != 200 || a.proto != "HTTP/2.0" {
		t.Fatalf("HTTP/2 request in flight during SIGTERM: %s %d %v, want HTTP/2.0 200", a.proto, a.status, a.err)
	}
	if code := h.shield.wait(t); code != 0 {
		t.Errorf("shield exited %d after SIGTERM, want 0", code)
	}
}

// TestHTTP2Off: server.http2: false keeps the TLS listener HTTP/1.1
// only (curl --http2 falls back), and a plain listener without
// server.h2c takes no prior-knowledge HTTP/2.
func TestHTTP2Off(t *testing.T) {
	t.Parallel()
	// exactly: a false set before defaults would read as "absent".
	h := newH2Env(t, true, exactly(func(c *config.Config) { c.Server.HTTP2 = false }))
	if a := h.curl("/off", false); a.heads[0] != "HTTP/1.1 200 OK" {
		t.Errorf("curl --http2 with server.http2: false: %v, want HTTP/1.1", a.heads)
	}
	plain := newEnv(t)
	out, err := exec.Command("curl", "-sS", "-o", "/dev/null", "--max-time", "5", "--http2-prior-knowledge", "http://"+plain.cfg.Listen+"/off").CombinedOutput()
	if err == nil {
		t.Errorf("prior-knowledge HTTP/2 without server.h2c succeeded (%s), want it refused", out)
	}
}
