package proxy

import (
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/proxy/httpx"
)

// cacheStatus is shield's member of the Cache-Status field (RFC 9211):
// every answer says how the cache handled its request. It is written
// here only, so its parameters always come in one order and spelling:
//
//	shield; hit; fwd=<reason>; fwd-status=<n>; stored; collapsed; detail=<token>; ttl=<s>
//
// fwd is RFC 9211's forward reason (bypass, method, miss, vary-miss,
// request, stale); detail is shield's own token (docs/configuration.md
// lists them). The members of the hit path are built once, ending in
// "ttl=" for the handler to append the seconds without allocating
// (csHitTTL, csStaleSWR); the others are built where they are answered.
type cacheStatus struct {
	hit       bool
	fwd       string
	fwdStatus int // the origin's status; 0: none
	stored    bool
	collapsed bool
	detail    string
	ttlNext   bool // end with "; ttl=": the caller appends the value
}

// append appends the member to dst.
func (cs cacheStatus) append(dst []byte) []byte {
	dst = append(dst, "shield"...)
	if cs.hit {
		dst = append(dst, "; hit"...)
	}
	if cs.fwd != "" {
		dst = append(append(dst, "; fwd="...), cs.fwd...)
	}
	if cs.fwdStatus != 0 {
		dst = strconv.AppendInt(append(dst, "; fwd-status="...), int64(cs.fwdStatus), 10)
	}
	if cs.stored {
		dst = append(dst, "; stored"...)
	}
	if cs.collapsed {
		dst = append(dst, "; collapsed"...)
	}
	if cs.detail != "" {
		dst = append(append(dst, "; detail="...), cs.detail...)
	}
	if cs.ttlNext {
		dst = append(dst, "; ttl="...)
	}
	return dst
}

// set writes the member as h's Cache-Status.
func (cs cacheStatus) set(h *fasthttp.ResponseHeader) {
	var buf [128]byte
	h.SetBytesKV(httpx.HCacheStatus, cs.append(buf[:0]))
}
