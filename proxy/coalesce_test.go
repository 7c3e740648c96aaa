package proxy

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/valyala/fasthttp"
)

// gate holds the origin's first answer until the test opens it, so that
// the other requests can be seen queued behind the leader's fetch.
type gate struct {
	once sync.Once
	ch   chan struct{}
}

func newGate(t testing.TB) *gate {
	g := &gate{ch: make(chan struct{})}
	t.Cleanup(g.open) // never leave an origin handler blocked
	return g
}

func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

// concurrently serves one request per ctx, each on its own goroutine,
// and returns a function that waits for them all.
func concurrently(p *Proxy, ctxs []*fasthttp.RequestCtx) (wait func()) {
	var wg sync.WaitGroup
	for _, ctx := range ctxs {
		wg.Go(func() { serve(p, ctx) })
	}
	return wg.Wait
}

// queued waits until n requests wait on a fetch in flight.
func queued(t testing.TB, p *Proxy, n int) {
	t.Helper()
	waitUntil(t, fmt.Sprintf("%d requests wait on the leader", n), func() bool { return p.g.waiting.Load() == int64(n) })
}

func TestColdKeyOneOriginRequest(t *testing.T) {
	const clients = 200
	g := newGate(t)
	o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		<-g.ch
		w.Header().Set("Cache-Control", "public, max-age=3600")
		_, _ = fmt.Fprintf(w, "answer %d", n)
	})
	p := newTestProxy(t, o.addr(), nil)
	ctxs := make([]*fasthttp.RequestCtx, clients)
	for i := range ctxs {
		ctxs[i] = get(t, "/hot")
	}
	wait := concurrently(p, ctxs)
	queued(t, p, clients-1)
	g.open()
	wait()

	if n := o.hits.Load(); n != 1 {
		t.Fatalf("origin got %d requests for %d concurrent cold requests, want 1", n, clients)
	}
	collapsed := 0
	for i, ctx := range ctxs {
		got := summary(ctx)
		if got.code != 200 || got.body != "answer 1" {
			t.Fatalf("client %d = %+v, want 200 %q", i, got, "answer 1")
		}
		if strings.Contains(got.cacheStatus, "collapsed") {
			collapsed++
		}
	}
	if collapsed != clients-1 {
		t.Fatalf("%d responses say collapsed, want %d", collapsed, clients-1)
	}
	if n := p.fl.inFlight(); n != 0 {
		t.Fatalf("%d flights left after all requests finished, want 0", n)
	}
}

// TestNotSharedWithWaiters: when the leader's answer turns out not
// shareable, every waiter gets an origin answer of its own.
func TestNotSharedWithWaiters(t *testing.T) {
	const clients = 50
	tests := []struct {
		name   string
		header [2]string
	}{
		{"private", [2]string{"Cache-Control", "private, max-age=3600"}},
		{"Set-Cookie", [2]string{"Set-Cookie", "session=secret"}},
		{"no-store", [2]string{"Cache-Control", "no-store"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGate(t)
			o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
				<-g.ch
				if tt.header[0] != "Cache-Control" {
					w.Header().Set("Cache-Control", "public, max-age=3600")
				}
				w.Header().Set(tt.header[0], tt.header[1])
				_, _ = fmt.Fprintf(w, "for client %d", n)
			})
			p := newTestProxy(t, o.addr(), nil)
			ctxs := make([]*fasthttp.RequestCtx, clients)
			for i := range ctxs {
				ctxs[i] = get(t, "/me")
			}
			wait := concurrently(p, ctxs)
			queued(t, p, clients-1)
			g.open()
			wait()

			if n := o.hits.Load(); n != clients {
				t.Fatalf("origin got %d requests, want %d (one per client)", n, clients)
			}
			seen := make(map[string]int)
			for i, ctx := range ctxs {
				got := summary(ctx)
				if got.code != 200 || !strings.HasPrefix(got.body, "for client ") {
					t.Fatalf("client %d = %+v, want its own origin answer", i, got)
				}
				if j, dup := seen[got.body]; dup {
					t.Fatalf("clients %d and %d both got %q: an unshareable answer was shared", j, i, got.body)
				}
				seen[got.body] = i
			}
		})
	}
}

// TestWaiterWithOtherVaryValue: a waiter whose value of the leader's Vary
// header differs must not get the leader's body.
func TestWaiterWithOtherVaryValue(t *testing.T) {
	g := newGate(t)
	o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		if n == 1 {
			<-g.ch
		}
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Header().Set("Vary", "Accept-Language")
		_, _ = fmt.Fprintf(w, "lang=%s", r.Header.Get("Accept-Language"))
	})
	p := newTestProxy(t, o.addr(), nil)
	leader := get(t, "/v", "Accept-Language: en")
	waitLeader := concurrently(p, []*fasthttp.RequestCtx{leader})
	waitUntil(t, "the leader reaches the origin", func() bool { return o.hits.Load() == 1 })
	same := get(t, "/v", "Accept-Language: en")
	other := get(t, "/v", "Accept-Language: fr")
	waitWaiters := concurrently(p, []*fasthttp.RequestCtx{same, other})
	queued(t, p, 2)
	g.open()
	waitLeader()
	waitWaiters()

	tests := []struct {
		name string
		ctx  *fasthttp.RequestCtx
		want string
	}{
		{"leader", leader, "lang=en"},
		{"waiter, same value", same, "lang=en"},
		{"waiter, other value", other, "lang=fr"},
	}
	for _, tt := range tests {
		if got := summary(tt.ctx); got.code != 200 || got.body != tt.want {
			t.Errorf("%s = %+v, want %q", tt.name, got, tt.want)
		}
	}
	if n := o.hits.Load(); n != 2 {
		t.Fatalf("origin got %d requests, want 2 (the leader's and the fr waiter's)", n)
	}
}
