package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// testOrigin starts o behind a real HTTP server (hijack, flush and
// cancellation behave as in production) and stops both at cleanup.
func testOrigin(t *testing.T) (*origin, *httptest.Server) {
	t.Helper()
	o := newOrigin(slog.New(slog.DiscardHandler), time.Now())
	srv := httptest.NewServer(o)
	t.Cleanup(func() {
		o.stop()
		srv.Close()
	})
	return o, srv
}

type reply struct {
	status int
	header http.Header
	body   []byte
	te     []string // transfer encodings seen by the client
}

func do(t *testing.T, srv *httptest.Server, method, target string, hdr map[string]string) reply {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+target, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, target, err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: body, te: resp.TransferEncoding}
}

func get(t *testing.T, srv *httptest.Server, target string) reply {
	t.Helper()
	return do(t, srv, http.MethodGet, target, nil)
}

func decode(t *testing.T, b []byte) resource {
	t.Helper()
	var r resource
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("body %.200q is not the JSON resource: %v", b, err)
	}
	return r
}

func statsOf(t *testing.T, srv *httptest.Server) stats {
	t.Helper()
	r := get(t, srv, "/__origin/stats")
	if r.status != http.StatusOK {
		t.Fatalf("GET /__origin/stats = %d, want 200", r.status)
	}
	var s stats
	if err := json.Unmarshal(r.body, &s); err != nil {
		t.Fatalf("stats %q: %v", r.body, err)
	}
	return s
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestHeaders(t *testing.T) {
	_, srv := testOrigin(t)
	tests := []struct {
		name   string
		target string
		header string
		want   string // "" = header absent
	}{
		{"default cache-control", "/h", "Cache-Control", defaultCacheControl},
		{"cc sets cache-control", "/h?cc=private,+max-age=5", "Cache-Control", "private, max-age=5"},
		{"empty cc drops cache-control", "/h?cc=", "Cache-Control", ""},
		{"vary header", "/h?vary=accept-language", "Vary", "Accept-Language"},
		{"vary list", "/h?vary=Accept-Language,+X-Tenant", "Vary", "Accept-Language, X-Tenant"},
		{"no vary by default", "/h", "Vary", ""},
		{"etag version 1", "/h?etag=1", "ETag", `"v1"`},
		{"no etag by default", "/h", "ETag", ""},
		{"no cookie by default", "/h", "Set-Cookie", ""},
		{"json body", "/h", "Content-Type", "application/json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := get(t, srv, tt.target)
			if r.status != http.StatusOK {
				t.Fatalf("GET %s = %d, want 200", tt.target, r.status)
			}
			if got := r.header.Get(tt.header); got != tt.want {
				t.Errorf("GET %s: %s = %q, want %q", tt.target, tt.header, got, tt.want)
			}
		})
	}
}

func TestBodyDiffersAndCounts(t *testing.T) {
	o, srv := testOrigin(t)
	a := get(t, srv, "/same?x=1")
	b := get(t, srv, "/same?x=1")
	c := get(t, srv, "/other")
	if string(a.body) == string(b.body) {
		t.Fatalf("two fetches of /same?x=1 returned the same body %q", a.body)
	}
	ra, rb, rc := decode(t, a.body), decode(t, b.body), decode(t, c.body)
	if ra.N != 1 || rb.N != 2 || rc.N != 1 {
		t.Errorf("n = %d, %d, %d; want 1, 2, 1 (per-path counts)", ra.N, rb.N, rc.N)
	}
	if ra.Path != "/same" || ra.Query != "x=1" {
		t.Errorf("path, query = %q, %q; want /same, x=1", ra.Path, ra.Query)
	}
	if _, err := time.Parse(time.RFC3339Nano, ra.Time); err != nil {
		t.Errorf("time %q: %v", ra.Time, err)
	}
	s := statsOf(t, srv)
	if s.Total != 3 || s.ByPath["/same"] != 2 || s.ByPath["/other"] != 1 {
		t.Errorf("stats = %+v; want total 3, /same 2, /other 1", s)
	}
	if s.MaxInFlight != 1 || s.InFlight != 0 {
		t.Errorf("in_flight, max_in_flight = %d, %d; want 0, 1", s.InFlight, s.MaxInFlight)
	}

	r := do(t, srv, http.MethodPost, "/__origin/reset", nil)
	if r.status != http.StatusOK {
		t.Fatalf("POST /__origin/reset = %d", r.status)
	}
	if s := statsOf(t, srv); s.Total != 0 || len(s.ByPath) != 0 || s.MaxInFlight != 0 {
		t.Errorf("stats after reset = %+v, want zeros", s)
	}
	if n := decode(t, get(t, srv, "/same").body).N; n != 1 {
		t.Errorf("n after reset = %d, want 1", n)
	}
	if s := o.snapshot(); s.Total != 1 {
		t.Errorf("control requests were counted: total = %d, want 1", s.Total)
	}
}

func TestSize(t *testing.T) {
	_, srv := testOrigin(t)
	for _, size := range []int{0, 1, 50, 150, 151, 1000, 65536, 2_000_000} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			for _, chunked := range []bool{false, true} {
				target := "/pad?size=" + strconv.Itoa(size)
				if chunked {
					target += "&chunked=1"
				}
				r := get(t, srv, target)
				if len(r.body) != size {
					t.Fatalf("GET %s: body is %d bytes, want %d", target, len(r.body), size)
				}
				if !chunked && r.header.Get("Content-Length") != strconv.Itoa(size) {
					t.Errorf("GET %s: Content-Length = %q", target, r.header.Get("Content-Length"))
				}
				var res resource
				if json.Unmarshal(r.body, &res) != nil {
					// Only an envelope cut short may be invalid JSON.
					if size >= 200 {
						t.Fatalf("GET %s: %d-byte body is not JSON", target, size)
					}
					continue
				}
				if res.Pad == nil {
					t.Fatalf("GET %s: no pad field", target)
				}
				for i := 0; i < len(*res.Pad); i++ {
					if (*res.Pad)[i] != padAlphabet[i%61] {
						t.Fatalf("GET %s: pad[%d] = %q, want %q", target, i, (*res.Pad)[i], padAlphabet[i%61])
					}
				}
			}
		})
	}
}

func TestChunked(t *testing.T) {
	_, srv := testOrigin(t)
	r := get(t, srv, "/c?chunked=1&size=10000")
	if len(r.te) != 1 || r.te[0] != "chunked" {
		t.Errorf("Transfer-Encoding = %v, want [chunked]", r.te)
	}
	if cl := r.header.Get("Content-Length"); cl != "" {
		t.Errorf("Content-Length = %q, want none", cl)
	}
	plain := get(t, srv, "/c?size=10000")
	if len(plain.te) != 0 {
		t.Errorf("without chunked=1: Transfer-Encoding = %v, want none", plain.te)
	}
}

// rate= paces the body: 300,000 bytes at 1,000,000 bytes/s take about
// 0.3 s, and arrive whole, with their Content-Length.
func TestRate(t *testing.T) {
	_, srv := testOrigin(t)
	start := time.Now()
	r := get(t, srv, "/r?size=300000&rate=1000000")
	if el := time.Since(start); el < 250*time.Millisecond {
		t.Errorf("rate=1000000: 300000 bytes in %v, want about 0.3s", el)
	}
	if len(r.body) != 300000 || r.header.Get("Content-Length") != "300000" {
		t.Errorf("rate: %d bytes, Content-Length %q", len(r.body), r.header.Get("Content-Length"))
	}
	if sent, err := time.Parse(time.RFC3339Nano, r.header.Get("X-Origin-First-Byte")); err != nil || sent.Before(start) {
		t.Errorf("X-Origin-First-Byte %q (%v), want the time sending began", r.header.Get("X-Origin-First-Byte"), err)
	}
	if sum := sha256.Sum256(r.body); r.header.Get("X-Origin-Body-Sha256") != hex.EncodeToString(sum[:]) {
		t.Errorf("X-Origin-Body-Sha256 %q, want the body's %x", r.header.Get("X-Origin-Body-Sha256"), sum)
	}
	if r := get(t, srv, "/r?rate=0"); r.status != http.StatusBadRequest {
		t.Errorf("rate=0: %d, want 400", r.status)
	}
}

func TestVaryEcho(t *testing.T) {
	_, srv := testOrigin(t)
	r := do(t, srv, http.MethodGet, "/v?vary=Accept-Language,X-Absent", map[string]string{"Accept-Language": "fr-CH"})
	got := decode(t, r.body).Vary
	if got["Accept-Language"] != "fr-CH" {
		t.Errorf("vary[Accept-Language] = %q, want fr-CH", got["Accept-Language"])
	}
	if v, ok := got["X-Absent"]; !ok || v != "" {
		t.Errorf("vary[X-Absent] = %q, %v; want empty, present", v, ok)
	}
}

func TestSetCookie(t *testing.T) {
	_, srv := testOrigin(t)
	a := get(t, srv, "/s?setcookie=1").header.Get("Set-Cookie")
	b := get(t, srv, "/s?setcookie=1").header.Get("Set-Cookie")
	if !strings.HasPrefix(a, "sid=") || a == b {
		t.Errorf("Set-Cookie = %q then %q; want distinct sid= cookies", a, b)
	}
}

func TestExpires(t *testing.T) {
	_, srv := testOrigin(t)
	r := get(t, srv, "/e?cc=&expires=60")
	date, err1 := http.ParseTime(r.header.Get("Date"))
	exp, err2 := http.ParseTime(r.header.Get("Expires"))
	if err1 != nil || err2 != nil {
		t.Fatalf("Date %q, Expires %q: %v %v", r.header.Get("Date"), r.header.Get("Expires"), err1, err2)
	}
	if d := exp.Sub(date); d != time.Minute {
		t.Errorf("Expires - Date = %v, want 1m", d)
	}
	if cc := r.header.Get("Cache-Control"); cc != "" {
		t.Errorf("Cache-Control = %q, want none", cc)
	}
}

func TestStatus(t *testing.T) {
	_, srv := testOrigin(t)
	tests := []struct {
		target   string
		want     int
		wantBody bool
	}{
		{"/s?status=404", 404, true},
		{"/s?status=503", 503, true},
		{"/s?status=204", 204, false},
		{"/s?status=99", 400, true},
		{"/s?status=abc", 400, true},
		{"/s?delay=-1", 400, true},
		{"/s?size=-5", 400, true},
		{"/s?vary=Bad%20Name", 400, true},
		{"/s?expires=soon", 400, true},
	}
	for _, tt := range tests {
		t.Run(tt.target, func(t *testing.T) {
			r := get(t, srv, tt.target)
			if r.status != tt.want {
				t.Errorf("GET %s = %d, want %d", tt.target, r.status, tt.want)
			}
			if (len(r.body) > 0) != tt.wantBody {
				t.Errorf("GET %s: body %q, want body: %v", tt.target, r.body, tt.wantBody)
			}
		})
	}
}

func TestConditional(t *testing.T) {
	_, srv := testOrigin(t)
	first := get(t, srv, "/c?etag=1&lm=1")
	etag, lm := first.header.Get("ETag"), first.header.Get("Last-Modified")
	if etag == "" || lm == "" {
		t.Fatalf("ETag %q, Last-Modified %q; want both", etag, lm)
	}
	if again := get(t, srv, "/c?etag=1&lm=1"); again.header.Get("ETag") != etag || again.header.Get("Last-Modified") != lm {
		t.Fatalf("validators changed without bump: %q %q -> %q %q", etag, lm,
			again.header.Get("ETag"), again.header.Get("Last-Modified"))
	}

	tests := []struct {
		name   string
		target string
		hdr    map[string]string
		want   int
	}{
		{"matching etag", "/c?etag=1", map[string]string{"If-None-Match": etag}, 304},
		{"weak matching etag", "/c?etag=1", map[string]string{"If-None-Match": `"zz", W/` + etag}, 304},
		{"star", "/c?etag=1", map[string]string{"If-None-Match": "*"}, 304},
		{"other etag", "/c?etag=1", map[string]string{"If-None-Match": `"v9"`}, 200},
		{"no etag sent", "/c", map[string]string{"If-None-Match": etag}, 200},
		{"ims equal", "/c?lm=1", map[string]string{"If-Modified-Since": lm}, 304},
		{"ims earlier", "/c?lm=1", map[string]string{"If-Modified-Since": "Mon, 02 Jan 2006 15:04:05 GMT"}, 200},
		{"inm wins over ims", "/c?etag=1&lm=1", map[string]string{"If-None-Match": `"v9"`, "If-Modified-Since": lm}, 200},
		{"status not 200", "/c?etag=1&status=404", map[string]string{"If-None-Match": etag}, 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := statsOf(t, srv).NotModified
			r := do(t, srv, http.MethodGet, tt.target, tt.hdr)
			if r.status != tt.want {
				t.Fatalf("GET %s %v = %d, want %d", tt.target, tt.hdr, r.status, tt.want)
			}
			wantNM := before
			if tt.want == 304 {
				wantNM++
				if len(r.body) != 0 {
					t.Errorf("304 with body %q", r.body)
				}
			}
			if got := statsOf(t, srv).NotModified; got != wantNM {
				t.Errorf("not_modified = %d, want %d", got, wantNM)
			}
		})
	}

	// A bump changes both validators; the old ones no longer match.
	b := do(t, srv, http.MethodPost, "/__origin/bump?path=/c", nil)
	if b.status != http.StatusOK {
		t.Fatalf("bump = %d %s", b.status, b.body)
	}
	r := do(t, srv, http.MethodGet, "/c?etag=1&lm=1", map[string]string{"If-None-Match": etag})
	if r.status != http.StatusOK || r.header.Get("ETag") == etag {
		t.Errorf("after bump: %d ETag %q; want 200 with a new ETag", r.status, r.header.Get("ETag"))
	}
	r = do(t, srv, http.MethodGet, "/c?lm=1", map[string]string{"If-Modified-Since": lm})
	if r.status != http.StatusOK {
		t.Errorf("after bump: If-Modified-Since old date = %d, want 200", r.status)
	}
}

func TestDelay(t *testing.T) {
	o, srv := testOrigin(t)
	start := time.Now()
	if r := get(t, srv, "/d?delay=50"); r.status != 200 {
		t.Fatalf("delay=50: %d", r.status)
	}
	if el := time.Since(start); el < 50*time.Millisecond {
		t.Errorf("delay=50 answered after %v", el)
	}

	// A client that gives up ends the wait: in_flight drops to 0 long
	// before the 60 s delay.
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/d?delay=60000", nil)
	errc := make(chan error, 1)
	go func() {
		resp, err := srv.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	eventually(t, "the delayed request to arrive", func() bool { return o.snapshot().InFlight == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled request: err = %v, want context.Canceled", err)
	}
	eventually(t, "the delayed handler to return", func() bool { return o.snapshot().InFlight == 0 })
}

func TestFaults(t *testing.T) {
	o, srv := testOrigin(t)
	setMode := func(mode string) {
		t.Helper()
		if r := do(t, srv, http.MethodPost, "/__origin/fault?mode="+mode, nil); r.status != http.StatusOK {
			t.Fatalf("fault mode %s: %d %s", mode, r.status, r.body)
		}
	}

	setMode(modeError)
	if r := get(t, srv, "/f"); r.status != http.StatusInternalServerError {
		t.Errorf("mode error: GET /f = %d, want 500", r.status)
	}
	if s := statsOf(t, srv); s.Mode != modeError || s.ByPath["/f"] != 1 {
		t.Errorf("mode error: stats = %+v; want mode error, /f counted once", s)
	}

	setMode(modeThrottle)
	if r := get(t, srv, "/f"); r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") == "" {
		t.Errorf("mode throttle: GET /f = %d, Retry-After %q; want 429 with Retry-After", r.status, r.header.Get("Retry-After"))
	}

	setMode(modeReset)
	if _, err := srv.Client().Get(srv.URL + "/f"); err == nil {
		t.Error("mode reset: GET /f succeeded, want a transport error")
	}

	setMode(modeHang)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/f", nil)
	if _, err := srv.Client().Do(req); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("mode hang: err = %v, want deadline exceeded", err)
	}
	eventually(t, "the hanging handler to return", func() bool { return o.snapshot().InFlight == 0 })

	setMode(modeSlow)
	start := time.Now()
	r := get(t, srv, "/f?size=4")
	if len(r.body) != 4 || r.status != 200 {
		t.Errorf("mode slow: %d, %q; want 200 and 4 bytes", r.status, r.body)
	}
	if el := time.Since(start); el < 3*slowInterval {
		t.Errorf("mode slow: 4 bytes took %v, want ≥ %v", el, 3*slowInterval)
	}

	setMode(modeOK)
	if r := get(t, srv, "/f"); r.status != http.StatusOK {
		t.Errorf("mode ok: GET /f = %d, want 200", r.status)
	}
}

func TestStopEndsHang(t *testing.T) {
	o, srv := testOrigin(t)
	o.setMode(modeHang)
	var wg sync.WaitGroup
	wg.Go(func() {
		if resp, err := srv.Client().Get(srv.URL + "/h"); err == nil {
			resp.Body.Close()
		}
	})
	eventually(t, "the hanging request to arrive", func() bool { return o.snapshot().InFlight == 1 })
	o.stop()
	eventually(t, "stop to end the hang", func() bool { return o.snapshot().InFlight == 0 })
	wg.Wait()
}

func TestControlErrors(t *testing.T) {
	o, srv := testOrigin(t)
	o.setMode(modeError) // control endpoints must ignore faults
	tests := []struct {
		method, target string
		want           int
	}{
		{http.MethodGet, "/__origin/stats", 200},
		{http.MethodPost, "/__origin/stats", 405},
		{http.MethodGet, "/__origin/reset", 405},
		{http.MethodPost, "/__origin/fault?mode=explode", 400},
		{http.MethodPost, "/__origin/bump?path=nope", 400},
		{http.MethodPost, "/__origin/bump?path=/x", 200},
		{http.MethodGet, "/__origin/nothing", 404},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.target, func(t *testing.T) {
			if r := do(t, srv, tt.method, tt.target, nil); r.status != tt.want {
				t.Errorf("%s %s = %d, want %d", tt.method, tt.target, r.status, tt.want)
			}
		})
	}
	if s := o.snapshot(); s.Total != 0 {
		t.Errorf("control requests counted: total = %d", s.Total)
	}
}

func TestRun(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- run(ctx, []string{"-listen", addr}, io.Discard, slog.New(slog.DiscardHandler)) }()
	eventually(t, "the origin to listen", func() bool {
		resp, err := http.Get("http://" + addr + "/__origin/stats")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	cancel()
	if err := <-errc; err != nil {
		t.Errorf("run after cancel = %v, want nil", err)
	}

	if err := run(context.Background(), []string{"-nope"}, io.Discard, slog.New(slog.DiscardHandler)); err == nil {
		t.Error("run -nope = nil, want a flag error")
	}
}

// TestInterimHeads: interim=… sends those 1xx first, hints=n sends n
// 103s with the Link (and hintpad bytes of X-Pad), then the answer.
func TestInterimHeads(t *testing.T) {
	_, srv := testOrigin(t)
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = io.WriteString(conn, "GET /i?interim=100,102&hints=3&hintpad=5 HTTP/1.1\r\nHost: o\r\nConnection: close\r\n\r\n")
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	raw, err := io.ReadAll(conn)
	if err != nil {
		t.Fatal(err)
	}
	var codes []string
	for _, line := range strings.Split(string(raw), "\r\n") {
		if code, ok := strings.CutPrefix(line, "HTTP/1.1 "); ok {
			codes = append(codes, code[:3])
		}
	}
	if strings.Join(codes, ",") != "100,102,103,103,103,200" {
		t.Errorf("status lines %v, want 100,102,103×3,200 in %q", codes, raw)
	}
	if n := strings.Count(string(raw), "X-Pad: ppppp\r\n"); n != 3 {
		t.Errorf("%d heads with X-Pad, want the 3 hints only: %q", n, raw)
	}
	for _, bad := range []string{"/i?hints=-1", "/i?hints=10001", "/i?interim=101", "/i?interim=200", "/i?hintpad=x"} {
		if r := get(t, srv, bad); r.status != http.StatusBadRequest {
			t.Errorf("GET %s = %d, want 400", bad, r.status)
		}
	}
}
