package proxy

import (
	"bytes"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/shield-proxy/shield/config"
)

// diskProxy is a test proxy with a disk tier, in front of an origin
// answering large bodies tagged by their path.
func diskProxy(t testing.TB, body []byte) (*Proxy, *testOrigin, string) {
	t.Helper()
	o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Surrogate-Key", "big "+strings.TrimPrefix(r.URL.Path, "/"))
		w.Header().Set("ETag", `"v1"`)
		_, _ = w.Write(body)
	})
	dir := t.TempDir()
	p := newTestProxy(t, o.addr(), func(c *config.Config) {
		c.Cache.Path = filepath.Join(dir, "snap")
		c.Cache.Disk = &config.CacheDisk{Path: filepath.Join(dir, "disk"), Size: 64 * config.MiB}
		c.Cache.MaxObjectSize = 4 * config.MiB
	})
	return p, o, dir
}

// TestDiskHitServedFromFile: a large object is stored on disk and its
// fresh hits are the file streamed, byte for byte; a conditional hit is
// a 304 without a body; stale and Range paths read it whole.
func TestDiskHitServedFromFile(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdefghijklmnopqrstuv"), 40<<10) // 1.25 MiB
	body[12345] = 'X'
	p, o, dir := diskProxy(t, body)
	first := serve(p, get(t, "/big"))
	if !bytes.Equal(first.Response.Body(), body) {
		t.Fatalf("miss: %d bytes, want %d", len(first.Response.Body()), len(body))
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "disk", "??", "*")); len(files) != 1 {
		t.Fatalf("%d files in the disk tier after the miss, want 1", len(files))
	}
	for range 3 {
		ctx := get(t, "/big")
		p.Handler()(ctx)
		if !ctx.Response.IsBodyStream() {
			t.Fatal("a disk hit's body is not the file stream")
		}
		s := summary(ctx)
		if !strings.HasPrefix(s.cacheStatus, "shield; hit") || s.code != 200 || s.body != string(body) {
			t.Fatalf("disk hit: %d %q, %d bytes (equal %v)", s.code, s.cacheStatus, len(s.body), s.body == string(body))
		}
		if got := ctx.Response.Header.ContentLength(); got != len(body) {
			t.Fatalf("Content-Length %d, want %d", got, len(body))
		}
	}
	if ctx := serve(p, get(t, "/big", `If-None-Match: "v1"`)); ctx.Response.StatusCode() != 304 || len(ctx.Response.Body()) != 0 {
		t.Fatalf("conditional disk hit: %d with %d bytes", ctx.Response.StatusCode(), len(ctx.Response.Body()))
	}
	ctx := serve(p, get(t, "/big", "Range: bytes=12340-12349"))
	if ctx.Response.StatusCode() != 206 || string(ctx.Response.Body()) != string(body[12340:12350]) {
		t.Fatalf("range of a disk entry: %d %q", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	if n := o.hits.Load(); n != 1 {
		t.Fatalf("origin fetches = %d, want 1", n)
	}
	st, _ := p.cache.DiskStats()
	if st.Hits < 5 || st.Objects != 1 {
		t.Errorf("disk stats %+v", st)
	}
}

// TestDiskPurgeRemovesFromService: purges by URL and by tag reach disk
// entries exactly as memory ones.
func TestDiskPurgeRemovesFromService(t *testing.T) {
	body := bytes.Repeat([]byte("purge me "), 60<<10)
	p, o, _ := diskProxy(t, body)
	for _, path := range []string{"/a", "/b"} {
		serve(p, get(t, path))
		if s := summary(serve(p, get(t, path))); !strings.HasPrefix(s.cacheStatus, "shield; hit") {
			t.Fatalf("%s not a hit before the purge: %q", path, s.cacheStatus)
		}
	}
	if _, err := p.Purge(url.Values{"url": {"http://" + testHost + "/a"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Purge(url.Values{"tag": {"b"}}); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/a", "/b"} {
		s := summary(serve(p, get(t, path)))
		if strings.HasPrefix(s.cacheStatus, "shield; hit") || s.body != string(body) {
			t.Fatalf("%s after its purge: %q, want a miss with the body", path, s.cacheStatus)
		}
	}
	if n := o.hits.Load(); n != 4 {
		t.Errorf("origin fetches = %d, want 4 (each path before and after its purge)", n)
	}
}

// BenchmarkDiskHit is a fresh hit on a 1 MiB disk entry, up to the
// response handed to the server (the body stream is the file; sending
// it is sendfile's business). Compare BenchmarkHit for memory hits.
func BenchmarkDiskHit(b *testing.B) {
	p, _, _ := diskProxy(b, bytes.Repeat([]byte("0123456789abcdef"), 64<<10))
	serve(p, get(b, "/big"))
	ctx := get(b, "/big")
	b.ReportAllocs()
	for b.Loop() {
		ctx.Response.Reset() // closes the previous hit's file
		p.Handler()(ctx)
		if !ctx.Response.IsBodyStream() {
			b.Fatal("not a disk hit")
		}
	}
	ctx.Response.Reset()
}

// TestDiskFailingDegradesToMemory: a disk that cannot be written (its
// temporary directory replaced by a file) leaves large objects served
// and cached in memory, with the failure counted — no crash, no wrong
// body.
func TestDiskFailingDegradesToMemory(t *testing.T) {
	body := bytes.Repeat([]byte("degraded "), 40<<10)
	p, o, dir := diskProxy(t, body)
	tmp := filepath.Join(dir, "disk", "tmp")
	if err := os.RemoveAll(tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tmp, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		ctx := serve(p, get(t, "/d"))
		if s := summary(ctx); s.code != 200 || s.body != string(body) || ctx.Response.IsBodyStream() {
			t.Fatalf("request %d on a failing disk: %d %q, %d bytes", i, s.code, s.cacheStatus, len(s.body))
		}
	}
	if n := o.hits.Load(); n != 1 {
		t.Errorf("origin fetches = %d, want 1 (cached in memory)", n)
	}
	var m bytes.Buffer
	p.g.set.WritePrometheus(&m)
	for _, want := range []string{"shield_cache_disk_errors_total 1", "shield_cache_disk_degraded 1", "shield_cache_disk_degraded_total 1"} {
		if !strings.Contains(m.String(), want+"\n") {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// TestDiskFailingDropsLargeAnswers: on a failing disk, answers too large
// for memory (over cache.size/8) are served whole — buffered and streamed
// fills alike, to concurrent waiters too — and not counted stored nor
// overtaken: each request fetches again, shield_cache_disk_dropped_total
// counts them.
func TestDiskFailingDropsLargeAnswers(t *testing.T) {
	body := bytes.Repeat([]byte("too large for memory "), 250<<10) // 5 MiB > 32 MiB/8
	o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		if r.URL.Path == "/streamed" {
			w.Header().Set("Content-Length", strconv.Itoa(len(body))) // a streamed fill
		}
		_, _ = w.Write(body)
	})
	dir := t.TempDir()
	p := newTestProxy(t, o.addr(), func(c *config.Config) {
		c.Cache.Path = filepath.Join(dir, "snap")
		c.Cache.Disk = &config.CacheDisk{Path: filepath.Join(dir, "disk"), Size: 64 * config.MiB}
		c.Cache.MaxObjectSize = 8 * config.MiB
	})
	tmp := filepath.Join(dir, "disk", "tmp")
	if err := os.RemoveAll(tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tmp, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/buffered", "/streamed"} {
		for i := range 2 {
			var wg sync.WaitGroup
			for range 3 {
				wg.Go(func() {
					ctx := serve(p, get(t, path))
					if s := summary(ctx); s.code != 200 || s.body != string(body) {
						t.Errorf("%s round %d on a failing disk: %d %q, %d bytes", path, i, s.code, s.cacheStatus, len(s.body))
					}
				})
			}
			wg.Wait()
		}
	}
	st, _ := p.cache.DiskStats()
	var m bytes.Buffer
	p.g.set.WritePrometheus(&m)
	p.writeDiskMetrics(&m)
	fetches := o.hits.Load()
	if fetches < 4 || st.Dropped != uint64(fetches) || st.Objects != 0 || !st.Degraded {
		t.Errorf("%d origin fetches, disk stats %+v: want ≥ 4 fetches (nothing kept), each dropped", fetches, st)
	}
	for _, want := range []string{`shield_cache_stored_total{route="r"} 0`, "shield_cache_overtaken_total 0",
		fmt.Sprintf("shield_cache_disk_dropped_total %d", fetches)} {
		if !strings.Contains(m.String(), want+"\n") {
			t.Errorf("metrics lack %q:\n%s", want, grepLines(m.String(), "shield_cache"))
		}
	}
}
