package proxy

import (
	"encoding/json"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/proxy/cache"
	"github.com/shield-proxy/shield/statuspage"
)

// dynamicSetup makes harness nodes behave as with Consul membership.
var dynamicSetup = clusterSetup{opts: func(o *ClusterOptions) { o.DynamicMembership = true }}

// adminPurge runs POST /purge?args on n's admin handler.
func (n *testNode) adminPurge(t *testing.T, args url.Values) string {
	t.Helper()
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod(fasthttp.MethodPost)
	ctx.Request.SetRequestURI("/purge?" + args.Encode())
	n.p.AdminHandler()(&ctx)
	if ctx.Response.StatusCode() != fasthttp.StatusOK {
		t.Fatalf("purge %v on %s: %d %s", args, n.id, ctx.Response.StatusCode(), ctx.Response.Body())
	}
	return string(ctx.Response.Body())
}

func (n *testNode) gated() bool { return n.p.cache.Invalidations().Gated.Load() }

// peerSynced is the status page's purge_synced for peer id.
func peerSynced(peers []statuspage.Peer, id string) bool {
	for _, p := range peers {
		if p.ID == id {
			return p.PurgeSynced
		}
	}
	return false
}

// TestPurgeSyncGate: with dynamic membership a node whose peer does not
// have it in its view (so that peer's purges skip it) serves nothing
// from its cache; a purge that peer applied meanwhile reaches the node
// through the sync before it serves from its cache again.
func TestPurgeSyncGate(t *testing.T) {
	c := newTestCluster(t, dynamicSetup, "a", "b")
	a, b := c.node("a"), c.node("b")
	waitUntil(t, "both nodes in sync", func() bool { return !a.gated() && !b.gated() })
	path := pathWhere(t, "gate", func(p string) bool { return a.owner(t, p) == "a" })
	a.get(t, path)
	if r := a.get(t, path); !strings.Contains(r.cacheStatus, "hit") {
		t.Fatalf("second GET via a: %q, want a hit", r.cacheStatus)
	}

	c.setPeers([]*testNode{b}, "b") // b drops a: b's purges skip a from now on
	waitUntil(t, "a out of sync once b dropped it", a.gated)
	if st := a.p.Status(time.Now()).Cluster; st.CacheOpen || peerSynced(st.Peers, "b") {
		t.Errorf("status of a out of sync: cache_open %v, b purge_synced %v; want both false", st.CacheOpen, peerSynced(st.Peers, "b"))
	}
	before := c.origin.hits(path)
	if r := a.get(t, path); strings.Contains(r.cacheStatus, "hit") {
		t.Errorf("GET via a out of sync: %q, want no hit", r.cacheStatus)
	}
	if got := c.origin.hits(path); got != before+1 {
		t.Errorf("origin requests for %s while a is out of sync: %d, want %d", path, got, before+1)
	}
	if body := b.adminPurge(t, url.Values{"url": {"http://" + testHost + path}}); strings.Contains(body, `"a"`) {
		t.Fatalf("b delivered to a, which is not in its view: %s", body)
	}

	c.setPeers([]*testNode{b}, "a", "b")
	waitUntil(t, "a back in sync", func() bool { return !a.gated() })
	if st := a.p.Status(time.Now()).Cluster; !st.CacheOpen || !peerSynced(st.Peers, "b") {
		t.Errorf("status of a in sync: cache_open %v, b purge_synced %v; want both true", st.CacheOpen, peerSynced(st.Peers, "b"))
	}
	before = c.origin.hits(path)
	if r := a.get(t, path); strings.Contains(r.cacheStatus, "hit") {
		t.Errorf("GET via a after the sync: %q; b's purge (applied while a was out of its view) was not synced", r.cacheStatus)
	}
	if r := a.get(t, path); !strings.Contains(r.cacheStatus, "hit") {
		t.Errorf("GET via a in sync again: %q, want a hit", r.cacheStatus)
	}
	if got := c.origin.hits(path); got != before+1 {
		t.Errorf("origin requests after the sync: %d, want %d", got, before+1)
	}
}

// TestPurgeRelayedAcrossViews: a purge from a node that does not know
// some node reaches it through a peer that does, before the purge is
// answered.
func TestPurgeRelayedAcrossViews(t *testing.T) {
	c := newTestCluster(t, dynamicSetup, "a", "b", "c")
	a, b, cn := c.node("a"), c.node("b"), c.node("c")
	c.setPeers([]*testNode{a}, "a", "b")
	c.setPeers([]*testNode{cn}, "b", "c")
	waitUntil(t, "all in sync", func() bool { return !a.gated() && !b.gated() && !cn.gated() })
	path := pathWhere(t, "relay", func(p string) bool { return cn.owner(t, p) == "c" })
	cn.get(t, path)
	if r := cn.get(t, path); !strings.Contains(r.cacheStatus, "hit") {
		t.Fatalf("second GET via c: %q, want a hit", r.cacheStatus)
	}
	a.adminPurge(t, url.Values{"url": {"http://" + testHost + path}})
	if r := cn.get(t, path); strings.Contains(r.cacheStatus, "hit") {
		t.Errorf("GET via c right after a's purge: %q, want a miss (b should have relayed it)", r.cacheStatus)
	}
}

// TestPurgeRetriedUntilDelivered: a peer that refuses a purge (here: it
// answers 503) gets it again from its queue until it takes it, and its
// copy is gone then; the purge's answer says the peer was not reached.
func TestPurgeRetriedUntilDelivered(t *testing.T) {
	var failing atomic.Bool
	failing.Store(true)
	setup := clusterSetup{handler: func(n *testNode, next fasthttp.RequestHandler) fasthttp.RequestHandler {
		return func(ctx *fasthttp.RequestCtx) {
			if n.id == "b" && string(ctx.Path()) == purgePath && failing.Load() {
				ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
				return
			}
			next(ctx)
		}
	}}
	c := newTestCluster(t, setup, "a", "b")
	a, b := c.node("a"), c.node("b")
	path := pathWhere(t, "retry", func(p string) bool { return b.owner(t, p) == "b" })
	b.get(t, path)
	if !b.has(t, path, cache.KindResponse) {
		t.Fatalf("%s not stored on its owner b", path)
	}
	body := a.adminPurge(t, url.Values{"url": {"http://" + testHost + path}})
	if !strings.Contains(body, `"b":503`) {
		t.Errorf("purge answer %s, want b's 503 reported", body)
	}
	waitUntil(t, "a retried the purge", func() bool { return a.p.g.peerPurgeRetries.Get() >= 2 })
	if !b.has(t, path, cache.KindResponse) {
		t.Fatal("b's copy went before the purge got through: the test did not hold the purge back")
	}
	failing.Store(false)
	before := c.origin.hits(path)
	waitUntil(t, "the purge reached b", func() bool { return !b.has(t, path, cache.KindResponse) })
	if r := b.get(t, path); strings.Contains(r.cacheStatus, "hit") || c.origin.hits(path) != before+1 {
		t.Errorf("GET via b after the retried purge: %q, origin %d → %d; want a miss", r.cacheStatus, before, c.origin.hits(path))
	}
}

// TestOverflowPurgeStaysLocal: the "everything fetched before now" a
// peer gets when its purge queue overflowed empties that peer's cache
// only: it is neither logged there (others syncing from it would empty
// theirs) nor relayed, even across differing views.
func TestOverflowPurgeStaysLocal(t *testing.T) {
	c := newTestCluster(t, clusterSetup{}, "a", "b")
	a, b := c.node("a"), c.node("b")
	path := pathWhere(t, "overflow", func(p string) bool { return a.owner(t, p) == "a" })
	a.get(t, path)
	bPath := pathWhere(t, "overflow-b", func(p string) bool { return b.owner(t, p) == "b" })
	b.get(t, bPath)
	resp := c.peerReq(t, a.ip, b, "POST", purgePath+"?all=1&overflow=1&_id=77&_at=1", "",
		"Shield-Auth: "+clusterSecret, "Shield-Generation: 1") // a generation b does not have
	if resp.StatusCode() != fasthttp.StatusOK {
		t.Fatalf("overflow purge: %d %s", resp.StatusCode(), resp.Body())
	}
	if r := b.get(t, bPath); strings.Contains(r.cacheStatus, "hit") {
		t.Errorf("GET %s via b after its overflow purge: %q, want a miss", bPath, r.cacheStatus)
	}
	if recs := b.p.plog.Records(0); len(recs) != 0 {
		t.Errorf("b logged the overflow purge: %v", recs)
	}
	if r := a.get(t, path); !strings.Contains(r.cacheStatus, "hit") {
		t.Errorf("GET %s via a: %q; b's overflow purge reached a", path, r.cacheStatus)
	}
}

// TestPurgeSyncLegacyPeer: a peer from before purge sync (it answers the
// sync's question 400) does not keep the cache closed: a rolling upgrade
// must not turn every node into a pass-through.
func TestPurgeSyncLegacyPeer(t *testing.T) {
	setup := dynamicSetup
	setup.handler = func(n *testNode, next fasthttp.RequestHandler) fasthttp.RequestHandler {
		return func(ctx *fasthttp.RequestCtx) {
			if n.id == "b" && string(ctx.Path()) == purgeLogPath && !ctx.QueryArgs().Has("since") {
				ctx.Error("since must be unix nanoseconds\n", fasthttp.StatusBadRequest)
				return
			}
			next(ctx)
		}
	}
	c := newTestCluster(t, setup, "a", "b")
	a := c.node("a")
	waitUntil(t, "a in sync with its legacy peer", func() bool { return !a.gated() })
	path := pathWhere(t, "legacy", func(p string) bool { return a.owner(t, p) == "a" })
	a.get(t, path)
	if r := a.get(t, path); !strings.Contains(r.cacheStatus, "hit") {
		t.Errorf("second GET via a: %q, want a hit", r.cacheStatus)
	}
}

// TestReadThroughWhileOutOfSync: a node out of purge sync (here: a peer
// that just joined has not yet answered that it knows it) still answers
// that peer's read-through from its cache: the reader checks the copy
// against its own invalidations (TestPurgeSyncGate: its own clients get
// no hit).
func TestReadThroughWhileOutOfSync(t *testing.T) {
	var refuse atomic.Bool
	setup := dynamicSetup
	setup.handler = func(n *testNode, next fasthttp.RequestHandler) fasthttp.RequestHandler {
		return func(ctx *fasthttp.RequestCtx) {
			if n.id == "c" && refuse.Load() && string(ctx.Path()) == purgeLogPath {
				ctx.SetStatusCode(fasthttp.StatusForbidden) // "I do not know you"
				return
			}
			next(ctx)
		}
	}
	c := newTestCluster(t, setup, "a", "b", "c")
	a, cn := c.node("a"), c.node("c")
	c.setPeers(c.nodes, "a", "b")
	waitUntil(t, "a and b in sync", func() bool { return !a.gated() && !c.node("b").gated() })
	path := pathWhere(t, "rtsync", func(p string) bool {
		return a.owner(t, p) == "a" && c.ownerIn(t, p, "a", "b", "c") == "c"
	})
	a.get(t, path)
	if !a.has(t, path, cache.KindResponse) {
		t.Fatalf("%s not stored on its owner a", path)
	}
	refuse.Store(true)
	c.setPeers(c.nodes, "a", "b", "c") // c joins: a is out of sync until c answers
	waitUntil(t, "a out of sync with the new peer c", a.gated)
	before := c.origin.hits(path)
	if r := cn.get(t, path); r.code != 200 {
		t.Fatalf("GET via the new owner c: %+v", r)
	}
	if got := c.origin.hits(path); got != before || cn.counter(`shield_peer_read_through_total{outcome="hit"}`) != 1 {
		t.Errorf("origin requests for %s: %d → %d, c's read-through hits %d; want c to have read a's copy", path, before, got, cn.counter(`shield_peer_read_through_total{outcome="hit"}`))
	}
	if !a.gated() {
		t.Fatal("a back in sync during the test: it did not exercise the gate")
	}
}

// TestPurgeSyncViewShrinks: a peer leaving the view does not close the
// cache — the peers that stayed are still synced (a peer new to the view
// does: TestReadThroughWhileOutOfSync).
func TestPurgeSyncViewShrinks(t *testing.T) {
	c := newTestCluster(t, dynamicSetup, "a", "b", "c")
	a := c.node("a")
	waitUntil(t, "a in sync", func() bool { return !a.gated() })
	c.setPeers([]*testNode{a}, "a", "b") // c leaves a's view
	if a.gated() {
		t.Error("a closed its cache when a peer left its view")
	}
}

// TestPurgeAnswerNotHeldByHungPeer: a peer that takes a purge and never
// answers (its handler blocks) holds the purge's answer purgeAnswerWait
// at most; the answer names it pending and the other peer as having the
// purge. While it is behind, later purges do not wait for it at all (they
// join its queue). Once it answers again it gets them all.
func TestPurgeAnswerNotHeldByHungPeer(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	setup := clusterSetup{handler: func(n *testNode, next fasthttp.RequestHandler) fasthttp.RequestHandler {
		return func(ctx *fasthttp.RequestCtx) {
			if n.id == "c" && string(ctx.Path()) == purgePath {
				<-release
			}
			next(ctx)
		}
	}}
	c := newTestCluster(t, setup, "a", "b", "c")
	a, cn := c.node("a"), c.node("c")
	var paths []string
	for i := range 3 {
		p := pathWhere(t, "hung"+strconv.Itoa(i), func(p string) bool { return a.owner(t, p) == "c" })
		cn.get(t, p)
		if !cn.has(t, p, cache.KindResponse) {
			t.Fatalf("%s not stored on its owner c", p)
		}
		paths = append(paths, p)
	}
	for i, p := range paths {
		start := time.Now()
		body := a.adminPurge(t, url.Values{"url": {"http://" + testHost + p}})
		took := time.Since(start)
		var ans purgeAnswer
		if err := json.Unmarshal([]byte(body), &ans); err != nil {
			t.Fatalf("purge answer %q: %v", body, err)
		}
		if ans.Peers["b"] != fasthttp.StatusOK || !slices.Equal(ans.Pending, []string{"c"}) {
			t.Errorf("purge %d answer %s, want b 200 and c pending", i, body)
		}
		limit := purgeAnswerWait + 2*time.Second // slack for a loaded machine, far below the 5s peer timeout
		if i > 0 {
			limit = purgeAnswerWait // c is behind: not waited for at all
		}
		if took > limit {
			t.Errorf("purge %d answered in %v, want under %v", i, took, limit)
		}
	}
	if !cn.has(t, paths[0], cache.KindResponse) {
		t.Fatal("c's copy went while its purge handler was blocked: the test did not hold the purge back")
	}
	unblock()
	for _, p := range paths {
		waitUntil(t, "c got the purge of "+p, func() bool { return !cn.has(t, p, cache.KindResponse) })
	}
	waitUntil(t, "a's queue for c drained", func() bool {
		return a.p.g.set.GetOrCreateGauge(`shield_purge_queue_length`, nil).Get() == 0
	})
	if got := a.p.g.purgesPending.Get(); got != uint64(len(paths)) {
		t.Errorf("shield_purge_answered_pending_total %d, want %d", got, len(paths))
	}
}

// purgeAnswerWait is how long a purge's answer waits for peers
// (proxy/cluster's purgeAnswerWait).
const purgeAnswerWait = 500 * time.Millisecond

// TestStallClosesCache: a node whose process did not run for a while
// (the watchdog saw the gap) serves nothing from its cache until every
// peer has been asked again (b's sync answers are held back meanwhile:
// an answer, or a failure, after the stall would end it), then serves
// again.
func TestStallClosesCache(t *testing.T) {
	var hold atomic.Pointer[chan struct{}]
	setup := dynamicSetup
	setup.handler = func(n *testNode, next fasthttp.RequestHandler) fasthttp.RequestHandler {
		return func(ctx *fasthttp.RequestCtx) {
			if h := hold.Load(); n.id == "b" && string(ctx.Path()) == purgeLogPath && h != nil {
				<-*h
			}
			next(ctx)
		}
	}
	c := newTestCluster(t, setup, "a", "b")
	a := c.node("a")
	waitUntil(t, "in sync", func() bool { return !a.gated() })
	if l := a.p.cache.Invalidations().Lease.Load(); l == 0 {
		t.Fatal("no lease with dynamic membership: the watchdog is not running")
	}
	path := pathWhere(t, "stall", func(p string) bool { return a.owner(t, p) == "a" })
	a.get(t, path)
	if r := a.get(t, path); !strings.Contains(r.cacheStatus, "hit") {
		t.Fatalf("GET via a before the stall: %q, want a hit", r.cacheStatus)
	}
	release := make(chan struct{})
	hold.Store(&release)
	defer func() {
		if hold.Swap(nil) != nil {
			close(release)
		}
	}()
	a.p.cluster.Load().Stalled(time.Now())
	time.Sleep(3 * 20 * time.Millisecond) // rounds run, b answers none
	if r := a.get(t, path); strings.Contains(r.cacheStatus, "hit") {
		t.Errorf("GET via a after a stall, b not asked again yet: %q, want no hit", r.cacheStatus)
	}
	hold.Store(nil)
	close(release)
	waitUntil(t, "in sync again once b answered", func() bool { return !a.gated() })
	if r := a.get(t, path); !strings.Contains(r.cacheStatus, "hit") {
		t.Errorf("GET via a once resynced: %q, want a hit", r.cacheStatus)
	}
}

// peerUp is the status page's up for peer id (its breaker not open).
func peerUp(peers []statuspage.Peer, id string) bool {
	for _, p := range peers {
		if p.ID == id {
			return p.Up
		}
	}
	return false
}

// TestLeaveClosesCache: a node that starts a graceful leave (Leave, before
// it deregisters) answers nothing from its cache any more, near copies
// included, and stays so through later sync rounds that find every peer
// in sync — its peers drop it and stop pushing purges to it while it
// still serves. A purge it never got is not served: its request goes to
// the owner. With static membership Leave closes the cache too.
func TestLeaveClosesCache(t *testing.T) {
	var asksOfB atomic.Int64 // a's purge log requests to b
	setup := clusterSetup{
		yaml: "  hot_key_max_age: 10s\n",
		opts: func(o *ClusterOptions) { o.DynamicMembership, o.HotKeyRate = true, 1 },
		handler: func(n *testNode, next fasthttp.RequestHandler) fasthttp.RequestHandler {
			return func(ctx *fasthttp.RequestCtx) {
				if n.id == "b" && string(ctx.Path()) == purgeLogPath && string(ctx.QueryArgs().Peek("node")) == "a" {
					asksOfB.Add(1)
				}
				next(ctx)
			}
		},
	}
	c := newTestCluster(t, setup, "a", "b", "c")
	a, b, cn := c.node("a"), c.node("b"), c.node("c")
	waitUntil(t, "all in sync", func() bool { return !a.gated() && !b.gated() && !cn.gated() })
	near := pathWhere(t, "leavenear", func(p string) bool { return a.owner(t, p) == "b" })
	for i := 0; !a.has(t, near, cache.KindNearCopy); i++ {
		a.get(t, near)
		if i > 5000 {
			t.Fatal("no near copy on a after 5000 requests")
		}
	}
	if r := a.get(t, near); !strings.HasPrefix(r.cacheStatus, "shield; hit") {
		t.Fatalf("GET via a before the leave: %q, want a near-copy hit", r.cacheStatus)
	}
	a.p.Leave()
	if !a.gated() {
		t.Fatal("a's cache still open right after Leave")
	}
	// Two more sync requests from a to b: at least one whole round ran
	// after Leave, with every peer still having a in its view.
	asked := asksOfB.Load()
	waitUntil(t, "a sync round after Leave", func() bool { return asksOfB.Load() >= asked+2 })
	if st := a.p.Status(time.Now()).Cluster; !a.gated() || st.CacheOpen || !peerSynced(st.Peers, "b") || !peerSynced(st.Peers, "c") {
		t.Fatalf("a after a sync round while leaving: gated %v, cache_open %v, peers %+v; want closed with b and c in sync",
			a.gated(), st.CacheOpen, st.Peers)
	}

	c.setPeers([]*testNode{b, cn}, "b", "c") // b and c drop a: their purges skip it
	c.setPeers([]*testNode{a}, "b", "c")     // a's own view, without itself
	body := cn.adminPurge(t, url.Values{"url": {"http://" + testHost + near}})
	if strings.Contains(body, `"a"`) {
		t.Fatalf("c delivered to a, which is not in its view: %s", body)
	}
	before := c.origin.hits(near)
	r := a.get(t, near)
	if strings.HasPrefix(r.cacheStatus, "shield; hit") || r.code != 200 {
		t.Fatalf("GET via the leaving a after a purge it never got: %+v, want the owner's answer", r)
	}
	if got := c.origin.hits(near); got != before+1 {
		t.Errorf("origin requests for %s: %d → %d, want one (the owner refetched the purged key)", near, before, got)
	}

	s := newTestCluster(t, clusterSetup{}, "a", "b")
	sa := s.node("a")
	path := pathWhere(t, "leavestatic", func(p string) bool { return sa.owner(t, p) == "a" })
	sa.get(t, path)
	if r := sa.get(t, path); !strings.HasPrefix(r.cacheStatus, "shield; hit") {
		t.Fatalf("static: second GET via a: %q, want a hit", r.cacheStatus)
	}
	sa.p.Leave()
	if r := sa.get(t, path); strings.HasPrefix(r.cacheStatus, "shield; hit") {
		t.Errorf("static: GET via a after Leave: %q, want no hit", r.cacheStatus)
	}
}
