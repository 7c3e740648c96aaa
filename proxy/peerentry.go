package proxy

import (
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/cachekey"
	"github.com/shield-proxy/shield/proxy/cache"
	"github.com/shield-proxy/shield/proxy/cluster"
	"github.com/shield-proxy/shield/proxy/httpx"
	"github.com/shield-proxy/shield/stale"
)

// Entry answers (proxy/cluster/muxentry.go): a key's owner answers a
// forwarded fresh hit on a small entry with the entry's stored bytes,
// and the edge serves them with serveHit, as a local hit, after checking
// them (they crossed a wire: checksum, kind, and the key the request
// names). A hot key's entry is kept as a near copy as it is, its timing
// fields rewritten (cache.SetNearCopy). A request for a coded
// representation does not ask (its sibling's key is the owner's
// business).

// wantEntry returns sc.ent asking for an entry answer, the response's
// body buffer lent to receive it, or nil when the request does not ask.
func (sc *scratch) wantEntry(ctx *fasthttp.RequestCtx, rte *route) *cluster.EntryAnswer {
	sc.ent.Got = false
	if sc.coding != codingIdentityIdx && rte.comp != nil {
		sc.ent.Want = false
		return nil
	}
	sc.ent.Want = true
	sc.ent.Buf = ctx.Response.SwapBody(nil)[:0]
	return &sc.ent
}

// serveEntryAnswer serves the owner's entry answer in sc.ent as a fresh
// local hit, with the owner's Cache-Status member for a relayed answer,
// keeping a near copy of a hot key's (c not nil; seq: the invalidation
// clock when the forward started). It reports false, the response's body
// buffer given back, when the entry does not check: the caller serves
// the request locally, as after a failed forward. checked is false when
// it reports false because the entry did not check (damaged, not a
// response, another key): the owner's fault, for its breaker; an entry
// that checked but is no longer fresh here (clocks apart) is not.
func (p *Proxy) serveEntryAnswer(ctx *fasthttp.RequestCtx, sc *scratch, owner string, c *cluster.Node, seq int64) (served, checked bool) {
	b := sc.ent.Buf
	var e cache.Entry
	if !p.checkEntryAnswer(ctx, sc, &e, b) {
		p.g.corrupt.Inc()
		sc.ent.Got = false
		ctx.Response.SwapBody(b[:0])
		return false, false
	}
	// The age the owner computed: its clock, rebased on ours.
	now := ctx.Time()
	e.StoredAt += now.UnixNano() - sc.ent.OwnerNow
	age := e.Age(now)
	if e.Classify(age, &sc.cc) != stale.Fresh {
		sc.ent.Got = false
		ctx.Response.SwapBody(b[:0])
		return false, true
	}
	if c != nil && e.Status == fasthttp.StatusOK {
		p.keepEntryNearCopy(ctx, c, sc, &e, b, seq, age)
	}
	p.serveHit(ctx, sc, &e, b, age, csHitTTL)
	sc.tmp = cluster.AppendPeerCacheStatus(sc.tmp[:0], owner)
	ctx.Response.Header.AddBytesKV(httpx.HCacheStatus, sc.tmp)
	return true, true
}

// checkEntryAnswer decodes b into e, checking its checksum, that it is
// a stored response, and that it is the entry of the request's key (or
// of its Vary variant).
func (p *Proxy) checkEntryAnswer(ctx *fasthttp.RequestCtx, sc *scratch, e *cache.Entry, b []byte) bool {
	if err := cache.DecodeEntryCheck(b, e, true); err != nil || e.Kind != cache.KindResponse {
		return false
	}
	if e.VaryCount == 0 {
		return e.KeyDigest == cachekey.Digest(sc.key)
	}
	sc.vkey = appendVariantKey(sc.vkey[:0], sc.key, e, &ctx.Request.Header)
	ok := e.KeyDigest == cachekey.Digest(sc.vkey)
	sc.vkey = sc.vkey[:0]
	return ok
}

// answerEntry answers a forwarded request with e's stored bytes b when
// its edge asked for that (cluster.AnswerEntry), reporting whether it
// did; the response's body buffer goes back to the response.
func answerEntry(ctx *fasthttp.RequestCtx, e *cache.Entry, b []byte, now time.Time) bool {
	if e.Kind != cache.KindResponse || len(b) > cluster.EntryAnswerMax || !cluster.AnswerEntry(ctx, b, now) {
		return false
	}
	ctx.Response.SwapBody(b[:0])
	return true
}

// keepEntryNearCopy stores b, the entry e was decoded from (checked), as
// a near copy of a hot key: as nearcopy.go keeps one from a relayed
// answer — stored now at its current age, for at most hot_key_max_age,
// no stale windows, in invalidation order at the earlier of seq and the
// owner's fetch sequence (an invalidation this node knows of refuses
// it) — with the timing fields rewritten in place instead of encoding
// the entry again. e keeps its decoded fields.
func (p *Proxy) keepEntryNearCopy(ctx *fasthttp.RequestCtx, c *cluster.Node, sc *scratch, e *cache.Entry, b []byte, seq int64, age time.Duration) {
	now := ctx.Time()
	ne := *e
	ne.Kind, ne.StoredAt, ne.InitialAge = cache.KindNearCopy, now.UnixNano(), int64(age)
	ne.Lifetime = min(e.Lifetime, int64(c.Options().HotKeyMaxAge+age))
	ne.SWR, ne.SIE, ne.FetchSeq = 0, 0, min(seq, e.FetchSeq)
	if cache.SetNearCopy(b, ne.StoredAt, ne.InitialAge, ne.Lifetime, ne.FetchSeq) != nil {
		return
	}
	key, vary := sc.key, [][]byte(nil)
	if e.VaryCount > 0 {
		vary = e.VaryList()
		key = storeKey(sc.key, &ctx.Request.Header, vary)
	}
	if p.putResponse(sc.key, key, b, &ne, vary, now) == cache.Stored {
		c.NearCopyStored()
	}
}
