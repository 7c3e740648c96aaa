package proxy

import (
	"bytes"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/admission"
	"github.com/shield-proxy/shield/proxy/httpx"
)

// tenantOf identifies the request's tenant: the route's fixed tenant, else
// the configured header or API key. tid is the identity used in
// tenant-scoped keys: the raw header value (so unknown tenants, which
// share the default class's limits, still never share entries) or the
// tenant an API key maps to.
func (rt *runtimeConfig) tenantOf(h *fasthttp.RequestHeader, rte *route) (t *admission.Tenant, tid []byte) {
	switch {
	case rt.tenants == nil:
		return nil, rte.tenant
	case rte.tenant != nil:
		tid = rte.tenant
	case rt.idHeader != nil:
		tid = h.PeekBytes(rt.idHeader)
	case rt.apiKeyH != nil:
		tid = rt.apiKeys[string(h.PeekBytes(rt.apiKeyH))]
	}
	return rt.tenants.Lookup(tid), tid
}

// reject answers 429 without allocating: Retry-After from the bucket and
// a small JSON body naming the tenant class and the reason.
func reject(ctx *fasthttp.RequestCtx, t *admission.Tenant, reason admission.Reason, retryAfter time.Duration) {
	resp := &ctx.Response
	resp.SetStatusCode(fasthttp.StatusTooManyRequests)
	setRetryAfter(resp, retryAfter)
	resp.Header.SetContentType("application/json")
	resp.Header.SetBytesKV(httpx.HCacheControl, noStore)
	resp.Header.SetBytesKV(httpx.HCacheStatus, csRejected)
	var buf [256]byte
	b := append(buf[:0], `{"error":"too many requests","tenant":"`...)
	b = append(b, t.Name()...)
	b = append(b, `","reason":"`...)
	b = append(b, reason.String()...)
	b = append(b, `","retry_after":`...)
	b = appendInt(b, max(int64((retryAfter+time.Second-1)/time.Second), 1))
	b = append(b, "}\n"...)
	resp.SetBody(b)
}

var (
	noStore    = []byte("no-store")
	csRejected = cacheStatus{fwd: "bypass", detail: "rejected"}.append(nil)
)

// validHost reports whether h is a reg-name, IPv4 or bracketed IPv6
// literal with an optional numeric port (RFC 9110 §7.2, RFC 3986 §3.2.2),
// without allocating. An empty Host is allowed (HTTP/1.0); it matches
// only "*" routes.
func validHost(h []byte) bool {
	if len(h) > 0 && h[0] == '[' {
		end := bytes.IndexByte(h, ']')
		if end < 0 {
			return false
		}
		for _, c := range h[1:end] {
			if !(c == ':' || c == '.' || ('0' <= c && c <= '9') || ('a' <= c|0x20 && c|0x20 <= 'f')) {
				return false
			}
		}
		h = h[end+1:]
		if len(h) == 0 {
			return true
		}
		if h[0] != ':' {
			return false
		}
		return digitsOnly(h[1:])
	}
	if i := bytes.IndexByte(h, ':'); i >= 0 {
		if !digitsOnly(h[i+1:]) {
			return false
		}
		h = h[:i]
	}
	for _, c := range h {
		if !(c == '-' || c == '.' || c == '_' || ('0' <= c && c <= '9') || ('a' <= c|0x20 && c|0x20 <= 'z')) {
			return false
		}
	}
	return true
}

// plainValidHost is validHost and cachekey.PlainHost in one pass over
// the bytes, for the Host of nearly every request: only lower-case
// letters, digits, '-', '.' and '_', no trailing dot, and at most a port
// of one to five digits that is neither 80 nor 443. Such a host is a
// valid reg-name and its own canonical form, so the request side reads
// it once instead of twice (validHost here, PlainHost in sanitize). A
// false answer decides nothing: validHost and sanitize read it then.
// FuzzPlainValidHost checks it never accepts what either refuses.
func plainValidHost(h []byte) bool {
	name, port, hasPort := h, []byte(nil), false
	if i := bytes.IndexByte(h, ':'); i >= 0 {
		name, port, hasPort = h[:i], h[i+1:], true
	}
	var bad byte
	for _, c := range name {
		bad |= hostNotPlain[c]
	}
	if bad != 0 || len(name) > 0 && name[len(name)-1] == '.' {
		return false
	}
	return !hasPort || len(port) > 0 && digitsOnly(port) && string(port) != "80" && string(port) != "443"
}

// hostNotPlain marks every byte plainValidHost refuses.
var hostNotPlain = func() (t [256]byte) {
	for i := range t {
		c := byte(i)
		if !(c == '-' || c == '.' || c == '_' || ('0' <= c && c <= '9') || ('a' <= c && c <= 'z')) {
			t[i] = 1
		}
	}
	return t
}()

func digitsOnly(b []byte) bool {
	if len(b) > 5 {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func appendInt(dst []byte, n int64) []byte { return strconv.AppendInt(dst, n, 10) }
