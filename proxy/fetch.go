package proxy

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/cachekey"
	"github.com/shield-proxy/shield/stale"
)

// miss fetches through the coalescing group: the first request for the
// key leads, the others wait for its result.
func (p *Proxy) miss(ctx *fasthttp.RequestCtx, rt *runtimeConfig, rte *route, sc *scratch, staleCopy []byte, fwd string) result {
	key := sc.flightKey()
	digest := cachekey.Digest(key)
	f, leader := p.fl.join(key, digest)
	if !leader {
		return p.wait(ctx, rt, rte, sc, f, staleCopy, fwd)
	}
	defer p.fl.finish(f)
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
	t := time.NewTimer(rt.waitFor)
	select {
	case <-f.done:
		t.Stop()
		p.g.waiting.Add(-1)
	case <-t.C:
		p.g.waiting.Add(-1)
		p.g.waitTimeouts.Inc()
		p.generatedStatus(ctx, fasthttp.StatusGatewayTimeout, "timed out waiting for the origin", "shield; fwd=miss; collapsed; detail=wait-timeout")
		return resError
	}
	switch f.kind {
	case flightShared:
		var e entry
		if decodeEntry(f.entry, &e) != nil {
			return p.fetch(ctx, rt, rte, sc, nil, staleCopy, fwd)
		}
		if e.varyCount > 0 {
			// The leader's response varies: it is ours only if our
			// values of its Vary headers are the leader's.
			sc.vkey = appendVariantKey(sc.vkey[:0], sc.key, &e, &ctx.Request.Header)
			if !bytes.Equal(sc.vkey, f.key) {
				return p.miss(ctx, rt, rte, sc, staleCopy, "vary-miss")
			}
		}
		age := stale.CurrentAge(time.Duration(e.initialAge), time.Unix(0, e.storedAt), ctx.Time())
		p.serveShared(ctx, &e, age, "shield; fwd="+fwd+"; collapsed")
		return resCollapsed
	case flightFailed:
		p.generatedStatus(ctx, f.status, "origin unavailable", "shield; fwd="+fwd+"; collapsed; detail="+f.detail)
		return resError
	default:
		// Unshareable: fetch on our own, never from the leader's answer.
		return p.fetch(ctx, rt, rte, sc, nil, staleCopy, "bypass")
	}
}

// fetch asks the origin on behalf of the cache, stores what may be
// stored, answers the client and, when f is set, publishes the result to
// the flight's waiters. staleCopy, when set, is the stored entry whose
// validators make the request conditional.
func (p *Proxy) fetch(ctx *fasthttp.RequestCtx, rt *runtimeConfig, rte *route, sc *scratch, f *flight, staleCopy []byte, fwd string) result {
	o := rte.origin
	var se *entry
	if staleCopy != nil {
		se = new(entry)
		if decodeEntry(staleCopy, se) != nil || se.kind != kindResponse {
			se = nil
		}
	}
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	buildUpstream(req, ctx, true, se)

	resp := fasthttp.AcquireResponse()
	keep := false // set when a streamed body owns resp
	defer func() {
		if !keep {
			fasthttp.ReleaseResponse(resp)
		}
	}()

	reqTime := time.Now()
	err := o.do(req, resp, reqTime.Add(o.timeout))
	if err != nil {
		return p.fetchFailed(ctx, o, f, err, fwd)
	}
	o.m.duration.UpdateDuration(reqTime)
	status := resp.StatusCode()

	if status == fasthttp.StatusNotModified && se != nil {
		o.m.fetches[outNotModified].Inc()
		_ = resp.CloseBodyStream()
		return p.revalidated(ctx, rte, sc, f, se, resp, reqTime, time.Now(), fwd)
	}
	if status >= 500 {
		o.m.fetches[out5xx].Inc()
	} else {
		o.m.fetches[outOK].Inc()
	}

	body, complete, err := readBody(resp, rt.maxObject)
	if err != nil {
		return p.fetchFailed(ctx, o, f, err, fwd)
	}
	respTime := time.Now()
	if !complete {
		// Larger than max_object_size: stream it through, store nothing,
		// and send later requests straight to the origin.
		p.g.streamed.Inc()
		if f != nil {
			f.kind = flightUnshareable
		}
		p.writeHitForMiss(rt, sc.flightKey(), respTime)
		copyResponseHead(&ctx.Response, resp, respTime)
		ctx.Response.Header.Set("Cache-Status", "shield; fwd="+fwd+"; detail=too-large")
		ctx.Response.SetBodyStream(&streamBody{r: io.MultiReader(bytes.NewReader(body), resp.BodyStream()), resp: resp}, -1)
		keep = true
		return resMiss
	}
	if status >= 500 {
		// Origin errors are never cached nor shared as content; waiters
		// get a 502 of ours rather than each retrying the origin.
		if f != nil {
			f.kind, f.status, f.detail = flightFailed, fasthttp.StatusBadGateway, "origin-5xx"
		}
		passResponse(&ctx.Response, resp, body, respTime, "shield; fwd="+fwd+"; fwd-status="+itoa(status))
		return resMiss
	}

	d := decide(&ctx.Request.Header, resp, rte, reqTime, respTime)
	if !d.storable {
		p.g.notStored.Inc()
		if f != nil {
			f.kind = flightUnshareable
		}
		if d.hitForMiss {
			p.writeHitForMiss(rt, sc.flightKey(), respTime)
		}
		passResponse(&ctx.Response, resp, body, respTime, "shield; fwd="+fwd+"; fwd-status="+itoa(status)+"; detail="+d.reason)
		return resMiss
	}

	e := entry{
		kind:         kindResponse,
		status:       status,
		storedAt:     respTime.UnixNano(),
		initialAge:   int64(d.initialAge),
		lifetime:     int64(d.lifetime),
		swr:          int64(d.swr),
		sie:          int64(d.sie),
		etag:         resp.Header.PeekBytes(hETag),
		lastModified: resp.Header.PeekBytes(hLastModified),
		body:         body,
	}
	headers, vary := storedHeaders(resp, respTime, rte.allowSC)
	storeKey := p.storeResponse(sc, &ctx.Request.Header, &e, vary, headers, respTime)
	rte.m.stored.Inc()
	enc := appendEntry(nil, &e, vary, headers)
	if f != nil {
		f.kind, f.entry, f.key = flightShared, enc, storeKey
	}
	var out entry
	_ = decodeEntry(enc, &out)
	p.serveShared(ctx, &out, d.initialAge, "shield; fwd="+fwd+"; fwd-status="+itoa(status)+"; stored")
	return resMiss
}

// storeResponse writes e (and, for a varying response, its vary marker)
// and returns the key e was stored under.
func (p *Proxy) storeResponse(sc *scratch, h *fasthttp.RequestHeader, e *entry, vary [][]byte, headers []header, respTime time.Time) []byte {
	if len(vary) == 0 {
		key := bytes.Clone(sc.key)
		e.keyDigest = cachekey.Digest(key)
		p.store.set(key, appendEntry(nil, e, nil, headers))
		return key
	}
	// Keep the marker when it already names the same headers: rewriting
	// it would invalidate every other variant.
	var cur entry
	curBuf := p.store.get(nil, sc.key)
	if len(curBuf) == 0 || decodeEntry(curBuf, &cur) != nil || cur.kind != kindVary || !sameVary(&cur, vary) {
		marker := entry{kind: kindVary, storedAt: respTime.UnixNano(), keyDigest: cachekey.Digest(sc.key)}
		p.store.set(sc.key, appendEntry(nil, &marker, vary, nil))
	}
	key := bytes.Clone(sc.key)
	for _, name := range vary {
		key = cachekey.AppendVary(key, name, h.PeekBytes(name))
	}
	e.keyDigest = cachekey.Digest(key)
	p.store.set(key, appendEntry(nil, e, vary, headers))
	return key
}

func sameVary(e *entry, vary [][]byte) bool {
	if e.varyCount != len(vary) {
		return false
	}
	it := e.varyNames()
	for _, v := range vary {
		n, ok := it.next()
		if !ok || !bytes.Equal(n, v) {
			return false
		}
	}
	return true
}

// revalidated handles a 304 to our conditional request: the stored body
// is kept, headers from the 304 replace stored ones of the same name, and
// freshness restarts from this response (RFC 9111 §4.3.4).
func (p *Proxy) revalidated(ctx *fasthttp.RequestCtx, rte *route, sc *scratch, f *flight, se *entry, resp *fasthttp.Response, reqTime, respTime time.Time, fwd string) result {
	merged := mergeHeaders(se, resp, respTime)
	// Freshness is computed from the merged header set, as if the
	// stored response had just arrived with the new fields.
	tmp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(tmp)
	tmp.SetStatusCode(se.status)
	for _, h := range merged {
		tmp.Header.AddBytesKV(h.k, h.v)
	}
	d := decide(&ctx.Request.Header, tmp, rte, reqTime, respTime)
	e := *se
	e.storedAt = respTime.UnixNano()
	e.initialAge, e.lifetime, e.swr, e.sie = int64(d.initialAge), int64(d.lifetime), int64(d.swr), int64(d.sie)
	if v := tmp.Header.PeekBytes(hETag); len(v) > 0 {
		e.etag = v
	}
	if v := tmp.Header.PeekBytes(hLastModified); len(v) > 0 {
		e.lastModified = v
	}
	var vary [][]byte
	it := se.varyNames()
	for n, ok := it.next(); ok; n, ok = it.next() {
		vary = append(vary, n)
	}
	key := bytes.Clone(sc.flightKey())
	if d.storable {
		e.keyDigest = cachekey.Digest(key)
		p.store.set(key, appendEntry(nil, &e, vary, merged))
	}
	enc := appendEntry(nil, &e, vary, merged)
	if f != nil {
		f.kind, f.entry, f.key = flightShared, enc, key
	}
	var out entry
	_ = decodeEntry(enc, &out)
	p.serveShared(ctx, &out, d.initialAge, "shield; fwd="+fwd+"; fwd-status=304; stored")
	return resRevalidated
}

// fetchFailed answers a transport failure: 502 or 504, shared with the
// flight's waiters so they do not each retry a failing origin.
func (p *Proxy) fetchFailed(ctx *fasthttp.RequestCtx, o *origin, f *flight, err error, fwd string) result {
	outcome, status := classifyErr(err)
	o.m.fetches[outcome].Inc()
	detail := outcomeLabels[outcome]
	if f != nil {
		f.kind, f.status, f.detail = flightFailed, status, detail
	}
	p.logger.Debug("origin fetch failed", "origin", o.name, "err", err)
	p.generatedStatus(ctx, status, "origin unavailable", "shield; fwd="+fwd+"; detail="+detail)
	return resError
}

// writeHitForMiss remembers that key's response could not be shared, so
// requests skip the coalescing queue for cache.hit_for_miss.
func (p *Proxy) writeHitForMiss(rt *runtimeConfig, key []byte, now time.Time) {
	if rt.hitForMiss <= 0 {
		return
	}
	e := entry{kind: kindHitForMiss, storedAt: now.UnixNano(), lifetime: int64(rt.hitForMiss), keyDigest: cachekey.Digest(key)}
	p.store.set(key, appendEntry(nil, &e, nil, nil))
	p.g.hitForMiss.Inc()
}

// passUnsafe forwards a request whose method is not cacheable. A
// successful unsafe request invalidates the stored URL (RFC 9111 §4.4).
func (p *Proxy) passUnsafe(ctx *fasthttp.RequestCtx, rt *runtimeConfig, rte *route) result {
	res := p.forward(ctx, rte, "shield; fwd=method")
	if s := ctx.Response.StatusCode(); s >= 200 && s < 400 && !isSafe(ctx.Request.Header.Method()) {
		sc := scratchPool.Get().(*scratch)
		sc.key = rte.appendKey(sc.key[:0], ctx, sc)
		p.store.del(sc.key)
		scratchPool.Put(sc)
		p.g.invalidations.Inc()
	}
	if res == resMiss {
		return resPass
	}
	return res
}

// bypass forwards a cacheable-method request that must not use the cache.
func (p *Proxy) bypass(ctx *fasthttp.RequestCtx, rt *runtimeConfig, rte *route, detail string) result {
	res := p.forward(ctx, rte, "shield; fwd=bypass; detail="+detail)
	if res == resMiss {
		return resBypass
	}
	return res
}

// forward sends the request as is (minus hop-by-hop fields) and relays
// the answer without storing it. Bodies are streamed both ways.
func (p *Proxy) forward(ctx *fasthttp.RequestCtx, rte *route, cacheStatus string) result {
	o := rte.origin
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	buildUpstream(req, ctx, false, nil)
	resp := fasthttp.AcquireResponse()
	reqTime := time.Now()
	if err := o.do(req, resp, reqTime.Add(o.timeout)); err != nil {
		fasthttp.ReleaseResponse(resp)
		return p.fetchFailed(ctx, o, nil, err, "bypass")
	}
	o.m.duration.UpdateDuration(reqTime)
	if resp.StatusCode() >= 500 {
		o.m.fetches[out5xx].Inc()
	} else {
		o.m.fetches[outOK].Inc()
	}
	copyResponseHead(&ctx.Response, resp, time.Now())
	ctx.Response.Header.Set("Cache-Status", cacheStatus)
	if r := resp.BodyStream(); r != nil {
		ctx.Response.SetBodyStream(&streamBody{r: r, resp: resp}, resp.Header.ContentLength())
	} else {
		ctx.Response.SetBody(resp.Body())
		fasthttp.ReleaseResponse(resp)
	}
	return resMiss
}

func isSafe(method []byte) bool {
	switch string(method) {
	case "GET", "HEAD", "OPTIONS", "TRACE":
		return true
	}
	return false
}

// readBody reads the origin's body up to limit bytes. complete is false
// when the body is larger: body then holds what was read, and the rest is
// still in resp.BodyStream().
func readBody(resp *fasthttp.Response, limit int) (body []byte, complete bool, err error) {
	r := resp.BodyStream()
	if r == nil {
		return bytes.Clone(resp.Body()), true, nil
	}
	cl := resp.Header.ContentLength()
	if cl > limit {
		return nil, false, nil
	}
	size := 4096
	if cl >= 0 {
		size = cl + 1
	}
	buf := make([]byte, 0, size)
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, len(buf))
		}
		n, rerr := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if len(buf) > limit {
			return buf, false, nil
		}
		if rerr == io.EOF {
			_ = resp.CloseBodyStream()
			return buf, true, nil
		}
		if rerr != nil {
			_ = resp.CloseBodyStream()
			return nil, false, rerr
		}
	}
}

// streamBody relays an origin body and releases the origin response
// when fasthttp closes it after writing.
type streamBody struct {
	r    io.Reader
	resp *fasthttp.Response
}

func (s *streamBody) Read(b []byte) (int, error) { return s.r.Read(b) }

func (s *streamBody) Close() error {
	err := s.resp.CloseBodyStream()
	fasthttp.ReleaseResponse(s.resp)
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}
