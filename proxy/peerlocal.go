package proxy

import (
	"bytes"
	"fmt"
	"net"
	"net/url"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/admission"
	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/proxy/cache"
	"github.com/shield-proxy/shield/proxy/cluster"
	"github.com/shield-proxy/shield/proxy/httpx"
	"github.com/shield-proxy/shield/routing"
	"github.com/shield-proxy/shield/stale"
)

// The cluster (proxy/cluster) reaches this node through cluster.Local,
// implemented here by peerLocal; the proxy reaches the cluster through
// p.cluster (nil on a single node).

// peerLocal is the proxy as the cluster sees it (cluster.Local): its
// methods are the proxy's, kept off the proxy's exported API.
type peerLocal struct{ p *Proxy }

// ClusterOptions are the cluster settings the proxy uses.
type ClusterOptions = cluster.Options

// Delivery is what a purge's answer says of its peers (cluster.Delivery).
type Delivery = cluster.Delivery

// PurgeResult is what one purge did on this node.
type PurgeResult = cluster.PurgeResult

// Peer protocol header fields the request path reads.
var (
	hShieldTenant      = cluster.HTenant
	hShieldClientIP    = cluster.HClientIP
	hShieldForwarded   = cluster.HForwarded
	hShieldReadThrough = cluster.HReadThrough
	valueOne           = []byte("1")
)

// isShieldHeader reports the peer protocol fields: never forwarded to an
// origin, never accepted from the public.
func isShieldHeader(name []byte) bool { return cluster.IsShieldHeader(name) }

// SetCluster joins the proxy to a cluster: requests whose key another
// node owns are forwarded to it. src is refreshed after a 421 or a peer
// failure. Call before serving.
func (p *Proxy) SetCluster(m *routing.Membership, src routing.Source, opts ClusterOptions) {
	env := cluster.Env{
		Log:     p.plog,
		Metrics: p.g.set,
		Logger:  p.logger,
		Ctx:     p.bg.ctx,
		WG:      &p.bg.wg,
		Gate:    &p.cache.Invalidations().Gated,
		Lease:   &p.cache.Invalidations().Lease,
	}
	if p.hold != nil {
		env.Release, env.HoldSince = p.releaseSnapshot, p.hold.since
	}
	p.cluster.Store(cluster.New(m, src, peerLocal{p}, opts, env))
}

// PeerHandler serves the peer listener: requests forwarded by other
// nodes, purges, purge logs, usage reports and hand-offs (cluster.Node's
// PeerHandler); 404 when the proxy is not in a cluster.
func (p *Proxy) PeerHandler() fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		defer httpx.EnsureDate(&ctx.Response)
		c := p.cluster.Load()
		if c == nil {
			ctx.SetStatusCode(fasthttp.StatusNotFound)
			return
		}
		c.PeerHandler(ctx)
	}
}

// PeerListener wraps the peer listener ln so that it serves the
// multiplexed peer transport beside HTTP (cluster.Node.Listener): serve
// PeerServer on what it returns. ln is returned as it is when the proxy
// is not in a cluster (call after SetCluster).
func (p *Proxy) PeerListener(ln net.Listener) net.Listener {
	c := p.cluster.Load()
	if c == nil {
		return ln
	}
	return c.Listener(ln)
}

// PreparePeerTLS reads a reload's cluster.tls for a node whose peers
// already talk TLS (cluster.Node.PreparePeerTLS); nothing to install
// when the proxy is not in a cluster.
func (p *Proxy) PreparePeerTLS(t *config.PeerTLS) (install func(), err error) {
	c := p.cluster.Load()
	if c == nil {
		return nil, nil
	}
	return c.PreparePeerTLS(t)
}

// forwardToOwner sends the request to the key's owner and relays its
// answer. ok is false when the owner could not answer; the caller then
// serves the request locally. Over a multiplexed connection the request
// is encoded as it is built (cluster.MuxRequest); a fasthttp.Request is
// built only for HTTP (no connection open, or it could not take the
// request) and for a hot key, whose near copy reads it.
func (p *Proxy) forwardToOwner(ctx *fasthttp.RequestCtx, c *cluster.Node, v *routing.View, owner *routing.Peer, rt *runtimeConfig, rte *route, sc *scratch) (result, bool) {
	fw, ok := c.Begin(owner.ID, ctx.Time().UnixNano())
	if !ok {
		return 0, false
	}
	src := &ctx.Request
	seq := p.cache.Invalidations().Next() // a near copy's place in invalidation order
	hot := c.Options().HotKeyRate
	isHot := sc.hotRate > 0 && hot > 0 && sc.hotRate >= hot
	var reqTime time.Time // a near copy's request time
	if isHot {
		reqTime = time.Now()
	}
	ent := sc.wantEntry(ctx, rte)
	maxHints := rte.origin.MaxHints()
	var resp *fasthttp.Response
	sent := false
	if !isHot && fw.UseMux(src.Header.Method()) {
		mr := cluster.AcquireMuxRequest()
		mr.Start(src.Header.Method(), src.Header.RequestURI())
		p.forwardFields(ctx, c, v, rt, rte, sc, mr.Head())
		resp, ok, sent = c.DoMux(ctx, fw, mr, maxHints, ent)
		cluster.ReleaseMuxRequest(mr)
	}
	var req *fasthttp.Request
	if !sent {
		req = fasthttp.AcquireRequest()
		defer fasthttp.ReleaseRequest(req)
		req.Header.SetMethodBytes(src.Header.Method())
		req.SetRequestURIBytes(src.Header.RequestURI())
		p.forwardFields(ctx, c, v, rt, rte, sc, cluster.HTTPHead(&req.Header))
		resp, ok = c.DoEntry(ctx, fw, req, maxHints, ent)
	}
	if ent != nil {
		if ok && ent.Got {
			fasthttp.ReleaseResponse(resp)
			var keep *cluster.Node
			if isHot {
				keep = c
			}
			var checked bool
			ok, checked = p.serveEntryAnswer(ctx, sc, fw.Owner(), keep, seq)
			c.EntryChecked(fw, checked)
		} else {
			ctx.Response.SwapBody(ent.Buf[:0])
		}
		ent.Buf = nil
	}
	if !ok {
		return 0, false
	}
	if sc.ent.Got {
		return resPeer, true
	}
	if isHot && req != nil && resp.StatusCode() == fasthttp.StatusOK {
		if p.keepNearCopy(ctx, c, rt, rte, sc, req, resp, seq, reqTime) {
			return resPeer, true
		}
	}
	out := &ctx.Response
	sc.tmp = cluster.RelayPeerHead(out, resp, fw.Owner(), sc.tmp)
	// Hand the body buffer over instead of copying it.
	old := out.SwapBody(resp.SwapBody(nil))
	resp.SwapBody(old)
	fasthttp.ReleaseResponse(resp)
	return resPeer, true
}

// forwardFields sets a forwarded request's header fields on h: the
// client's, but for hop-by-hop, peer protocol, Forwarded and
// X-Forwarded-* fields and Content-Length (and Accept-Encoding when the
// route names the negotiated coding), then the peer protocol's
// (cluster.Node.SetForwardHead) and the forwarded fields the edge sets
// for its client.
func (p *Proxy) forwardFields(ctx *fasthttp.RequestCtx, c *cluster.Node, v *routing.View, rt *runtimeConfig, rte *route, sc *scratch, h cluster.ReqHead) {
	src := &ctx.Request
	conn := src.Header.PeekBytes(httpx.HConnection)
	coded := rte.forwardsCoding(sc.coding)
	for k, val := range src.Header.All() {
		if httpx.IsHopByHop(k, conn) || isShieldHeader(k) || httpx.IsForwardedHeader(k) || bytes.EqualFold(k, httpx.HContentLength) ||
			(coded && bytes.EqualFold(k, hAcceptEncoding)) {
			continue
		}
		h.Add(k, val)
	}
	rte.forwardCoding(h, sc.coding)
	sc.tmp = appendRemoteIP(sc.tmp[:0], ctx)
	c.SetForwardHead(h, v.Current.Generation(), sc.tid, sc.tmp)
	setForwarded(h, &src.Header, sc.tmp, ctx.IsTLS(), rt.trusts(ctx))
	h.SetCanonical(hShieldForwarded, valueOne)
}

// invalidateEverywhere delivers the URL invalidation of a successful
// unsafe request to every peer (cluster.Node.InvalidateEverywhere).
func (p *Proxy) invalidateEverywhere(rawURL string, tid []byte) {
	if c := p.cluster.Load(); c != nil {
		c.InvalidateEverywhere(rawURL, tid)
	}
}

// deliver sends a purge applied here to every other current peer
// (cluster.Node.Deliver); nothing to do on a single node.
func (p *Proxy) deliver(r cluster.PurgeRecord, wait bool) Delivery {
	c := p.cluster.Load()
	if c == nil {
		return Delivery{Peers: map[string]int{}, Pending: []string{}}
	}
	return c.Deliver(r, wait)
}

// newPurge makes a record for args, applied here first.
func newPurge(args url.Values) cluster.PurgeRecord { return cluster.NewPurge(args) }

// ServePeer serves a request another node forwarded, as the key's
// owner (cluster.Local).
func (l peerLocal) ServePeer(ctx *fasthttp.RequestCtx) { l.p.serveRequest(ctx, true) }

// ServePeerHit serves a forwarded request when its answer is at hand (a
// fresh hit from memory) and reports true; else false, having answered
// nothing (cluster.Local).
func (l peerLocal) ServePeerHit(ctx *fasthttp.RequestCtx) bool {
	return l.p.serveRequestAs(ctx, true, true)
}

// serveInline ends serveRoute for a request ServePeerHit serves: a fresh
// hit from memory is served as serveLookup serves it (the key's rate and
// the top-keys view fed as for any request); for anything else —
// a miss, a stale or large entry, one on disk, a coded sibling still to
// compress, a read-through — it answers nothing and returns resDeferred.
func (p *Proxy) serveInline(ctx *fasthttp.RequestCtx, rt *runtimeConfig, rte *route, sc *scratch, now time.Time, readThrough bool) result {
	if readThrough {
		return resDeferred
	}
	b := ctx.Response.SwapBody(nil)
	var e cache.Entry
	sc.memOnly = true
	b, lk := p.lookupCoded(b, ctx, sc, rte, &e)
	sc.memOnly = false
	if lk != lkHit || e.Classify(e.Age(now), &sc.cc) != stale.Fresh {
		ctx.Response.SwapBody(b[:0])
		return resDeferred
	}
	if c := p.cluster.Load(); c != nil {
		p.owner(c, sc, true, now)
	}
	p.sampleTop(ctx, sc, &e, lk, now)
	return p.serveLookup(ctx, rt, rte, sc, &e, b, lk, now, false)
}

// ApplyPurge applies a purge record once (by id) and logs it; applied
// is false when it had been applied already (cluster.Local).
func (l peerLocal) ApplyPurge(r cluster.PurgeRecord) (res PurgeResult, applied bool, err error) {
	return l.p.applyPurge(r)
}

// applyPurge applies a purge record once (by id) and logs it; false when
// it had been applied already.
func (p *Proxy) applyPurge(r cluster.PurgeRecord) (PurgeResult, bool, error) {
	args, err := url.ParseQuery(r.Args)
	if err != nil {
		return PurgeResult{}, false, fmt.Errorf("%w: %v", errPurge, err)
	}
	if !p.plog.Add(r) {
		return PurgeResult{}, false, nil
	}
	res, err := p.Purge(args)
	return res, true, err
}

// InvalidateAll drops everything fetched before now (cluster.Local).
func (l peerLocal) InvalidateAll() { l.p.cache.Invalidations().InvalidateAll() }

// Tenants is the tenant table in force, nil without admission control
// (cluster.Local).
func (l peerLocal) Tenants() *admission.Tenants {
	rt := l.p.rt.Load()
	if rt == nil {
		return nil
	}
	return rt.tenants
}

// SetPeers tells the tenant limits how many nodes share them
// (cluster.Local).
func (l peerLocal) SetPeers(n int, now time.Time) {
	if l.p.kept.tenants != nil {
		l.p.kept.tenants.SetPeers(n, now)
	}
}

// Event records an event for the status page (cluster.Local).
func (l peerLocal) Event(kind, detail string) { l.p.info.events.add(kind, detail) }

// Purge applies a purge's arguments here, unlogged (cluster.Local).
func (l peerLocal) Purge(args url.Values) (PurgeResult, error) { return l.p.Purge(args) }
