package proxy

import (
	"bytes"
	"io"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/admission"
	"github.com/shield-proxy/shield/cachekey"
	"github.com/shield-proxy/shield/proxy/cache"
	"github.com/shield-proxy/shield/proxy/cluster"
	"github.com/shield-proxy/shield/proxy/httpx"
	"github.com/shield-proxy/shield/proxy/upstream"
	"github.com/shield-proxy/shield/stale"
)

// answerKind is what one origin fetch on behalf of the cache produced.
type answerKind uint8

const (
	ansStored      answerKind = iota + 1 // storable response, stored; entry holds it
	ansRevalidated                       // 304 to our conditional; entry holds the refreshed copy
	ansUnstorable                        // an answer that must not be shared (resp, body)
	ansStream                            // larger than max_object_size: resp streams, body is its start
	ansOriginError                       // origin answered 5xx (or 429 on a stale_on_429 route)
	ansFailed                            // no answer: transport error, timeout, breaker, budget
	ansFilling                           // storable and large: fill streams the body as it arrives (fill.go)
)

// answer is the outcome of fetchOrigin. It does not reference the
// client's RequestCtx, so it can come from a background refresh.
type answer struct {
	kind   answerKind
	entry  []byte             // ansStored, ansRevalidated: encoded, read-only, shareable
	key    []byte             // the key entry is stored under
	resp   *fasthttp.Response // ansUnstorable, ansStream, ansOriginError; release()
	body   []byte             // the body read so far
	reason string             // ansUnstorable: why not stored; the key is then remembered as hit-for-miss
	fail   failure            // ansFailed, ansOriginError
	// private holds fields of a 304 meant for the requester only
	// (Set-Cookie): never stored, never shared with waiters.
	private []cache.Header
	// noShare: entry answers the requester but must not reach waiters
	// (a 304 that made the copy unstorable, or an answer an invalidation
	// overtook while it was in flight).
	noShare bool
	seq     int64          // the fetch's invalidation clock value
	lease   upstream.Lease // ansStream: the origin budget slot, held until the body is relayed
	fill    *fill          // ansFilling: owns the origin response and budget slot
}

// failure says why a fetch gave no answer, and what shield answers
// instead when no stale copy can: an origin's (upstream.Failure) or the
// request path's own (wait-timeout, origin-5xx, invalidated).
type failure struct {
	status     int           // 502, 503 or 504 (429: origin-429)
	detail     string        // Cache-Status detail and stale reason label
	retryAfter time.Duration // for 503s
}

// fromUpstream is an origin's failure as the request path answers it.
func fromUpstream(f upstream.Failure) failure {
	return failure{status: f.Status, detail: f.Detail, retryAfter: f.RetryAfter}
}

// release frees the origin response the answer still holds, and a
// streamed fill's reference for its requester.
func (a *answer) release() {
	if a.kind == ansFilling && a.fill != nil {
		a.fill.release() // the requester's reference to a disk fill's file (startFill)
		a.fill = nil
	}
	if a.resp != nil {
		_ = a.resp.CloseBodyStream()
		fasthttp.ReleaseResponse(a.resp)
		a.resp = nil
	}
	a.lease.End()
}

// originFetch is one fetch for the cache: the request it is made for,
// as fetchOrigin needs it.
type originFetch struct {
	rt  *runtimeConfig
	rte *route
	// tenant is charged for the fetch (nil: a background refresh).
	tenant *admission.Tenant
	// req is the upstream request; with stale set it carries that
	// stored copy's validators.
	req   *fasthttp.Request
	stale *cache.Entry
	// primary is the request's primary key, flightKey the key it
	// coalesces on (the variant key when a vary marker is known).
	primary, flightKey []byte
	urlDigest          uint64
	hasAuth            bool // the client sent Authorization
	// prev is the key's previous owner inside the overlap window (read
	// through to it first), tid the tenant sent along; both nil else.
	prev *cluster.Peer
	tid  []byte
	// client gets the origin's 103 Early Hints (nil: nobody does;
	// httpx/earlyhints.go).
	client *fasthttp.RequestCtx
	// flight is the flight the fetch leads (nil: none); a streamed fill
	// removes it when it ends (fill.go).
	flight *flight
}

// fetchOrigin fetches for the cache, stores what may be stored and says
// what happened.
func (p *Proxy) fetchOrigin(f *originFetch) answer {
	// The fetch's place in invalidation order: taken before the origin
	// (or the previous owner) is asked, so any invalidation after this
	// instant outranks the answer.
	seq := p.cache.Invalidations().Next()
	a := p.fetchOriginAt(seq, f)
	a.seq = seq
	return a
}

func (p *Proxy) fetchOriginAt(seq int64, f *originFetch) answer {
	rte, req, se, urlDigest, hasAuth := f.rte, f.req, f.stale, f.urlDigest, f.hasAuth
	resp := fasthttp.AcquireResponse()
	reqTime := time.Now()
	fromPrev, seq, prevTags := p.readThroughPrev(seq, f, resp)
	var l upstream.Lease
	if !fromPrev {
		var fl failure
		if l, fl = callOrigin(f, resp); fl.status != 0 {
			fasthttp.ReleaseResponse(resp)
			return answer{kind: ansFailed, fail: fl}
		}
	}
	status := resp.StatusCode()
	if se != nil {
		rte.origin.Revalidated(status == fasthttp.StatusNotModified)
		if status == fasthttp.StatusNotModified {
			_ = resp.CloseBodyStream()
			l.End()
			a := p.refresh(rte, se, resp, f.flightKey, seq, reqTime, time.Now(), hasAuth)
			fasthttp.ReleaseResponse(resp)
			return a
		}
	}
	if fl := p.startFill(f, resp, l, seq, reqTime, fromPrev, prevTags); fl != nil {
		return answer{kind: ansFilling, fill: fl}
	}
	body, a, done := readFetched(f, resp, l)
	if done {
		return a
	}
	respTime := time.Now()
	d := decide(hasAuth, resp, rte, reqTime, respTime)
	if !d.storable {
		p.g.notStored.Inc()
		return answer{kind: ansUnstorable, resp: resp, body: body, reason: d.reason}
	}
	e := responseEntry(resp, rte, &d, status, seq, urlDigest, fromPrev, prevTags, respTime)
	e.Body = body
	headers, vary, _ := entryFields(resp, rte, &d, status, len(body), respTime)
	fasthttp.ReleaseResponse(resp)
	enc, key, res := p.storeResponse(f.primary, &req.Header, &e, vary, headers, respTime, true)
	if res == cache.Refused {
		// Overtaken while in flight: an invalidation of the key, or a
		// newer answer already stored. The requester gets it (its
		// request was concurrent with the invalidation), nobody else.
		return answer{kind: ansStored, entry: enc, key: key, noShare: true}
	}
	if res == cache.Dropped {
		// Not kept (a failing disk, too large for memory), yet the
		// answer is as good as a stored one for the waiters.
		return answer{kind: ansStored, entry: enc, key: key}
	}
	rte.m.stored.Inc()
	if rte.comp != nil {
		p.storeSiblings(rte, key, enc)
	}
	return answer{kind: ansStored, entry: enc, key: key}
}

// readThroughPrev asks the key's previous owner for its cached copy
// first, once, when inside the overlap window a new owner misses (f.prev
// set, no stale copy to revalidate). fromPrev says resp holds that copy;
// seq is then the older of the two fetches' clock values and tags the
// copy's surrogate-key digests.
func (p *Proxy) readThroughPrev(seq int64, f *originFetch, resp *fasthttp.Response) (fromPrev bool, _ int64, tags []byte) {
	c := p.cluster.Load()
	if f.prev == nil || c == nil || f.stale != nil {
		return false, seq, nil
	}
	if !c.ReadThrough(f.prev, f.req, f.tid, resp) {
		return false, seq, nil
	}
	fromPrev = true
	// The previous owner's copy is ours only if no invalidation
	// this node knows of (a write or purge here, during the
	// overlap) came after that copy's fetch started.
	remoteSeq, tags, ok := parsePeerTags(resp.Header.PeekBytes(hShieldTags))
	if dead, _ := p.cache.Invalidations().Verdict(remoteSeq, f.urlDigest, tags); !ok || dead {
		c.ReadThroughRefused()
		resp.Reset()
		fromPrev, tags = false, nil
	} else {
		seq = min(seq, remoteSeq)
	}
	resp.Header.DelBytes(hShieldTags)
	return fromPrev, seq, tags
}

// readFetched reads the body of the origin's answer resp, whose budget
// slot l holds, and returns with done set the answer when it is not one
// to store: a body that could not be read, one too large to store
// (streamed on, l still held), an error answer the stale rules take over.
// Otherwise l has ended and body is the whole body.
func readFetched(f *originFetch, resp *fasthttp.Response, l upstream.Lease) (body []byte, a answer, done bool) {
	rte, status := f.rte, resp.StatusCode()
	body, complete, err := readBody(resp, f.rt.maxObject, metaHeadroom(resp))
	if err != nil {
		l.End()
		fasthttp.ReleaseResponse(resp)
		return nil, answer{kind: ansFailed, fail: fromUpstream(rte.origin.BodyFailed())}, true
	}
	if !complete {
		return nil, answer{kind: ansStream, resp: resp, body: body, lease: l}, true
	}
	l.End()
	// An error answer the origin gave explicit freshness is an answer
	// like any other (RFC 9111 §3): stored and served as a hit. With a
	// stored copy to fall back on, the stale rules win instead: an
	// origin failing now does not replace a good copy (README Decisions).
	if status >= 500 && (f.stale != nil || !explicitFreshness(resp, rte)) {
		return nil, answer{kind: ansOriginError, resp: resp, body: body, fail: failure{status: fasthttp.StatusBadGateway, detail: "origin-5xx"}}, true
	}
	if status == fasthttp.StatusTooManyRequests && rte.staleOn429 {
		return nil, answer{kind: ansOriginError, resp: resp, body: body, fail: failure{status: fasthttp.StatusTooManyRequests, detail: "origin-429"}}, true
	}
	return body, answer{}, false
}

// callOrigin makes f's protected origin call into resp, relaying the
// origin's 103 Early Hints to f.client. A failure (status not 0), counted
// against the route when it was a budget refusal, comes with the zero
// lease.
func callOrigin(f *originFetch, resp *fasthttp.Response) (upstream.Lease, failure) {
	o := f.rte.origin
	tok := httpx.WatchHints(f.req, f.client, o.MaxHints())
	l, ok, uf := o.Call(f.tenant, f.rte.prio, f.req, resp)
	httpx.EndHints(f.req, tok)
	if ok {
		return l, failure{}
	}
	fl := fromUpstream(uf)
	f.rte.countShed(fl)
	return l, fl
}

// publish hands a fetch's outcome to the flight's waiters. Only a stored
// (shareable) response is shared; failures are shared as failures so
// waiters do not each retry a failing origin.
func publish(f *flight, a *answer) {
	if f == nil {
		return
	}
	switch a.kind {
	case ansStored, ansRevalidated:
		if a.noShare {
			f.kind = flightUnshareable
			return
		}
		f.kind, f.entry, f.key = flightShared, a.entry, a.key
	case ansFilling:
		// Waiters are answered from the fill as it streams: done is
		// closed now, the flight stays joinable until the fill ends.
		f.kind, f.fill, f.key = flightFilling, a.fill, a.fill.key
		close(f.done)
	case ansOriginError, ansFailed:
		f.kind, f.status, f.detail, f.retryAfter = flightFailed, a.fail.status, a.fail.detail, a.fail.retryAfter
		if a.kind == ansOriginError {
			f.status = fasthttp.StatusBadGateway
		}
	default:
		f.kind = flightUnshareable
	}
}

// miss fetches through the coalescing group: the first request for the
// key leads, the others wait for its result.
func (p *Proxy) miss(ctx *fasthttp.RequestCtx, rt *runtimeConfig, rte *route, sc *scratch, staleCopy []byte, fwd string) result {
	key := sc.flightKey()
	f, leader := p.fl.join(key, cachekey.Digest(key))
	if !leader {
		return p.wait(ctx, rt, rte, sc, f, staleCopy, fwd)
	}
	defer p.fl.finish(f)
	// Re-check the store: between our lookup and becoming leader, a
	// previous leader may have finished and stored the key (groupcache's
	// load does the same), and fetching again would be a second origin
	// request for one key.
	if b := p.cache.Get(nil, key); len(b) > 0 {
		var e cache.Entry
		if cache.DecodeEntry(b, &e) == nil && e.Kind == cache.KindResponse && e.KeyDigest == cachekey.Digest(key) && p.cache.Invalidations().Servable(&e, ctx.Time()) {
			age := e.Age(ctx.Time())
			if e.Classify(age, &sc.cc) == stale.Fresh {
				f.kind, f.entry, f.key = flightShared, b, bytes.Clone(key)
				p.serveSharedCoded(ctx, sc, rte, &e, key, age, cacheStatus{hit: true, detail: "just-stored"})
				sc.peerTags(&ctx.Response, &e)
				return resHit
			}
		}
	}
	return p.fetch(ctx, rt, rte, sc, f, staleCopy, fwd)
}

// wait joins f as a waiter, bounded in count and by the waiter's own
// timer, then answers from the leader's result.
func (p *Proxy) wait(ctx *fasthttp.RequestCtx, rt *runtimeConfig, rte *route, sc *scratch, f *flight, staleCopy []byte, fwd string) result {
	if f.waiters.Add(1) > rt.maxWaiters {
		p.g.waitOverflow.Inc()
		return p.fetch(ctx, rt, rte, sc, nil, staleCopy, fwd)
	}
	p.g.waiters.Inc()
	p.g.waiting.Add(1)
	// The timer bounds the wait for the first byte: a fill that streams
	// is followed to its end, a request that waits for a fill to
	// complete (answerFill) is still bounded by it.
	t := time.NewTimer(rt.waitFor)
	defer t.Stop()
	select {
	case <-f.done:
		p.g.waiting.Add(-1)
	case <-t.C:
		p.g.waiting.Add(-1)
		p.g.waitTimeouts.Inc()
		fl := failure{status: fasthttp.StatusGatewayTimeout, detail: "wait-timeout"}
		return p.failed(ctx, rte, p.decodeStale(staleCopy, ctx.Time()), fl, cacheStatus{fwd: fwd, collapsed: true, detail: "wait-timeout"})
	}
	switch f.kind {
	case flightShared, flightFilling:
		var e cache.Entry
		enc := f.entry
		if f.kind == flightFilling {
			enc = f.fill.head // the entry's head: its body is still arriving
		}
		if cache.DecodeEntry(enc, &e) != nil || !p.cache.Invalidations().Apply(&e) {
			// Invalidated after the leader's fetch started: not ours.
			return p.fetch(ctx, rt, rte, sc, nil, staleCopy, fwd)
		}
		if e.VaryCount > 0 {
			// The leader's response varies: it is ours only if our
			// values of its Vary headers are the leader's.
			sc.vkey = appendVariantKey(sc.vkey[:0], sc.key, &e, &ctx.Request.Header)
			if !bytes.Equal(sc.vkey, f.key) {
				return p.miss(ctx, rt, rte, sc, staleCopy, "vary-miss")
			}
		}
		if f.kind == flightFilling {
			return p.answerFill(ctx, rt, rte, sc, f.fill, t.C, staleCopy, cacheStatus{fwd: fwd, collapsed: true}, resCollapsed)
		}
		age := e.Age(ctx.Time())
		p.serveSharedCoded(ctx, sc, rte, &e, f.key, age, cacheStatus{fwd: fwd, collapsed: true})
		sc.peerTags(&ctx.Response, &e)
		return resCollapsed
	case flightFailed:
		fl := failure{status: f.status, detail: f.detail, retryAfter: f.retryAfter}
		return p.failed(ctx, rte, p.decodeStale(staleCopy, ctx.Time()), fl, cacheStatus{fwd: fwd, collapsed: true, detail: f.detail})
	default:
		// Unshareable: fetch on our own, never from the leader's answer.
		return p.fetch(ctx, rt, rte, sc, nil, staleCopy, "bypass")
	}
}

// decodeStale decodes a kept stale copy, or returns nil; a copy
// invalidated since it was read is nil too.
func (p *Proxy) decodeStale(staleCopy []byte, now time.Time) *cache.Entry {
	if staleCopy == nil {
		return nil
	}
	se := new(cache.Entry)
	if cache.DecodeEntry(staleCopy, se) != nil || se.Kind != cache.KindResponse || !p.cache.Invalidations().Servable(se, now) {
		return nil
	}
	return se
}

// fetch asks the origin on behalf of the cache, answers the client and,
// when f is set, publishes the result to the flight's waiters.
func (p *Proxy) fetch(ctx *fasthttp.RequestCtx, rt *runtimeConfig, rte *route, sc *scratch, f *flight, staleCopy []byte, fwd string) result {
	se := p.decodeStale(staleCopy, ctx.Time())
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	buildUpstream(req, ctx, rte, true, sc.fromPeer, rt.trusts(ctx), se)
	hasAuth := len(ctx.Request.Header.PeekBytes(hAuthorization)) > 0
	a := p.fetchOrigin(&originFetch{rt: rt, rte: rte, tenant: sc.tenant, req: req, stale: se, primary: sc.key, flightKey: sc.flightKey(),
		urlDigest: sc.urlDigest(), hasAuth: hasAuth, prev: sc.prevOwner, tid: sc.tid, client: ctx, flight: f})
	publish(f, &a)
	now := time.Now()
	switch a.kind {
	case ansStored, ansRevalidated:
		var e cache.Entry
		_ = cache.DecodeEntry(a.entry, &e)
		age := e.Age(now)
		if a.kind == ansRevalidated {
			p.serveSharedCoded(ctx, sc, rte, &e, a.key, age, cacheStatus{fwd: fwd, fwdStatus: fasthttp.StatusNotModified, stored: true})
			sc.peerTags(&ctx.Response, &e)
			for _, h := range a.private {
				ctx.Response.Header.AddBytesKV(h.Name, h.Value)
			}
			return resRevalidated
		}
		p.serveSharedCoded(ctx, sc, rte, &e, a.key, age, cacheStatus{fwd: fwd, fwdStatus: e.Status, stored: true})
		sc.peerTags(&ctx.Response, &e)
		return resMiss
	case ansFilling:
		res := p.answerFill(ctx, rt, rte, sc, a.fill, nil, staleCopy, cacheStatus{fwd: fwd, fwdStatus: a.fill.status, stored: true}, resMiss)
		a.release()
		return res
	case ansUnstorable:
		if !hasAuth {
			// A request-side reason not to store (Authorization) says
			// nothing about the URL: the stored copy stays.
			p.writeHitForMiss(rt, sc.flightKey(), a.seq, now)
		}
		hideTags(a.resp, rte)
		passResponse(&ctx.Response, a.resp, a.body, now, cacheStatus{fwd: fwd, fwdStatus: a.resp.StatusCode(), detail: a.reason})
		p.compressPassed(&ctx.Response, rte, sc.coding)
		a.release()
		return resMiss
	case ansStream:
		// Larger than max_object_size: stream it through, store nothing,
		// and send later requests straight to the origin.
		p.g.streamed.Inc()
		p.writeHitForMiss(rt, sc.flightKey(), a.seq, now)
		copyResponseHead(&ctx.Response, a.resp, now)
		hideTags(&ctx.Response, rte)
		cacheStatus{fwd: fwd, detail: "too-large"}.set(&ctx.Response.Header)
		ctx.Response.SetBodyStream(&streamBody{r: io.MultiReader(bytes.NewReader(a.body), a.resp.BodyStream()), resp: a.resp, lease: a.lease}, -1)
		return resMiss
	case ansOriginError:
		if se != nil && staleServable(se, now) {
			a.release()
			return p.serveStale(ctx, rte, se, staleReasonOf(a.fail.detail))
		}
		hideTags(a.resp, rte)
		passResponse(&ctx.Response, a.resp, a.body, now, cacheStatus{fwd: fwd, fwdStatus: a.resp.StatusCode()})
		a.release()
		return resMiss
	default: // ansFailed
		return p.failed(ctx, rte, se, a.fail, cacheStatus{fwd: fwd, detail: a.fail.detail})
	}
}

// failed answers a request whose origin fetch failed: the stale copy when
// its stale-if-error window allows, else shield's own error.
func (p *Proxy) failed(ctx *fasthttp.RequestCtx, rte *route, se *cache.Entry, fl failure, cs cacheStatus) result {
	if se != nil && staleServable(se, time.Now()) {
		return p.serveStale(ctx, rte, se, staleReasonOf(fl.detail))
	}
	p.generatedStatus(ctx, fl.status, "origin unavailable: "+fl.detail, cs)
	if fl.status == fasthttp.StatusServiceUnavailable || fl.status == fasthttp.StatusTooManyRequests {
		setRetryAfter(&ctx.Response, fl.retryAfter)
	}
	return resError
}

// staleServable reports whether se may stand in for a failed fetch: it is
// fresh (the client asked to revalidate), or inside its
// stale-while-revalidate or stale-if-error window. Responses with
// must-revalidate, proxy-revalidate or no-cache have no windows.
func staleServable(se *cache.Entry, now time.Time) bool {
	age := se.Age(now)
	return se.Classify(age, nil) != stale.Expired
}

// serveStale answers from a stale copy and says why.
func (p *Proxy) serveStale(ctx *fasthttp.RequestCtx, rte *route, se *cache.Entry, why staleReason) result {
	if !p.cache.Invalidations().Servable(se, ctx.Time()) {
		// Invalidated while the fetch was failing: never stand in.
		p.generatedStatus(ctx, fasthttp.StatusBadGateway, "origin unavailable", cacheStatus{fwd: "stale", detail: "invalidated"})
		return resError
	}
	age := se.Age(time.Now())
	ctx.Response.Reset()
	p.serveShared(ctx, se, age, cacheStatus{hit: true, fwd: "stale", detail: staleLabels[why]})
	rte.m.stale[why].Inc()
	return resStale
}

// setRetryAfter writes Retry-After in whole seconds, at least 1.
func setRetryAfter(resp *fasthttp.Response, d time.Duration) {
	secs := int64((d + time.Second - 1) / time.Second)
	if secs < 1 {
		secs = 1
	}
	var b [20]byte
	resp.Header.SetBytesKV(httpx.HRetryAfter, appendInt(b[:0], secs))
}

// refreshInBackground starts one background refresh of a stale entry
// (stale-while-revalidate), coalesced with any fetch of the key already in
// flight. The request is copied before the handler returns; the refresh
// runs under the proxy's background context, is not charged to the
// client's tenant, and its result reaches waiters like any fetch. A
// refresh whose copy was replaced meanwhile asks nothing
// (refreshedMeanwhile).
func (p *Proxy) refreshInBackground(ctx *fasthttp.RequestCtx, rt *runtimeConfig, rte *route, sc *scratch, staleCopy []byte) {
	key := sc.flightKey()
	f, leader := p.fl.join(key, cachekey.Digest(key))
	if !leader {
		return
	}
	se := p.decodeStale(staleCopy, ctx.Time())
	req := fasthttp.AcquireRequest()
	buildUpstream(req, ctx, rte, true, sc.fromPeer, rt.trusts(ctx), se)
	primary, flightKey, urlDigest := bytes.Clone(sc.key), bytes.Clone(key), sc.urlDigest()
	hasAuth := len(ctx.Request.Header.PeekBytes(hAuthorization)) > 0
	p.bg.wg.Add(1)
	go func() {
		defer p.bg.wg.Done()
		defer fasthttp.ReleaseRequest(req)
		defer p.fl.finish(f)
		if p.bg.ctx.Err() != nil || p.refreshedMeanwhile(f, flightKey, se) {
			return
		}
		a := p.fetchOrigin(&originFetch{rt: rt, rte: rte, req: req, stale: se, primary: primary, flightKey: flightKey, urlDigest: urlDigest, hasAuth: hasAuth, flight: f})
		publish(f, &a)
		if (a.kind == ansUnstorable && !hasAuth) || a.kind == ansStream {
			p.writeHitForMiss(rt, flightKey, a.seq, time.Now())
		}
		a.release()
	}()
}

// refreshedMeanwhile reports whether key holds an answer whose fetch
// started after that of se, the copy a background refresh was asked for,
// and then shares that answer with the refresh's flight f. A hit reads
// its entry first and joins the key's flight after: a refresh that
// stored its answer and ended in between leaves this one leading with a
// copy already replaced, and asking the origin again would be a second
// refresh of the key back to back, whose answer would replace the one
// just stored (miss re-checks the store for the same reason). Fetch
// order decides, as it does for Store, not freshness: an eager refresh's
// answer may itself be past the eager point. Without se (no copy, or
// one invalidated since) the refresh goes ahead.
func (p *Proxy) refreshedMeanwhile(f *flight, key []byte, se *cache.Entry) bool {
	if se == nil {
		return false
	}
	b := p.cache.Get(nil, key)
	var e cache.Entry
	if len(b) == 0 || cache.DecodeEntry(b, &e) != nil || e.Kind != cache.KindResponse || e.KeyDigest != cachekey.Digest(key) ||
		e.FetchSeq <= se.FetchSeq || !p.cache.Invalidations().Servable(&e, time.Now()) {
		return false
	}
	f.kind, f.entry, f.key = flightShared, b, key
	return true
}

// storeResponse writes e (and, for a varying response, its vary marker)
// and returns the encoded entry and the key it was stored under. Variant
// values come from the upstream request's headers (the client's, minus
// hop-by-hop fields). res is cache.Refused when e was not written (an
// invalidation of its URL or tags came after its fetch started, or the
// key holds an answer whose fetch started later), cache.Dropped when a
// failing disk tier could not keep it (putResponse).
//
// owned says e.Body is a buffer of the caller's that nothing else reads
// past its end (readBody's): when the meta fits in its spare capacity,
// the entry is encoded there, after the body, instead of copying the body
// into a new buffer; enc then shares e.Body's array.
func (p *Proxy) storeResponse(primary []byte, h *fasthttp.RequestHeader, e *cache.Entry, vary [][]byte, headers []cache.Header, respTime time.Time, owned bool) (enc, key []byte, res cache.PutResult) {
	key = storeKey(primary, h, vary)
	e.KeyDigest = cachekey.Digest(key)
	if owned && cap(e.Body)-len(e.Body) >= cache.EntryMetaMax(e, vary, headers) {
		enc = cache.AppendEntryAfterBody(e.Body, e, vary, headers)
	} else {
		enc = cache.AppendEntry(nil, e, vary, headers)
	}
	return enc, key, p.putResponse(primary, key, enc, e, vary, respTime)
}

// metaHeadroom is the room readBody leaves after a body for the entry's
// meta (cache.EntryMetaMax): the fixed fields and a generous share per
// response header — a guess, as the stored headers are chosen after the
// body is read; storeResponse copies when it falls short.
func metaHeadroom(resp *fasthttp.Response) int {
	return 256 + 128*resp.Header.Len()
}

// refresh handles a 304 to our conditional request: the stored body is
// kept, fields from the 304 replace stored ones of the same name, and
// freshness restarts from this response (RFC 9111 §4.3.4). Fields that
// must not be shared (Set-Cookie, unless the route allows it) go to the
// requester only; a 304 that makes the copy unstorable (private,
// no-store) is the requester's alone too.
func (p *Proxy) refresh(rte *route, se *cache.Entry, resp *fasthttp.Response, key []byte, seq int64, reqTime, respTime time.Time, hasAuth bool) answer {
	merged, private := mergeHeaders(se, resp, respTime, rte)
	if rte.comp != nil && rte.comp.headersEligible(se.Status, len(se.Body), merged) {
		merged = withVaryAE(merged) // a Vary in the 304 replaced the stored one
	}
	// Freshness is computed from the merged field set, as if the stored
	// response had just arrived with the new fields (Set-Cookie included:
	// it makes the answer unstorable unless the route allows it).
	tmp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(tmp)
	tmp.SetStatusCode(se.Status)
	for _, h := range merged {
		tmp.Header.AddBytesKV(h.Name, h.Value)
	}
	for _, h := range private {
		tmp.Header.AddBytesKV(h.Name, h.Value)
	}
	d := decide(hasAuth, tmp, rte, reqTime, respTime)
	e := *se
	e.StoredAt = respTime.UnixNano()
	e.FetchSeq = seq
	e.InitialAge, e.Lifetime, e.SWR, e.SIE = int64(d.initialAge), int64(d.lifetime), int64(d.swr), int64(d.sie)
	if v := tmp.Header.PeekBytes(httpx.HETag); len(v) > 0 {
		e.ETag = bytes.Clone(v)
	}
	if v := tmp.Header.PeekBytes(httpx.HLastModified); len(v) > 0 {
		e.LastModified = bytes.Clone(v)
	}
	storedKey := bytes.Clone(key)
	e.KeyDigest = cachekey.Digest(storedKey)
	enc := cache.AppendEntry(nil, &e, se.VaryList(), merged)
	a := answer{kind: ansRevalidated, entry: enc, key: storedKey, private: private, noShare: !d.storable}
	if !d.storable {
		return a
	}
	if p.cache.Store(storedKey, enc, &e, cache.PutOptions{}) == cache.Refused {
		p.g.overtaken.Inc()
		a.noShare = true
	}
	return a
}

// writeHitForMiss remembers that key's response could not be shared, so
// requests skip the coalescing queue for cache.hit_for_miss.
func (p *Proxy) writeHitForMiss(rt *runtimeConfig, key []byte, seq int64, now time.Time) {
	if rt.hitForMiss <= 0 {
		return
	}
	e := cache.Entry{Kind: cache.KindHitForMiss, StoredAt: now.UnixNano(), Lifetime: int64(rt.hitForMiss), KeyDigest: cachekey.Digest(key), FetchSeq: seq}
	if p.cache.Put(key, cache.AppendEntry(nil, &e, nil, nil), &e, cache.PutOptions{}) {
		p.g.hitForMiss.Inc()
	}
}

// responseEntry is the entry of an origin answer the cache may store (d
// says so), without its body: the buffered fill and the streamed fill
// build it alike.
func responseEntry(resp *fasthttp.Response, rte *route, d *decision, status int, seq int64, urlDigest uint64, fromPrev bool, prevTags []byte, respTime time.Time) cache.Entry {
	return cache.Entry{
		Kind:         cache.KindResponse,
		Status:       status,
		StoredAt:     respTime.UnixNano(),
		InitialAge:   int64(d.initialAge),
		Lifetime:     int64(d.lifetime),
		SWR:          int64(d.swr),
		SIE:          int64(d.sie),
		FetchSeq:     seq,
		URLDigest:    urlDigest,
		Tags:         entryTags(fromPrev, prevTags, resp, rte),
		ETag:         bytes.Clone(resp.Header.PeekBytes(httpx.HETag)),
		LastModified: bytes.Clone(resp.Header.PeekBytes(httpx.HLastModified)),
	}
}

// entryFields are the stored fields and Vary names of that answer; coded
// says the route compresses it (a body of size bytes), and then the
// fields carry Vary: Accept-Encoding.
func entryFields(resp *fasthttp.Response, rte *route, d *decision, status, size int, respTime time.Time) (headers []cache.Header, vary [][]byte, coded bool) {
	headers, vary = storedHeaders(resp, respTime, rte, d.strip)
	coded = rte.comp != nil && rte.comp.headersEligible(status, size, headers)
	if coded {
		headers = withVaryAE(headers) // what a client gets depends on its Accept-Encoding
	}
	return headers, vary, coded
}

// entryTags are the surrogate key digests of a fetched answer: the
// previous owner's (it does not send the tag field) or the origin's.
func entryTags(fromPrev bool, prevTags []byte, resp *fasthttp.Response, rte *route) []byte {
	if fromPrev {
		return prevTags
	}
	return cache.AppendTags(nil, resp.Header.PeekBytes(rte.tagHeader))
}
