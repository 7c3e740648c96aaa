package cluster

import (
	"bytes"
	"context"
	"crypto/subtle"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/admission"
	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/proxy/httpx"
	"github.com/shield-proxy/shield/proxy/rawio"
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
	// HTenant carries the tenant an edge admitted a forwarded request for.
	HTenant = []byte("Shield-Tenant")
	// HClientIP is the edge's client address (for owners from before
	// Shield-Forwarded).
	HClientIP = []byte("Shield-Client-Ip")
	// HForwarded says the edge set X-Forwarded-For, -Proto, -Host
	// and -Port for its client (setForwarded): the owner forwards them.
	// An edge without it (an older release) passed its client's on.
	HForwarded = []byte("Shield-Forwarded")
	valueOne   = []byte("1")
	// HReadThrough asks the previous owner for a cached copy only.
	HReadThrough = []byte("Shield-Read-Through")
	// HTags carries an entry's place in invalidation order to the node
	// that forwarded the request (the proxy writes and reads it; a relay
	// never passes it on).
	HTags = []byte("Shield-Tags")
)

// IsShieldHeader reports the peer protocol fields: never forwarded to an
// origin, never accepted from the public.
func IsShieldHeader(name []byte) bool {
	return len(name) > 7 && bytes.EqualFold(name[:7], []byte("Shield-"))
}

// PurgeResult is what one purge did on a node: the admin answer's and a
// peer's acknowledgement's body.
type PurgeResult struct {
	Kind      string `json:"kind"` // url, soft-url, tag, soft-tag, route, tenant
	Target    string `json:"target"`
	Found     bool   `json:"found,omitempty"`
	Namespace uint16 `json:"namespace,omitempty"`
}

// Local is the node a cluster Node serves: everything the cluster needs
// of the cache and the request path, and nothing more. Cache entries
// cross it as their stored bytes.
type Local interface {
	// ServePeer serves a request another node forwarded (or read
	// through) as the key's owner: no admission, no forwarding again.
	ServePeer(ctx *fasthttp.RequestCtx)
	// ServePeerHit serves a forwarded request as ServePeer does when its
	// answer is at hand — a fresh hit from memory — and reports true.
	// Otherwise it reports false having answered nothing, and the
	// caller serves the request again with ServePeer (ctx is spent: the
	// request is decoded afresh). It never waits (no origin, no disk,
	// no other request's fetch): the owner's multiplexed reader calls
	// it before it reads the connection's next request.
	ServePeerHit(ctx *fasthttp.RequestCtx) bool
	// Purge applies a purge's arguments here, without logging it (a
	// purge from a node that gives no id, or an overflow meant for this
	// node alone).
	Purge(args url.Values) (PurgeResult, error)
	// ApplyPurge applies a purge record once (by id, in the purge log)
	// and logs it; applied is false when it had been applied already.
	ApplyPurge(r PurgeRecord) (res PurgeResult, applied bool, err error)
	// InvalidateAll drops everything fetched before now: a peer's purge
	// log could not say which purges were missed.
	InvalidateAll()
	// HandoffEntry returns the stored bytes of key's entry when it is a
	// response this node may hand over (not invalidated, servable at now).
	HandoffEntry(key []byte, now time.Time) (entry []byte, ok bool)
	// TakeHandoff stores an entry a leaving node handed over, unless one
	// is held for the key already (stored false); err when the entry does
	// not decode or was not stored under exactly this key.
	TakeHandoff(key, entry []byte) (stored bool, err error)
	// Tenants is the tenant table in force (nil: no admission control).
	Tenants() *admission.Tenants
	// SetPeers tells the tenant limits how many nodes share them.
	SetPeers(n int, now time.Time)
	// Event records an event for the status page.
	Event(kind, detail string)
}

// Env is what a Node shares with the process that runs it.
type Env struct {
	Log     *PurgeLog    // the node's purge log (it exists without a cluster too)
	Metrics *metrics.Set // where the cluster's metrics are registered
	Logger  *slog.Logger
	// Ctx is cancelled when the node closes; WG counts the background
	// goroutines, which end with Ctx.
	Ctx context.Context
	WG  *sync.WaitGroup
	// Gate is the invalidation table's flag, set while the node is out
	// of purge sync (nothing served from the cache); Lease its lease,
	// renewed by the stall watchdog (unix ns). Both are used with
	// Options.DynamicMembership only.
	Gate  *atomic.Bool
	Lease *atomic.Int64
	// Release, when set, lets the held snapshot entries be served once
	// the purges missed since HoldSince (unix ns) are applied (catchUp).
	Release   func()
	HoldSince int64
}

// Node is one node's view of membership and its peer clients.
type Node struct {
	local   Local
	env     Env
	plog    *PurgeLog
	logger  *slog.Logger
	m       *routing.Membership
	src     routing.Source
	secret  []byte
	timeout time.Duration
	peers   atomic.Pointer[peerTable]
	genText atomic.Pointer[genText] // the last generation setPeerAuth wrote
	hot     *hotKeys
	opts    Options
	usage   *usageExchange // nil when the usage exchange is off
	clients map[string]*Peer
	heads   *answerHeads   // decoded mux answer heads (edge)
	fields  *requestFields // decoded mux request fields (owner)

	qmu    sync.Mutex            // guards queues
	queues map[string]*peerQueue // purges not yet delivered, by peer id
	sync   *purgeSync            // nil with static membership (purgesync.go)

	forbidden        *metrics.Counter // peer requests refused (secret or address)
	muxRefused       *metrics.Counter // multiplexed connections refused at their hello (secret or address)
	misdirected      *metrics.Counter // peer requests answered 421
	genChanges       *metrics.Counter
	readThroughHit   *metrics.Counter // previous-owner read-throughs answered from its cache
	readThroughMiss  *metrics.Counter // previous-owner read-throughs that fell back to the origin
	nearStored       *metrics.Counter
	nearHits         *metrics.Counter
	entryAnswers     atomic.Uint64 // entry answers received (EntryAnswers)
	handoffSent      *metrics.Counter
	handoffTaken     *metrics.Counter
	peerPurgeRetries *metrics.Counter
	purgesPending    *metrics.Counter // purges answered before every peer acknowledged them
	purgesDropped    *metrics.Counter // queued purges given up on (the peer syncs them)
	stalls           *metrics.Counter // watchdog gaps that closed the cache (purgesync.go)
}

// Options are the cluster settings.
type Options struct {
	Secret       string
	PeerTimeout  time.Duration
	HotKeyRate   float64       // 0: no near copies
	HotKeyMaxAge time.Duration // near copy lifetime cap
	HandoffKeys  int           // hottest entries pushed on leave
	MaxBody      int           // largest forwarded answer read (cache.max_object_size plus slack)
	// UsageInterval is how often tenant usage is exchanged with peers so
	// shares follow demand (usage.go); 0: each node keeps rate/n.
	UsageInterval time.Duration
	// TLS, when set, makes connections to peers mutual TLS (the peer
	// listener is wrapped by the caller with TLS.Server).
	TLS *httpx.PeerTLS
	// Dial, when set, opens connections to peers instead of TCP (and
	// TLS): tests run a cluster over in-memory listeners with it.
	Dial func(addr string) (net.Conn, error)
	// Transport is how forwarded GET and HEAD requests reach their
	// owner: "http" (one HTTP/1.1 exchange per connection at a time) or
	// "mux" (persistent multiplexed connections, mux.go; a peer that
	// does not speak it is reached over HTTP). Empty: "http" (the
	// config's default is "mux").
	Transport string
	// DynamicMembership (Consul): nodes learn of each other at different
	// instants, so each pulls its peers' purge logs and serves nothing
	// from its cache until it is in sync with every peer (purgesync.go).
	DynamicMembership bool
}

// peerTable is rebuilt whenever membership changes.
type peerTable struct {
	byID    map[string]*Peer
	allowed map[string]bool // peer IPs allowed on the peer listener
}

// Peer is the client of one peer node.
type Peer struct {
	id       string
	hc       *fasthttp.HostClient
	mux      *muxClient // nil: forwarded requests go over HTTP
	skip     peerSkip   // skips a failing peer for a while
	outcomes [numPeerOutcomes]*metrics.Counter
	// viaMux and viaHTTP count forwarded requests by the transport that
	// carried them (shield_peer_transport_total).
	viaMux, viaHTTP *metrics.Counter
}

// ID is the peer's node id.
func (pc *Peer) ID() string { return pc.id }

// PeerOutcome is how one forwarded request to a peer ended.
type PeerOutcome uint8

// Peer outcomes, the values of shield_peer_requests_total's outcome.
const (
	PeerOK PeerOutcome = iota
	PeerError
	PeerMisdirected
	PeerForbidden
	PeerSkipped // breaker open: served locally without trying
	numPeerOutcomes
)

var peerOutcomeLabels = [numPeerOutcomes]string{"ok", "error", "misdirected", "forbidden", "skipped"}

// New joins local to a cluster: requests whose key another node owns
// are forwarded to it. src is refreshed after a 421 or a peer failure.
// Call before serving.
func New(m *routing.Membership, src routing.Source, local Local, opts Options, env Env) *Node {
	set := env.Metrics
	c := &Node{
		local:            local,
		env:              env,
		plog:             env.Log,
		logger:           env.Logger,
		m:                m,
		src:              src,
		secret:           []byte(opts.Secret),
		timeout:          opts.PeerTimeout,
		hot:              newHotKeys(),
		opts:             opts,
		clients:          map[string]*Peer{},
		queues:           map[string]*peerQueue{},
		forbidden:        set.NewCounter(`shield_peer_forbidden_total`),
		muxRefused:       set.NewCounter(`shield_peer_mux_refused_total`),
		misdirected:      set.NewCounter(`shield_peer_misdirected_total`),
		genChanges:       set.NewCounter(`shield_cluster_generation_changes_total`),
		nearStored:       set.NewCounter(`shield_near_copies_stored_total`),
		nearHits:         set.NewCounter(`shield_near_copy_hits_total`),
		handoffSent:      set.NewCounter(`shield_handoff_entries_sent_total`),
		handoffTaken:     set.NewCounter(`shield_handoff_entries_received_total`),
		peerPurgeRetries: set.GetOrCreateCounter(`shield_peer_purge_retries_total`),
		purgesPending:    set.GetOrCreateCounter(`shield_purge_answered_pending_total`),
		purgesDropped:    set.GetOrCreateCounter(`shield_purge_queue_dropped_total`),
		stalls:           set.GetOrCreateCounter(`shield_process_stalls_total`),
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	c.readThroughHit = set.NewCounter(`shield_peer_read_through_total{outcome="hit"}`)
	c.readThroughMiss = set.NewCounter(`shield_peer_read_through_total{outcome="miss"}`)
	c.heads, c.fields = newAnswerHeads(), newRequestFields() // an owner serves mux whatever its own transport
	if opts.DynamicMembership {
		c.sync = newPurgeSync(time.Now(), env.Gate, src.Reachable)
		c.sync.viewChanged(otherIDs(m.View(), m.Self().ID), time.Now())
	}
	c.registerGauges()
	m.Subscribe(c.viewChanged)
	c.startUsage()
	if c.sync != nil {
		env.WG.Add(2)
		go c.syncLoop()
		go c.stallWatch()
	}
	if env.Release != nil {
		env.WG.Add(1)
		go c.catchUp(env.HoldSince, env.Release)
	}
	return c
}

// registerGauges exports the membership's and the purge machinery's state.
func (c *Node) registerGauges() {
	set, m, src := c.env.Metrics, c.m, c.src
	set.NewGauge(`shield_cluster_peers`, func() float64 { return float64(m.View().Current.Len()) })
	set.NewGauge(`shield_cluster_generation`, func() float64 { return float64(m.View().Current.Generation() >> 11) })
	set.NewGauge(`shield_consul_reachable`, func() float64 {
		if src.Reachable() {
			return 1
		}
		return 0
	})
	set.NewGauge(`shield_peer_mux_connections`, func() float64 {
		n := 0
		if t := c.peers.Load(); t != nil {
			for _, pc := range t.byID {
				if pc.mux != nil && pc.mux.cur.Load() != nil {
					n++
				}
			}
		}
		return float64(n)
	})
	set.NewGauge(`shield_purge_sync_pending`, func() float64 {
		if c.sync == nil {
			return 0 // static membership: every node knows every peer from the start
		}
		return float64(c.sync.pending())
	})
	set.NewGauge(`shield_purge_queue_length`, func() float64 {
		c.qmu.Lock()
		defer c.qmu.Unlock()
		n := 0
		for _, q := range c.queues {
			n += q.size()
		}
		return float64(n)
	})
}

// viewChanged rebuilds the peer table for a new view. It runs
// synchronously inside Membership.Update: quick, no calls back into
// membership.
func (c *Node) viewChanged(v *routing.View) {
	c.genChanges.Inc()
	if c.sync != nil {
		c.sync.viewChanged(otherIDs(v, c.m.Self().ID), time.Now())
	}
	t := &peerTable{byID: map[string]*Peer{}, allowed: map[string]bool{}}
	prev := c.peers.Load()
	for _, peer := range v.Current.Peers() {
		pc := c.clients[peer.ID+"@"+peer.Addr]
		if pc == nil {
			pc = c.newPeer(peer)
			c.clients[peer.ID+"@"+peer.Addr] = pc
		}
		if pc.mux != nil && prev != nil && prev.byID[peer.ID] != pc {
			// Back in the view after leaving it: it may have been
			// upgraded meanwhile (a rolling upgrade), so a refusal of
			// the mux transport is not held against it.
			pc.mux.rejoined()
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
	// A peer gone from both views keeps no multiplexed connection.
	for _, pc := range c.clients {
		if pc.mux != nil && t.byID[pc.id] != pc && !inView(v.Previous, pc) {
			pc.mux.closeAll()
		}
	}
	c.local.SetPeers(v.Current.Len(), time.Now())
}

// inView reports whether pc is the client of one of s's peers.
func inView(s *routing.PeerSet, pc *Peer) bool {
	if s == nil {
		return false
	}
	for _, peer := range s.Peers() {
		if peer.ID == pc.id && peer.Addr == pc.mux.addr {
			return true
		}
	}
	return false
}

// newPeer makes the client of one peer: one dial function (the test's
// Options.Dial, else TLS with cluster.tls, else plain TCP) for both its
// HTTP client and its multiplexed connection.
func (c *Node) newPeer(peer routing.Peer) *Peer {
	opts := c.opts
	dial := opts.Dial
	if dial == nil {
		dial = dialPlain
		if opts.TLS != nil {
			// TLS over raw system calls, as plain peer connections.
			tlsDial := httpx.TLSDialer(peer.Addr, opts.TLS.Client, 500*time.Millisecond, rawio.Wrap)
			dial = func(addr string) (net.Conn, error) { return tlsDial(addr, 0) }
		}
	}
	pc := &Peer{id: peer.ID, hc: newPlainPeerClient(peer.Addr, opts.PeerTimeout, opts.MaxBody)}
	// The owner's 103 Early Hints reach the edge's client
	// through the same connection wrapper as an origin's.
	pc.hc.DialTimeout = func(addr string, _ time.Duration) (net.Conn, error) {
		conn, err := dial(addr)
		if err != nil {
			return nil, err
		}
		return httpx.NewTrackedConn(conn), nil
	}
	if opts.Transport == TransportMux {
		pc.mux = newMuxClient(c, peer.Addr, dial)
	}
	for i := range pc.outcomes {
		pc.outcomes[i] = c.env.Metrics.GetOrCreateCounter(`shield_peer_requests_total{peer="` + peer.ID + `",outcome="` + peerOutcomeLabels[i] + `"}`)
	}
	pc.viaMux = c.env.Metrics.GetOrCreateCounter(`shield_peer_transport_total{peer="` + peer.ID + `",transport="` + TransportMux + `"}`)
	pc.viaHTTP = c.env.Metrics.GetOrCreateCounter(`shield_peer_transport_total{peer="` + peer.ID + `",transport="` + TransportHTTP + `"}`)
	return pc
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
		DialTimeout:              func(addr string, _ time.Duration) (net.Conn, error) { return dialPlain(addr) },
	}
}

// dialPlain opens a TCP connection to a peer, reading and writing with
// raw system calls (proxy/rawio). A dead owner must cost little: fall
// back fast.
func dialPlain(addr string) (net.Conn, error) {
	conn, err := fasthttp.DialTimeout(addr, 250*time.Millisecond)
	if err != nil {
		return nil, err
	}
	return rawio.Wrap(conn), nil
}

// Transports (Options.Transport).
const (
	TransportHTTP = "http"
	TransportMux  = "mux"
)

// View is the membership view requests route by now.
func (c *Node) View() *routing.View { return c.m.View() }

// Options are the options the node was made with.
func (c *Node) Options() *Options { return &c.opts }

// Touch samples one request for key (digest: cachekey.Digest(key)) in
// the hot-key table and returns the key's estimated rate in requests per
// second (0 when this request was not sampled).
func (c *Node) Touch(key []byte, digest uint64, now time.Time) float64 {
	return c.hot.touch(key, digest, now)
}

// Leave closes this node's cache for good: call it when the node starts
// a graceful leave, before it deregisters. From then on nothing is served
// from the cache (lookups miss: a request is forwarded to its owner or
// fetched), except read-throughs, which their reader checks against its
// own invalidations (purgesync.go). Peers drop a leaving node from their
// views, and stop pushing purges to it, before it stops serving.
func (c *Node) Leave() {
	if c.sync != nil {
		c.sync.leave()
	} else {
		c.env.Gate.Store(true)
	}
	c.logger.Info("leaving the cluster: not serving from the cache any more (purges may no longer reach this node)")
}

// Peer returns the client of the current peer id (nil: none).
func (c *Node) Peer(id string) *Peer { return c.peers.Load().byID[id] }

// PeerOutcomes is how many forwarded requests to peer ended with o.
func (c *Node) PeerOutcomes(peer string, o PeerOutcome) uint64 {
	pc := c.Peer(peer)
	if pc == nil {
		return 0
	}
	return pc.outcomes[o].Get()
}

// CloseIdleConnections closes every idle connection to a peer.
func (c *Node) CloseIdleConnections() {
	if t := c.peers.Load(); t != nil {
		for _, pc := range t.byID {
			pc.hc.CloseIdleConnections()
			if pc.mux != nil {
				pc.mux.closeAll()
			}
		}
	}
}

// PeerHandler serves the peer listener: requests forwarded by other
// nodes. It checks the shared secret (constant time) and the caller's
// address, then the generation (421 with ours when it is neither the
// current one nor the previous one inside the overlap), and serves the
// request locally without admission (the edge admitted it) and without
// forwarding it again.
func (c *Node) PeerHandler(ctx *fasthttp.RequestCtx) {
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
	client := len(h.PeekBytes(HClientIP)) > 0 || len(h.PeekBytes(HReadThrough)) > 0
	endpoint := ""
	if !client {
		endpoint = string(ctx.Request.URI().PathOriginal())
	}
	// Purges, purge logs and usage go through whatever generation
	// either side has: they must get through while views differ, and
	// none depends on key ownership.
	switch endpoint {
	case purgePath:
		c.peerPurge(ctx)
		return
	case purgeLogPath:
		if ctx.QueryArgs().Has("node") {
			c.serveSync(ctx)
		} else {
			c.servePurgeLog(ctx)
		}
		return
	case usagePath:
		c.takeUsage(ctx)
		return
	}
	v := c.m.View()
	if !c.acceptsGeneration(v, h.PeekBytes(hShieldGeneration), ctx.Time()) {
		c.misdirected.Inc()
		ctx.SetStatusCode(fasthttp.StatusMisdirectedRequest)
		ctx.Response.Header.SetBytesKV(hShieldGeneration, strconv.AppendUint(nil, v.Current.Generation(), 10))
		ctx.SetBodyString("misdirected: generation mismatch\n")
		return
	}
	if endpoint == handoffPath {
		c.takeHandoff(ctx)
		return
	}
	c.local.ServePeer(ctx)
}

// sendPurge applies a purge on one peer; it returns the peer's HTTP
// status, or 0 when the peer could not be reached.
func (c *Node) sendPurge(pc *Peer, addr string, gen uint64, args url.Values) int {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI(purgePath + "?" + args.Encode())
	c.setPeerHead(&req.Header, addr, gen)
	if err := pc.hc.DoTimeout(req, resp, 5*time.Second); err != nil {
		return 0
	}
	return resp.StatusCode()
}

// InvalidateEverywhere delivers the URL invalidation of a successful
// unsafe request (RFC 9111 §4.4) to every peer — the owner, a previous
// owner inside the overlap window and edges with near copies may each
// hold a copy. The client's answer waits for one parallel attempt (a peer
// round trip), so a read after the write never finds the old copy on a
// reachable peer; unreachable peers get it through their retried queues.
func (c *Node) InvalidateEverywhere(rawURL string, tid []byte) {
	args := url.Values{"url": {rawURL}}
	if len(tid) > 0 {
		args.Set("tenant", string(tid))
	}
	rec := NewPurge(args)
	c.plog.Add(rec)
	c.Deliver(rec, true)
}

// setPeerHead addresses a request to a peer: its address as Host, the
// shared secret and the generation this node routes by (setPeerAuth).
func (c *Node) setPeerHead(h *fasthttp.RequestHeader, addr string, gen uint64) {
	h.SetHost(addr)
	c.setPeerAuth(HTTPHead(h), gen)
}

// setPeerAuth sets the two fields every request to a peer carries over
// HTTP — the shared secret and the generation the sender routes by — and
// is the one place that writes them: forwards (SetForwardHead),
// read-throughs, purges, purge logs and sync, usage and hand-offs. A
// multiplexed connection carries the secret in its hello instead (a mux
// request drops the field).
func (c *Node) setPeerAuth(h ReqHead, gen uint64) {
	h.SetCanonical(hShieldAuth, c.secret)
	h.SetCanonical(hShieldGeneration, c.generationText(gen))
}

// acceptsGeneration reports whether field, a request's
// Shield-Generation, names a generation v accepts (routing.View.Accepts):
// the current one is recognised by its text, without parsing.
func (c *Node) acceptsGeneration(v *routing.View, field []byte, now time.Time) bool {
	if bytes.Equal(field, c.generationText(v.Current.Generation())) {
		return true
	}
	gen, err := strconv.ParseUint(string(field), 10, 64)
	return err == nil && v.Accepts(gen, now)
}

// genText is a generation in decimal.
type genText struct {
	gen  uint64
	text []byte
}

// generationText returns gen in decimal, formatted once per generation
// (it changes with the peer set, not per request); the bytes are never
// modified.
func (c *Node) generationText(gen uint64) []byte {
	if t := c.genText.Load(); t != nil && t.gen == gen {
		return t.text
	}
	t := &genText{gen: gen, text: strconv.AppendUint(nil, gen, 10)}
	c.genText.Store(t)
	return t.text
}

// purgePath is the peer-listener path a purge is fanned out on.
const purgePath = "/__shield/purge"

// PreparePeerTLS reads a reload's cluster.tls for a node whose peers
// already talk TLS (turning it on or off needs a restart, as server.tls
// does). install makes the new certificate and CA pool those of new
// handshakes, both ways, and closes the idle connections to peers, so
// the next requests dial with them instead of reusing sessions made with
// the old ones.
func (c *Node) PreparePeerTLS(t *config.PeerTLS) (install func(), err error) {
	if c.opts.TLS == nil || t == nil {
		return nil, nil
	}
	in, err := c.opts.TLS.Prepare(t)
	if err != nil {
		return nil, err
	}
	return func() {
		in()
		c.CloseIdleConnections()
	}, nil
}

// appendRemoteIP appends the client's address as net.IP.String would
// write it (IPv4 in dotted form, also when held as IPv4-mapped IPv6),
// without net.IP.String's allocation.
func appendRemoteIP(dst []byte, ctx *fasthttp.RequestCtx) []byte {
	a, ok := netip.AddrFromSlice(ctx.RemoteIP())
	if !ok {
		return append(dst, "<nil>"...) // what net.IP.String says of no address
	}
	return a.Unmap().AppendTo(dst)
}
