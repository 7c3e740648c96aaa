package proxy

import (
	"strings"
	"testing"
	"time"

	"github.com/shield-proxy/shield/cachekey"
	"github.com/shield-proxy/shield/proxy/cache"
)

// plant stores a response entry for path whose freshness started age
// ago, so that tests drive staleness without waiting.
func plant(t testing.TB, p *Proxy, path string, age, lifetime, swr, sie time.Duration, etag string) {
	t.Helper()
	key := primaryKey(p, get(t, path))
	e := cache.Entry{
		Kind: cache.KindResponse, Status: 200, StoredAt: time.Now().Add(-age).UnixNano(),
		Lifetime: int64(lifetime), SWR: int64(swr), SIE: int64(sie),
		KeyDigest: cachekey.Digest(key), ETag: []byte(etag), Body: []byte("planted"),
	}
	putEntry(t, p, key, cache.AppendEntry(nil, &e, nil, []cache.Header{{Name: []byte("Content-Type"), Value: []byte("text/plain")}}))
}

func TestFreshnessThroughHandler(t *testing.T) {
	tests := []struct {
		name     string
		age      time.Duration
		lifetime time.Duration
		wantHit  bool
	}{
		{"fresh", time.Minute, time.Hour, true},
		{"just fresh", time.Hour - 5*time.Second, time.Hour, true},
		{"expired", 2 * time.Hour, time.Hour, false},
		{"zero lifetime", 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := newTestOrigin(t, cacheable("from origin"))
			p := newTestProxy(t, o.addr(), nil)
			plant(t, p, "/f", tt.age, tt.lifetime, 0, 0, "")
			got := summary(serve(p, get(t, "/f")))
			want := map[bool]string{true: "planted", false: "from origin"}[tt.wantHit]
			if got.body != want || strings.HasPrefix(got.cacheStatus, "shield; hit") != tt.wantHit {
				t.Fatalf("response = %+v, want %q (hit: %v)", got, want, tt.wantHit)
			}
		})
	}
}

// TestStaleIfError: docs/architecture.md §5 — within stale-if-error, an origin failure
// is answered with the stored copy instead of a 5xx.
func TestStaleIfError(t *testing.T) {
	p := newTestProxy(t, closedAddr(t), nil)
	plant(t, p, "/s", 2*time.Hour, time.Hour, 0, 24*time.Hour, "")
	got := summary(serve(p, get(t, "/s")))
	if got.code != 200 || got.body != "planted" {
		t.Fatalf("origin down gives %+v, want the stale copy", got)
	}
}

// TestStaleWhileRevalidate: docs/architecture.md §5 — within stale-while-revalidate the
// stale copy is served at once and refreshed in the background.
func TestStaleWhileRevalidate(t *testing.T) {
	o := newTestOrigin(t, cacheable("refreshed"))
	p := newTestProxy(t, o.addr(), nil)
	plant(t, p, "/s", time.Hour+time.Minute, time.Hour, time.Hour, 0, "")
	got := summary(serve(p, get(t, "/s")))
	if got.body != "planted" {
		t.Fatalf("got %+v, want the stale copy at once", got)
	}
	waitUntil(t, "the background refresh reaches the origin", func() bool { return o.hits.Load() == 1 })
	waitUntil(t, "the refreshed copy is served", func() bool {
		return summary(serve(p, get(t, "/s"))).body == "refreshed"
	})
}
