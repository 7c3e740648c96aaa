package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/admission"
	"github.com/shield-proxy/shield/cachekey"
	"github.com/shield-proxy/shield/proxy/cache"
	"github.com/shield-proxy/shield/proxy/cluster"
	"github.com/shield-proxy/shield/proxy/httpx"
	"github.com/shield-proxy/shield/proxy/listener"
	"github.com/shield-proxy/shield/routing"
	"github.com/shield-proxy/shield/stale"
)

// scratch holds per-request buffers, pooled so that a HIT allocates
// nothing. Nothing in it outlives the handler.
type scratch struct {
	key  []byte   // primary key
	vkey []byte   // variant key
	tmp  []byte   // formatting (Age, Cache-Status)
	hdrs [][]byte // key header values (aliases request memory)
	cc   stale.Directives

	tenant   *admission.Tenant // nil without admission control
	tid      []byte            // tenant identity for tenant-scoped keys (aliases request or config memory)
	fromPeer bool              // forwarded by another node
	// checked: the requester checks the answer against its own
	// invalidations (a read-through carries Shield-Tags back), so this
	// node's purge sync does not hold the cache closed for it.
	checked bool

	hotRate   float64       // sampled request rate of a forwarded key (0: not sampled)
	ownerID   string        // the owner a request was forwarded to
	prevOwner *cluster.Peer // the key's previous owner, inside the overlap window
	urlLen    int           // key[:urlLen] names the URL (cachekey.AppendURL)
	ranges    []byteRange   // Range parsing (buffer only)

	// A hit's head: the entry's prepared head completed, read into the
	// response through rd and br (readHead).
	head   []byte
	rd     bytes.Reader
	br     *bufio.Reader
	coding uint8 // negotiated coding on a compress route (0: identity; compress.go)
	// dated: the answer's head has a Date (heads.write), so serve need
	// not look for one.
	dated bool
	// aeRoute: the route whose Accept-Encoding reduction is still to be
	// done (settleEncoding); nil: done or none.
	aeRoute *route
	// present: the request fields sanitize saw (reqFields); a hit skips
	// looking up the ones that are absent.
	present reqFields
	ckey    []byte // the coding's sibling key (compress.go)

	// A fresh hit's body stream (streamhit.go): streamOK lets the lookup
	// leave a disk tier entry's body in file (bodyLen bytes from its
	// offset), or a large memory entry's in pieces.
	streamOK bool
	// memOnly: the request is served inline (ServePeerHit): entries are
	// read from memory only, none of memStreamMin bytes or more.
	memOnly bool
	file    *cache.DiskBody
	pieces  *cache.PieceReader
	bodyLen int64

	// ent asks a key's owner for an entry answer and receives it
	// (peerentry.go).
	ent cluster.EntryAnswer
}

// reset clears every per-request field of a pooled scratch, keeping the
// buffers' capacity: nothing of an earlier request (a previous owner, a
// tenant, a hot rate) may steer this one.
func (sc *scratch) reset() {
	sc.key, sc.vkey, sc.tmp, sc.hdrs = sc.key[:0], sc.vkey[:0], sc.tmp[:0], sc.hdrs[:0]
	sc.cc.Reset()
	sc.tenant, sc.tid, sc.fromPeer, sc.checked = nil, nil, false, false
	sc.hotRate, sc.ownerID, sc.prevOwner, sc.urlLen = 0, "", nil, 0
	sc.coding, sc.present, sc.aeRoute, sc.dated = 0, 0, nil, false
	sc.closeStream()
	sc.streamOK, sc.memOnly = false, false
}

// peek is h.PeekCanonical(name), skipped when sanitize saw no such field.
func (sc *scratch) peek(h *fasthttp.RequestHeader, f reqFields, name []byte) []byte {
	if sc.present&f == 0 {
		return nil
	}
	return h.PeekCanonical(name)
}

// urlDigest identifies the request's URL for invalidation: every key
// and Vary variant of one URL shares it.
func (sc *scratch) urlDigest() uint64 { return cachekey.Digest(sc.key[:sc.urlLen]) }

// headReadSize bounds the head a hit reads in one block; larger heads
// (rare: many or long stored fields) are written field by field.
const headReadSize = 4096

var scratchPool = sync.Pool{New: func() any {
	sc := &scratch{key: make([]byte, 0, 256), vkey: make([]byte, 0, 256), tmp: make([]byte, 0, 64), head: make([]byte, 0, 1024)}
	sc.br = bufio.NewReaderSize(&sc.rd, headReadSize)
	return sc
}}

// Fixed Cache-Status values (RFC 9211). "shield" is the cache's name.
var (
	csHitTTL   = cacheStatus{hit: true, ttlNext: true}.append(nil)
	csStaleSWR = cacheStatus{hit: true, fwd: "stale", detail: "stale-while-revalidate", ttlNext: true}.append(nil)
)

// serve is the public request handler: docs/architecture.md §1 for one node.
func (p *Proxy) serve(ctx *fasthttp.RequestCtx) {
	var dated bool // a hit's head says so: its stored Date is there
	p.serveRequestAt(ctx, false, false, &dated)
	if !dated {
		httpx.EnsureDate(&ctx.Response)
	}
	if resp := &ctx.Response; !resp.IsBodyStream() && len(resp.Body()) >= listener.CoalesceMin {
		listener.Coalesce(ctx.Conn()) // one writev, as fasthttp's own (listener/deadline.go)
	}
}

// serveRequest routes, admits and answers a request. fromPeer marks a
// request another node forwarded: it was admitted there, its tenant comes
// from the peer protocol, and it is never forwarded again.
func (p *Proxy) serveRequest(ctx *fasthttp.RequestCtx, fromPeer bool) {
	p.serveRequestAs(ctx, fromPeer, false)
}

// serveRequestAs is serveRequest; inline (a forwarded request, served by
// the multiplexed connection's reader: ServePeerHit) serves only what
// needs no wait, and reports false, having answered and counted nothing,
// for any other request.
func (p *Proxy) serveRequestAs(ctx *fasthttp.RequestCtx, fromPeer, inline bool) (served bool) {
	return p.serveRequestAt(ctx, fromPeer, inline, nil)
}

// serveRequestAt is serveRequestAs; a hit whose head is known to carry a
// Date sets *dated when dated is not nil.
func (p *Proxy) serveRequestAt(ctx *fasthttp.RequestCtx, fromPeer, inline bool, dated *bool) (served bool) {
	rt := p.rt.Load()
	h := &ctx.Request.Header
	// Only origin-form targets: shield is a reverse proxy, and an
	// absolute-form target whose authority disagrees with Host is a
	// classic cache-poisoning and routing-confusion vector.
	if uri := h.RequestURI(); len(uri) == 0 || uri[0] != '/' {
		p.g.badRequests.Inc()
		p.generated(ctx, fasthttp.StatusBadRequest, "request target must be a path")
		return true
	}
	// Host must be host[:port]: anything else (userinfo, paths) is read
	// differently by routing and by the HTTP client, which could send
	// the request to a host no route allows.
	plain := plainValidHost(h.Host())
	if !plain && !validHost(h.Host()) {
		p.g.badRequests.Inc()
		p.generated(ctx, fasthttp.StatusBadRequest, "invalid Host")
		return true
	}
	// From here on the request is the one the origin will see (sanitize.go).
	msg, present := sanitizeHost(ctx, plain)
	if msg != "" {
		p.g.badRequests.Inc()
		p.generated(ctx, fasthttp.StatusBadRequest, msg)
		return true
	}
	r, err := rt.table.Resolve(h.Host(), ctx.Request.URI().PathOriginal())
	if err != nil {
		p.g.badRequests.Inc()
		p.generated(ctx, fasthttp.StatusBadRequest, "an encoded slash (%2F) in the path changes its route")
		return true
	}
	if r == nil {
		p.g.unrouted.Inc()
		p.generated(ctx, fasthttp.StatusNotFound, "no route for this host and path")
		return true
	}
	rte := rt.routes[r.Index]
	var t *admission.Tenant
	var tid []byte
	if fromPeer {
		tid = h.PeekBytes(hShieldTenant)
		if rt.tenants != nil {
			t = rt.tenants.Lookup(tid)
		}
	} else {
		t, tid = rt.tenantOf(h, rte)
		if t != nil {
			if reason, retryAfter := t.AdmitN(ctx.Time(), rte.cost); reason != admission.None {
				reject(ctx, t, reason, retryAfter)
				rte.m.requests.inc(ctx.ConnID(), resRejected)
				return true
			}
			defer t.Done()
		}
	}
	res := p.serveRoute(ctx, rt, rte, t, tid, fromPeer, inline, present, dated)
	if res == resDeferred {
		return false
	}
	rte.m.requests.inc(ctx.ConnID(), res)
	rte.m.duration.observe(ctx.ConnID(), time.Since(ctx.Time()))
	if rt.accessEvery > 0 && p.requests.Add(1)%rt.accessEvery == 0 {
		p.accessLog(ctx, rte, t, res, fromPeer)
	}
	return true
}

// accessLog writes one sampled request line (off the hit path's
// allocation budget by design: it runs only when enabled).
func (p *Proxy) accessLog(ctx *fasthttp.RequestCtx, rte *route, t *admission.Tenant, res result, fromPeer bool) {
	tenant := ""
	if t != nil {
		tenant = t.Name()
	}
	p.logger.LogAttrs(context.Background(), slog.LevelInfo, "access",
		slog.String("method", string(ctx.Method())),
		slog.String("host", string(ctx.Host())),
		slog.String("uri", string(ctx.RequestURI())),
		slog.Int("status", ctx.Response.StatusCode()),
		slog.String("route", rte.name),
		slog.String("cache", resultLabels[res]),
		slog.String("tenant", tenant),
		slog.Bool("from_peer", fromPeer),
		slog.String("client", ctx.RemoteIP().String()),
		slog.Duration("duration", time.Since(ctx.Time())),
	)
}

// serveRoute answers a routed, admitted request and says how.
// Inline (serveRequestAs), what it would not answer from memory is
// resDeferred.
func (p *Proxy) serveRoute(ctx *fasthttp.RequestCtx, rt *runtimeConfig, rte *route, t *admission.Tenant, tid []byte, fromPeer, inline bool, present reqFields, dated *bool) result {
	h := &ctx.Request.Header
	if !h.IsGet() && !h.IsHead() {
		if inline {
			return resDeferred
		}
		return p.passUnsafe(ctx, rt, rte, t, tid, fromPeer)
	}
	sc := scratchPool.Get().(*scratch)
	defer func() {
		if dated != nil {
			*dated = sc.dated
		}
		scratchPool.Put(sc)
	}()
	sc.reset()
	sc.tenant, sc.tid, sc.fromPeer, sc.present = t, tid, fromPeer, present

	if v := sc.peek(h, fieldCacheControl, httpx.HCacheControl); len(v) > 0 {
		sc.cc.Parse(v)
	} else if stale.PragmaNoCache(sc.peek(h, fieldPragma, httpx.HPragma)) {
		sc.cc.NoCache = true
	}
	if rte.disabled || sc.cc.NoStore || len(ctx.Request.Body()) > 0 {
		if inline {
			return resDeferred
		}
		return p.bypass(ctx, rte, t, fromPeer, "uncacheable-request")
	}

	sc.startEncoding(rte, h)
	sc.key = rte.appendKey(sc.key[:0], ctx, sc, p.cache.Namespaces().Version(rte.name, rte.scoped, tid))
	now := ctx.Time()
	readThrough := fromPeer && len(h.PeekCanonical(hShieldReadThrough)) > 0
	sc.checked = readThrough
	if inline {
		return p.serveInline(ctx, rt, rte, sc, now, readThrough)
	}

	// Step 4: the key's owner serves it.
	var forwardTo *routing.Peer
	var v *routing.View
	c := p.cluster.Load()
	if c != nil && !readThrough {
		v, forwardTo = p.owner(c, sc, fromPeer, now)
	}

	// Look up into the response's own body buffer: on a hit it goes back
	// to the response truncated to the body, so nothing is copied.
	b := ctx.Response.SwapBody(nil)
	var e cache.Entry
	sc.streamOK = forwardTo == nil && !readThrough && (sc.coding == codingIdentityIdx || rte.comp == nil)
	b, lk := p.lookupCoded(b, ctx, sc, rte, &e)
	p.sampleTop(ctx, sc, &e, lk, now)
	if forwardTo != nil {
		sc.settleEncoding(h) // forwarded as the owner would fetch it
		var res result
		var done bool
		if res, done, b, lk = p.viaOwner(ctx, c, v, forwardTo, rt, rte, sc, &e, b, lk, now); done {
			return res
		}
	}
	return p.serveLookup(ctx, rt, rte, sc, &e, b, lk, now, readThrough)
}

// sampleTop feeds one request in topk.DefaultSample to the top-keys
// view; the others pay one atomic add.
func (p *Proxy) sampleTop(ctx *fasthttp.RequestCtx, sc *scratch, e *cache.Entry, lk lookupResult, now time.Time) {
	if p.top.Sample() {
		hit := lk == lkHit
		p.top.Add(cachekey.Digest(sc.key), hit, hit && e.Kind == cache.KindNearCopy, now, ctx.Host(), ctx.RequestURI())
	}
}

// owner finds the key's owner (step 4) and returns it as forwardTo when
// it is another node. A forwarded request is always served where it
// lands, so a request crosses at most one hop: forwardTo is nil for it,
// and sc.prevOwner names the previous owner inside an overlap window.
func (p *Proxy) owner(c *cluster.Node, sc *scratch, fromPeer bool, now time.Time) (v *routing.View, forwardTo *routing.Peer) {
	v = c.View()
	digest := cachekey.Digest(sc.key)
	rate := c.Touch(sc.key, digest, now)
	if owner, self := v.Current.Owner(digest); !self && !fromPeer {
		sc.hotRate, sc.ownerID = rate, owner.ID
		return v, owner
	}
	sc.prevOwner = c.ReadThroughPeer(v, digest, now)
	return v, nil
}

// viaOwner answers a request whose key another node owns: from a fresh
// local copy (a near copy of a hot key) without the hop, else from the
// owner. When the owner could not answer, done is false and b, lk are the
// local lookup again, to be served here as a local miss.
func (p *Proxy) viaOwner(ctx *fasthttp.RequestCtx, c *cluster.Node, v *routing.View, owner *routing.Peer, rt *runtimeConfig, rte *route, sc *scratch, e *cache.Entry, b []byte, lk lookupResult, now time.Time) (res result, done bool, _ []byte, _ lookupResult) {
	if lk == lkHit && e.Kind == cache.KindNearCopy {
		age := e.Age(now)
		if stale.Classify(age, time.Duration(e.Lifetime), 0, 0, &sc.cc) == stale.Fresh {
			c.NearCopyHit()
			p.serveHit(ctx, sc, e, b, age, csHitTTL)
			return resHit, true, b, lk
		}
	}
	ctx.Response.SwapBody(b[:0])
	if res, ok := p.forwardToOwner(ctx, c, v, owner, rt, rte, sc); ok {
		return res, true, nil, lk
	}
	ctx.Response.Reset()
	b = ctx.Response.SwapBody(nil)
	b, lk = p.lookupCoded(b, ctx, sc, rte, e)
	return 0, false, b, lk
}

// serveLookup answers from what the lookup found (b, lk, e read into the
// response's body buffer): a fresh hit, a stale one inside
// stale-while-revalidate, or a miss, a revalidation or a bypass fetch.
// A read-through from a new owner is answered only from a fresh entry.
func (p *Proxy) serveLookup(ctx *fasthttp.RequestCtx, rt *runtimeConfig, rte *route, sc *scratch, e *cache.Entry, b []byte, lk lookupResult, now time.Time, readThrough bool) result {
	if lk != lkHit || sc.fromPeer || rte.eagerRefresh > 0 || sc.file != nil || sc.pieces != nil {
		sc.settleEncoding(&ctx.Request.Header)
	}
	if readThrough && lk != lkHit {
		ctx.Response.SwapBody(b[:0])
		p.generatedStatus(ctx, fasthttp.StatusGatewayTimeout, "not cached", cacheStatus{fwd: "miss", detail: "only-if-cached"})
		return resBypass
	}
	if sc.file != nil || sc.pieces != nil {
		var done bool
		if b, lk, done = p.streamLookup(ctx, rte, sc, e, b, lk, now); done {
			return resHit
		}
	}
	switch lk {
	case lkHit:
		age := e.Age(now)
		st := e.Classify(age, &sc.cc)
		if st != stale.Fresh {
			sc.settleEncoding(&ctx.Request.Header) // a refresh or a fetch follows
		}
		switch {
		case st == stale.Fresh:
			if rte.eagerRefresh > 0 && !readThrough {
				p.eagerRefresh(ctx, rt, rte, sc, e, b, age)
			}
			if sc.fromPeer && !readThrough && answerEntry(ctx, e, b, now) {
				return resHit
			}
			p.serveHit(ctx, sc, e, b, age, csHitTTL)
			return resHit
		case readThrough:
			ctx.Response.SwapBody(b[:0])
			p.generatedStatus(ctx, fasthttp.StatusGatewayTimeout, "not fresh", cacheStatus{fwd: "stale", detail: "only-if-cached"})
			return resBypass
		case st == stale.StaleRevalidate:
			// Serve the stale copy now; one background refresh per key.
			p.refreshInBackground(ctx, rt, rte, sc, bytes.Clone(b))
			p.serveHit(ctx, sc, e, b, age, csStaleSWR)
			rte.m.stale[staleSWR].Inc()
			return resStale
		}
		// Stale: keep a copy for conditional revalidation and hand the
		// buffer back to the response.
		staleCopy := append([]byte(nil), b...)
		ctx.Response.SwapBody(b[:0])
		fwd := "stale"
		if sc.cc.NoCache || sc.cc.MaxAge == 0 {
			fwd = "request"
		}
		return p.miss(ctx, rt, rte, sc, staleCopy, fwd)
	case lkHitForMiss:
		ctx.Response.SwapBody(b[:0])
		if len(ctx.Request.Header.PeekCanonical(hRange)) > 0 {
			// Unstorable or too large: the origin answers the range.
			return p.bypass(ctx, rte, sc.tenant, sc.fromPeer, "uncacheable")
		}
		return p.fetch(ctx, rt, rte, sc, nil, nil, "bypass")
	case lkVaryMiss:
		ctx.Response.SwapBody(b[:0])
		return p.miss(ctx, rt, rte, sc, nil, "vary-miss")
	default:
		ctx.Response.SwapBody(b[:0])
		return p.miss(ctx, rt, rte, sc, nil, "miss")
	}
}

// lookupResult says what the cache holds for a request.
type lookupResult uint8

const (
	lkMiss       lookupResult = iota // nothing usable; flight key = sc.key
	lkVaryMiss                       // vary marker, no variant; flight key = sc.vkey
	lkHit                            // e holds a response (fresh or not)
	lkHitForMiss                     // a hit-for-miss record is in force
)

// lookup reads the primary entry and, for a vary marker, the request's
// variant. It leaves the key the request must use from now on (for
// fetching, coalescing and storing) in sc.vkey when it is a variant key,
// and returns b (the buffer) holding the entry e was decoded from.
func (p *Proxy) lookup(b []byte, ctx *fasthttp.RequestCtx, sc *scratch, e *cache.Entry) ([]byte, lookupResult) {
	sc.vkey = sc.vkey[:0]
	b, verified := p.getEntry(b, sc.key, sc)
	if len(b) == 0 {
		return b, lkMiss
	}
	if !p.decode(b, sc.key, e, verified) {
		p.cache.Del(sc.key)
		return b, lkMiss
	}
	if e.Kind == cache.KindVary {
		markerAt := e.StoredAt
		sc.settleEncoding(&ctx.Request.Header)
		sc.vkey = appendVariantKey(sc.vkey, sc.key, e, &ctx.Request.Header)
		b, verified = p.getEntry(b, sc.vkey, sc)
		if len(b) == 0 {
			return b, lkVaryMiss
		}
		if !p.decode(b, sc.vkey, e, verified) {
			p.cache.Del(sc.vkey)
			return b, lkVaryMiss
		}
		if e.StoredAt < markerAt || e.Kind == cache.KindVary {
			return b, lkVaryMiss
		}
	}
	if e.Kind == cache.KindHitForMiss {
		if ctx.Time().UnixNano() < e.StoredAt+e.Lifetime {
			return b, lkHitForMiss
		}
		if len(sc.vkey) > 0 {
			return b, lkVaryMiss
		}
		return b, lkMiss
	}
	// Purged (by URL or tag) since this entry's fetch started: a miss;
	// soft-purged: stale from the purge on (proxy/cache/inval.go). Out of purge sync
	// nothing is served (servable), except to a reader that checks the
	// entry against its own invalidations (a read-through).
	if !p.cache.Invalidations().Servable(e, ctx.Time()) && !(sc.checked && p.cache.Invalidations().Apply(e)) {
		if len(sc.vkey) > 0 {
			return b, lkVaryMiss
		}
		return b, lkMiss
	}
	return b, lkHit
}

// decode parses b and checks it was stored under key; anything else is
// counted and treated as a miss.
func (p *Proxy) decode(b, key []byte, e *cache.Entry, verified bool) bool {
	if err := cache.DecodeEntryCheck(b, e, !verified); err != nil || e.KeyDigest != cachekey.Digest(key) {
		p.g.corrupt.Inc()
		return false
	}
	return true
}

// appendVariantKey appends primary plus the request's values of the
// marker's Vary headers (docs/architecture.md §3).
func appendVariantKey(dst, primary []byte, marker *cache.Entry, h *fasthttp.RequestHeader) []byte {
	dst = append(dst, primary...)
	it := marker.VaryNames()
	for name, ok := it.Next(); ok; name, ok = it.Next() {
		dst = cachekey.AppendVary(dst, name, h.PeekBytes(name))
	}
	return dst
}

// flightKey is the key a request fetches, coalesces and stores under.
func (sc *scratch) flightKey() []byte {
	if len(sc.vkey) > 0 {
		return sc.vkey
	}
	return sc.key
}

// appendKey builds the primary cache key of the request.
func (r *route) appendKey(dst []byte, ctx *fasthttp.RequestCtx, sc *scratch, namespace uint32) []byte {
	uri := ctx.Request.URI()
	sc.hdrs = sc.hdrs[:0]
	for _, name := range r.headers {
		sc.hdrs = append(sc.hdrs, ctx.Request.Header.Peek(name))
	}
	scheme := schemeHTTP
	if ctx.IsTLS() {
		scheme = schemeHTTPS
	}
	parts := cachekey.Parts{
		Namespace: namespace,
		Route:     r.name,
		Scheme:    scheme,
		Host:      ctx.Request.Header.Host(),
		HostPlain: sc.present&hostPlain != 0,
		Path:      uri.PathOriginal(),
		Query:     uri.QueryString(),
		Headers:   sc.hdrs,
	}
	if r.scoped {
		parts.Tenant = sc.tid
	}
	start := len(dst)
	dst = cachekey.AppendURL(dst, r.rules, &parts)
	sc.urlLen = len(dst) - start
	return r.rules.AppendHeaders(dst, sc.hdrs)
}

var (
	schemeHTTP  = []byte("http")
	schemeHTTPS = []byte("https")
	hRange      = []byte("Range")
)

// hitHead writes a fresh hit's head (serveHit, serveStreamHit) — or,
// when the client's If-Match or If-Unmodified-Since fails, the 412's —
// and returns what the client's conditionals decided.
func (p *Proxy) hitHead(ctx *fasthttp.RequestCtx, sc *scratch, e *cache.Entry, age time.Duration, csPrefix []byte) cond {
	resp := &ctx.Response
	c := condNone
	if sc.present&fieldsConditional != 0 {
		c = p.precondition(&ctx.Request.Header, e)
	}
	ageSec, ttl := int64(age/time.Second), int64((time.Duration(e.Lifetime)-age)/time.Second)
	if c == condFailed {
		preconditionFailed(resp, e, sc, ageSec, ttl, csPrefix)
		return c
	}
	if notModified := c == condNotModified; notModified || !p.heads.write(resp, sc, e, ageSec, ttl, csPrefix) {
		writeEntryHeaders(resp, e, notModified)
		stamp(&resp.Header, sc, ageSec, ttl, csPrefix)
	}
	sc.peerTags(resp, e)
	return c
}

// serveHit answers from a fresh entry decoded from b, which is the
// response's own body buffer: the body goes back with SwapBody, so a hit
// copies headers only. Client conditionals are answered here (RFC 9110
// §13.2.2, precondition).
func (p *Proxy) serveHit(ctx *fasthttp.RequestCtx, sc *scratch, e *cache.Entry, b []byte, age time.Duration, csPrefix []byte) {
	resp := &ctx.Response
	cond := p.hitHead(ctx, sc, e, age, csPrefix)
	if cond == condFailed {
		resp.SwapBody(b[:0])
		return
	}
	if cond == condNotModified {
		resp.SetStatusCode(fasthttp.StatusNotModified)
		resp.SwapBody(b[:0])
		return
	}
	if sc.present&fieldRange != 0 && wantsRange(&ctx.Request.Header, e) {
		var part, multi []byte
		var whole bool
		part, multi, whole, sc.tmp, sc.ranges = rangeAnswer(resp, &ctx.Request.Header, e, b[:len(e.Body)], sc.tmp, sc.ranges)
		switch {
		case whole:
		case multi != nil:
			resp.SwapBody(b[:0])
			resp.SetBody(multi)
			return
		default:
			// Move the part to the buffer's start (memmove) so the whole
			// buffer goes back to the response: no allocation.
			resp.SwapBody(b[:copy(b, part)])
			return
		}
	}
	resp.SwapBody(b[:len(e.Body)])
}

// hShieldTags carries an entry's place in invalidation order to the node
// that forwarded the request: "t", its fetch sequence (16 hex digits) and
// its surrogate key digests (hex). That node checks them against its own
// invalidations before keeping a near copy or a previous owner's copy,
// so neither can bring back what it purged; it keeps neither without
// this field, and never passes it on.
var hShieldTags = cluster.HTags

// peerTags sets Shield-Tags on an answer to a peer.
func (sc *scratch) peerTags(resp *fasthttp.Response, e *cache.Entry) {
	if !sc.fromPeer {
		return
	}
	sc.tmp = appendPeerTags(sc.tmp[:0], e)
	resp.Header.SetBytesKV(hShieldTags, sc.tmp)
}

// appendPeerTags appends the Shield-Tags value for e.
func appendPeerTags(dst []byte, e *cache.Entry) []byte {
	var seq [8]byte
	binary.BigEndian.PutUint64(seq[:], uint64(e.FetchSeq))
	return hex.AppendEncode(hex.AppendEncode(append(dst, 't'), seq[:]), e.Tags)
}

// parsePeerTags reads a Shield-Tags value: the entry's fetch sequence on
// the node that served it and its tag digests.
func parsePeerTags(v []byte) (seq int64, tags []byte, ok bool) {
	if len(v) < 17 || v[0] != 't' {
		return 0, nil, false
	}
	b, err := hex.AppendDecode(nil, v[1:])
	if err != nil || len(b) < 8 || (len(b)-8)%8 != 0 || len(b)-8 > cache.MaxTags*8 {
		return 0, nil, false
	}
	return int64(binary.BigEndian.Uint64(b)), b[8:], true
}

// cond is what a request's conditional fields make of a stored answer.
type cond uint8

const (
	condNone        cond = iota // serve it
	condNotModified             // 304 Not Modified
	condFailed                  // 412 Precondition Failed
)

// precondition evaluates the client's conditional fields against e in
// RFC 9110 §13.2.2's order: If-Match (strong comparison, "*" matches
// any stored answer), else If-Unmodified-Since (a Last-Modified later
// than its date), either false is 412; then If-None-Match (weak
// comparison), else If-Modified-Since, either false is 304. An answer
// that is not 2xx ignores them all (RFC 9110 §13.2.1); only a 200 is answered
// 304. A client's conditionals never reach the origin on a cache fetch
// (relay.go), so they are evaluated here on misses too (serveShared).
func (p *Proxy) precondition(h *fasthttp.RequestHeader, e *cache.Entry) cond {
	if e.Status < 200 || e.Status > 299 {
		return condNone
	}
	if im := h.PeekCanonical(httpx.HIfMatch); len(im) > 0 {
		if !stale.ETagMatchStrong(im, e.ETag) {
			return condFailed
		}
	} else if ius := h.PeekCanonical(httpx.HIfUnmodSince); len(ius) > 0 && stale.ModifiedSince(ius, e.LastModified) {
		return condFailed
	}
	if e.Status != fasthttp.StatusOK {
		return condNone
	}
	if inm := h.PeekCanonical(httpx.HIfNoneMatch); len(inm) > 0 {
		if len(e.ETag) > 0 && stale.ETagMatch(inm, e.ETag) {
			return condNotModified
		}
		return condNone
	}
	if ims := h.PeekCanonical(httpx.HIfModSince); len(ims) > 0 && len(e.LastModified) > 0 && stale.NotModifiedSince(ims, e.LastModified) {
		return condNotModified
	}
	return condNone
}

// preconditionFailed makes resp shield's 412 for a stored answer e a
// precondition ruled out: no body and none of the stored fields but Date
// (a Cache-Control of the entry would let a downstream cache store the
// 412 for everybody), Age and Cache-Status as for a hit.
func preconditionFailed(resp *fasthttp.Response, e *cache.Entry, sc *scratch, ageSec, ttl int64, csPrefix []byte) {
	setStoredDate(resp, e)
	resp.SetStatusCode(fasthttp.StatusPreconditionFailed)
	stamp(&resp.Header, sc, ageSec, ttl, csPrefix)
}

// setStoredDate gives resp e's stored Date, as a hit carries it (setting
// it resets the header, see httpx.SetDate: call it first).
func setStoredDate(resp *fasthttp.Response, e *cache.Entry) {
	it := e.Headers()
	for k, ok := it.Next(); ok; k, ok = it.Next() {
		v, _ := it.Next()
		if bytes.Equal(k, httpx.HDate) {
			httpx.SetDate(&resp.Header, v)
			return
		}
	}
}

// writeEntryHeaders sets status and stored headers; for a 304 only the
// fields RFC 9110 §15.4.5 lists.
func writeEntryHeaders(resp *fasthttp.Response, e *cache.Entry, notModified bool) {
	// The stored Date first (setting it resets the header, see httpx.SetDate):
	// a hit carries its origin's Date, not the sending time.
	it := e.Headers()
	for k, ok := it.Next(); ok; k, ok = it.Next() {
		v, _ := it.Next()
		if bytes.Equal(k, httpx.HDate) {
			httpx.SetDate(&resp.Header, v)
			break
		}
	}
	// Stored names are already canonical (normalised when the origin's
	// answer was parsed): skip normalising them again on every hit, then
	// restore normal behaviour for whoever reads the header next.
	resp.Header.DisableNormalizing()
	defer resp.Header.EnableNormalizing()
	resp.SetStatusCode(e.Status)
	it = e.Headers()
	for {
		k, ok := it.Next()
		if !ok {
			break
		}
		v, _ := it.Next()
		if (notModified && !httpx.NotModifiedHeader(k)) || bytes.Equal(k, httpx.HDate) {
			continue
		}
		resp.Header.AddBytesKV(k, v)
	}
}

// serveShared answers from an entry another request fetched. The bytes
// are shared with other waiters, so the body is copied, never swapped in.
func (p *Proxy) serveShared(ctx *fasthttp.RequestCtx, e *cache.Entry, age time.Duration, cs cacheStatus) {
	resp := &ctx.Response
	c := p.precondition(&ctx.Request.Header, e)
	if c == condFailed {
		setStoredDate(resp, e)
		resp.SetStatusCode(fasthttp.StatusPreconditionFailed)
		resp.Header.Set("Age", strconv.FormatInt(int64(age/time.Second), 10))
		cs.set(&resp.Header)
		return
	}
	notModified := c == condNotModified
	writeEntryHeaders(resp, e, notModified)
	resp.Header.Set("Age", strconv.FormatInt(int64(age/time.Second), 10))
	cs.set(&resp.Header)
	if notModified {
		resp.SetStatusCode(fasthttp.StatusNotModified)
		return
	}
	if wantsRange(&ctx.Request.Header, e) {
		part, multi, whole, _, _ := rangeAnswer(resp, &ctx.Request.Header, e, e.Body, nil, nil)
		switch {
		case whole:
		case multi != nil:
			resp.SetBody(multi)
			return
		default:
			resp.SetBody(part)
			return
		}
	}
	resp.SetBody(e.Body)
}

// generated writes a response shield makes itself (errors, 404).
func (p *Proxy) generated(ctx *fasthttp.RequestCtx, status int, msg string) {
	resp := &ctx.Response
	resp.Reset()
	resp.SetStatusCode(status)
	resp.Header.SetContentType("text/plain; charset=utf-8")
	resp.Header.SetBytesKV(httpx.HVia, httpx.ViaValue)
	cacheStatus{fwd: "bypass", detail: "generated"}.set(&resp.Header)
	resp.Header.Set("Cache-Control", "no-store")
	resp.SetBodyString(msg + "\n")
}
