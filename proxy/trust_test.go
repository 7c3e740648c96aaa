package proxy

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/proxy/cache"
	"github.com/shield-proxy/shield/proxy/cluster"
)

// blockingOrigin answers "version N" (N counts GETs) and holds the GET
// whose number is in hold until release is closed.
func blockingOrigin(t *testing.T, hold int64, started chan<- struct{}, release <-chan struct{}, extra func(w http.ResponseWriter)) *testOrigin {
	var gets atomic.Int64
	return newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, _ int64) {
		if r.Method != "GET" {
			w.WriteHeader(204)
			return
		}
		n := gets.Add(1)
		w.Header().Set("Cache-Control", "public, max-age=3600")
		if extra != nil {
			extra(w)
		}
		if n == hold {
			started <- struct{}{}
			<-release
		}
		_, _ = fmt.Fprintf(w, "version %d", n)
	})
}

// TestInvalidationDuringFetchIsNotUndone: a GET in flight when its URL is
// purged (by URL, soft, tag, or by a successful POST) must not be stored:
// the next request fetches again.
func TestInvalidationDuringFetchIsNotUndone(t *testing.T) {
	for _, how := range []string{"url", "soft-url", "tag", "post"} {
		t.Run(how, func(t *testing.T) {
			started, release := make(chan struct{}), make(chan struct{})
			o := blockingOrigin(t, 1, started, release, func(w http.ResponseWriter) { w.Header().Set("Surrogate-Key", "doc all") })
			p := newTestProxy(t, o.addr(), nil)
			first := make(chan status, 1)
			go func() { first <- summary(serve(p, get(t, "/doc"))) }()
			<-started
			switch how {
			case "url", "soft-url":
				args := url.Values{"url": {"http://" + testHost + "/doc"}}
				if how == "soft-url" {
					args.Set("soft", "1")
				}
				if _, err := p.Purge(args); err != nil {
					t.Fatal(err)
				}
			case "tag":
				if _, err := p.Purge(url.Values{"tag": {"doc"}}); err != nil {
					t.Fatal(err)
				}
			case "post":
				if s := summary(serve(p, newCtxBody(t, request("POST", "/doc"), "x"))); s.code != 204 {
					t.Fatalf("POST = %+v", s)
				}
			}
			close(release)
			if s := <-first; s.body != "version 1" {
				t.Fatalf("in-flight GET = %+v", s)
			}
			next := summary(serve(p, get(t, "/doc")))
			if next.body != "version 2" || strings.HasPrefix(next.cacheStatus, "shield; hit") {
				t.Fatalf("GET after the %s invalidation = %+v, want a fresh fetch (version 2)", how, next)
			}
		})
	}
}

// TestWaiterAfterPurgeDoesNotGetOlderAnswer: a request joining a flight
// that started before a purge must not be served the flight's answer.
func TestWaiterAfterPurgeDoesNotGetOlderAnswer(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	o := blockingOrigin(t, 1, started, release, nil)
	p := newTestProxy(t, o.addr(), nil)
	first := make(chan status, 1)
	go func() { first <- summary(serve(p, get(t, "/w"))) }()
	<-started
	if _, err := p.Purge(url.Values{"url": {"http://" + testHost + "/w"}}); err != nil {
		t.Fatal(err)
	}
	second := make(chan status, 1)
	go func() { second <- summary(serve(p, get(t, "/w"))) }()
	waitUntil(t, "the second request waits on the flight", func() bool { return p.g.waiting.Load() == 1 })
	close(release)
	<-first
	if s := <-second; s.body == "version 1" {
		t.Fatalf("a request that started after the purge got the pre-purge answer: %+v", s)
	}
}

// TestOlderFetchNeverOverwritesNewer: an answer whose fetch started
// before the stored one's is refused.
func TestOlderFetchNeverOverwritesNewer(t *testing.T) {
	o := newTestOrigin(t, cacheable("x"))
	p := newTestProxy(t, o.addr(), nil)
	key := []byte("some key")
	var h fasthttp.RequestHeader
	older, newer := p.cache.Invalidations().Next(), p.cache.Invalidations().Next()
	now := time.Now()
	e := cache.Entry{Kind: cache.KindResponse, Status: 200, StoredAt: now.UnixNano(), Lifetime: int64(time.Hour), FetchSeq: newer, Body: []byte("new")}
	if _, _, res := p.storeResponse(key, &h, &e, nil, nil, now, false); res != cache.Stored {
		t.Fatal("newer answer not stored")
	}
	e2 := cache.Entry{Kind: cache.KindResponse, Status: 200, StoredAt: now.UnixNano(), Lifetime: int64(time.Hour), FetchSeq: older, Body: []byte("old")}
	if _, _, res := p.storeResponse(key, &h, &e2, nil, nil, now, false); res != cache.Refused {
		t.Fatal("an older fetch's answer replaced a newer one")
	}
	p.writeHitForMiss(p.rt.Load(), key, older, now)
	if got, _ := stored(t, p, key); string(got.Body) != "new" || got.Kind != cache.KindResponse {
		t.Fatalf("stored = %q (kind %d), want the newer answer", got.Body, got.Kind)
	}
}

// TestTagPurge: entries carrying a tag are purged by it, others stay; the
// tag header is not shown to clients; soft purge serves stale then
// refreshes.
func TestTagPurge(t *testing.T) {
	o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Cache-Control", "public, max-age=3600, stale-while-revalidate=60")
		w.Header().Set("Surrogate-Key", "shared "+strings.TrimPrefix(r.URL.Path, "/"))
		_, _ = fmt.Fprintf(w, "version %d", n)
	})
	p := newTestProxy(t, o.addr(), nil)
	a := summary(serve(p, get(t, "/a")))
	serve(p, get(t, "/b"))
	if ctx := serve(p, get(t, "/a")); len(ctx.Response.Header.Peek("Surrogate-Key")) > 0 {
		t.Fatalf("Surrogate-Key reached the client: %q", ctx.Response.Header.Peek("Surrogate-Key"))
	}
	if _, err := p.Purge(url.Values{"tag": {"a"}}); err != nil {
		t.Fatal(err)
	}
	if s := summary(serve(p, get(t, "/a"))); s.body == a.body {
		t.Fatalf("/a after purge of its tag = %+v, still the old answer", s)
	}
	if s := summary(serve(p, get(t, "/b"))); !strings.HasPrefix(s.cacheStatus, "shield; hit") {
		t.Fatalf("/b (other tag) = %+v, want a hit", s)
	}
	before := o.hits.Load()
	if _, err := p.Purge(url.Values{"tag": {"shared"}, "soft": {"1"}}); err != nil {
		t.Fatal(err)
	}
	s := summary(serve(p, get(t, "/b")))
	if !strings.Contains(s.cacheStatus, "stale-while-revalidate") {
		t.Fatalf("/b after soft tag purge = %+v, want served stale while revalidating", s)
	}
	waitUntil(t, "the background refresh", func() bool { return o.hits.Load() > before })
	waitUntil(t, "a fresh /b", func() bool {
		s := summary(serve(p, get(t, "/b")))
		return strings.HasPrefix(s.cacheStatus, "shield; hit; ttl=")
	})
}

// TestPurgeURLReachesKeyHeaderVariants: every key_headers variant of a
// URL goes with it.
func TestPurgeURLReachesKeyHeaderVariants(t *testing.T) {
	o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		_, _ = fmt.Fprintf(w, "%s %d", r.Header.Get("X-Api-Version"), n)
	})
	p := newTestProxy(t, o.addr(), func(c *config.Config) { c.Routes[0].Cache.KeyHeaders = []string{"X-Api-Version"} })
	for _, v := range []string{"1", "2"} {
		serve(p, get(t, "/k", "X-Api-Version: "+v))
		if s := summary(serve(p, get(t, "/k", "X-Api-Version: "+v))); !strings.HasPrefix(s.cacheStatus, "shield; hit") {
			t.Fatalf("variant %s not cached: %+v", v, s)
		}
	}
	if _, err := p.Purge(url.Values{"url": {"http://" + testHost + "/k"}}); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"1", "2"} {
		if s := summary(serve(p, get(t, "/k", "X-Api-Version: "+v))); strings.HasPrefix(s.cacheStatus, "shield; hit") {
			t.Fatalf("variant %s survived the URL purge: %+v", v, s)
		}
	}
}

// TestRevalidationSetCookieNotShared: a 304 carrying Set-Cookie gives it
// to its requester only; the stored copy and later clients never see it.
func TestRevalidationSetCookieNotShared(t *testing.T) {
	o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Cache-Control", "public, max-age=0")
		w.Header().Set("ETag", `"v1"`)
		if r.Header.Get("If-None-Match") == `"v1"` {
			w.Header().Set("Set-Cookie", "session=leader-"+strconv.FormatInt(n, 10))
			w.WriteHeader(304)
			return
		}
		_, _ = w.Write([]byte("body"))
	})
	p := newTestProxy(t, o.addr(), nil)
	serve(p, get(t, "/c"))
	leader := serve(p, get(t, "/c"))
	if got := string(leader.Response.Header.Peek("Set-Cookie")); !strings.HasPrefix(got, "session=leader-") {
		t.Fatalf("revalidating requester's Set-Cookie = %q, want the origin's", got)
	}
	if e, ok := stored(t, p, primaryKey(p, get(t, "/c"))); ok {
		if v, has := storedHeader(&e, "Set-Cookie"); has {
			t.Fatalf("stored copy carries Set-Cookie %q", v)
		}
	}
	// Concurrent requests collapse on one revalidation: none but the
	// leader may see its cookie.
	var wg sync.WaitGroup
	cookies := make(chan string, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cookies <- string(serve(p, get(t, "/c")).Response.Header.Peek("Set-Cookie"))
		}()
	}
	wg.Wait()
	close(cookies)
	seen := map[string]int{}
	for c := range cookies {
		if c != "" {
			seen[c]++
		}
	}
	for c, n := range seen {
		if n > 1 {
			t.Fatalf("Set-Cookie %q reached %d clients", c, n)
		}
	}
}

// TestAuthorizationKeepsStaleCopy: a request with Authorization, whose
// answer is not shareable, does not wipe the shared stale-if-error copy.
func TestAuthorizationKeepsStaleCopy(t *testing.T) {
	var down atomic.Bool
	o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		if down.Load() {
			w.WriteHeader(503)
			return
		}
		w.Header().Set("Cache-Control", "max-age=0, stale-if-error=600")
		_, _ = fmt.Fprintf(w, "version %d", n)
	})
	p := newTestProxy(t, o.addr(), nil)
	serve(p, get(t, "/s"))
	if s := summary(serve(p, get(t, "/s", "Authorization: Bearer x"))); s.code != 200 {
		t.Fatalf("authorized request = %+v", s)
	}
	down.Store(true)
	if s := summary(serve(p, get(t, "/s"))); s.code != 200 || !strings.Contains(s.cacheStatus, "fwd=stale") {
		t.Fatalf("during the outage = %+v, want the stale copy", s)
	}
}

// TestScratchReset: nothing of an earlier request survives in a pooled
// scratch (a stale previous owner would trigger a read-through to an
// unrelated peer).
func TestScratchReset(t *testing.T) {
	sc := &scratch{key: []byte("k"), vkey: []byte("v"), tmp: []byte("t"), hdrs: [][]byte{[]byte("h")},
		tid: []byte("tenant"), fromPeer: true, hotRate: 3, ownerID: "n2", prevOwner: new(cluster.Peer), urlLen: 4}
	sc.cc.NoStore = true
	sc.reset()
	v := reflect.ValueOf(sc).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		if f.Kind() == reflect.Slice {
			if f.Len() != 0 {
				t.Errorf("field %s has length %d after reset", v.Type().Field(i).Name, f.Len())
			}
			continue
		}
		if name := v.Type().Field(i).Name; name != "cc" && !f.IsZero() {
			t.Errorf("field %s = %v after reset", name, f.Interface())
		}
	}
	if sc.cc.NoStore {
		t.Error("cache-control directives kept after reset")
	}
}

// TestPurgeSurvivesRestart: purges by URL and tag are kept beside the
// snapshot; the restarted node does not serve what they removed.
func TestPurgeSurvivesRestart(t *testing.T) {
	o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Header().Set("Surrogate-Key", "t"+strings.TrimPrefix(r.URL.Path, "/"))
		_, _ = fmt.Fprintf(w, "version %d", n)
	})
	path := filepath.Join(t.TempDir(), "cache")
	edit := func(c *config.Config) { c.Cache.Path = path }
	p := newTestProxy(t, o.addr(), edit)
	for _, u := range []string{"/a", "/b", "/c"} {
		serve(p, get(t, u))
	}
	if _, err := p.Purge(url.Values{"url": {"http://" + testHost + "/a"}, "soft": {"1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Purge(url.Values{"tag": {"tb"}}); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	q := newTestProxy(t, o.addr(), edit)
	for u, wantHit := range map[string]bool{"/a": false, "/b": false, "/c": true} {
		s := summary(serve(q, get(t, u)))
		if hit := strings.HasPrefix(s.cacheStatus, "shield; hit; ttl="); hit != wantHit {
			t.Errorf("%s after restart = %+v, want fresh hit = %v", u, s, wantHit)
		}
	}
}

// TestRandomInterleaving races fills, purges (URL, soft, tag) and unsafe
// requests on a few paths and checks that no request that started after
// an invalidation of its path completed is answered with a version the
// origin produced before that invalidation began.
func TestRandomInterleaving(t *testing.T) {
	const paths = 4
	var counters [paths]atomic.Int64
	o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, _ int64) {
		i, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/p"))
		if r.Method != "GET" {
			w.WriteHeader(204)
			return
		}
		time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
		n := counters[i].Add(1)
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Header().Set("Surrogate-Key", "tag"+strconv.Itoa(i))
		_, _ = fmt.Fprintf(w, "%d", n)
	})
	p := newTestProxy(t, o.addr(), func(c *config.Config) { c.Cache.MaxWaiters = 2 })
	// floor[i]: answers must be above this version for requests starting now.
	var floor [paths]atomic.Int64
	var wg sync.WaitGroup
	var bad atomic.Int64
	deadline := time.Now().Add(1500 * time.Millisecond)
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for time.Now().Before(deadline) {
				i := r.IntN(paths)
				path := "/p" + strconv.Itoa(i)
				switch op := r.IntN(10); {
				case op < 7:
					min := floor[i].Load()
					s := summary(serve(p, get(t, path)))
					if s.code != 200 {
						continue
					}
					v, _ := strconv.ParseInt(s.body, 10, 64)
					if v <= min {
						bad.Add(1)
						t.Errorf("%s answered version %d (%s), but an invalidation after version %d had completed", path, v, s.cacheStatus, min)
					}
				default:
					before := counters[i].Load()
					switch op {
					case 7:
						_, _ = p.Purge(url.Values{"url": {"http://" + testHost + path}})
					case 8:
						_, _ = p.Purge(url.Values{"tag": {"tag" + strconv.Itoa(i)}})
					default:
						serve(p, newCtxBody(t, request("POST", path), "x"))
					}
					for {
						cur := floor[i].Load()
						if cur >= before || floor[i].CompareAndSwap(cur, before) {
							break
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	if bad.Load() > 0 {
		t.Fatalf("%d answers older than an invalidation", bad.Load())
	}
}

// TestRoutePurgeWrapIsNotUndone: a route's namespace version is 16 bits;
// after 65536 route purges it is back where it started, and an entry
// stored before the first purge, still in the cache under that old key,
// must not be served again.
func TestRoutePurgeWrapIsNotUndone(t *testing.T) {
	o := newTestOrigin(t, cacheable("x"))
	p := newTestProxy(t, o.addr(), nil)
	serve(p, get(t, "/wrap"))
	if s := summary(serve(p, get(t, "/wrap"))); !strings.HasPrefix(s.cacheStatus, "shield; hit") {
		t.Fatalf("/wrap not cached: %+v", s)
	}
	route := p.rt.Load().routes[0].name
	var last PurgeResult
	for range 1 << 16 {
		res, err := p.Purge(url.Values{"route": {route}})
		if err != nil {
			t.Fatal(err)
		}
		last = res
	}
	if last.Namespace != 0 {
		t.Fatalf("after 65536 route purges the namespace is %d, want it wrapped to 0", last.Namespace)
	}
	if s := summary(serve(p, get(t, "/wrap"))); strings.HasPrefix(s.cacheStatus, "shield; hit") {
		t.Fatalf("/wrap came back as a hit after the namespace version wrapped: %+v", s)
	}
}
