package proxy

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/cachekey"
	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/proxy/cache"
	"github.com/shield-proxy/shield/proxy/cluster"
)

// muxCluster starts nodes a and b on the multiplexed peer transport,
// with the origin's answers varying on Accept-Language, and returns a
// path b owns with a's connection to b open.
func muxCluster(t *testing.T) (a, b *testNode, path string) {
	t.Helper()
	c := newTestCluster(t, clusterSetup{cfg: func(c *config.Config) { c.Cluster.Transport = "mux" }}, "a", "b")
	a, b = c.node("a"), c.node("b")
	c.origin.setHandler(func(ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.Set("Cache-Control", "public, max-age=3600")
		ctx.Response.Header.Set("ETag", `"v1"`)
		ctx.Response.Header.Set("Vary", "Accept-Language")
		ctx.SetContentType("text/plain")
		ctx.SetBodyString("body of " + string(ctx.Path()) + " in " + string(ctx.Request.Header.Peek("Accept-Language")))
	})
	path = pathWhere(t, "entry", func(p string) bool { return a.owner(t, p) == "b" })
	waitMuxOpen(t, a, "b")
	return a, b, path
}

// waitMuxOpen sends a's requests for a key owner owns until a's mux
// connection to owner is open.
func waitMuxOpen(t *testing.T, a *testNode, owner string) {
	t.Helper()
	// An open connection is not yet an accepted one: until the owner
	// has answered the hello, forwards go over HTTP. Wait for a forward
	// that went over mux, a new key each time (a hot key's near copy
	// would answer it without a forward).
	viaMux := `shield_peer_transport_total{peer="` + owner + `",transport="mux"}`
	deadline := time.Now().Add(5 * time.Second)
	for n := 0; !a.cl().MuxOpen(owner) || a.counter(viaMux) == 0; n++ {
		if time.Now().After(deadline) {
			t.Fatal("no forward from a to " + owner + " over mux")
		}
		a.get(t, pathWhere(t, fmt.Sprintf("warm%d", n), func(p string) bool { return a.owner(t, p) == owner }))
		time.Sleep(time.Millisecond)
	}
}

// TestForwardedEntryAnswer: over the multiplexed transport, a forwarded
// fresh hit comes back as the owner's entry and is served by the edge as
// a local hit, with the relayed answer's Cache-Status, and the request's
// own conditionals, range, HEAD and Vary variant.
func TestForwardedEntryAnswer(t *testing.T) {
	a, b, path := muxCluster(t)
	if r := a.get(t, path, "Accept-Language: de"); r.code != 200 || r.body != "body of "+path+" in de" {
		t.Fatalf("miss via a: %+v", r)
	}
	before := a.cl().EntryAnswers()
	r := a.get(t, path, "Accept-Language: de")
	if r.code != 200 || r.body != "body of "+path+" in de" {
		t.Fatalf("hit via a: %+v", r)
	}
	if !strings.HasPrefix(r.cacheStatus, "shield; hit; ttl=") || !strings.HasSuffix(r.cacheStatus, ", shield-edge; detail=peer-b") {
		t.Fatalf("Cache-Status = %q, want the owner's hit relayed", r.cacheStatus)
	}
	if r.age == "" {
		t.Fatal("no Age on an entry answer")
	}
	if got := a.cl().EntryAnswers(); got != before+1 {
		t.Fatalf("entry answers = %d, want %d", got, before+1)
	}
	if r := a.get(t, path, "Accept-Language: de", `If-None-Match: "v1"`); r.code != 304 || r.body != "" {
		t.Fatalf("conditional: %+v", r)
	}
	if r := a.get(t, path, "Accept-Language: de", "Range: bytes=0-3"); r.code != 206 || r.body != "body" {
		t.Fatalf("range: %+v", r)
	}
	if r := a.do(t, "HEAD", path, "", "Accept-Language: de"); r.code != 200 || r.body != "" {
		t.Fatalf("HEAD: %+v", r)
	}
	// Another variant is a miss on the owner: its answer is relayed.
	n := a.cl().EntryAnswers()
	if r := a.get(t, path, "Accept-Language: fr"); r.code != 200 || r.body != "body of "+path+" in fr" || !strings.Contains(r.cacheStatus, "fwd=") {
		t.Fatalf("other variant: %+v", r)
	}
	if got := a.cl().EntryAnswers(); got != n {
		t.Fatalf("a miss came back as an entry (%d answers, want %d)", got, n)
	}
	if got := a.cl().EntryAnswers(); got != before+4 {
		t.Fatalf("entry answers = %d, want %d", got, before+4)
	}
	if a.has(t, path, cache.KindResponse) || a.has(t, path, cache.KindNearCopy) {
		t.Fatal("the edge stored an entry answer")
	}
	if r := b.get(t, path, "Accept-Language: de"); !strings.HasPrefix(r.cacheStatus, "shield; hit; ttl=") {
		t.Fatalf("owner: %+v", r)
	}
}

// TestEntryAnswerChecked: an entry answer whose bytes do not check — a
// flipped bit, another key, a variant of other request values — is
// refused (the edge then serves the request locally).
func TestEntryAnswerChecked(t *testing.T) {
	p := newTestProxy(t, "127.0.0.1:1", nil)
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	sc.reset()
	sc.key = append(sc.key[:0], "primary"...)
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.Set("Accept-Language", "de")
	entry := func(key string, vary ...[]byte) []byte {
		e := cache.Entry{Kind: cache.KindResponse, Status: 200, StoredAt: time.Now().UnixNano(), Lifetime: int64(time.Hour), Body: []byte("hello")}
		e.KeyDigest = cachekey.Digest([]byte(key))
		return cache.AppendEntry(nil, &e, vary, nil)
	}
	var e cache.Entry
	good := entry("primary")
	if !p.checkEntryAnswer(&ctx, sc, &e, good) {
		t.Fatal("a good entry was refused")
	}
	flipped := bytes.Clone(good)
	flipped[2] ^= 1
	variant := string(appendVariantKey(nil, sc.key, mustDecode(t, entry("x", []byte("accept-language"))), &ctx.Request.Header))
	for name, b := range map[string][]byte{
		"flipped bit":   flipped,
		"another key":   entry("other"),
		"truncated":     good[:len(good)-1],
		"other variant": entry(variant+"x", []byte("accept-language")),
	} {
		if p.checkEntryAnswer(&ctx, sc, &e, b) {
			t.Errorf("%s: accepted", name)
		}
	}
	if !p.checkEntryAnswer(&ctx, sc, &e, entry(variant, []byte("accept-language"))) {
		t.Error("the request's variant was refused")
	}

	// Served: refused without an answer, or as a hit with the relayed
	// answer's Cache-Status member, the owner's age kept.
	sc.ent = cluster.EntryAnswer{Got: true, OwnerNow: time.Now().UnixNano(), Buf: flipped}
	if served, checked := p.serveEntryAnswer(&ctx, sc, "b", nil, 0); served || checked || sc.ent.Got || len(ctx.Response.Header.Peek("Cache-Status")) != 0 {
		t.Fatalf("a damaged entry: served %v, checked %v (want false, false)", served, checked)
	}
	ctx.Response.Reset()
	sc.ent = cluster.EntryAnswer{Got: true, OwnerNow: time.Now().Add(time.Minute).UnixNano(), Buf: bytes.Clone(good)}
	if served, checked := p.serveEntryAnswer(&ctx, sc, "b", nil, 0); !served || !checked {
		t.Fatalf("a good entry: served %v, checked %v (want true, true)", served, checked)
	}
	cs := string(bytes.Join(ctx.Response.Header.PeekAll("Cache-Status"), []byte(", ")))
	if string(ctx.Response.Body()) != "hello" || !strings.HasPrefix(cs, "shield; hit; ttl=") || !strings.HasSuffix(cs, ", shield-edge; detail=peer-b") {
		t.Fatalf("served %q with Cache-Status %q", ctx.Response.Body(), cs)
	}
	if age := string(ctx.Response.Header.Peek("Age")); age != "60" {
		t.Fatalf("Age %q, want the owner's 60", age)
	}
}

func mustDecode(t *testing.T, b []byte) *cache.Entry {
	t.Helper()
	var e cache.Entry
	if err := cache.DecodeEntry(b, &e); err != nil {
		t.Fatal(err)
	}
	return &e
}

// TestNearCopyFromEntry: over the multiplexed transport a hot key's
// near copy is the owner's entry kept as it is (cache.SetNearCopy): the
// edge then answers from it without the hop, its variant under the
// request's Vary values, and a purge drops it.
func TestNearCopyFromEntry(t *testing.T) {
	c := newTestCluster(t, clusterSetup{yaml: "  hot_key_max_age: 5s\n", opts: func(o *ClusterOptions) { o.HotKeyRate = 1 },
		cfg: func(c *config.Config) { c.Cluster.Transport = "mux" }}, "a", "b")
	a, b := c.node("a"), c.node("b")
	c.origin.setHandler(func(ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.Set("Cache-Control", "public, max-age=3600")
		ctx.Response.Header.Set("Vary", "Accept-Language")
		ctx.SetBodyString("body of " + string(ctx.Path()) + " in " + string(ctx.Request.Header.Peek("Accept-Language")))
	})
	path := pathWhere(t, "near", func(p string) bool { return a.owner(t, p) == "b" })
	waitMuxOpen(t, a, "b")
	if r := b.get(t, path, "Accept-Language: de"); r.code != 200 {
		t.Fatalf("warm the owner: %+v", r)
	}
	// The warm-up's key may have got a near copy of its own (hot_key_rate
	// 1): wait for this key's.
	kept := a.counter(`shield_near_copies_stored_total`)
	for i := 0; a.counter(`shield_near_copies_stored_total`) == kept; i++ {
		if r := a.get(t, path, "Accept-Language: de"); r.code != 200 || r.body != "body of "+path+" in de" {
			t.Fatalf("via a: %+v", r)
		}
		if i > 5000 {
			t.Fatal("no near copy after 5000 requests")
		}
	}
	if a.cl().EntryAnswers() == 0 {
		t.Fatal("no entry answer: the near copy came from a relayed answer")
	}
	var e cache.Entry
	key := appendVariantKey(nil, a.key(t, path), mustDecode(t, cache.AppendEntry(nil, &cache.Entry{Kind: cache.KindResponse}, [][]byte{[]byte("accept-language")}, nil)), func() *fasthttp.RequestHeader {
		var h fasthttp.RequestHeader
		h.Set("Accept-Language", "de")
		return &h
	}())
	raw, _ := a.p.cache.GetVerified(nil, key)
	if err := cache.DecodeEntry(raw, &e); err != nil || e.Kind != cache.KindNearCopy || e.SWR != 0 || e.Lifetime > int64(5*time.Second+time.Minute) {
		t.Fatalf("near copy: %v %+v", err, e)
	}
	forwards := a.peerOutcome("b", cluster.PeerOK)
	r := a.get(t, path, "Accept-Language: de")
	if r.body != "body of "+path+" in de" || !strings.HasPrefix(r.cacheStatus, "shield; hit; ttl=") || strings.Contains(r.cacheStatus, "peer-b") || a.peerOutcome("b", cluster.PeerOK) != forwards {
		t.Fatalf("near-copy hit: %+v", r)
	}
	if r := a.get(t, path, "Accept-Language: fr"); r.body != "body of "+path+" in fr" {
		t.Fatalf("other variant: %+v", r)
	}
	code, body := admin(t, a.p, "POST", "/purge?url=http://"+testHost+path)
	if code != 200 || !strings.Contains(body, `"b":200`) {
		t.Fatalf("purge: %d %s", code, body)
	}
	if raw, _ := a.p.cache.GetVerified(nil, key); len(raw) > 0 {
		if err := cache.DecodeEntry(raw, &e); err == nil && a.p.cache.Invalidations().Servable(&e, time.Now()) {
			t.Fatal("the near copy survived the purge")
		}
	}
}
