package cluster

import (
	"context"
	"encoding/binary"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/cachekey"
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
func (c *Node) Handoff(ctx context.Context) int {
	if c.opts.HandoffKeys <= 0 {
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
		b, ok := c.local.HandoffEntry(key, now)
		if !ok {
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
		c.setPeerHead(&req.Header, owner.Addr, v.Current.Generation())
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
func (c *Node) takeHandoff(ctx *fasthttp.RequestCtx) {
	body := ctx.PostBody()
	n, w := binary.Uvarint(body)
	if !ctx.IsPost() || w <= 0 || n == 0 || n > uint64(len(body)-w) || len(body) > maxHandoffBody {
		ctx.Error("bad hand-off\n", fasthttp.StatusBadRequest)
		return
	}
	key, raw := body[w:w+int(n)], body[w+int(n):]
	stored, err := c.local.TakeHandoff(key, raw)
	if err != nil {
		ctx.Error("bad hand-off entry\n", fasthttp.StatusBadRequest)
		return
	}
	if stored {
		c.handoffTaken.Inc()
	}
	ctx.SetStatusCode(fasthttp.StatusNoContent)
}
