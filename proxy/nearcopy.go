package proxy

import (
	"bytes"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/proxy/cache"
	"github.com/shield-proxy/shield/proxy/cluster"
	"github.com/shield-proxy/shield/proxy/httpx"
)

// keepNearCopy answers a hot key's forwarded request from the owner's
// response and keeps a short-lived local copy (at most hot_key_max_age,
// no stale windows), so the next requests for that key are local hits. It
// reports false, leaving resp untouched, when the answer cannot be kept
// (too large, not storable): the caller then relays it as usual.
func (p *Proxy) keepNearCopy(ctx *fasthttp.RequestCtx, c *cluster.Node, rt *runtimeConfig, rte *route, sc *scratch, req *fasthttp.Request, resp *fasthttp.Response, seq int64, reqTime time.Time) bool {
	body := resp.Body()
	if len(body) > rt.maxObject {
		return false
	}
	// Without the entry's tags a tag purge could not reach the copy; an
	// entry fetched before an invalidation this node knows of is not kept.
	remoteSeq, tags, ok := parsePeerTags(resp.Header.PeekBytes(hShieldTags))
	if !ok {
		return false
	}
	seq = min(seq, remoteSeq)
	if dead, _ := p.cache.Invalidations().Verdict(seq, sc.urlDigest(), tags); dead {
		return false
	}
	now := time.Now()
	hasAuth := len(ctx.Request.Header.PeekBytes(hAuthorization)) > 0
	if d := decide(hasAuth, resp, rte, reqTime, now); d.storable {
		e := cache.Entry{
			Kind:       cache.KindNearCopy,
			Status:     resp.StatusCode(),
			StoredAt:   now.UnixNano(),
			InitialAge: int64(d.initialAge),
			Lifetime:   int64(min(d.lifetime, c.Options().HotKeyMaxAge+d.initialAge)),
			Body:       body,
			ETag:       bytes.Clone(resp.Header.PeekBytes(httpx.HETag)),
			FetchSeq:   seq,
			URLDigest:  sc.urlDigest(),
			Tags:       tags,
		}
		e.LastModified = bytes.Clone(resp.Header.PeekBytes(httpx.HLastModified))
		headers, vary := storedHeaders(resp, now, rte, d.strip)
		p.storeResponse(sc.key, &req.Header, &e, vary, headers, now, false)
		c.NearCopyStored()
	}
	out := &ctx.Response
	sc.tmp = cluster.RelayPeerHead(out, resp, sc.ownerID, sc.tmp)
	out.SetBody(body)
	fasthttp.ReleaseResponse(resp)
	return true
}
