package proxy

import (
	"errors"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/admission"
	"github.com/shield-proxy/shield/proxy/httpx"
	"github.com/shield-proxy/shield/proxy/upstream"
)

// passUnsafe forwards a request whose method is not cacheable. A
// successful unsafe request invalidates the stored URL (RFC 9111 §4.4).
func (p *Proxy) passUnsafe(ctx *fasthttp.RequestCtx, rt *runtimeConfig, rte *route, t *admission.Tenant, tid []byte, fromPeer bool) result {
	res := p.forward(ctx, rte, t, fromPeer, cacheStatus{fwd: "method"})
	if s := ctx.Response.StatusCode(); s >= 200 && s < 400 && !isSafe(ctx.Request.Header.Method()) {
		sc := scratchPool.Get().(*scratch)
		sc.reset()
		sc.tid = tid
		sc.key = rte.appendKey(sc.key[:0], ctx, sc, p.cache.Namespaces().Version(rte.name, rte.scoped, tid))
		// Every variant of the URL, and any fetch of it still in flight.
		p.cache.Invalidations().InvalidateURL(sc.urlDigest(), false)
		p.cache.Del(sc.key)
		if p.cluster.Load() != nil && !fromPeer {
			scheme := "http://"
			if ctx.IsTLS() {
				scheme = "https://"
			}
			p.invalidateEverywhere(scheme+string(ctx.Request.Header.Host())+string(ctx.Request.Header.RequestURI()), tid)
		}
		scratchPool.Put(sc)
		p.g.invalidations.Inc()
		p.invalidateRelated(ctx, rt, tid, fromPeer)
	}
	if res == resMiss {
		return resPass
	}
	return res
}

var (
	hLocation        = []byte("Location")
	hContentLocation = []byte("Content-Location")
)

// invalidateRelated invalidates the URLs in the answer's Location and
// Content-Location when they name the request's host (RFC 9111 §4.4; a
// URL on another host is never invalidated, so an origin cannot purge
// someone else's content). Each is keyed under the route its path
// matches, by briefly pointing the request at it.
func (p *Proxy) invalidateRelated(ctx *fasthttp.RequestCtx, rt *runtimeConfig, tid []byte, fromPeer bool) {
	scheme := "http://"
	if ctx.IsTLS() {
		scheme = "https://"
	}
	host := string(ctx.Request.Header.Host())
	base := scheme + host + string(ctx.Request.Header.RequestURI())
	for _, name := range [...][]byte{hLocation, hContentLocation} {
		v := ctx.Response.Header.PeekBytes(name)
		if len(v) == 0 {
			continue
		}
		u := fasthttp.AcquireURI()
		if err := u.Parse(nil, []byte(base)); err == nil {
			u.UpdateBytes(v)
		}
		target := normalTarget(string(u.RequestURI())) // as sanitize spells a request's
		same := strings.EqualFold(string(u.Host()), host) && string(u.Scheme())+"://" == scheme
		fasthttp.ReleaseURI(u)
		if !same || target == string(ctx.Request.Header.RequestURI()) {
			continue
		}
		r := rt.table.Match(ctx.Request.Header.Host(), []byte(target))
		if r == nil {
			continue
		}
		rte := rt.routes[r.Index]
		orig := string(ctx.Request.Header.RequestURI())
		ctx.Request.SetRequestURI(target)
		sc := scratchPool.Get().(*scratch)
		sc.reset()
		sc.tid = tid
		sc.key = rte.appendKey(sc.key[:0], ctx, sc, p.cache.Namespaces().Version(rte.name, rte.scoped, tid))
		p.cache.Invalidations().InvalidateURL(sc.urlDigest(), false)
		p.cache.Del(sc.key)
		scratchPool.Put(sc)
		ctx.Request.SetRequestURI(orig)
		if p.cluster.Load() != nil && !fromPeer {
			p.invalidateEverywhere(scheme+host+target, tid)
		}
		p.g.invalidations.Inc()
	}
}

// bypass forwards a cacheable-method request that must not use the cache.
func (p *Proxy) bypass(ctx *fasthttp.RequestCtx, rte *route, t *admission.Tenant, fromPeer bool, detail string) result {
	res := p.forward(ctx, rte, t, fromPeer, cacheStatus{fwd: "bypass", detail: detail})
	if res == resMiss {
		return resBypass
	}
	return res
}

// forward sends the request as is (minus hop-by-hop fields) and relays
// the answer without storing it; the answer's body is streamed.
func (p *Proxy) forward(ctx *fasthttp.RequestCtx, rte *route, t *admission.Tenant, fromPeer bool, cs cacheStatus) result {
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	buildUpstream(req, ctx, rte, false, fromPeer, p.rt.Load().trusts(ctx), nil)
	resp := fasthttp.AcquireResponse()
	tok := httpx.WatchHints(req, ctx, rte.origin.MaxHints())
	l, ok, uf := rte.origin.Call(t, rte.prio, req, resp)
	httpx.EndHints(req, tok)
	if !ok {
		fl := fromUpstream(uf)
		rte.countShed(fl)
		fasthttp.ReleaseResponse(resp)
		return p.failed(ctx, rte, nil, fl, cacheStatus{fwd: "bypass", detail: fl.detail})
	}
	copyResponseHead(&ctx.Response, resp, time.Now())
	hideTags(&ctx.Response, rte)
	cs.set(&ctx.Response.Header)
	if rte.comp != nil && p.compressForwarded(ctx, rte, resp, l) {
		return resMiss
	}
	if r := resp.BodyStream(); r != nil {
		ctx.Response.SetBodyStream(&streamBody{r: r, resp: resp, lease: l}, resp.Header.ContentLength())
	} else {
		ctx.Response.SetBody(resp.Body())
		fasthttp.ReleaseResponse(resp)
		l.End()
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

// readBody reads the origin's body up to limit bytes into a buffer of
// its own with at least headroom bytes free after a body read whole
// (room for the entry's meta: storeResponse then encodes the entry in
// place instead of copying the body into a second buffer). complete is
// false when the body is larger: body then holds what was read, and the
// rest is still in resp.BodyStream().
func readBody(resp *fasthttp.Response, limit, headroom int) (body []byte, complete bool, err error) {
	r := resp.BodyStream()
	if r == nil {
		b := resp.Body()
		return append(make([]byte, 0, len(b)+headroom), b...), true, nil
	}
	cl := resp.Header.ContentLength()
	if cl > limit {
		return nil, false, nil
	}
	size := 4096
	if cl >= 0 {
		size = cl + 1 + headroom
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
	r     io.Reader
	resp  *fasthttp.Response
	lease upstream.Lease // the origin budget slot, ended on Close
}

func (s *streamBody) Read(b []byte) (int, error) { return s.r.Read(b) }

func (s *streamBody) Close() error {
	err := s.resp.CloseBodyStream()
	fasthttp.ReleaseResponse(s.resp)
	s.lease.End()
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}
