package proxy

import (
	"context"
	"encoding/binary"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/cachekey"
	"github.com/shield-proxy/shield/proxy/cache"
)

// handoffPath is the peer-listener path hand-off entries arrive on.
const handoffPath = "/__shield/handoff"

// maxHandoffBody bounds one hand-off request.
const maxHandoffBody = 16 << 20

// Handoff pushes this node's hottest fresh entries to the nodes that own
// their keys now. Call it on a graceful leave, after membership no longer
// includes this node; it returns how many entries were accepted. Entries
// travel as they are stored (key, then the encoded entry), so the new
// owner serves them as hits at once. Vary markers are skipped (their
// variants would need their own keys): a varying hot URL starts cold on
// its new owner.
func (p *Proxy) Handoff(ctx context.Context) int {
	c := p.cluster.Load()
	if c == nil || c.opts.HandoffKeys <= 0 {
		return 0
	}
	v := c.m.View()
	self := c.m.Self().ID
	sent := 0
	now := time.Now()
	for _, key := range c.hot.top(c.opts.HandoffKeys) {
		if ctx.Err() != nil {
			break
		}
		owner, isSelf := v.Current.Owner(cachekey.Digest(key))
		if isSelf || owner.ID == self {
			continue
		}
		b := p.cache.Get(nil, key)
		var e cache.Entry
		// apply, not servable: a leaving node is out of its peers' views
		// (out of purge sync) by now, and the new owner checks the
		// entry's fetch start against its own invalidations at lookup.
		if len(b) == 0 || cache.DecodeEntry(b, &e) != nil || e.Kind != cache.KindResponse || !p.cache.Invalidations().Apply(&e) || !staleServable(&e, now) {
			continue
		}
		pc := c.peers.Load().byID[owner.ID]
		if pc == nil {
			continue
		}
		req := fasthttp.AcquireRequest()
		resp := fasthttp.AcquireResponse()
		req.Header.SetMethod(fasthttp.MethodPost)
		req.SetRequestURI(handoffPath)
		setPeerHead(&req.Header, c, owner.Addr, v.Current.Generation())
		body := binary.AppendUvarint(make([]byte, 0, len(key)+len(b)+8), uint64(len(key)))
		body = append(append(body, key...), b...)
		req.SetBodyRaw(body)
		if err := pc.hc.DoTimeout(req, resp, 2*time.Second); err == nil && resp.StatusCode() == fasthttp.StatusNoContent {
			sent++
			c.handoffSent.Inc()
		}
		_ = resp.CloseBodyStream()
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
	}
	return sent
}

// takeHandoff stores an entry pushed by a leaving node, unless this node
// already holds one for the key (it may be newer). The entry must decode
// and must have been stored under exactly this key.
func (p *Proxy) takeHandoff(ctx *fasthttp.RequestCtx, c *cluster) {
	body := ctx.PostBody()
	n, w := binary.Uvarint(body)
	if !ctx.IsPost() || w <= 0 || n == 0 || n > uint64(len(body)-w) || len(body) > maxHandoffBody {
		ctx.Error("bad hand-off\n", fasthttp.StatusBadRequest)
		return
	}
	key, raw := body[w:w+int(n)], body[w+int(n):]
	var e cache.Entry
	if cache.DecodeEntry(raw, &e) != nil || e.Kind != cache.KindResponse || e.KeyDigest != cachekey.Digest(key) {
		ctx.Error("bad hand-off entry\n", fasthttp.StatusBadRequest)
		return
	}
	// Checked and stored in one step under the key's stripe: a fill that
	// lands meanwhile is never overwritten.
	if p.cache.Put(key, raw, &e, cache.PutOptions{IfAbsent: true}) {
		c.handoffTaken.Inc()
	}
	ctx.SetStatusCode(fasthttp.StatusNoContent)
}

func appendUint(dst []byte, n uint64) []byte { return strconv.AppendUint(dst, n, 10) }
