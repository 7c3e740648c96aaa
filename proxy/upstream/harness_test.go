package upstream

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"
	"go.uber.org/goleak"

	"github.com/shield-proxy/shield/config"
)

// TestMain fails the package's tests if goroutines outlive them (a health
// check that did not stop, above all). The ignored functions are
// fasthttp's own background goroutines, which have no stop method (see
// proxy/main_test.go).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*TCPDialer).tcpAddrsClean"),
	)
}

// configYAML is a configuration with the origins block given (indented
// under origins:) and one route per origin.
func configYAML(origins string, names ...string) string {
	var b strings.Builder
	b.WriteString("listen: 127.0.0.1:0\nadmin: {listen: \"off\"}\norigins:\n")
	b.WriteString(origins)
	b.WriteString("routes:\n")
	for i, n := range names {
		fmt.Fprintf(&b, "  - name: r%d\n    hosts: [h%d.example.com]\n    origin: %s\n", i, i, n)
	}
	return b.String()
}

// parse parses a configuration whose origins block is origins, one route
// per name in names.
func parse(t testing.TB, origins string, names ...string) *config.Config {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(configYAML(origins, names...)), nil)
	if err != nil {
		t.Fatalf("config.Parse: %v\n%s", err, configYAML(origins, names...))
	}
	return cfg
}

// oneOrigin is the origins block of origin o with the given servers and
// extra settings (YAML lines, each indented by four spaces).
func oneOrigin(servers []string, extra ...string) string {
	var b strings.Builder
	b.WriteString("  o:\n    servers: [")
	for i, s := range servers {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q", s)
	}
	b.WriteString("]\n")
	for _, e := range extra {
		b.WriteString("    " + e + "\n")
	}
	return b.String()
}

// testRegistry is a registry with its metric set and log.
type testRegistry struct {
	*Registry
	set *metrics.Set
	log *syncBuffer
}

// newRegistry returns a registry whose health checks stop, and whose
// idle connections close, when the test ends.
func newRegistry(t testing.TB) *testRegistry {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	set := metrics.NewSet()
	log := &syncBuffer{}
	r := NewRegistry(ctx, set, slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug})))
	tr := &testRegistry{Registry: r, set: set, log: log}
	t.Cleanup(func() {
		cancel()
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, st := range r.states {
			if st.servers != nil {
				(&Origin{servers: st.servers}).CloseIdleConnections()
			}
		}
	})
	return tr
}

// update applies cfg and returns origin o.
func (r *testRegistry) update(t testing.TB, cfg *config.Config) *Origin {
	t.Helper()
	if err := Check(cfg.Origins); err != nil {
		t.Fatalf("Check: %v", err)
	}
	os, err := r.Update(cfg)
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	return os["o"]
}

// scrape returns the registry's metrics in the Prometheus text format.
func (r *testRegistry) scrape() string {
	var b bytes.Buffer
	r.set.WritePrometheus(&b)
	r.WriteMetrics(&b)
	return b.String()
}

// syncBuffer is a bytes.Buffer safe for concurrent writes (log lines from
// health checks and dialers).
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testOrigin is an HTTP server on 127.0.0.1 answering with status (200
// until set), counting requests and recording the last Host.
type testOrigin struct {
	srv    *httptest.Server
	status atomic.Int32
	hits   atomic.Int64
	host   atomic.Value // string
}

func newTestOrigin(t testing.TB) *testOrigin {
	t.Helper()
	o := &testOrigin{}
	o.status.Store(200)
	o.srv = httptest.NewServer(o.handler())
	t.Cleanup(o.srv.Close)
	return o
}

func (o *testOrigin) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.hits.Add(1)
		o.host.Store(r.Host)
		w.WriteHeader(int(o.status.Load()))
		_, _ = w.Write([]byte("body of " + r.URL.Path))
	})
}

func (o *testOrigin) addr() string { return o.srv.Listener.Addr().String() }

// closedAddr is a 127.0.0.1 address nothing listens on: connections are
// refused.
func closedAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// call makes one GET of path through o and returns the status (0 on
// failure), the failure and the body; the lease is ended.
func call(t testing.TB, o *Origin, path string) (int, Failure, string) {
	t.Helper()
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(path)
	req.Header.SetHost("client.example.com")
	l, ok, f := o.Call(nil, 0, req, resp)
	defer l.End()
	if !ok {
		return 0, f, ""
	}
	body, err := readAll(resp)
	if err != nil {
		t.Fatalf("reading the body: %v", err)
	}
	return resp.StatusCode(), f, body
}

// readAll reads a streamed response body.
func readAll(resp *fasthttp.Response) (string, error) {
	var b bytes.Buffer
	if s := resp.BodyStream(); s != nil {
		if _, err := b.ReadFrom(s); err != nil {
			return "", err
		}
		return b.String(), resp.CloseBodyStream()
	}
	return string(resp.Body()), nil
}

// waitUntil polls cond for up to 5s.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
