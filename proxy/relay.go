package proxy

import (
	"bytes"
	"net/netip"
	"slices"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/proxy/cache"
	"github.com/shield-proxy/shield/proxy/cluster"
	"github.com/shield-proxy/shield/proxy/httpx"
	"github.com/shield-proxy/shield/stale"
)

// Headers forwarded to the origin: every end-to-end request field the
// client sent, except
//   - hop-by-hop fields and those named in Connection (RFC 9110 §7.6.1);
//   - Forwarded and every X-Forwarded-* field: shield sets X-Forwarded-For,
//     -Proto and -Host itself (setForwarded), so clients cannot spoof
//     them or slip other unkeyed ones (X-Forwarded-Port, -Prefix) to the
//     origin; only a configured trusted proxy's are extended;
//   - on a cache fetch, the client's conditional fields (shield fetches
//     a full response to store and answers the client's conditional
//     itself) and URL/method rewrite fields (see rewriteHeaders).
//
// Via gains "1.1 shield".
var conditionalHeaders = [][]byte{
	[]byte("If-None-Match"), []byte("If-Modified-Since"), []byte("If-Match"),
	[]byte("If-Unmodified-Since"), []byte("If-Range"),
}

// buildUpstream fills req from the client request for route rte.
// fromPeer marks a request forwarded by another node (which set the
// forwarding fields: Shield-Forwarded); trusted, a client that is a
// trusted proxy (setForwarded). forCache marks a fetch on behalf of the
// cache: HEAD becomes GET (so the answer can be stored and serve both),
// the query loses the parameters the key ignores (upstreamTarget), client
// conditionals are dropped, and se's validators, if any, make the request
// conditional.
func buildUpstream(req *fasthttp.Request, ctx *fasthttp.RequestCtx, rte *route, forCache, fromPeer, trusted bool, se *cache.Entry) {
	src := &ctx.Request
	if forCache && src.Header.IsHead() {
		req.Header.SetMethod(fasthttp.MethodGet)
	} else {
		req.Header.SetMethodBytes(src.Header.Method())
	}
	var buf [256]byte
	target, dropped := buf[:0], false
	if forCache {
		target, dropped = upstreamTarget(target, src, rte)
	}
	if dropped {
		req.SetRequestURIBytes(target)
	} else {
		req.SetRequestURIBytes(src.Header.RequestURI())
	}
	conn := src.Header.PeekBytes(httpx.HConnection)
	var via []byte
	for k, v := range src.Header.All() {
		switch {
		case httpx.IsHopByHop(k, conn), httpx.IsForwardedHeader(k), isShieldHeader(k),
			bytes.EqualFold(k, []byte("Host")), bytes.EqualFold(k, httpx.HContentLength):
			continue
		case bytes.EqualFold(k, httpx.HVia):
			via = append(append(via, v...), ", "...)
			continue
		case forCache && (isConditional(k) || isRewriteHeader(k) || bytes.EqualFold(k, hRange)):
			continue
		}
		req.Header.AddBytesKV(k, v)
	}
	req.Header.SetHostBytes(src.Header.Host())
	req.Header.SetBytesKV(httpx.HVia, append(via, httpx.ViaValue...))
	switch {
	case fromPeer && len(src.Header.PeekBytes(hShieldForwarded)) > 0:
		// The edge set them for its client, trusted or not: kept.
		for k, v := range src.Header.All() {
			if httpx.IsEdgeForwarded(k) {
				req.Header.AddBytesKV(k, v)
			}
		}
	case fromPeer:
		// An edge from before Shield-Forwarded sends its client's fields
		// unchecked: only the address it saw is used.
		ip := src.Header.PeekBytes(hShieldClientIP)
		var ipBuf [64]byte
		if len(ip) == 0 {
			ip = appendRemoteIP(ipBuf[:0], ctx)
		}
		setForwarded(cluster.HTTPHead(&req.Header), &src.Header, ip, ctx.IsTLS(), false)
	default:
		var ipBuf [64]byte
		setForwarded(cluster.HTTPHead(&req.Header), &src.Header, appendRemoteIP(ipBuf[:0], ctx), ctx.IsTLS(), trusted)
	}
	if se != nil {
		if len(se.ETag) > 0 {
			req.Header.SetBytesKV(httpx.HIfNoneMatch, se.ETag)
		}
		if len(se.LastModified) > 0 {
			req.Header.SetBytesKV(httpx.HIfModSince, se.LastModified)
		}
	}
	if !forCache {
		req.SetBody(src.Body())
	}
}

// setForwarded sets X-Forwarded-For, -Proto and -Host (and -Port) on dst,
// an upstream request (its header, or a mux request to a peer) that got
// none of the client's Forwarded and
// X-Forwarded-* fields, for a client at ip. From a trusted proxy they
// speak for the proxy's own client: its X-Forwarded-For gains ip, and its
// X-Forwarded-Proto, -Host and -Port are kept. Anyone else's are replaced:
// ip, the listener's scheme and the request's Host. The names are
// canonical: SetCanonical skips normalising them.
func setForwarded(dst cluster.ReqHead, src *fasthttp.RequestHeader, ip []byte, tls, trusted bool) {
	var buf [128]byte
	xff := buf[:0]
	var proto, host, port []byte
	if trusted {
		for k, v := range src.All() {
			switch {
			case bytes.EqualFold(k, httpx.HXForwardedFor):
				if len(v) > 0 {
					xff = append(append(xff, v...), ", "...)
				}
			case bytes.EqualFold(k, httpx.HXForwardedProt):
				proto = v
			case bytes.EqualFold(k, httpx.HXForwardedHost):
				host = v
			case bytes.EqualFold(k, httpx.HXForwardedPort):
				port = v
			}
		}
	}
	dst.SetCanonical(httpx.HXForwardedFor, append(xff, ip...))
	switch {
	case proto != nil:
	case tls:
		proto = schemeHTTPS
	default:
		proto = schemeHTTP
	}
	dst.SetCanonical(httpx.HXForwardedProt, proto)
	if host == nil {
		host = src.Host()
	}
	dst.SetCanonical(httpx.HXForwardedHost, host)
	if port != nil {
		dst.SetCanonical(httpx.HXForwardedPort, port)
	}
}

// upstreamTarget appends the target of a cache fetch to dst: the client's
// path (raw) and query without the parameters the route's key ignores
// (cachekey.Rules.AppendForwardQuery), unless the route forwards them.
// ok is false when that is the client's target as sent. Only a cache
// fetch drops them: its answer is stored under a key without them, so
// none may reach the origin (which might echo it into the answer).
func upstreamTarget(dst []byte, src *fasthttp.Request, rte *route) (t []byte, ok bool) {
	if rte.forwardIgnored || rte.rules == nil {
		return dst, false
	}
	uri := src.URI()
	dst = append(append(dst, uri.PathOriginal()...), '?')
	t, ok = rte.rules.AppendForwardQuery(dst, uri.QueryString())
	if ok && len(t) == len(dst) {
		t = t[:len(dst)-1] // every parameter dropped: no '?'
	}
	return t, ok
}

// rewriteHeaders are fields some origin frameworks honour to change the
// URL or method they serve. They are not part of the cache key, so on a
// cache fetch they would let one client store an answer for another URL
// or method under this key (cache poisoning): dropped on cache fetches,
// forwarded on pass-through requests, whose answers are never stored.
var rewriteHeaders = [][]byte{
	[]byte("X-Original-Url"), []byte("X-Rewrite-Url"),
	[]byte("X-Http-Method-Override"), []byte("X-Http-Method"), []byte("X-Method-Override"),
}

func isRewriteHeader(k []byte) bool {
	for _, c := range rewriteHeaders {
		if bytes.EqualFold(k, c) {
			return true
		}
	}
	return false
}

func isConditional(k []byte) bool {
	for _, c := range conditionalHeaders {
		if bytes.EqualFold(k, c) {
			return true
		}
	}
	return false
}

// copyResponseHead copies status and end-to-end headers of an origin
// response, adds Via and, when the origin sent none, Date.
func copyResponseHead(out *fasthttp.Response, resp *fasthttp.Response, now time.Time) {
	// Date first: setting it resets the header (see httpx.SetDate).
	if !httpx.SetDate(&out.Header, resp.Header.PeekBytes(httpx.HDate)) {
		httpx.SetDate(&out.Header, stale.AppendHTTPDate(nil, now))
	}
	out.SetStatusCode(resp.StatusCode())
	conn := resp.Header.PeekBytes(httpx.HConnection)
	var via []byte
	for k, v := range resp.Header.All() {
		switch {
		case httpx.IsHopByHop(k, conn), bytes.EqualFold(k, httpx.HContentLength), bytes.EqualFold(k, httpx.HCacheStatus),
			bytes.EqualFold(k, httpx.HDate):
			continue
		case bytes.EqualFold(k, httpx.HVia):
			via = append(append(via, v...), ", "...)
			continue
		}
		out.Header.AddBytesKV(k, v)
	}
	out.Header.SetBytesKV(httpx.HVia, append(via, httpx.ViaValue...))
}

// passResponse relays an origin response whose body has been read.
func passResponse(out *fasthttp.Response, resp *fasthttp.Response, body []byte, now time.Time, cs cacheStatus) {
	copyResponseHead(out, resp, now)
	cs.set(&out.Header)
	out.SetBody(body)
}

// storedHeaders collects the fields to store with an entry and the
// response's Vary names (lower-case, sorted, unique). Via is stored
// already combined with ours; Date is added when the origin sent none
// (RFC 9110 §6.6.1). The fields own their bytes (resp is released
// before the entry is encoded), copied into one buffer: a miss stores
// a dozen fields, and two allocations each were most of its garbage.
func storedHeaders(resp *fasthttp.Response, now time.Time, rte *route, strip []byte) ([]cache.Header, [][]byte) {
	allowSetCookie := rte.policy.AllowSetCookie
	conn := resp.Header.PeekBytes(httpx.HConnection)
	hs := make([]cache.Header, 0, storedFieldsCap)
	var via []byte
	var vary [][]byte
	hasDate := false
	size := 0
	for k, v := range resp.Header.All() {
		switch {
		case httpx.IsHopByHop(k, conn), httpx.NotStored(k) && !bytes.EqualFold(k, httpx.HVia):
			continue
		case bytes.EqualFold(k, httpx.HVia):
			via = append(append(via, v...), ", "...)
			continue
		case bytes.EqualFold(k, httpx.HSetCookie) && !allowSetCookie, rte.hidesTag(k), rte.hidesTargeted(k),
			len(strip) > 0 && stale.ListHas(strip, k):
			continue
		case bytes.EqualFold(k, httpx.HVary):
			vary = appendVaryNames(vary, v)
		case bytes.EqualFold(k, httpx.HDate):
			hasDate = true
		}
		hs = append(hs, cache.Header{Name: k, Value: v}) // resp's bytes until copied below
		size += len(k) + len(v)
	}
	size += len(via) + len(httpx.ViaValue) + stale.HTTPDateLen
	buf := make([]byte, 0, size)
	for i := range hs {
		buf, hs[i].Name = appendOwned(buf, hs[i].Name)
		buf, hs[i].Value = appendOwned(buf, hs[i].Value)
	}
	// Our Via after the origin's (the buffer has room for both).
	var v []byte
	buf, v = appendOwned(buf, via, httpx.ViaValue)
	hs = append(hs, cache.Header{Name: httpx.HVia, Value: v})
	if !hasDate {
		var d [stale.HTTPDateLen]byte
		_, v = appendOwned(buf, stale.AppendHTTPDate(d[:0], now))
		hs = append(hs, cache.Header{Name: httpx.HDate, Value: v})
	}
	slices.SortFunc(vary, bytes.Compare)
	vary = slices.CompactFunc(vary, bytes.Equal)
	return hs, vary
}

// storedFieldsCap is the room storedHeaders makes for an answer's
// fields at first: a typical API answer's dozen, with Via and Date.
const storedFieldsCap = 16

// appendOwned appends parts to buf and returns buf and their copy,
// capped so that appending to the copy cannot write over what follows.
func appendOwned(buf []byte, parts ...[]byte) ([]byte, []byte) {
	n := len(buf)
	for _, p := range parts {
		buf = append(buf, p...)
	}
	return buf, buf[n:len(buf):len(buf)]
}

// appendVaryNames adds the lower-cased field names of one Vary value.
func appendVaryNames(dst [][]byte, v []byte) [][]byte {
	for _, tok := range bytes.Split(v, []byte(",")) {
		tok = bytes.TrimSpace(tok)
		if len(tok) > 0 {
			dst = append(dst, bytes.ToLower(tok))
		}
	}
	return dst
}

// mergeHeaders applies a 304's fields to a stored entry's: a field the
// 304 carries replaces every stored field of that name (RFC 9111 §3.2),
// except those describing the body, which the 304 does not update.
// Set-Cookie (unless the route allows storing it) is returned apart, in
// private: it belongs to the requester, never to the stored copy.
func mergeHeaders(se *cache.Entry, resp *fasthttp.Response, now time.Time, rte *route) (merged, private []cache.Header) {
	conn := resp.Header.PeekBytes(httpx.HConnection)
	var fresh []cache.Header
	for k, v := range resp.Header.All() {
		if httpx.IsHopByHop(k, conn) || httpx.NotStored(k) || bytes.EqualFold(k, []byte("Content-Type")) ||
			bytes.EqualFold(k, []byte("Content-Encoding")) || bytes.EqualFold(k, []byte("Content-Range")) ||
			rte.hidesTag(k) || rte.hidesTargeted(k) {
			continue
		}
		h := cache.Header{Name: bytes.Clone(k), Value: bytes.Clone(v)}
		if bytes.EqualFold(k, httpx.HSetCookie) && !rte.policy.AllowSetCookie {
			private = append(private, h)
			continue
		}
		fresh = append(fresh, h)
	}
	out := slices.DeleteFunc(se.HeaderList(), func(old cache.Header) bool {
		return slices.ContainsFunc(fresh, func(h cache.Header) bool { return bytes.EqualFold(h.Name, old.Name) })
	})
	return append(out, fresh...), private
}

// hidesTag reports whether k is the route's surrogate-key field and
// clients must not see it.
func (r *route) hidesTag(k []byte) bool {
	return !r.exposeTags && len(r.tagHeader) > 0 && bytes.EqualFold(k, r.tagHeader)
}

// hideTags removes the route's surrogate-key field from a response
// passed through to a client, unless the route exposes it.
func hideTags(resp *fasthttp.Response, r *route) {
	if !r.exposeTags && len(r.tagHeader) > 0 {
		resp.Header.DelBytes(r.tagHeader)
	}
	if !r.forwardTargeted {
		for _, name := range r.targeted {
			resp.Header.DelBytes(name)
		}
	}
}

// hidesTargeted reports whether k is one of the route's targeted
// cache-control fields (RFC 9213) and clients must not see it.
func (r *route) hidesTargeted(k []byte) bool {
	if r.forwardTargeted {
		return false
	}
	for _, name := range r.targeted {
		if bytes.EqualFold(k, name) {
			return true
		}
	}
	return false
}

// generatedStatus writes a shield-made response with a Cache-Status.
func (p *Proxy) generatedStatus(ctx *fasthttp.RequestCtx, status int, msg string, cs cacheStatus) {
	p.generated(ctx, status, msg)
	cs.set(&ctx.Response.Header)
}

// appendRemoteIP appends the client's address as net.IP.String would
// write it (IPv4 in dotted form, also when held as IPv4-mapped IPv6),
// without net.IP.String's allocation: it is on every forwarded request.
func appendRemoteIP(dst []byte, ctx *fasthttp.RequestCtx) []byte {
	a, ok := netip.AddrFromSlice(ctx.RemoteIP())
	if !ok {
		return append(dst, "<nil>"...) // what net.IP.String says of no address
	}
	return a.Unmap().AppendTo(dst)
}
