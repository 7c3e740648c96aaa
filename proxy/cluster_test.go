package proxy

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/cachekey"
	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/proxy/cache"
	"github.com/shield-proxy/shield/proxy/cluster"
	"github.com/shield-proxy/shield/routing"
)

// A request through a node that does not own its key is forwarded to the
// owner, which fetches once; every node then answers from the owner's
// copy, and only the owner stores it.
func TestClusterForwardsToOwner(t *testing.T) {
	c := newTestCluster(t, clusterSetup{}, "a", "b", "c")
	a, b := c.node("a"), c.node("b")
	path := pathWhere(t, "fwd", func(p string) bool { return a.owner(t, p) == "b" })

	r := a.get(t, path)
	if r.code != 200 || r.body != "body of "+path {
		t.Fatalf("via a: %+v", r)
	}
	if want := "shield; fwd=miss; fwd-status=200; stored, shield-edge; detail=peer-b"; r.cacheStatus != want {
		t.Fatalf("Cache-Status via a = %q, want %q", r.cacheStatus, want)
	}
	r = c.node("c").get(t, path)
	if !strings.HasPrefix(r.cacheStatus, "shield; hit; ttl=") || !strings.HasSuffix(r.cacheStatus, ", shield-edge; detail=peer-b") {
		t.Fatalf("Cache-Status via c = %q, want the owner's hit relayed", r.cacheStatus)
	}
	r = b.get(t, path)
	if !strings.HasPrefix(r.cacheStatus, "shield; hit; ttl=") {
		t.Fatalf("Cache-Status on the owner = %q, want a local hit", r.cacheStatus)
	}
	if n := c.origin.hits(path); n != 1 {
		t.Fatalf("origin saw %d requests, want 1", n)
	}
	if !b.has(t, path, cache.KindResponse) {
		t.Fatal("the owner stored nothing")
	}
	if a.has(t, path, cache.KindResponse) || c.node("c").has(t, path, cache.KindResponse) {
		t.Fatal("a non-owner stored the forwarded answer")
	}
	if got := a.peerOutcome("b", cluster.PeerOK); got != 1 {
		t.Fatalf("a's ok forwards to b = %d, want 1", got)
	}
}

// The forwarded request carries the client's fields but none of the
// client's Shield-* fields; the owner's origin request carries none of
// the peer protocol's.
func TestClusterForwardStripsShieldHeaders(t *testing.T) {
	c := newTestCluster(t, clusterSetup{}, "a", "b")
	a := c.node("a")
	var seen fasthttp.RequestHeader
	c.origin.setHandler(func(ctx *fasthttp.RequestCtx) {
		ctx.Request.Header.CopyTo(&seen)
		ctx.Response.Header.Set("Cache-Control", "no-store")
	})
	path := pathWhere(t, "strip", func(p string) bool { return a.owner(t, p) == "b" })
	r := a.get(t, path, "X-Client: kept", "Shield-Tenant: forged", "Shield-Auth: forged")
	if r.code != 200 || !strings.HasSuffix(r.cacheStatus, "shield-edge; detail=peer-b") {
		t.Fatalf("via a: %+v", r)
	}
	if string(seen.Peek("X-Client")) != "kept" {
		t.Fatal("the client's field did not reach the origin")
	}
	for k := range seen.All() {
		if isShieldHeader(k) {
			t.Fatalf("the origin saw peer protocol field %s", k)
		}
	}
}

// An owner that cannot be reached costs a refresh of membership and the
// request is served locally; after three failures the breaker skips it.
func TestClusterOwnerDownServedLocally(t *testing.T) {
	c := newTestCluster(t, clusterSetup{}, "a", "b")
	a, b := c.node("a"), c.node("b")
	c.net.down(b.peerAddr)
	for i := range 5 {
		path := pathWhere(t, "down"+itoa(i), func(p string) bool { return a.owner(t, p) == "b" })
		r := a.get(t, path)
		if r.code != 200 || r.cacheStatus != "shield; fwd=miss; fwd-status=200; stored" {
			t.Fatalf("request %d with the owner down: %+v", i, r)
		}
	}
	if got := a.peerOutcome("b", cluster.PeerError); got != 3 {
		t.Fatalf("errors = %d, want 3 (then the breaker opens)", got)
	}
	if got := a.peerOutcome("b", cluster.PeerSkipped); got != 2 {
		t.Fatalf("skipped = %d, want 2", got)
	}
	if a.src.refreshes.Load() != 3 {
		t.Fatalf("membership refreshes = %d, want one per failed forward (3)", a.src.refreshes.Load())
	}
}

// A peer answer larger than the forwarding limit is served locally
// without counting against the peer.
func TestClusterForwardTooLargeServedLocally(t *testing.T) {
	c := newTestCluster(t, clusterSetup{opts: func(o *ClusterOptions) { o.MaxBody = 64 }}, "a", "b")
	a := c.node("a")
	c.origin.setHandler(func(ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.Set("Cache-Control", "public, max-age=60")
		ctx.SetBody(make([]byte, 1000))
	})
	path := pathWhere(t, "large", func(p string) bool { return a.owner(t, p) == "b" })
	r := a.get(t, path)
	if r.code != 200 || len(r.body) != 1000 || r.cacheStatus != "shield; fwd=miss; fwd-status=200; stored" {
		t.Fatalf("large answer: code %d, %d bytes, Cache-Status %q", r.code, len(r.body), r.cacheStatus)
	}
	if a.peerOutcome("b", cluster.PeerError) != 1 {
		t.Fatalf("errors = %d, want 1", a.peerOutcome("b", cluster.PeerError))
	}
	// cluster.TestForwardTooLarge checks that no failure was counted.
	if st := a.p.Status(time.Now()).Cluster; !peerUp(st.Peers, "b") {
		t.Fatalf("breaker after a too-large answer: b down on the status page, want closed")
	}
}

// Nodes whose views disagree: the owner answers 421 with its generation,
// the edge refreshes membership and serves the request itself.
func TestClusterMisdirectedServedLocally(t *testing.T) {
	c := newTestCluster(t, clusterSetup{}, "a", "b", "c")
	a, b := c.node("a"), c.node("b")
	// a alone learns of a change (c left); b still has the old view.
	c.setPeers([]*testNode{a}, "a", "b")
	path := pathWhere(t, "mis", func(p string) bool { return a.owner(t, p) == "b" })
	// Make the old generation unacceptable on b: two more changes on b
	// push a's generation out of b's overlap.
	c.setPeers([]*testNode{b}, "b")
	c.setPeers([]*testNode{b}, "a", "b", "c")
	r := a.get(t, path)
	if r.code != 200 || r.cacheStatus != "shield; fwd=miss; fwd-status=200; stored" {
		t.Fatalf("misdirected forward: %+v", r)
	}
	if got := a.peerOutcome("b", cluster.PeerMisdirected); got != 1 {
		t.Fatalf("misdirected = %d, want 1", got)
	}
	if got := b.counter(`shield_peer_misdirected_total`); got != 1 {
		t.Fatalf("b answered 421 %d times, want 1", got)
	}
	if a.src.refreshes.Load() != 1 {
		t.Fatalf("refreshes = %d, want 1", a.src.refreshes.Load())
	}
}

// A node with a different secret is refused (403 with a generation
// field); the edge serves locally and does not refresh membership.
func TestClusterForbiddenServedLocally(t *testing.T) {
	c := newTestCluster(t, clusterSetup{opts: func(o *ClusterOptions) {
		if o.Secret != "" {
			o.Secret += "-" + time.Now().String() // every node its own secret
		}
	}}, "a", "b")
	a, b := c.node("a"), c.node("b")
	path := pathWhere(t, "forbidden", func(p string) bool { return a.owner(t, p) == "b" })
	r := a.get(t, path)
	if r.code != 200 || r.cacheStatus != "shield; fwd=miss; fwd-status=200; stored" {
		t.Fatalf("refused forward: %+v", r)
	}
	if a.peerOutcome("b", cluster.PeerForbidden) != 1 || b.counter(`shield_peer_forbidden_total`) != 1 {
		t.Fatalf("forbidden: edge counted %d, owner %d; want 1 and 1", a.peerOutcome("b", cluster.PeerForbidden), b.counter(`shield_peer_forbidden_total`))
	}
	if a.src.refreshes.Load() != 0 {
		t.Fatal("a refused forward refreshed membership")
	}
}

// peerReq sends a raw request to n's peer listener from the address
// from, with the given fields ("Name: value").
func (c *testCluster) peerReq(t testing.TB, from net.IP, n *testNode, method, uri, body string, headers ...string) *fasthttp.Response {
	t.Helper()
	hc := &fasthttp.HostClient{Addr: n.peerAddr, Dial: c.net.dialFrom(from), DisablePathNormalizing: true}
	defer hc.CloseIdleConnections()
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.Header.SetMethod(method)
	req.SetRequestURI(uri)
	req.Header.SetHost(testHost)
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ":")
		req.Header.Set(k, strings.TrimSpace(v))
	}
	if body != "" {
		req.SetBodyString(body)
	}
	resp := new(fasthttp.Response)
	if err := hc.DoTimeout(req, resp, 10*time.Second); err != nil {
		t.Fatalf("peer request to %s: %v", n.id, err)
	}
	return resp
}

func genField(v *routing.View) string { return "Shield-Generation: " + itoa64(v.Current.Generation()) }

func itoa64(n uint64) string { return strconv.FormatUint(n, 10) }

// The peer listener checks the secret and the caller's address, then the
// generation: the current one, or the previous one inside the overlap;
// anything else is 421 with the current generation.
func TestPeerHandlerChecks(t *testing.T) {
	c := newTestCluster(t, clusterSetup{overlap: 300 * time.Millisecond}, "a", "b", "c")
	a, b := c.node("a"), c.node("b")
	auth := "Shield-Auth: " + clusterSecret
	v0 := b.m.View()

	if r := c.peerReq(t, a.ip, b, "GET", "/x", "", genField(v0), "Shield-Auth: wrong"); r.StatusCode() != 403 || string(r.Header.Peek("Shield-Generation")) != "0" {
		t.Fatalf("wrong secret: %d %q", r.StatusCode(), r.Header.Peek("Shield-Generation"))
	}
	if r := c.peerReq(t, net.IPv4(10, 9, 9, 9), b, "GET", "/x", "", genField(v0), auth); r.StatusCode() != 403 {
		t.Fatalf("unknown caller address: %d, want 403", r.StatusCode())
	}
	if r := c.peerReq(t, a.ip, b, "GET", "/x", "", "Shield-Generation: junk", auth); r.StatusCode() != 421 || string(r.Header.Peek("Shield-Generation")) != itoa64(v0.Current.Generation()) {
		t.Fatalf("bad generation: %d %q", r.StatusCode(), r.Header.Peek("Shield-Generation"))
	}
	if r := c.peerReq(t, a.ip, b, "GET", "/x", "", genField(v0), auth); r.StatusCode() != 200 {
		t.Fatalf("current generation: %d, want 200", r.StatusCode())
	}
	// A change: the old generation is accepted until the overlap ends.
	c.setPeers([]*testNode{b}, "a", "b")
	if r := c.peerReq(t, a.ip, b, "GET", "/x", "", genField(v0), auth); r.StatusCode() != 200 {
		t.Fatalf("previous generation inside the overlap: %d, want 200", r.StatusCode())
	}
	waitUntil(t, "the overlap ends", func() bool { return !b.m.View().Accepts(v0.Current.Generation(), time.Now()) })
	r := c.peerReq(t, a.ip, b, "GET", "/x", "", genField(v0), auth)
	if r.StatusCode() != 421 || string(r.Header.Peek("Shield-Generation")) != itoa64(b.m.View().Current.Generation()) {
		t.Fatalf("previous generation after the overlap: %d %q", r.StatusCode(), r.Header.Peek("Shield-Generation"))
	}
	if b.counter(`shield_peer_forbidden_total`) != 2 || b.counter(`shield_peer_misdirected_total`) != 2 {
		t.Fatalf("forbidden %d, misdirected %d; want 2 and 2", b.counter(`shield_peer_forbidden_total`), b.counter(`shield_peer_misdirected_total`))
	}
}

// Without SetCluster the peer handler has nothing to serve.
func TestPeerHandlerWithoutCluster(t *testing.T) {
	o := newFakeOrigin(t)
	p := newTestProxy(t, o.addr, nil)
	ctx := get(t, "/x")
	p.PeerHandler()(ctx)
	if ctx.Response.StatusCode() != 404 {
		t.Fatalf("status %d, want 404", ctx.Response.StatusCode())
	}
	if p.Handoff(context.Background()) != 0 {
		t.Fatal("a single node handed off")
	}
}

// ownerIn is the owner of path's key in a peer set of ids.
func (c *testCluster) ownerIn(t testing.TB, path string, ids ...string) string {
	t.Helper()
	var peers []routing.Peer
	for _, id := range ids {
		n := c.node(id)
		peers = append(peers, routing.Peer{ID: n.id, Addr: n.peerAddr, Weight: 1})
	}
	set, err := routing.NewPeerSet(ids[0], peers)
	if err != nil {
		t.Fatal(err)
	}
	o, _ := set.Owner(cachekey.Digest(c.nodes[0].key(t, path)))
	return o.ID
}

// Inside the overlap window a new owner that misses asks the key's
// previous owner for its copy once, before the origin: a membership
// change does not cost an origin fetch per moved key.
func TestClusterReadThroughPreviousOwner(t *testing.T) {
	c := newTestCluster(t, clusterSetup{}, "a", "b", "c")
	a, b, cn := c.node("a"), c.node("b"), c.node("c")
	c.setPeers(c.nodes, "a", "b")
	moved := func(p string) bool { return c.ownerIn(t, p, "a", "b") == "b" && c.ownerIn(t, p, "a", "b", "c") == "c" }
	hit := pathWhere(t, "rt-hit", moved)
	miss := pathWhere(t, "rt-miss", moved)
	if r := a.get(t, hit); r.code != 200 || !b.has(t, hit, cache.KindResponse) {
		t.Fatalf("priming the old owner: %+v", r)
	}
	c.setPeers(c.nodes, "a", "b", "c")

	r := a.get(t, hit)
	if r.code != 200 || r.body != "body of "+hit || !strings.HasSuffix(r.cacheStatus, "shield-edge; detail=peer-c") {
		t.Fatalf("after the change: %+v", r)
	}
	if n := c.origin.hits(hit); n != 1 {
		t.Fatalf("origin saw %d requests for the moved key, want 1 (read-through)", n)
	}
	if !cn.has(t, hit, cache.KindResponse) {
		t.Fatal("the new owner did not keep the previous owner's copy")
	}
	if got := cn.counter(`shield_peer_read_through_total{outcome="hit"}`); got != 1 {
		t.Fatalf("read-through hits = %d, want 1", got)
	}

	// The previous owner has nothing: 504 there, the origin here.
	if r := a.get(t, miss); r.code != 200 || c.origin.hits(miss) != 1 {
		t.Fatalf("read-through miss: %+v, origin %d", r, c.origin.hits(miss))
	}
	if got := cn.counter(`shield_peer_read_through_total{outcome="miss"}`); got != 1 {
		t.Fatalf("read-through misses = %d, want 1", got)
	}
	if got := b.readThroughsReceived(); len(got) != 2 || got[0] != hit || got[1] != miss {
		t.Fatalf("read-throughs received by the previous owner = %q, want [%s %s]", got, hit, miss)
	}
}

// A read-through is answered from memory only: a miss or a stale copy is
// 504, never an origin fetch on the previous owner.
func TestPeerReadThroughOnlyIfCached(t *testing.T) {
	c := newTestCluster(t, clusterSetup{}, "a", "b")
	a, b := c.node("a"), c.node("b")
	c.origin.setHandler(func(ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.Set("Cache-Control", "public, max-age=0, stale-if-error=600")
		ctx.SetBodyString("stale soon")
	})
	path := pathWhere(t, "rto", func(p string) bool { return a.owner(t, p) == "b" })
	gen, auth := genField(b.m.View()), "Shield-Auth: "+clusterSecret
	r := c.peerReq(t, a.ip, b, "GET", path, "", gen, auth, "Shield-Read-Through: 1")
	if r.StatusCode() != 504 || string(r.Header.Peek("Cache-Status")) != "shield; fwd=miss; detail=only-if-cached" || c.origin.hits(path) != 0 {
		t.Fatalf("read-through of a missing key: %d %q, origin %d", r.StatusCode(), r.Header.Peek("Cache-Status"), c.origin.hits(path))
	}
	if r := b.get(t, path); r.code != 200 || !b.has(t, path, cache.KindResponse) {
		t.Fatalf("storing a stale-at-once copy: %+v", r)
	}
	r = c.peerReq(t, a.ip, b, "GET", path, "", gen, auth, "Shield-Read-Through: 1")
	if r.StatusCode() != 504 || string(r.Header.Peek("Cache-Status")) != "shield; fwd=stale; detail=only-if-cached" || c.origin.hits(path) != 1 {
		t.Fatalf("read-through of a stale key: %d %q, origin %d", r.StatusCode(), r.Header.Peek("Cache-Status"), c.origin.hits(path))
	}
}

// Regression: per-request state is pooled. A request that sets the
// key's previous owner (a key that moved here inside the overlap) must
// not leave it behind for a later request on the same pooled state: a
// forwarded request whose owner is down is served locally and must go
// to the origin, not read through to the first key's previous owner.
func TestClusterPooledPrevOwnerNotReused(t *testing.T) {
	c := newTestCluster(t, clusterSetup{}, "b", "c", "d")
	b, cn, d := c.node("b"), c.node("c"), c.node("d")
	c.setPeers(c.nodes, "b", "d")
	moved := pathWhere(t, "moved", func(p string) bool { return c.ownerIn(t, p, "b", "d") == "b" && c.ownerIn(t, p, "b", "c", "d") == "c" })
	c.setPeers(c.nodes, "b", "c", "d")
	c.net.down(d.peerAddr)
	for i := range 30 {
		// Served on c, which looks up the previous owner b.
		if r := summary(serve(cn.p, get(t, moved))); r.code != 200 {
			t.Fatalf("moved key: %+v", r)
		}
		// d owns this one and is down: c serves it as a local miss.
		other := pathWhere(t, "other"+itoa(i), func(p string) bool { return cn.owner(t, p) == "d" })
		if r := summary(serve(cn.p, get(t, other))); r.code != 200 || r.body != "body of "+other {
			t.Fatalf("request %d for a key owned by the down node: %+v", i, r)
		}
	}
	if got := b.readThroughsReceived(); len(got) != 1 || got[0] != moved {
		t.Fatalf("read-throughs received by b = %q, want only [%s]: a stale previous owner leaked into unrelated requests", got, moved)
	}
}

// A leaving node pushes its hottest fresh entries to their new owners,
// which serve them as hits without asking the origin.
func TestClusterHandoffOnLeave(t *testing.T) {
	c := newTestCluster(t, clusterSetup{}, "a", "b")
	a, b := c.node("a"), c.node("b")
	path := pathWhere(t, "hand", func(p string) bool { return a.owner(t, p) == "a" })
	key := a.key(t, path)
	for i := 0; ; i++ {
		a.get(t, path)
		if top := a.cl().Hottest(10); len(top) > 0 && bytes.Equal(top[0], key) {
			break
		}
		if i > 5000 {
			t.Fatal("the key never became hot")
		}
	}
	c.setPeers(c.nodes, "b") // a leaves
	if sent := a.p.Handoff(context.Background()); sent != 1 {
		t.Fatalf("Handoff sent %d entries, want 1", sent)
	}
	if !b.has(t, path, cache.KindResponse) || b.counter(`shield_handoff_entries_received_total`) != 1 {
		t.Fatal("the new owner did not take the entry")
	}
	if r := b.get(t, path); !strings.HasPrefix(r.cacheStatus, "shield; hit") || c.origin.hits(path) != 1 {
		t.Fatalf("on the new owner: %+v, origin %d", r, c.origin.hits(path))
	}
	// A second push finds the key held: not overwritten, still 204.
	if sent := a.p.Handoff(context.Background()); sent != 1 || b.counter(`shield_handoff_entries_received_total`) != 1 {
		t.Fatalf("second hand-off: sent %d, taken %d", sent, b.counter(`shield_handoff_entries_received_total`))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if sent := a.p.Handoff(ctx); sent != 0 {
		t.Fatalf("cancelled hand-off sent %d", sent)
	}
	// Malformed hand-offs are refused.
	gen, auth := genField(b.m.View()), "Shield-Auth: "+clusterSecret
	for _, body := range []string{"", "\x05ab", "\x02abnot-an-entry"} {
		if r := c.peerReq(t, a.ip, b, "POST", handoffPath, body, gen, auth); r.StatusCode() != 400 {
			t.Fatalf("hand-off body %q: %d, want 400", body, r.StatusCode())
		}
	}
}

// An edge forwarding a hot key keeps a near copy and answers from it
// without the hop; an admin purge on any node reaches every node and
// drops the owner's copy and the near copy.
func TestClusterNearCopyAndPurgeFanOut(t *testing.T) {
	c := newTestCluster(t, clusterSetup{yaml: "  hot_key_max_age: 5s\n", opts: func(o *ClusterOptions) { o.HotKeyRate = 1 }}, "a", "b")
	a, b := c.node("a"), c.node("b")
	path := pathWhere(t, "near", func(p string) bool { return a.owner(t, p) == "b" })
	for i := 0; a.counter(`shield_near_copies_stored_total`) == 0; i++ {
		a.get(t, path)
		if i > 5000 {
			t.Fatal("no near copy after 5000 requests")
		}
	}
	if !a.has(t, path, cache.KindNearCopy) {
		t.Fatal("the edge holds no near copy")
	}
	forwards := a.peerOutcome("b", cluster.PeerOK)
	r := a.get(t, path)
	if !strings.HasPrefix(r.cacheStatus, "shield; hit; ttl=") || strings.Contains(r.cacheStatus, "peer-b") || a.peerOutcome("b", cluster.PeerOK) != forwards {
		t.Fatalf("near-copy hit: %+v (forwards %d → %d)", r, forwards, a.peerOutcome("b", cluster.PeerOK))
	}
	if a.counter(`shield_near_copy_hits_total`) == 0 {
		t.Fatal("near-copy hit not counted")
	}
	code, body := admin(t, a.p, "POST", "/purge?url=http://"+testHost+path)
	if code != 200 || !strings.Contains(body, `"b":200`) {
		t.Fatalf("purge: %d %s", code, body)
	}
	if a.has(t, path, cache.KindNearCopy) || b.has(t, path, cache.KindResponse) {
		t.Fatal("a copy survived the purge")
	}
	if code, _ := admin(t, a.p, "POST", "/purge"); code != 400 {
		t.Fatalf("purge without a target: %d, want 400", code)
	}
}

// TestClusterForwardedFieldsFromEdge: the edge sets the forwarding fields
// for its client — replacing a client's, extending a trusted proxy's —
// and the key's owner sends them to the origin as the edge set them; the
// owner's cache fetch drops the ignore_query parameters. Over either
// transport: a mux request is encoded as the edge builds it, an HTTP one
// is a fasthttp request.
func TestClusterForwardedFieldsFromEdge(t *testing.T) {
	for _, tc := range []struct {
		transport string
		trusted   bool
	}{{"http", false}, {"http", true}, {"mux", false}, {"mux", true}} {
		trusted := tc.trusted
		t.Run(tc.transport+map[bool]string{false: " untrusted", true: " trusted"}[trusted], func(t *testing.T) {
			c := newTestCluster(t, clusterSetup{cfg: func(cfg *config.Config) {
				cfg.Cluster.Transport = tc.transport
				cfg.Routes[0].Cache.IgnoreQuery = []string{"utm_source"}
				if trusted {
					cfg.Server.TrustedProxies = []string{"0.0.0.0/0", "::/0"}
				}
			}}, "a", "b")
			a := c.node("a")
			if tc.transport == "mux" {
				waitMuxOpen(t, a, "b")
			}
			var seen fasthttp.RequestHeader
			var uri string
			c.origin.setHandler(func(ctx *fasthttp.RequestCtx) {
				ctx.Request.Header.CopyTo(&seen)
				uri = string(ctx.Request.Header.RequestURI())
				ctx.Response.Header.Set("Cache-Control", "max-age=60")
			})
			path := pathWhere(t, "xff", func(p string) bool { return a.owner(t, p+"?a=1") == "b" })
			r := a.get(t, path+"?utm_source=evil&a=1", "X-Forwarded-For: 6.6.6.6", "X-Forwarded-Port: 1",
				"X-Forwarded-Proto: https", "X-Forwarded-Host: evil.example", "X-Forwarded-Prefix: /evil", "Forwarded: for=6.6.6.6")
			if r.code != 200 || !strings.HasSuffix(r.cacheStatus, "shield-edge; detail=peer-b") {
				t.Fatalf("via a: %+v", r)
			}
			if uri != path+"?a=1" {
				t.Errorf("the owner's fetch sent %q, want %q", uri, path+"?a=1")
			}
			xff := string(seen.Peek("X-Forwarded-For"))
			want := map[string]string{"X-Forwarded-Prefix": "", "Forwarded": "", "Shield-Forwarded": ""}
			if trusted {
				if !strings.HasPrefix(xff, "6.6.6.6, ") || strings.Count(xff, ",") != 1 {
					t.Errorf("X-Forwarded-For = %q, want the trusted proxy's chain and the address the edge saw", xff)
				}
				want["X-Forwarded-Port"], want["X-Forwarded-Proto"], want["X-Forwarded-Host"] = "1", "https", "evil.example"
			} else {
				if xff == "" || strings.Contains(xff, "6.6.6.6") || strings.Contains(xff, ",") {
					t.Errorf("X-Forwarded-For = %q, want only the address the edge saw", xff)
				}
				want["X-Forwarded-Port"], want["X-Forwarded-Proto"], want["X-Forwarded-Host"] = "", "http", testHost
			}
			for name, v := range want {
				if got := string(seen.Peek(name)); got != v {
					t.Errorf("origin saw %s = %q, want %q", name, got, v)
				}
			}
		})
	}
}

// TestClusterLegacyEdgeForwarded: an edge from before Shield-Forwarded
// passed its client's forwarding fields on unchecked; the owner then
// uses only the client address the edge saw (Shield-Client-Ip), as
// before, and forwards none of the client's fields.
func TestClusterLegacyEdgeForwarded(t *testing.T) {
	legacy := func(n *testNode, next fasthttp.RequestHandler) fasthttp.RequestHandler {
		return func(ctx *fasthttp.RequestCtx) {
			h := &ctx.Request.Header
			if len(h.PeekBytes(hShieldForwarded)) > 0 {
				h.DelBytes(hShieldForwarded)
				h.Set("X-Forwarded-For", "6.6.6.6") // the client's, as an old edge sent them
				h.Set("X-Forwarded-Port", "1")
				h.Set("X-Forwarded-Host", "evil.example")
			}
			next(ctx)
		}
	}
	c := newTestCluster(t, clusterSetup{handler: legacy}, "a", "b")
	a := c.node("a")
	var seen fasthttp.RequestHeader
	c.origin.setHandler(func(ctx *fasthttp.RequestCtx) {
		ctx.Request.Header.CopyTo(&seen)
		ctx.Response.Header.Set("Cache-Control", "no-store")
	})
	path := pathWhere(t, "legacy", func(p string) bool { return a.owner(t, p) == "b" })
	if r := a.get(t, path); r.code != 200 || !strings.HasSuffix(r.cacheStatus, "shield-edge; detail=peer-b") {
		t.Fatalf("via a: %+v", r)
	}
	for name, want := range map[string]string{"X-Forwarded-For": clientAddr.IP.String(), "X-Forwarded-Port": "",
		"X-Forwarded-Host": testHost, "X-Forwarded-Proto": "http"} {
		if got := string(seen.Peek(name)); got != want {
			t.Errorf("origin saw %s = %q, want %q", name, got, want)
		}
	}
}

// TestClusterClientCannotReachPeerEndpoints: a public request whose path
// is one of the peer protocol's (/__shield/purge, purgelog, usage,
// handoff), however spelt, is a client request on the owner too: the
// edge forwards it with the cluster secret, and the owner must not run
// a purge (or hand out its purge log) for it.
func TestClusterClientCannotReachPeerEndpoints(t *testing.T) {
	c := newTestCluster(t, clusterSetup{}, "a", "b")
	a, b := c.node("a"), c.node("b")
	kept := pathWhere(t, "kept", func(p string) bool { return a.owner(t, p) == "b" })
	if r := b.get(t, kept); r.code != 200 {
		t.Fatalf("warm %s: %+v", kept, r)
	}
	for _, base := range []string{purgePath + "?route=r", purgePath + "?route=r&_id=1&_at=1", "/__shield%2Fpurge?route=r",
		purgeLogPath + "?after=0", usagePath + "?x=1"} {
		target := ""
		for i := 0; target == ""; i++ {
			if p := base + "&n=" + itoa(i); a.owner(t, p) == "b" {
				target = p
			}
		}
		r := a.get(t, target)
		if strings.Contains(r.body, "purged") || strings.Contains(r.body, `"records"`) {
			t.Errorf("GET %s via a reached b's peer endpoint: %+v", target, r)
		}
	}
	if r := b.get(t, kept); !strings.HasPrefix(r.cacheStatus, "shield; hit") {
		t.Fatalf("%s after the attempts: %+v, want still a hit (nothing purged)", kept, r)
	}
}
