package proxy

import (
	"bytes"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/proxy/cache"
	"github.com/shield-proxy/shield/proxy/httpx"
	"github.com/shield-proxy/shield/routing"
)

// keepNearCopy answers a hot key's forwarded request from the owner's
// response and keeps a short-lived local copy (at most hot_key_max_age,
// no stale windows), so the next requests for that key are local hits. It
// reports false, leaving resp untouched, when the answer cannot be kept
// (too large, not storable): the caller then relays it as usual.
func (p *Proxy) keepNearCopy(ctx *fasthttp.RequestCtx, c *cluster, rt *runtimeConfig, rte *route, sc *scratch, req *fasthttp.Request, resp *fasthttp.Response, seq int64, reqTime time.Time) bool {
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
			Lifetime:   int64(min(d.lifetime, c.opts.HotKeyMaxAge+d.initialAge)),
			Body:       body,
			ETag:       bytes.Clone(resp.Header.PeekBytes(httpx.HETag)),
			FetchSeq:   seq,
			URLDigest:  sc.urlDigest(),
			Tags:       tags,
		}
		e.LastModified = bytes.Clone(resp.Header.PeekBytes(httpx.HLastModified))
		headers, vary := storedHeaders(resp, now, rte, d.strip)
		p.storeResponse(sc.key, &req.Header, &e, vary, headers, now)
		c.nearStored.Inc()
	}
	out := &ctx.Response
	sc.tmp = relayPeerHead(out, resp, sc.ownerID, sc.tmp)
	out.SetBody(body)
	fasthttp.ReleaseResponse(resp)
	return true
}

// readThroughPeer returns the client of the key's previous owner when a
// membership change inside the overlap window moved the key here.
func (c *cluster) readThroughPeer(v *routing.View, digest uint64, now time.Time) *peerClient {
	prev, isSelf, ok := v.PreviousOwner(digest, now)
	if !ok || isSelf {
		return nil
	}
	return c.peers.Load().byID[prev.ID]
}

// readThrough asks the previous owner for its cached copy of req's key.
// ok means resp holds that copy (a fresh hit there); anything else — a
// miss, an error, the peer gone — means "go to the origin".
func (p *Proxy) readThrough(c *cluster, pc *peerClient, req *fasthttp.Request, tid []byte, resp *fasthttp.Response) bool {
	pr := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(pr)
	req.CopyTo(pr)
	v := c.m.View()
	var num [20]byte
	pr.Header.SetBytesKV(hShieldGeneration, appendUint(num[:0], v.Current.Generation()))
	pr.Header.SetBytesKV(hShieldAuth, c.secret)
	pr.Header.SetBytesKV(hShieldTenant, tid)
	pr.Header.SetBytesKV(hShieldReadThrough, []byte("1"))
	// A short bound: the previous owner answers from memory or not at all.
	timeout := min(c.timeout, 500*time.Millisecond)
	if err := pc.hc.DoDeadline(pr, resp, time.Now().Add(timeout)); err != nil || resp.StatusCode() != fasthttp.StatusOK {
		c.readThroughMiss.Inc()
		_ = resp.CloseBodyStream()
		resp.Reset()
		return false
	}
	c.readThroughHit.Inc()
	return true
}
