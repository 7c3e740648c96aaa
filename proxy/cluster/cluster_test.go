package cluster

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/admission"
	"github.com/shield-proxy/shield/breaker"
	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/routing"
)

var auth = "Shield-Auth: " + testSecret

// TestForwardToOwner: a forwarded request reaches the owner's Local with
// the peer protocol's fields, the owner's answer comes back, and relaying
// its head adds this node's Cache-Status member and drops Shield-Tags.
func TestForwardToOwner(t *testing.T) {
	h := newHarness(t, setup{}, "a", "b")
	a, b := h.node("a"), h.node("b")
	resp, ok := a.forward(t, "b", "/x?y=1")
	if !ok {
		t.Fatal("forward to b failed")
	}
	defer fasthttp.ReleaseResponse(resp)
	if string(resp.Body()) != "served by b /x?y=1" {
		t.Fatalf("answer %q", resp.Body())
	}
	b.local.mu.Lock()
	head := b.local.headers[0]
	b.local.mu.Unlock()
	if head != (http1Head{tenant: "acme", clientIP: "192.0.2.1", forwarded: "1"}) {
		t.Errorf("owner saw %+v", head)
	}
	var out fasthttp.Response
	buf := RelayPeerHead(&out, resp, "b", nil)
	if cs := string(out.Header.Peek("Cache-Status")); cs != "shield-edge; detail=peer-b" || string(buf) != cs {
		t.Errorf("Cache-Status %q (buffer %q)", cs, buf)
	}
	if len(out.Header.PeekBytes(HTags)) != 0 || string(out.Header.Peek("Cache-Control")) != "max-age=60" {
		t.Errorf("relayed head: %s", out.Header.Header())
	}
	if a.node.PeerOutcomes("b", PeerOK) != 1 || a.node.PeerOutcomes("nobody", PeerOK) != 0 {
		t.Errorf("ok outcomes %d", a.node.PeerOutcomes("b", PeerOK))
	}
	if _, ok := a.node.Begin("nobody", time.Now().UnixNano()); ok {
		t.Error("Begin to a peer not in the view succeeded")
	}
	if a.local.peers != 2 || a.node.View().Current.Len() != 2 || a.node.Options().Secret != testSecret {
		t.Errorf("peers told %d, view %d", a.local.peers, a.node.View().Current.Len())
	}
}

// TestStaleGenerationRefused: a request routed by a generation the owner
// does not accept is answered 421 with the owner's generation; the edge
// refreshes membership and serves it itself.
func TestStaleGenerationRefused(t *testing.T) {
	h := newHarness(t, setup{}, "a", "b", "c")
	a, b := h.node("a"), h.node("b")
	r := h.peerReq(t, a.ip, b, "GET", "/x", "", auth, "Shield-Generation: 12345")
	if r.StatusCode() != fasthttp.StatusMisdirectedRequest || string(r.Header.Peek("Shield-Generation")) != strconv.FormatUint(b.m.View().Current.Generation(), 10) {
		t.Fatalf("stale generation: %d, generation %q", r.StatusCode(), r.Header.Peek("Shield-Generation"))
	}
	if r := h.peerReq(t, a.ip, b, "GET", "/x", "", auth); r.StatusCode() != fasthttp.StatusMisdirectedRequest {
		t.Fatalf("no generation: %d", r.StatusCode())
	}
	// b's view changes (c left): a still routes by the old one, which b
	// accepts inside the overlap; a generation b never had is refused.
	h.setPeers([]*testNode{b}, "a", "b")
	if _, ok := a.forward(t, "b", "/y"); !ok {
		t.Fatal("the previous generation inside the overlap was refused")
	}
	a.m.Update([]routing.Peer{{ID: "a", Addr: a.addr, Weight: 1}, {ID: "b", Addr: b.addr, Weight: 2}}, time.Now())
	if _, ok := a.forward(t, "b", "/z"); ok {
		t.Fatal("a generation the owner never had was accepted")
	}
	if a.node.PeerOutcomes("b", PeerMisdirected) != 1 || a.src.refreshes.Load() != 1 || b.counter(`shield_peer_misdirected_total`) != 3 {
		t.Errorf("misdirected: edge %d, refreshes %d, owner %d", a.node.PeerOutcomes("b", PeerMisdirected), a.src.refreshes.Load(), b.counter(`shield_peer_misdirected_total`))
	}
	for _, uri := range b.local.served {
		if uri == "/z" {
			t.Error("the owner served a misdirected request")
		}
	}
}

// TestPeerForbidden: a wrong secret or an address outside the view is
// 403 (with generation 0, so the edge knows it is the peer protocol's).
func TestPeerForbidden(t *testing.T) {
	h := newHarness(t, setup{}, "a", "b")
	a, b := h.node("a"), h.node("b")
	if r := h.peerReq(t, a.ip, b, "GET", "/x", "", "Shield-Auth: wrong", a.gen()); r.StatusCode() != 403 || string(r.Header.Peek("Shield-Generation")) != "0" {
		t.Fatalf("wrong secret: %d %q", r.StatusCode(), r.Header.Peek("Shield-Generation"))
	}
	if r := h.peerReq(t, []byte{10, 9, 9, 9}, b, "GET", "/x", "", auth, a.gen()); r.StatusCode() != 403 {
		t.Fatalf("unknown address: %d", r.StatusCode())
	}
	a.node.secret = []byte("other")
	if _, ok := a.forward(t, "b", "/x"); ok {
		t.Fatal("a refused forward counted as answered")
	}
	if a.node.PeerOutcomes("b", PeerForbidden) != 1 || b.counter(`shield_peer_forbidden_total`) != 3 {
		t.Errorf("forbidden: edge %d, owner %d", a.node.PeerOutcomes("b", PeerForbidden), b.counter(`shield_peer_forbidden_total`))
	}
}

// TestPeerSkippedAfterFailures: an owner that cannot be reached trips
// its breaker after three failures; requests are then served locally
// without trying (counted as skipped); the status page shows it down.
func TestPeerSkippedAfterFailures(t *testing.T) {
	h := newHarness(t, setup{}, "a", "b")
	a, b := h.node("a"), h.node("b")
	h.net.down(b.addr)
	for range 3 {
		if _, ok := a.forward(t, "b", "/x"); ok {
			t.Fatal("forward to a down owner succeeded")
		}
	}
	if _, ok := a.forward(t, "b", "/x"); ok {
		t.Fatal("forward with the breaker open succeeded")
	}
	if a.node.PeerOutcomes("b", PeerError) != 3 || a.node.PeerOutcomes("b", PeerSkipped) != 1 || a.src.refreshes.Load() != 3 {
		t.Errorf("errors %d, skipped %d, refreshes %d", a.node.PeerOutcomes("b", PeerError), a.node.PeerOutcomes("b", PeerSkipped), a.src.refreshes.Load())
	}
	st := a.node.Status()
	for _, p := range st.Peers {
		if p.ID == "b" && p.Up {
			t.Error("status: b up with its breaker open")
		}
		if p.ID == "a" && (!p.Self || !p.PurgeSynced) {
			t.Errorf("status of self: %+v", p)
		}
	}
	if st.Membership != "static" || !st.CacheOpen || len(st.Peers) != 2 {
		t.Errorf("status %+v", st)
	}
}

// TestForwardTooLarge: an answer over MaxBody is served locally, and
// the owner's breaker counts nothing against it.
func TestForwardTooLarge(t *testing.T) {
	h := newHarness(t, setup{opts: func(o *Options) { o.MaxBody = 1024 }, local: func(l *fakeLocal) { l.serveLarge = true }}, "a", "b")
	a := h.node("a")
	if _, ok := a.forward(t, "b", "/large"); ok {
		t.Fatal("a too-large answer was relayed")
	}
	pc := a.node.Peer("b")
	if st := pc.skip.state(time.Now().UnixNano()); st != breaker.Closed || pc.skip.failures.Load() != 0 {
		t.Fatalf("breaker after a too-large answer: %v, %d failures", st, pc.skip.failures.Load())
	}
}

// TestReadThrough: the previous owner is asked for a cached copy only
// (Shield-Read-Through); a miss there is "go to the origin".
func TestReadThrough(t *testing.T) {
	h := newHarness(t, setup{}, "a", "b")
	a, b := h.node("a"), h.node("b")
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.SetRequestURI("/cached")
	req.Header.SetHost("example.test")
	var resp fasthttp.Response
	if !a.node.ReadThrough(a.node.Peer("b"), req, []byte("acme"), &resp) || !strings.HasPrefix(string(resp.Body()), "served by b") {
		t.Fatalf("read-through: %d %q", resp.StatusCode(), resp.Body())
	}
	if b.local.headers[0].readThrough != "1" || b.local.headers[0].tenant != "acme" {
		t.Errorf("owner saw %+v", b.local.headers[0])
	}
	req.SetRequestURI("/missing")
	if a.node.ReadThrough(a.node.Peer("b"), req, nil, &resp) {
		t.Fatal("a miss on the previous owner read as a copy")
	}
	a.node.ReadThroughRefused()
	if hit, miss := a.counter(`shield_peer_read_through_total{outcome="hit"}`), a.counter(`shield_peer_read_through_total{outcome="miss"}`); hit != 1 || miss != 2 {
		t.Errorf("read-throughs: %d hits, %d misses", hit, miss)
	}
	// Inside the overlap window a key that moved to a (it joins b) has b
	// as its previous owner; a key that stayed with b has none.
	h.setPeers([]*testNode{a}, "b")
	h.setPeers([]*testNode{a}, "a", "b")
	v := a.node.View()
	moved, kept := 0, 0
	for d := range uint64(64) {
		if pc := a.node.ReadThroughPeer(v, d*0x9e3779b97f4a7c15, time.Now()); pc != nil {
			if pc.ID() != "b" {
				t.Fatalf("previous owner %s", pc.ID())
			}
			moved++
		} else {
			kept++
		}
	}
	if moved == 0 || kept == 0 {
		t.Errorf("of 64 keys %d moved, %d kept", moved, kept)
	}
	a.node.NearCopyStored()
	a.node.NearCopyHit()
	if a.counter(`shield_near_copies_stored_total`) != 1 || a.counter(`shield_near_copy_hits_total`) != 1 {
		t.Error("near copy counters")
	}
}

// TestPurgeDelivery: a purge reaches every peer at once, is applied once
// per node (by id), is answered 200, and a purge from a peer that gives
// no id is applied as is.
func TestPurgeDelivery(t *testing.T) {
	h := newHarness(t, setup{}, "a", "b", "c")
	a, b, c := h.node("a"), h.node("b"), h.node("c")
	rec := NewPurge(url.Values{"url": {"http://example.test/p"}})
	a.local.plog.Add(rec)
	d := a.node.Deliver(rec, true)
	if d.Peers["b"] != 200 || d.Peers["c"] != 200 || len(d.Pending) != 0 {
		t.Fatalf("delivery %+v", d)
	}
	if !b.local.hasPurged("http://example.test/p") || !c.local.hasPurged("http://example.test/p") {
		t.Fatal("a peer did not apply the purge")
	}
	d = a.node.Deliver(rec, true)
	if d.Peers["b"] != 200 || len(b.local.purged()) != 1 {
		t.Fatalf("second delivery %+v: b applied %d purges", d, len(b.local.purged()))
	}
	if r := h.peerReq(t, a.ip, b, "POST", purgePath+"?url=http://example.test/old", "", auth); r.StatusCode() != 200 {
		t.Fatalf("purge without id: %d", r.StatusCode())
	}
	if r := h.peerReq(t, a.ip, b, "POST", purgePath+"?bad=1&_id=5&_at=1", "", auth); r.StatusCode() != 400 {
		t.Fatalf("refused purge: %d", r.StatusCode())
	}
	if len(b.local.purged()) != 2 || len(b.local.events) != 3 { // an acknowledged repeat is an event too, a refused purge none
		t.Errorf("b applied %v, events %v", b.local.purged(), b.local.events)
	}
	a.node.InvalidateEverywhere("http://example.test/w", []byte("acme"))
	if !b.local.hasPurged("http://example.test/w") || b.local.purges[len(b.local.purges)-1].Get("tenant") != "acme" {
		t.Errorf("invalidation: b applied %v", b.local.purges)
	}
	if recs := a.local.plog.Records(0); len(recs) != 2 {
		t.Errorf("a's log holds %d records, want 2", len(recs))
	}
}

// TestPurgeQueuedUntilDelivered: a peer that refuses purges gets them
// from its queue, in order, once it takes them; the answer says it is
// pending, and later purges queue behind without a direct attempt.
func TestPurgeQueuedUntilDelivered(t *testing.T) {
	var failing atomic.Bool
	failing.Store(true)
	h := newHarness(t, setup{handler: func(n *testNode, next fasthttp.RequestHandler) fasthttp.RequestHandler {
		return func(ctx *fasthttp.RequestCtx) {
			if n.id == "b" && string(ctx.Path()) == purgePath && failing.Load() {
				ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
				return
			}
			next(ctx)
		}
	}}, "a", "b")
	a, b := h.node("a"), h.node("b")
	first := NewPurge(url.Values{"url": {"http://example.test/1"}})
	if d := a.node.Deliver(first, true); d.Peers["b"] != 503 || !slices.Equal(d.Pending, []string{"b"}) {
		t.Fatalf("delivery to a refusing peer: %+v", d)
	}
	waitUntil(t, "a retried", func() bool { return a.counter(`shield_peer_purge_retries_total`) >= 1 })
	second := NewPurge(url.Values{"url": {"http://example.test/2"}})
	if d := a.node.Deliver(second, true); len(d.Peers) != 0 || !slices.Equal(d.Pending, []string{"b"}) {
		t.Fatalf("delivery to a peer behind: %+v", d)
	}
	if got := a.set.GetOrCreateGauge(`shield_purge_queue_length`, nil).Get(); got != 2 {
		t.Errorf("queue length %v, want 2", got)
	}
	failing.Store(false)
	waitUntil(t, "b took both purges", func() bool { return len(b.local.purged()) == 2 })
	if got := b.local.purged(); got[0] != "http://example.test/1" || got[1] != "http://example.test/2" {
		t.Errorf("b applied %v, want them in order", got)
	}
	if a.counter(`shield_purge_answered_pending_total`) != 2 || a.counter(`shield_purge_delivery_failures_total{peer="b"}`) == 0 {
		t.Error("pending answers or failures not counted")
	}
	// A peer that left the membership is forgotten with its queue.
	failing.Store(true)
	a.node.Deliver(NewPurge(url.Values{"url": {"http://example.test/3"}}), false)
	h.setPeers([]*testNode{a}, "a")
	waitUntil(t, "the queue of a peer that left is dropped", func() bool {
		a.node.qmu.Lock()
		defer a.node.qmu.Unlock()
		return a.node.queues["b"] == nil
	})
}

// TestPeerQueueOverflow: a queue that overflows is replaced by one
// "purge everything" for that peer alone.
func TestPeerQueueOverflow(t *testing.T) {
	q := &peerQueue{wake: make(chan struct{}, 1)}
	for i := range peerQueueMax + 1 {
		q.push(PurgeRecord{ID: uint64(i + 1)})
	}
	if q.size() != 2 || !q.behind() {
		t.Fatalf("after overflow: %d queued", q.size())
	}
	args, _ := url.ParseQuery(q.pending[0].Args)
	if args.Get("all") != "1" || args.Get("overflow") != "1" || q.pending[1].ID != peerQueueMax+1 {
		t.Errorf("overflow queue %+v", q.pending)
	}
	if q.pop() != 1 || q.clear() != 1 || q.head() != nil {
		t.Error("pop, clear")
	}
	a := &attempt{}
	q.markLate(a)
	if !q.behind() {
		t.Error("a late attempt does not make the peer behind")
	}
	q.ended(a)
	if q.behind() {
		t.Error("an ended attempt still counts")
	}
}

// TestOverflowPurgeStaysLocal: an overflow "purge everything" is
// applied by the peer it was meant for and neither recorded in its
// purge log nor relayed; its log says the cache was dropped.
func TestOverflowPurgeStaysLocal(t *testing.T) {
	var logs lockedBuffer
	h := newHarness(t, setup{env: func(id string, env *Env) {
		if id == "b" {
			env.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		}
	}}, "a", "b", "c")
	a, b, c := h.node("a"), h.node("b"), h.node("c")
	h.setPeers([]*testNode{b}, "a", "b") // b's view differs from the sender's
	r := h.peerReq(t, a.ip, b, "POST", purgePath+"?all=1&overflow=1&_id=77&_at=1", "", auth, "Shield-Generation: 1")
	if r.StatusCode() != 200 {
		t.Fatalf("overflow purge: %d %s", r.StatusCode(), r.Body())
	}
	if len(b.local.purges) != 1 || len(b.local.plog.Records(0)) != 0 || len(c.local.purges) != 0 {
		t.Errorf("b applied %d, logged %d; c applied %d", len(b.local.purges), len(b.local.plog.Records(0)), len(c.local.purges))
	}
	if got := logs.String(); !strings.Contains(got, "everything fetched before now is dropped") {
		t.Errorf("b's log does not say its cache was dropped: %q", got)
	}
}

// lockedBuffer is a log destination a test reads while servers write.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestPurgeRelayedAcrossViews: a purge from a peer whose view differs
// from the receiver's is delivered on before it is acknowledged.
func TestPurgeRelayedAcrossViews(t *testing.T) {
	h := newHarness(t, setup{}, "a", "b", "c")
	a, c := h.node("a"), h.node("c")
	h.setPeers([]*testNode{a}, "a", "b") // a does not know c
	rec := NewPurge(url.Values{"url": {"http://example.test/r"}})
	a.local.plog.Add(rec)
	if d := a.node.Deliver(rec, true); d.Peers["b"] != 200 || len(d.Peers) != 1 {
		t.Fatalf("delivery %+v", d)
	}
	if !c.local.hasPurged("http://example.test/r") {
		t.Fatal("b did not relay the purge to c before acknowledging it")
	}
}

// TestCatchUp: a node started from a snapshot applies the purges its
// peers logged since the snapshot was saved, then releases it.
func TestCatchUp(t *testing.T) {
	released := make(chan struct{})
	savedAt := time.Now().Add(-time.Minute).UnixNano()
	early := NewPurge(url.Values{"url": {"http://example.test/early"}})
	h := newHarness(t, setup{
		local: func(l *fakeLocal) {
			l.plog = NewPurgeLog(time.Now().Add(-time.Hour)) // complete since then
			if l.id == "b" {
				l.plog.Add(early)
			}
		},
		env: func(id string, e *Env) {
			if id == "a" {
				e.HoldSince = savedAt
				e.Release = func() { close(released) }
			}
		},
	}, "a", "b")
	select {
	case <-released:
	case <-time.After(10 * time.Second):
		t.Fatal("catch-up never released the snapshot")
	}
	a, b := h.node("a"), h.node("b")
	if !a.local.hasPurged("http://example.test/early") {
		t.Error("the missed purge was not applied")
	}
	if r := h.peerReq(t, a.ip, b, "GET", purgeLogPath+"?since=x", "", auth); r.StatusCode() != 400 {
		t.Errorf("purge log with a bad since: %d", r.StatusCode())
	}
}

// TestPurgeSyncGate: with dynamic membership a node serves nothing from
// its cache (the gate) until every peer in its view has answered that
// it has the node in its view; a purge it missed arrives by the sync.
func TestPurgeSyncGate(t *testing.T) {
	// While hold is set, b's purge log answers wait for release: the
	// stall's re-sync cannot finish before the gate is looked at.
	var hold atomic.Bool
	release := make(chan struct{})
	var releaseOnce sync.Once
	unhold := func() { releaseOnce.Do(func() { hold.Store(false); close(release) }) }
	t.Cleanup(unhold)
	dynamic := setup{
		opts: func(o *Options) { o.DynamicMembership = true },
		handler: func(n *testNode, next fasthttp.RequestHandler) fasthttp.RequestHandler {
			return func(ctx *fasthttp.RequestCtx) {
				if n.id == "b" && hold.Load() && string(ctx.Path()) == purgeLogPath {
					<-release
				}
				next(ctx)
			}
		},
	}
	h := newHarness(t, dynamic, "a", "b")
	a, b := h.node("a"), h.node("b")
	waitUntil(t, "both in sync", func() bool { return !a.gate.Load() && !b.gate.Load() })
	if a.lease.Load() == 0 {
		t.Error("the watchdog renews no lease")
	}
	h.setPeers([]*testNode{b}, "b") // b drops a: its purges skip a
	waitUntil(t, "a out of sync", a.gate.Load)
	if st := a.node.Status(); st.CacheOpen {
		t.Error("status: cache open out of sync")
	}
	rec := NewPurge(url.Values{"url": {"http://example.test/s"}})
	b.local.plog.Add(rec)
	if d := b.node.Deliver(rec, true); len(d.Peers) != 0 {
		t.Fatalf("b delivered to a, not in its view: %+v", d)
	}
	h.setPeers([]*testNode{b}, "a", "b")
	waitUntil(t, "a back in sync", func() bool { return !a.gate.Load() })
	if !a.local.hasPurged("http://example.test/s") {
		t.Error("the purge a missed did not arrive by the sync")
	}
	// A stall closes the cache until every peer has been asked again
	// (b's answers held meanwhile: without the hold the re-sync could
	// reopen the gate before it is read).
	hold.Store(true)
	a.node.Stalled(time.Now())
	if !a.gate.Load() {
		t.Error("a stall left the cache open")
	}
	unhold()
	waitUntil(t, "a in sync after the stall", func() bool { return !a.gate.Load() })
	if a.node.sync.pending() != 0 {
		t.Error("sync pending after the stall")
	}
	peers, open := a.node.sync.synced()
	if !open || !peers["b"] {
		t.Errorf("synced %v, open %v", peers, open)
	}
}

// TestPurgeSyncLegacyAndUnreachable: a peer from before purge sync (it
// answers 400) is trusted to push; an incomplete log drops everything.
func TestPurgeSyncLegacyAndUnreachable(t *testing.T) {
	var legacy atomic.Bool
	legacy.Store(true)
	h := newHarness(t, setup{
		opts: func(o *Options) { o.DynamicMembership = true },
		handler: func(n *testNode, next fasthttp.RequestHandler) fasthttp.RequestHandler {
			return func(ctx *fasthttp.RequestCtx) {
				if n.id == "b" && legacy.Load() && string(ctx.Path()) == purgeLogPath && !ctx.QueryArgs().Has("since") {
					ctx.Error("since must be unix nanoseconds\n", fasthttp.StatusBadRequest)
					return
				}
				next(ctx)
			}
		},
	}, "a", "b")
	a := h.node("a")
	waitUntil(t, "a in sync with a legacy peer", func() bool { return !a.gate.Load() })
	// An answer that is not complete drops everything fetched before.
	a.node.syncApply("b", syncAnswer{Epoch: 9, Complete: false, Member: true}, nil, time.Now())
	if a.local.invalAll != 1 {
		t.Errorf("incomplete log: %d invalidations of everything, want 1", a.local.invalAll)
	}
	// A peer that never synced and stays unreachable past catchUpWindow
	// is given up on: everything fetched before is dropped.
	a.node.sync.mu.Lock()
	ps := a.node.sync.peers["b"]
	ps.synced, ps.tryingAt = false, time.Now().Add(-2*catchUpWindow)
	a.node.sync.mu.Unlock()
	a.node.syncApply("b", syncAnswer{}, errLegacyPeer, time.Now())
	a.node.sync.mu.Lock()
	ps.synced, ps.tryingAt = false, time.Now().Add(-2*catchUpWindow)
	a.node.sync.mu.Unlock()
	a.node.syncApply("b", syncAnswer{}, context.DeadlineExceeded, time.Now())
	if a.local.invalAll != 2 {
		t.Errorf("unreachable peer given up: %d invalidations, want 2", a.local.invalAll)
	}
	// A peer answering "not a member" puts the node out of sync.
	a.node.syncApply("b", syncAnswer{Epoch: 9, Complete: true}, nil, time.Now())
	if !a.gate.Load() {
		t.Error("a peer without us in its view left the cache open")
	}
}

// TestPurgeSyncAnswers: the sync endpoint answers by position within an
// epoch, by instant across epochs, and says whether the asker is in the
// view.
func TestPurgeSyncAnswers(t *testing.T) {
	h := newHarness(t, setup{}, "a", "b")
	a, b := h.node("a"), h.node("b")
	for i := range 3 {
		b.local.plog.Add(PurgeRecord{ID: uint64(i + 1), Args: "url=x"})
	}
	get := func(query string) syncAnswer {
		t.Helper()
		r := h.peerReq(t, a.ip, b, "GET", purgeLogPath+"?"+query, "", auth)
		var ans syncAnswer
		if r.StatusCode() != 200 || json.Unmarshal(r.Body(), &ans) != nil {
			t.Fatalf("sync %s: %d %s", query, r.StatusCode(), r.Body())
		}
		return ans
	}
	epoch := strconv.FormatUint(b.local.plog.epoch, 10)
	if ans := get("node=a&epoch=" + epoch + "&from=2&added_since=0"); !ans.Member || len(ans.Records) != 2 || ans.Next != 4 || !ans.Complete {
		t.Errorf("by position: %+v", ans)
	}
	if ans := get("node=z&epoch=1&from=2&added_since=0"); ans.Member || len(ans.Records) != 3 {
		t.Errorf("by instant: %+v", ans)
	}
	if r := h.peerReq(t, a.ip, b, "GET", purgeLogPath+"?node=a", "", auth); r.StatusCode() != 400 {
		t.Errorf("no position, no instant: %d", r.StatusCode())
	}
	ans, err := a.node.fetchSync(a.node.Peer("b"), b.addr, 0, "node=a&added_since=0")
	if err != nil || len(ans.Records) != 3 {
		t.Errorf("fetchSync: %v, %+v", err, ans)
	}
	a.node.secret = []byte("wrong")
	if ans, err := a.node.fetchSync(a.node.Peer("b"), b.addr, 0, "node=a&added_since=0"); err != nil || ans.Epoch != 0 {
		t.Errorf("fetchSync refused: %v, %+v", err, ans)
	}
	if _, _, err := a.node.fetchPurgeLog(a.node.Peer("b"), b.addr, 0, 0); err == nil {
		t.Error("fetchPurgeLog refused: no error")
	}
}

// TestHandoff: a leaving node pushes its hottest entries, as their
// stored bytes, to their new owners' TakeHandoff; a bad entry is 400.
func TestHandoff(t *testing.T) {
	h := newHarness(t, setup{}, "a", "b")
	a, b := h.node("a"), h.node("b")
	keys := [][]byte{[]byte("key-1"), []byte("key-2")}
	a.local.entries["key-1"] = []byte("entry one")
	a.local.entries["key-2"] = []byte("entry two")
	for i := 0; len(a.node.Hottest(2)) < 2; i++ {
		for _, k := range keys {
			a.node.Touch(k, uint64(k[4]), time.Now())
		}
		if i > 100000 {
			t.Fatal("the keys never became hot")
		}
	}
	h.setPeers([]*testNode{a}, "b") // a leaves: b owns every key
	if sent := a.node.Handoff(context.Background()); sent != 2 {
		t.Fatalf("hand-off sent %d entries, want 2", sent)
	}
	if string(b.local.taken["key-1"]) != "entry one" || string(b.local.taken["key-2"]) != "entry two" {
		t.Fatalf("b took %q", b.local.taken)
	}
	if sent := a.node.Handoff(context.Background()); sent != 2 || b.counter(`shield_handoff_entries_received_total`) != 2 {
		t.Errorf("second hand-off: sent %d, taken %d", sent, b.counter(`shield_handoff_entries_received_total`))
	}
	body := binary.AppendUvarint(nil, 3)
	body = append(append(body, "key"...), "bad entry"...)
	gen := "Shield-Generation: " + strconv.FormatUint(b.m.View().Current.Generation(), 10)
	if r := h.peerReq(t, a.ip, b, "POST", handoffPath, string(body), auth, gen); r.StatusCode() != 400 {
		t.Errorf("bad entry: %d", r.StatusCode())
	}
	if r := h.peerReq(t, a.ip, b, "POST", handoffPath, "\x09k", auth, gen); r.StatusCode() != 400 {
		t.Errorf("bad hand-off: %d", r.StatusCode())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if sent := a.node.Handoff(ctx); sent != 0 {
		t.Errorf("cancelled hand-off sent %d", sent)
	}
	a.node.opts.HandoffKeys = 0
	if sent := a.node.Handoff(context.Background()); sent != 0 {
		t.Errorf("hand-off with handoff_keys 0 sent %d", sent)
	}
}

// TestUsageExchange: nodes exchange tenant usage reports; a malformed
// report is 400 and counted, only POST is taken.
func TestUsageExchange(t *testing.T) {
	ts := func() *admission.Tenants {
		t.Helper()
		tt, err := admission.NewTenants(admission.Config{Default: admission.Limits{Rate: 100, Burst: 100, MaxConcurrency: 10}}, 2)
		if err != nil {
			t.Fatal(err)
		}
		return tt
	}
	h := newHarness(t, setup{
		opts:  func(o *Options) { o.UsageInterval = 20 * time.Millisecond },
		local: func(l *fakeLocal) { l.tenants = ts() },
	}, "a", "b")
	a, b := h.node("a"), h.node("b")
	for range 50 {
		if tn := a.local.tenants.Lookup([]byte("x")); tn != nil {
			if reason, _ := tn.AdmitN(time.Now(), 1); reason == admission.None {
				tn.Done()
			}
		}
	}
	waitUntil(t, "reports exchanged", func() bool {
		return a.counter(`shield_usage_reports_total{outcome="sent"}`) > 0 && b.counter(`shield_usage_reports_total{outcome="received"}`) > 0
	})
	if r := h.peerReq(t, a.ip, b, "POST", usagePath, "not a report", auth); r.StatusCode() != 400 || b.counter(`shield_usage_reports_total{outcome="bad"}`) != 1 {
		t.Errorf("malformed report: %d", r.StatusCode())
	}
	if r := h.peerReq(t, a.ip, b, "GET", usagePath, "", auth); r.StatusCode() != 405 {
		t.Errorf("GET usage: %d", r.StatusCode())
	}
	b.local.mu.Lock()
	b.local.tenants = nil
	b.local.mu.Unlock()
	if r := h.peerReq(t, a.ip, b, "POST", usagePath, "x", auth); r.StatusCode() != 404 {
		t.Errorf("usage without tenants: %d", r.StatusCode())
	}
}

// TestPreparePeerTLS: a node without peer TLS has nothing to install.
func TestPreparePeerTLS(t *testing.T) {
	h := newHarness(t, setup{}, "a")
	if in, err := h.node("a").node.PreparePeerTLS(&config.PeerTLS{}); in != nil || err != nil {
		t.Errorf("PreparePeerTLS without TLS: %v, %v", in != nil, err)
	}
}

// TestPeerEndpointsNotForClients: a client's request forwarded by an
// edge never reaches the peer protocol's endpoints: it is served as a
// request.
func TestPeerEndpointsNotForClients(t *testing.T) {
	h := newHarness(t, setup{}, "a", "b")
	a, b := h.node("a"), h.node("b")
	r := h.peerReq(t, a.ip, b, "POST", purgePath+"?all=1", "", auth, a.gen(), "Shield-Client-Ip: 192.0.2.1")
	if r.StatusCode() != 200 || !strings.HasPrefix(string(r.Body()), "served by b") || len(b.local.purges) != 0 {
		t.Errorf("client purge through an edge: %d %q, purges %d", r.StatusCode(), r.Body(), len(b.local.purges))
	}
}
