//go:build !race

package proxy

import (
	"bytes"
	"testing"

	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/proxy/httpx"
)

// TestEagerRefreshHitAllocs: with eager_refresh on, an ordinary hit (an
// entry before that point of its lifetime) still allocates nothing.
func TestEagerRefreshHitAllocs(t *testing.T) {
	o := newTestOrigin(t, hitOrigin(false))
	p := newTestProxy(t, o.addr(), func(c *config.Config) { c.Routes[0].Cache.EagerRefresh = 0.8 })
	ctx := hitCtx(t)
	serve(p, ctx)
	h := p.Handler()
	hit := true
	allocs := testing.AllocsPerRun(1000, func() {
		ctx.Response.Reset()
		h(ctx)
		hit = hit && bytes.HasPrefix(ctx.Response.Header.PeekBytes(httpx.HCacheStatus), hitPrefix)
	})
	if !hit {
		t.Fatalf("a run was not a hit: Cache-Status = %q", ctx.Response.Header.PeekBytes(httpx.HCacheStatus))
	}
	if allocs != 0 {
		t.Errorf("HIT with eager_refresh = %v allocs/op, want 0", allocs)
	}
}
