package proxy

import (
	"net"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/config"
)

// forwardedHit starts a two-node harness cluster, warms a key that b
// owns and returns a GET of it through a (client → edge → owner), one
// request and response reused by every call.
func forwardedHit(tb testing.TB, setup clusterSetup, headers ...string) (do func()) {
	c := newTestCluster(tb, setup, "a", "b")
	a := c.node("a")
	path := pathWhere(tb, "fwd", func(p string) bool { return a.owner(tb, p) == "b" })
	if r := a.get(tb, path); r.code != 200 {
		tb.Fatalf("warm-up: %+v", r)
	}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	tb.Cleanup(func() {
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
	})
	req.SetRequestURI(path)
	req.Header.SetHost(testHost)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	return func() {
		if err := a.client.DoTimeout(req, resp, 5*time.Second); err != nil || resp.StatusCode() != 200 {
			tb.Fatalf("forwarded hit: %v %d", err, resp.StatusCode())
		}
	}
}

// BenchmarkForwardedHit is a hit on the key's owner reached through
// another node, in-process: client → edge public listener → owner peer
// listener, over in-memory connections. allocs/op counts the whole
// exchange (client, edge and owner).
func BenchmarkForwardedHit(b *testing.B) {
	do := forwardedHit(b, clusterSetup{})
	b.ReportAllocs()
	for b.Loop() {
		do()
	}
}

// forwardedHitMux is forwardedHit over the multiplexed peer transport
// (cluster.transport: mux), once the edge's connection to the owner is
// open.
func forwardedHitMux(tb testing.TB, headers ...string) (do func()) {
	return forwardedHitMuxCfg(tb, nil, headers...)
}

// forwardedHitMuxCfg is forwardedHitMux with cfg applied to the nodes'
// configuration too.
func forwardedHitMuxCfg(tb testing.TB, cfg func(*config.Config), headers ...string) (do func()) {
	var a *Proxy
	do = forwardedHit(tb, clusterSetup{cfg: func(c *config.Config) {
		c.Cluster.Transport = "mux"
		if cfg != nil {
			cfg(c)
		}
	}, handler: func(n *testNode, next fasthttp.RequestHandler) fasthttp.RequestHandler {
		if n.id == "a" {
			a = n.p
		}
		return next
	}}, headers...)
	deadline := time.Now().Add(5 * time.Second)
	for !a.cluster.Load().MuxOpen("b") {
		if time.Now().After(deadline) {
			tb.Fatal("no mux connection from a to b")
		}
		do()
		time.Sleep(time.Millisecond)
	}
	return do
}

// BenchmarkForwardedHitMux is BenchmarkForwardedHit over the
// multiplexed peer transport.
func BenchmarkForwardedHitMux(b *testing.B) {
	do := forwardedHitMux(b)
	b.ReportAllocs()
	for b.Loop() {
		do()
	}
}

// TestAppendRemoteIP: the allocation-free form of the client address is
// what net.IP.String writes.
func TestAppendRemoteIP(t *testing.T) {
	for _, ip := range []net.IP{net.IPv4(10, 1, 2, 3), net.ParseIP("2001:db8::1"), net.IPv4(127, 0, 0, 1).To4()} {
		var ctx fasthttp.RequestCtx
		ctx.Init(&fasthttp.Request{}, &net.TCPAddr{IP: ip, Port: 1}, nil)
		if got, want := string(appendRemoteIP(nil, &ctx)), ip.String(); got != want {
			t.Errorf("appendRemoteIP(%v) = %q, want %q", ip, got, want)
		}
	}
}
