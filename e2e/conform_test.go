package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shield-proxy/shield/config"
)

// TestHitKeepsOriginDate: RFC 9110 §6.6.1, RFC 9111 §4 — a hit through
// the real listener carries the Date the origin sent, not the send time.
func TestHitKeepsOriginDate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	u := target("/dated", "dateago", "120", "cc", "public, max-age=3600")
	miss := e.get(u)
	date := miss.header.Get("Date")
	d, err := http.ParseTime(date)
	if err != nil || time.Since(d) < 100*time.Second {
		t.Fatalf("miss Date = %q (%v), want the origin's, 120s ago", date, err)
	}
	hit := e.get(u)
	wantHit(t, "second GET", hit)
	if got := hit.header.Values("Date"); len(got) != 1 || got[0] != date {
		t.Fatalf("hit Date = %q, want exactly the origin's %q", got, date)
	}
}

// TestPreconditionsE2E: RFC 9110 §13.1.1, §13.1.4, §13.2.2 — through
// the real listener, a cached answer's If-Match (strong comparison, "*")
// and If-Unmodified-Since are evaluated before If-None-Match: a false one
// is a 412 with no body and no Cache-Control, true ones fall through to
// the 200 or 304; the origin is fetched once for all of them.
func TestPreconditionsE2E(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	u := target("/precond", "etag", "1", "lm", "1", "cc", "public, max-age=3600")
	miss := e.get(u)
	etag, lm := miss.header.Get("ETag"), miss.header.Get("Last-Modified")
	modified, err := http.ParseTime(lm)
	if miss.status != 200 || etag == "" || err != nil {
		t.Fatalf("miss: %v, ETag %q, Last-Modified %q (%v); want 200 with both validators", miss, etag, lm, err)
	}
	earlier := modified.Add(-time.Hour).Format(http.TimeFormat)
	for _, c := range []struct {
		hdr  []string
		want int
	}{
		{[]string{"If-Match", etag}, 200},
		{[]string{"If-Match", `"other", ` + etag}, 200},
		{[]string{"If-Match", "*"}, 200},
		{[]string{"If-Match", `"other"`}, 412},
		{[]string{"If-Match", "W/" + etag}, 412},
		{[]string{"If-Unmodified-Since", earlier}, 412},
		{[]string{"If-Unmodified-Since", lm}, 200},
		{[]string{"If-Match", etag, "If-Unmodified-Since", earlier}, 200},
		{[]string{"If-Match", etag, "If-None-Match", etag}, 304},
		{[]string{"If-Match", `"other"`, "If-None-Match", etag}, 412},
	} {
		r := e.get(u, c.hdr...)
		if r.status != c.want || !strings.Contains(r.header.Get("Cache-Status"), "hit") {
			t.Errorf("GET %q: %v, want a %d hit", c.hdr, r, c.want)
		}
		if r.status == 412 && (len(r.body) > 0 || r.header.Get("Cache-Control") != "" || r.header.Get("ETag") != "") {
			t.Errorf("GET %q: 412 with body %q, Cache-Control %q, ETag %q; want none", c.hdr, r.body, r.header.Get("Cache-Control"), r.header.Get("ETag"))
		}
	}
	e.wantOriginCount("/precond", 1)
}

// TestTargetedCacheControlE2E: RFC 9213 §2.2 — CDN-Cache-Control gives
// shield a lifetime the browser-facing Cache-Control denies, and is not
// forwarded to clients.
func TestTargetedCacheControlE2E(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	u := target("/targeted", "cc", "no-store", "cdncc", "max-age=60")
	for i := range 2 {
		r := e.get(u)
		if v := r.header.Get("CDN-Cache-Control"); v != "" {
			t.Fatalf("request %d: CDN-Cache-Control %q reached the client", i, v)
		}
		if v := r.header.Get("Cache-Control"); v != "no-store" {
			t.Fatalf("request %d: Cache-Control = %q, want the origin's no-store", i, v)
		}
		if i == 1 {
			wantHit(t, "second GET", r)
		}
	}
	e.wantOriginCount("/targeted", 1)
}

// TestRangeE2E: RFC 9110 §14 — a 1 MiB object read in 64 KiB ranges by
// 50 concurrent clients through the listener: every answer is the right
// 206, and the origin was fetched exactly once.
func TestRangeE2E(t *testing.T) {
	t.Parallel()
	// A 32 MiB cache has one 64 KiB chunk per bucket, too few to keep
	// every 32 KiB piece of a 1 MiB entry: give it room.
	e := newEnv(t, func(c *shieldConfig) {
		c.MaxObjectSize = "2MiB"
		c.Extra = append(c.Extra, with(func(cc *config.Config) { cc.Cache.Size = 256 * config.MiB }))
	})
	u := target("/ranged", "size", fmt.Sprint(1<<20))
	const part = 64 << 10
	var wg sync.WaitGroup
	start := make(chan struct{})
	results := make([]result, 50)
	errs := make([]error, 50)
	for i := range 50 {
		wg.Go(func() {
			<-start
			first := (i % 16) * part
			results[i], errs[i] = e.try(http.MethodGet, u, "Range", fmt.Sprintf("bytes=%d-%d", first, first+part-1))
		})
	}
	close(start)
	wg.Wait()
	e.wantOriginCount("/ranged", 1)
	full := e.get(u)
	wantHit(t, "whole GET", full)
	if full.status != 200 || len(full.body) != 1<<20 {
		t.Fatalf("whole object: %d, %d bytes", full.status, len(full.body))
	}
	for i, r := range results {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		first := (i % 16) * part
		want := fmt.Sprintf("bytes %d-%d/%d", first, first+part-1, 1<<20)
		if r.status != 206 || r.header.Get("Content-Range") != want || !bytes.Equal(r.body, full.body[first:first+part]) {
			for j := range min(len(r.body), part) {
				if r.body[j] != full.body[first+j] {
					t.Logf("first difference at %d: %q vs %q", j, r.body[j:min(j+40, len(r.body))], full.body[first+j:first+j+40])
					break
				}
			}
			t.Fatalf("client %d: %d, Content-Range %q, %d bytes %.40q (whole %.40q); want 206 %s", i, r.status, r.header.Get("Content-Range"), len(r.body), r.body, full.body[first:], want)
		}
	}
	e.wantOriginCount("/ranged", 1)
	multi := e.get(u, "Range", "bytes=0-9,100-109")
	if multi.status != 206 || !strings.HasPrefix(multi.header.Get("Content-Type"), "multipart/byteranges") {
		t.Fatalf("two ranges: %d %q", multi.status, multi.header.Get("Content-Type"))
	}
	if r := e.get(u, "Range", "bytes=2000000-"); r.status != 416 || r.header.Get("Content-Range") != "bytes */1048576" {
		t.Fatalf("unsatisfiable: %d %q", r.status, r.header.Get("Content-Range"))
	}
}

// TestInterimResponsesBounded: an origin that sends 300 103 Early Hints
// (and unsolicited 100, 102, 104) before its 200. curl gets the 200 with
// its body after max_early_hints (default 3) 103s and no other 1xx — a
// stored miss, a no-store answer and a bypassed request alike (before,
// shield relayed all 300 and then answered 502: fasthttp's client gives
// up after 100 interim answers). An origin streaming megabytes of
// interim heads gets 502.
func TestInterimResponsesBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	curl := func(t *testing.T, u string, hdr ...string) (codes []string, body []byte) {
		t.Helper()
		dir := t.TempDir()
		heads, bodyFile := filepath.Join(dir, "heads"), filepath.Join(dir, "body")
		args := []string{"-sS", "--max-time", "15", "-D", heads, "-o", bodyFile}
		for _, h := range hdr {
			args = append(args, "-H", h)
		}
		if out, err := exec.Command("curl", append(args, "http://"+e.cfg.Listen+u)...).CombinedOutput(); err != nil {
			t.Fatalf("curl %s: %v: %s", u, err, out)
		}
		raw, err := os.ReadFile(heads)
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.SplitSeq(string(raw), "\n") {
			if code, ok := strings.CutPrefix(line, "HTTP/1.1 "); ok && len(code) >= 3 {
				codes = append(codes, code[:3])
			}
		}
		if body, err = os.ReadFile(bodyFile); err != nil {
			t.Fatal(err)
		}
		return codes, body
	}
	want := []string{"103", "103", "103", "200"}
	for _, tc := range []struct {
		name, path, query string
		hdr               []string
	}{
		{"stored miss", "/flood", "hints=300", nil},
		{"no-store, other 1xx first", "/flood-mixed", "interim=100,102,104&hints=300&cc=no-store", nil},
		{"bypass", "/flood-bypass", "hints=300&interim=102", []string{"Cache-Control: no-store"}},
	} {
		codes, body := curl(t, tc.path+"?"+tc.query, tc.hdr...)
		if !slices.Equal(codes, want) {
			t.Errorf("%s: status lines %v, want %v (3 hints, then the origin's 200)", tc.name, codes, want)
		}
		var res resource
		if err := json.Unmarshal(body, &res); err != nil || res.Path != tc.path {
			t.Errorf("%s: body %.200q (%v), want the origin's JSON for %s", tc.name, body, err, tc.path)
		}
	}
	e.wantOriginCount("/flood", 1)
	if codes, _ := curl(t, "/flood?hints=300"); !slices.Equal(codes, []string{"200"}) {
		t.Errorf("hit: status lines %v, want the 200 alone (interim answers are never replayed)", codes)
	}
	// 2,000 heads of 1 KB: past 1 MiB of interim heads the fetch fails.
	codes, _ := curl(t, "/flood-big?hints=2000&hintpad=1000&cc=no-store")
	if len(codes) == 0 || codes[len(codes)-1] != "502" || len(codes) > 4 {
		t.Errorf("2 MB of interim heads: status lines %v, want at most 3 hints, then 502", codes)
	}
	e.wantOriginCount("/flood-big", 1) // an origin that answered is not resent the request
}

// TestEarlyHintsForwarded: RFC 9110 §15.2 — the origin's 103 Early
// Hints reach the client before the final answer, with their Link
// fields; they are never stored or replayed: the hit that follows has
// none. An HTTP/1.0 client gets no interim answer at all.
func TestEarlyHintsForwarded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	u := target("/hinted", "hints", "1")
	type interim struct {
		code int
		link string
	}
	var got []interim
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		got = append(got, interim{code, h.Get("Link")})
		return nil
	}}
	for i := range 2 {
		got = nil
		req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodGet, "http://"+e.cfg.Listen+u, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: status %d, want the final 200", i, resp.StatusCode)
		}
		switch i {
		case 0:
			want := []interim{{103, "</style.css>; rel=preload; as=style"}}
			if !slices.Equal(got, want) {
				t.Errorf("miss: interim answers %v, want %v (the origin's 103, forwarded)", got, want)
			}
		case 1:
			if !strings.HasPrefix(resp.Header.Get("Cache-Status"), "shield; hit") {
				t.Fatalf("second request: Cache-Status %q, want a hit", resp.Header.Get("Cache-Status"))
			}
			if len(got) != 0 {
				t.Errorf("hit: interim answers %v; a stored answer must not replay them", got)
			}
		}
	}
	e.wantOriginCount("/hinted", 1)

	// HTTP/1.0 (RFC 9110 §15.2: no 1xx to a 1.0 client), on a fresh URL.
	conn, err := net.Dial("tcp", e.cfg.Listen)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", target("/hinted10", "hints", "1"), "demo.test")
	raw, err := io.ReadAll(conn)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(raw, []byte("HTTP/1.0 200")) && !bytes.HasPrefix(raw, []byte("HTTP/1.1 200")) {
		t.Errorf("HTTP/1.0 client got %q..., want the final 200 first", raw[:min(len(raw), 40)])
	}
}
