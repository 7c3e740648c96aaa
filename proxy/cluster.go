package proxy

import (
	"bytes"
	"crypto/subtle"
	"errors"
	"net"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/breaker"
	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/proxy/httpx"
	"github.com/shield-proxy/shield/routing"
)

// Peer forwarding (docs/architecture.md §8). Every key has one owner, picked by
// weighted rendezvous hashing over the current peer set. A node that does
// not own a request's key forwards it, once, to the owner's peer listener
// with the generation it routed by, the tenant and the shared secret; the
// owner serves it from its cache or fetches with coalescing, so the
// cluster makes one origin fetch per key. Every failure of this machinery
// — owner down or slow, wrong generation (421), refused — is answered as
// a local miss, never a wrong answer.
//
// Around that core:
//   - per-peer breakers: a peer that keeps failing is skipped for a while
//     (requests are served locally) instead of costing every request a
//     timeout;
//   - read-through: a new owner that misses inside the overlap window asks
//     the key's previous owner once, for a cached copy only
//     (Shield-Read-Through), before going to the origin;
//   - near copies: an edge that forwards one key above hot_key_rate keeps
//     the owner's answer for at most hot_key_max_age;
//   - hand-off: a node leaving gracefully pushes its hottest entries to
//     their new owners (Handoff);
//   - purges fan out to every node through retried per-peer queues (purgelog.go), dropping near copies too;
//   - a URL invalidated by a successful unsafe request is dropped on the
//     node that saw the request and, in the background, on its owner.

// Peer protocol header fields.
var (
	hShieldAuth       = []byte("Shield-Auth")
	hShieldGeneration = []byte("Shield-Generation")
	hShieldTenant     = []byte("Shield-Tenant")
	hShieldClientIP   = []byte("Shield-Client-Ip")
	// hShieldForwarded says the edge set X-Forwarded-For, -Proto, -Host
	// and -Port for its client (setForwarded): the owner forwards them.
	// An edge without it (an older release) passed its client's on.
	hShieldForwarded = []byte("Shield-Forwarded")
	valueOne         = []byte("1")
	// hShieldReadThrough asks the previous owner for a cached copy only.
	hShieldReadThrough = []byte("Shield-Read-Through")
)

// isShieldHeader reports the peer protocol fields: never forwarded to an
// origin, never accepted from the public.
func isShieldHeader(name []byte) bool {
	return len(name) > 7 && bytes.EqualFold(name[:7], []byte("Shield-"))
}

// cluster is the proxy's view of membership and its peer clients.
type cluster struct {
	m       *routing.Membership
	src     routing.Source
	secret  []byte
	timeout time.Duration
	peers   atomic.Pointer[peerTable]
	hot     *hotKeys
	opts    ClusterOptions
	usage   *usageExchange // nil when the usage exchange is off

	qmu    sync.Mutex            // guards queues
	queues map[string]*peerQueue // purges not yet delivered, by peer id
	sync   *purgeSync            // nil with static membership (purgesync.go)

	forbidden       *metrics.Counter // peer requests refused (secret or address)
	misdirected     *metrics.Counter // peer requests answered 421
	genChanges      *metrics.Counter
	readThroughHit  *metrics.Counter // previous-owner read-throughs answered from its cache
	readThroughMiss *metrics.Counter // previous-owner read-throughs that fell back to the origin
	nearStored      *metrics.Counter
	nearHits        *metrics.Counter
	handoffSent     *metrics.Counter
	handoffTaken    *metrics.Counter
}

// ClusterOptions are the cluster settings the proxy uses.
type ClusterOptions struct {
	Secret       string
	PeerTimeout  time.Duration
	HotKeyRate   float64       // 0: no near copies
	HotKeyMaxAge time.Duration // near copy lifetime cap
	HandoffKeys  int           // hottest entries pushed on leave
	MaxBody      int           // largest forwarded answer read (cache.max_object_size plus slack)
	// UsageInterval is how often tenant usage is exchanged with peers so
	// shares follow demand (proxy/usage.go); 0: each node keeps rate/n.
	UsageInterval time.Duration
	// TLS, when set, makes connections to peers mutual TLS (the peer
	// listener is wrapped by the caller with TLS.Server).
	TLS *httpx.PeerTLS
	// Dial, when set, opens connections to peers instead of TCP (and
	// TLS): tests run a cluster over in-memory listeners with it.
	Dial func(addr string) (net.Conn, error)
	// DynamicMembership (Consul): nodes learn of each other at different
	// instants, so each pulls its peers' purge logs and serves nothing
	// from its cache until it is in sync with every peer (purgesync.go).
	DynamicMembership bool
}

// peerTable is rebuilt whenever membership changes.
type peerTable struct {
	byID    map[string]*peerClient
	allowed map[string]bool // peer IPs allowed on the peer listener
}

type peerClient struct {
	id       string
	hc       *fasthttp.HostClient
	skip     peerSkip // skips a failing peer for a while
	outcomes [numPeerOutcomes]*metrics.Counter
}

type peerOutcome uint8

const (
	peerOK peerOutcome = iota
	peerError
	peerMisdirected
	peerForbidden
	peerSkipped // breaker open: served locally without trying
	numPeerOutcomes
)

var peerOutcomeLabels = [numPeerOutcomes]string{"ok", "error", "misdirected", "forbidden", "skipped"}

// SetCluster joins the proxy to a cluster: requests whose key another
// node owns are forwarded to it. src is refreshed after a 421 or a peer
// failure. Call before serving.
func (p *Proxy) SetCluster(m *routing.Membership, src routing.Source, opts ClusterOptions) {
	peerTimeout := opts.PeerTimeout
	c := &cluster{
		m:            m,
		src:          src,
		secret:       []byte(opts.Secret),
		timeout:      peerTimeout,
		hot:          newHotKeys(),
		opts:         opts,
		queues:       map[string]*peerQueue{},
		forbidden:    p.g.set.NewCounter(`shield_peer_forbidden_total`),
		misdirected:  p.g.set.NewCounter(`shield_peer_misdirected_total`),
		genChanges:   p.g.set.NewCounter(`shield_cluster_generation_changes_total`),
		nearStored:   p.g.set.NewCounter(`shield_near_copies_stored_total`),
		nearHits:     p.g.set.NewCounter(`shield_near_copy_hits_total`),
		handoffSent:  p.g.set.NewCounter(`shield_handoff_entries_sent_total`),
		handoffTaken: p.g.set.NewCounter(`shield_handoff_entries_received_total`),
	}
	c.readThroughHit = p.g.set.NewCounter(`shield_peer_read_through_total{outcome="hit"}`)
	c.readThroughMiss = p.g.set.NewCounter(`shield_peer_read_through_total{outcome="miss"}`)
	p.g.set.NewGauge(`shield_cluster_peers`, func() float64 { return float64(m.View().Current.Len()) })
	p.g.set.NewGauge(`shield_cluster_generation`, func() float64 { return float64(m.View().Current.Generation() >> 11) })
	p.g.set.NewGauge(`shield_consul_reachable`, func() float64 {
		if src.Reachable() {
			return 1
		}
		return 0
	})
	clients := map[string]*peerClient{}
	if opts.DynamicMembership {
		c.sync = newPurgeSync(time.Now(), &p.cache.Invalidations().Gated, src.Reachable)
		c.sync.viewChanged(otherIDs(m.View(), m.Self().ID), time.Now())
	}
	p.g.set.NewGauge(`shield_purge_sync_pending`, func() float64 {
		if c.sync == nil {
			return 0 // static membership: every node knows every peer from the start
		}
		return float64(c.sync.pending())
	})
	p.g.set.NewGauge(`shield_purge_queue_length`, func() float64 {
		c.qmu.Lock()
		defer c.qmu.Unlock()
		n := 0
		for _, q := range c.queues {
			n += q.size()
		}
		return float64(n)
	})
	m.Subscribe(func(v *routing.View) {
		// Runs synchronously inside Membership.Update: quick, no calls
		// back into membership.
		c.genChanges.Inc()
		if c.sync != nil {
			c.sync.viewChanged(otherIDs(v, m.Self().ID), time.Now())
		}
		t := &peerTable{byID: map[string]*peerClient{}, allowed: map[string]bool{}}
		for _, peer := range v.Current.Peers() {
			pc := clients[peer.ID+"@"+peer.Addr]
			if pc == nil {
				pc = &peerClient{id: peer.ID, hc: newPeerClient(peer.Addr, peerTimeout, opts.MaxBody, opts.TLS)}
				if dial := opts.Dial; dial != nil {
					pc.hc.DialTimeout = func(addr string, _ time.Duration) (net.Conn, error) { return dial(addr) }
				}
				// The owner's 103 Early Hints reach the edge's client
				// through the same connection wrapper as an origin's.
				dialPeer := pc.hc.DialTimeout
				pc.hc.DialTimeout = func(addr string, d time.Duration) (net.Conn, error) {
					conn, err := dialPeer(addr, d)
					if err != nil {
						return nil, err
					}
					return httpx.NewTrackedConn(conn), nil
				}
				for i := range pc.outcomes {
					pc.outcomes[i] = p.g.set.GetOrCreateCounter(`shield_peer_requests_total{peer="` + peer.ID + `",outcome="` + peerOutcomeLabels[i] + `"}`)
				}
				clients[peer.ID+"@"+peer.Addr] = pc
			}
			t.byID[peer.ID] = pc
			if host, _, err := net.SplitHostPort(peer.Addr); err == nil {
				t.allowed[host] = true
			}
		}
		if v.Previous != nil {
			// A node that just left still hands its hot entries off and
			// serves forwards routed by the previous generation: keep its
			// address allowed until the next change (it still needs the
			// secret, and the generation check bounds the overlap).
			for _, peer := range v.Previous.Peers() {
				if host, _, err := net.SplitHostPort(peer.Addr); err == nil {
					t.allowed[host] = true
				}
			}
		}
		c.peers.Store(t)
		if p.tenants != nil {
			p.tenants.SetPeers(v.Current.Len(), time.Now())
		}
	})
	p.startUsage(c)
	p.cluster.Store(c)
	if c.sync != nil {
		p.bgWG.Add(2)
		go p.syncLoop(c)
		go p.stallWatch(c)
	}
	if p.hold != nil {
		p.bgWG.Add(1)
		go p.catchUp(c, p.hold.since, p.releaseSnapshot)
	}
}

// otherIDs are the ids of v's current peers but self.
func otherIDs(v *routing.View, self string) []string {
	var ids []string
	for _, peer := range v.Current.Peers() {
		if peer.ID != self {
			ids = append(ids, peer.ID)
		}
	}
	return ids
}

func newPeerClient(addr string, timeout time.Duration, maxBody int, pt *httpx.PeerTLS) *fasthttp.HostClient {
	hc := newPlainPeerClient(addr, timeout, maxBody)
	if pt != nil {
		// A dead owner must cost little: the dial and handshake together
		// get the plain dial's 250ms, plus room for the handshake.
		hc.DialTimeout = httpx.TLSDialer(addr, pt.Client, 500*time.Millisecond)
	}
	return hc
}

func newPlainPeerClient(addr string, timeout time.Duration, maxBody int) *fasthttp.HostClient {
	return &fasthttp.HostClient{
		Addr:                      addr,
		Name:                      "shield-peer",
		MaxConns:                  1024,
		ReadTimeout:               timeout,
		WriteTimeout:              timeout,
		MaxIdemponentCallAttempts: 1,
		// Most recently used first: the purge sync asks every peer
		// several times a second, and FIFO would take each idle
		// connection in turn, so none would ever idle out after a burst.
		ConnPoolStrategy: fasthttp.LIFO,
		// Owners answer from memory: bodies are read whole (bounded by
		// MaxResponseBodySize; a larger one makes the edge serve the
		// request itself) and handed to the client without a copy.
		MaxResponseBodySize:      maxBody,
		DisablePathNormalizing:   true,
		NoDefaultUserAgentHeader: true,
		DialTimeout: func(addr string, _ time.Duration) (net.Conn, error) {
			// A dead owner must cost little: fall back fast.
			return fasthttp.DialTimeout(addr, 250*time.Millisecond)
		},
	}
}

// forwardToOwner sends the request to the key's owner and relays its
// answer. ok is false when the owner could not answer; the caller then
// serves the request locally.
func (p *Proxy) forwardToOwner(ctx *fasthttp.RequestCtx, c *cluster, v *routing.View, owner *routing.Peer, rt *runtimeConfig, rte *route, sc *scratch) (result, bool) {
	pc := c.peers.Load().byID[owner.ID]
	if pc == nil {
		return 0, false
	}
	ok, probe := pc.skip.allow(ctx.Time().UnixNano())
	if !ok {
		pc.outcomes[peerSkipped].Inc()
		return 0, false
	}
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	src := &ctx.Request
	req.Header.SetMethodBytes(src.Header.Method())
	req.SetRequestURIBytes(src.Header.RequestURI())
	conn := src.Header.PeekBytes(httpx.HConnection)
	for k, val := range src.Header.All() {
		if httpx.IsHopByHop(k, conn) || isShieldHeader(k) || httpx.IsForwardedHeader(k) || bytes.EqualFold(k, httpx.HContentLength) {
			continue
		}
		req.Header.AddBytesKV(k, val)
	}
	rte.forwardCoding(&req.Header, sc.coding)
	var num [20]byte
	req.Header.SetBytesKV(hShieldGeneration, strconv.AppendUint(num[:0], v.Current.Generation(), 10))
	req.Header.SetBytesKV(hShieldTenant, sc.tid)
	req.Header.SetBytesKV(hShieldAuth, c.secret)
	sc.tmp = appendRemoteIP(sc.tmp[:0], ctx)
	req.Header.SetBytesKV(hShieldClientIP, sc.tmp) // for owners from before Shield-Forwarded
	setForwarded(&req.Header, &src.Header, sc.tmp, ctx.IsTLS(), rt.trusts(ctx))
	req.Header.SetBytesKV(hShieldForwarded, valueOne)
	resp := fasthttp.AcquireResponse()
	seq := p.cache.Invalidations().Next() // a near copy's place in invalidation order
	reqTime := time.Now()
	tok := httpx.WatchHints(req, ctx, rte.origin.MaxHints())
	err := pc.hc.DoDeadline(req, resp, reqTime.Add(c.timeout))
	httpx.EndHints(req, tok)
	outcome := breaker.Success
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		outcome = breaker.Ignored // a large object, served locally; the peer is fine
	} else if err != nil {
		outcome = breaker.Failure
	} else if s := resp.StatusCode(); s == fasthttp.StatusMisdirectedRequest || s == fasthttp.StatusForbidden {
		outcome = breaker.Ignored
	}
	pc.skip.done(probe, outcome, time.Now().UnixNano())
	switch {
	case err != nil:
		pc.outcomes[peerError].Inc()
		fasthttp.ReleaseResponse(resp)
		c.src.Refresh()
		p.logger.Debug("peer forward failed, serving locally", "peer", owner.ID, "err", err)
		return 0, false
	case resp.StatusCode() == fasthttp.StatusMisdirectedRequest:
		pc.outcomes[peerMisdirected].Inc()
		_ = resp.CloseBodyStream()
		fasthttp.ReleaseResponse(resp)
		c.src.Refresh()
		return 0, false
	case resp.StatusCode() == fasthttp.StatusForbidden && len(resp.Header.PeekBytes(hShieldGeneration)) > 0:
		pc.outcomes[peerForbidden].Inc()
		_ = resp.CloseBodyStream()
		fasthttp.ReleaseResponse(resp)
		return 0, false
	}
	pc.outcomes[peerOK].Inc()
	if sc.hotRate > 0 && c.opts.HotKeyRate > 0 && sc.hotRate >= c.opts.HotKeyRate && resp.StatusCode() == fasthttp.StatusOK {
		if p.keepNearCopy(ctx, c, rt, rte, sc, req, resp, seq, reqTime) {
			return resPeer, true
		}
	}
	out := &ctx.Response
	sc.tmp = relayPeerHead(out, resp, pc.id, sc.tmp)
	// Hand the body buffer over instead of copying it.
	old := out.SwapBody(resp.SwapBody(nil))
	resp.SwapBody(old)
	fasthttp.ReleaseResponse(resp)
	return resPeer, true
}

// relayPeerHead copies an owner's answer head and appends this node's
// Cache-Status member (RFC 9211 lists caches from the origin outwards):
// "shield-edge; detail=peer-<owner>". The owner is a shield node: its
// answer has no hop-by-hop fields but its connection's own, so the head
// is copied whole (cheaper than field by field) and that one is reset.
// buf is scratch space for the member (returned for reuse), so relaying
// allocates nothing.
func relayPeerHead(out, resp *fasthttp.Response, owner string, buf []byte) []byte {
	resp.Header.CopyTo(&out.Header)
	out.Header.ResetConnectionClose()
	out.Header.DelBytes(hShieldTags)
	buf = append(append(buf[:0], csEdgePeer...), owner...)
	out.Header.AddBytesKV(httpx.HCacheStatus, buf)
	return buf
}

// csEdgePeer starts the Cache-Status member of an answer relayed from the
// key's owner.
var csEdgePeer = []byte("shield-edge; detail=peer-")

// PeerHandler serves the peer listener: requests forwarded by other
// nodes. It checks the shared secret (constant time) and the caller's
// address, then the generation (421 with ours when it is neither the
// current one nor the previous one inside the overlap), and serves the
// request locally without admission (the edge admitted it) and without
// forwarding it again.
func (p *Proxy) PeerHandler() fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		defer httpx.EnsureDate(&ctx.Response)
		c := p.cluster.Load()
		if c == nil {
			ctx.SetStatusCode(fasthttp.StatusNotFound)
			return
		}
		h := &ctx.Request.Header
		auth := h.PeekBytes(hShieldAuth)
		var ipBuf [64]byte
		ip := appendRemoteIP(ipBuf[:0], ctx)
		if subtle.ConstantTimeCompare(auth, c.secret) != 1 || !c.peers.Load().allowed[string(ip)] {
			c.forbidden.Inc()
			ctx.SetStatusCode(fasthttp.StatusForbidden)
			ctx.Response.Header.SetBytesKV(hShieldGeneration, []byte("0"))
			ctx.SetBodyString("forbidden\n")
			return
		}
		// A client's request — forwarded by an edge (Shield-Client-Ip)
		// or read through (Shield-Read-Through) — arrives with the
		// cluster secret too, and its path is the client's: it never
		// reaches the peer protocol's endpoints, or any client could
		// purge through an edge ("GET /__shield/purge?route=r"). The
		// endpoints are matched on the raw path: Path() decodes %2F and
		// removes dot segments.
		client := len(h.PeekBytes(hShieldClientIP)) > 0 || len(h.PeekBytes(hShieldReadThrough)) > 0
		endpoint := ""
		if !client {
			endpoint = string(ctx.Request.URI().PathOriginal())
		}
		// Purges, purge logs and usage go through whatever generation
		// either side has: they must get through while views differ, and
		// none depends on key ownership.
		switch endpoint {
		case purgePath:
			p.peerPurge(ctx)
			return
		case purgeLogPath:
			if ctx.QueryArgs().Has("node") {
				p.serveSync(ctx, c)
			} else {
				p.servePurgeLog(ctx)
			}
			return
		case usagePath:
			p.takeUsage(ctx, c)
			return
		}
		v := c.m.View()
		gen, err := strconv.ParseUint(string(h.PeekBytes(hShieldGeneration)), 10, 64)
		if err != nil || !v.Accepts(gen, ctx.Time()) {
			c.misdirected.Inc()
			ctx.SetStatusCode(fasthttp.StatusMisdirectedRequest)
			ctx.Response.Header.SetBytesKV(hShieldGeneration, strconv.AppendUint(nil, v.Current.Generation(), 10))
			ctx.SetBodyString("misdirected: generation mismatch\n")
			return
		}
		if endpoint == handoffPath {
			p.takeHandoff(ctx, c)
			return
		}
		p.serveRequest(ctx, true)
	}
}

// sendPurge applies a purge on one peer; it returns the peer's HTTP
// status, or 0 when the peer could not be reached.
func sendPurge(c *cluster, pc *peerClient, addr string, gen uint64, args url.Values) int {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI(purgePath + "?" + args.Encode())
	setPeerHead(&req.Header, c, addr, gen)
	if err := pc.hc.DoTimeout(req, resp, 5*time.Second); err != nil {
		return 0
	}
	return resp.StatusCode()
}

// invalidateEverywhere delivers the URL invalidation of a successful
// unsafe request (RFC 9111 §4.4) to every peer — the owner, a previous
// owner inside the overlap window and edges with near copies may each
// hold a copy. The client's answer waits for one parallel attempt (a peer
// round trip), so a read after the write never finds the old copy on a
// reachable peer; unreachable peers get it through their retried queues.
func (p *Proxy) invalidateEverywhere(rawURL string, tid []byte) {
	args := url.Values{"url": {rawURL}}
	if len(tid) > 0 {
		args.Set("tenant", string(tid))
	}
	rec := newPurge(args)
	p.plog.add(rec)
	p.deliver(rec, true)
}

// setPeerHead addresses a request to a peer: its address as Host, the
// shared secret and the generation this node routes by.
func setPeerHead(h *fasthttp.RequestHeader, c *cluster, addr string, gen uint64) {
	var num [20]byte
	h.SetHost(addr)
	h.SetBytesKV(hShieldAuth, c.secret)
	h.SetBytesKV(hShieldGeneration, strconv.AppendUint(num[:0], gen, 10))
}

// purgePath is the peer-listener path a purge is fanned out on.
const purgePath = "/__shield/purge"

// PreparePeerTLS reads a reload's cluster.tls for a node whose peers
// already talk TLS (turning it on or off needs a restart, as server.tls
// does). install makes the new certificate and CA pool those of new
// handshakes, both ways, and closes the idle connections to peers, so
// the next requests dial with them instead of reusing sessions made with
// the old ones.
func (p *Proxy) PreparePeerTLS(t *config.PeerTLS) (install func(), err error) {
	c := p.cluster.Load()
	if c == nil || c.opts.TLS == nil || t == nil {
		return nil, nil
	}
	in, err := c.opts.TLS.Prepare(t)
	if err != nil {
		return nil, err
	}
	return func() {
		in()
		for _, pc := range c.peers.Load().byID {
			pc.hc.CloseIdleConnections()
		}
	}, nil
}
