package cluster

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/shield-proxy/shield/admission"
	"github.com/shield-proxy/shield/routing"
)

// The harness runs cluster Nodes in one process against fake Locals:
// each node's peer listener is an in-memory listener on a fake network,
// peers dial each other through Options.Dial from their own address (the
// peer listener's allow-list sees it), and membership is static: every
// node starts with every node in its view.

const testSecret = "cluster-test-secret"

// memNet is a fake network of in-memory listeners, by address.
type memNet struct {
	mu  sync.Mutex
	lns map[string]*fasthttputil.InmemoryListener
}

func (n *memNet) listen(addr string) *fasthttputil.InmemoryListener {
	n.mu.Lock()
	defer n.mu.Unlock()
	ln := fasthttputil.NewInmemoryListener()
	n.lns[addr] = ln
	return ln
}

// down closes addr's listener: dials to it fail from now on.
func (n *memNet) down(addr string) {
	n.mu.Lock()
	ln := n.lns[addr]
	delete(n.lns, addr)
	n.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
}

func (n *memNet) dialFrom(ip net.IP) func(addr string) (net.Conn, error) {
	return func(addr string) (net.Conn, error) {
		n.mu.Lock()
		ln := n.lns[addr]
		n.mu.Unlock()
		if ln == nil {
			return nil, errors.New("connection refused")
		}
		return ln.DialWithLocalAddr(&net.TCPAddr{IP: ip, Port: 50000})
	}
}

// fakeSource is a membership source the test drives by hand.
type fakeSource struct {
	refreshes   atomic.Int64
	unreachable atomic.Bool
}

func (s *fakeSource) Run(ctx context.Context) error { <-ctx.Done(); return nil }
func (s *fakeSource) Refresh()                      { s.refreshes.Add(1) }
func (s *fakeSource) Reachable() bool               { return !s.unreachable.Load() }

// fakeLocal is the node a test Node serves: it records what the cluster
// asks of it.
type fakeLocal struct {
	id   string
	plog *PurgeLog

	mu         sync.Mutex
	purges     []url.Values      // every purge applied, in order
	served     []string          // request URIs served as owner
	headers    []http1Head       // their peer protocol fields
	entries    map[string][]byte // the "cache": key → stored entry
	taken      map[string][]byte // entries taken from hand-offs
	events     []string
	peers      int
	invalAll   int
	tenants    *admission.Tenants
	serveLarge bool // ServePeer answers a large body
	// before, when set, runs first in ServePeer (without the lock).
	before func(ctx *fasthttp.RequestCtx)
	// answer, when set and it returns true, has answered the request
	// itself (after before): ServePeer records it and adds nothing.
	answer func(ctx *fasthttp.RequestCtx) bool
	quiet  bool // ServePeer records nothing (benchmarks); ServePeerHit serves as it does
	// hit, when set, is ServePeerHit's answer (false: answered nothing).
	hit    func(ctx *fasthttp.RequestCtx) bool
	inline atomic.Int64 // requests ServePeerHit answered
	size   int          // serveLarge's body size (0: 4096)
}

// http1Head is what ServePeer saw of a forwarded request.
type http1Head struct {
	tenant, clientIP, readThrough, forwarded string
}

func newFakeLocal(id string) *fakeLocal {
	return &fakeLocal{id: id, plog: NewPurgeLog(time.Now()), entries: map[string][]byte{}, taken: map[string][]byte{}}
}

func (l *fakeLocal) ServePeer(ctx *fasthttp.RequestCtx) {
	if l.before != nil {
		l.before(ctx)
	}
	h := &ctx.Request.Header
	if l.quiet {
		ctx.Response.Header.Set("Cache-Control", "max-age=60")
		ctx.SetBodyString("served by ") // in two parts: no allocation
		ctx.Response.AppendBodyString(l.id)
		return
	}
	l.mu.Lock()
	l.served = append(l.served, string(h.RequestURI()))
	l.headers = append(l.headers, http1Head{
		tenant: string(h.PeekBytes(HTenant)), clientIP: string(h.PeekBytes(HClientIP)),
		readThrough: string(h.PeekBytes(HReadThrough)), forwarded: string(h.PeekBytes(HForwarded)),
	})
	large := l.serveLarge
	l.mu.Unlock()
	if l.answer != nil && l.answer(ctx) {
		return
	}
	if string(ctx.Path()) == "/missing" {
		ctx.SetStatusCode(fasthttp.StatusGatewayTimeout)
		return
	}
	ctx.Response.Header.Set("Cache-Control", "max-age=60")
	ctx.Response.Header.SetBytesKV(HTags, []byte("t0000000000000001"))
	if large {
		ctx.SetBody(bytes.Repeat([]byte("x"), cmp.Or(l.size, 4096)))
		return
	}
	ctx.SetBodyString("served by " + l.id + " " + string(h.RequestURI()))
}

// ServePeerHit answers what hit answers, or, quiet, every request as
// ServePeer; nothing otherwise (the owner's worker calls ServePeer).
func (l *fakeLocal) ServePeerHit(ctx *fasthttp.RequestCtx) bool {
	switch {
	case l.hit != nil:
		if !l.hit(ctx) {
			return false
		}
	case l.quiet:
		l.ServePeer(ctx)
	default:
		return false
	}
	l.inline.Add(1)
	return true
}

func (l *fakeLocal) Purge(args url.Values) (PurgeResult, error) {
	if args.Get("bad") != "" {
		return PurgeResult{}, errors.New("bad purge")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.purges = append(l.purges, args)
	return PurgeResult{Kind: "url", Target: args.Get("url")}, nil
}

func (l *fakeLocal) ApplyPurge(r PurgeRecord) (PurgeResult, bool, error) {
	args, err := url.ParseQuery(r.Args)
	if err != nil {
		return PurgeResult{}, false, err
	}
	if !l.plog.Add(r) {
		return PurgeResult{}, false, nil
	}
	res, err := l.Purge(args)
	return res, true, err
}

func (l *fakeLocal) InvalidateAll() {
	l.mu.Lock()
	l.invalAll++
	l.mu.Unlock()
}

func (l *fakeLocal) HandoffEntry(key []byte, _ time.Time) ([]byte, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.entries[string(key)]
	return b, ok
}

func (l *fakeLocal) TakeHandoff(key, entry []byte) (bool, error) {
	if bytes.HasPrefix(entry, []byte("bad")) {
		return false, errors.New("bad entry")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.taken[string(key)]; ok {
		return false, nil
	}
	l.taken[string(key)] = bytes.Clone(entry)
	return true, nil
}

func (l *fakeLocal) Tenants() *admission.Tenants {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tenants
}

func (l *fakeLocal) SetPeers(n int, _ time.Time) {
	l.mu.Lock()
	l.peers = n
	l.mu.Unlock()
}

func (l *fakeLocal) Event(kind, detail string) {
	l.mu.Lock()
	l.events = append(l.events, kind+": "+detail)
	l.mu.Unlock()
}

// purged lists the url= of every purge applied so far.
func (l *fakeLocal) purged() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, a := range l.purges {
		out = append(out, a.Get("url"))
	}
	return out
}

func (l *fakeLocal) hasPurged(u string) bool {
	for _, p := range l.purged() {
		if p == u {
			return true
		}
	}
	return false
}

// testNode is one Node of a harness cluster.
type testNode struct {
	id, addr string
	ip       net.IP
	m        *routing.Membership
	src      *fakeSource
	local    *fakeLocal
	node     *Node
	set      *metrics.Set
	gate     atomic.Bool
	lease    atomic.Int64
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	srv      *fasthttp.Server
	ln       *fasthttputil.InmemoryListener
}

// harness is a set of nodes on one fake network.
type harness struct {
	t     *testing.T
	net   *memNet
	nodes []*testNode
}

// setup adjusts a node before it joins.
type setup struct {
	opts    func(*Options)
	env     func(id string, e *Env)
	handler func(n *testNode, next fasthttp.RequestHandler) fasthttp.RequestHandler
	local   func(*fakeLocal)
	// httpOnly, when set, says which nodes' peer listeners speak HTTP
	// only (an older release: no Listener wrapper).
	httpOnly func(id string) bool
}

func newHarness(t *testing.T, s setup, ids ...string) *harness {
	t.Helper()
	h := &harness{t: t, net: &memNet{lns: map[string]*fasthttputil.InmemoryListener{}}}
	var peers []routing.Peer
	for i, id := range ids {
		peers = append(peers, routing.Peer{ID: id, Addr: fmt.Sprintf("10.0.0.%d:7000", i+1), Weight: 1})
	}
	for i, id := range ids {
		n := &testNode{id: id, addr: peers[i].Addr, ip: net.IPv4(10, 0, 0, byte(i+1)), src: &fakeSource{}, local: newFakeLocal(id), set: metrics.NewSet()}
		if s.local != nil {
			s.local(n.local)
		}
		n.m = routing.NewMembership(peers[i], time.Minute, nil)
		n.m.Update(peers, time.Now())
		opts := Options{Secret: testSecret, PeerTimeout: time.Second, MaxBody: 1 << 20, HandoffKeys: 10, Dial: h.net.dialFrom(n.ip)}
		if s.opts != nil {
			s.opts(&opts)
		}
		ctx, cancel := context.WithCancel(context.Background())
		n.cancel = cancel
		env := Env{Log: n.local.plog, Metrics: n.set, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Ctx: ctx, WG: &n.wg, Gate: &n.gate, Lease: &n.lease}
		if s.env != nil {
			s.env(id, &env)
		}
		n.ln = h.net.listen(n.addr)
		n.node = New(n.m, n.src, n.local, opts, env)
		var handler fasthttp.RequestHandler = n.node.PeerHandler
		if s.handler != nil {
			handler = s.handler(n, handler)
		}
		n.srv = &fasthttp.Server{Handler: handler, NoDefaultDate: true}
		var ln net.Listener = n.ln
		if s.httpOnly == nil || !s.httpOnly(id) {
			ln = n.node.Listener(ln)
		}
		go func() { _ = n.srv.Serve(ln) }()
		h.nodes = append(h.nodes, n)
	}
	t.Cleanup(h.close)
	return h
}

func (h *harness) close() {
	for _, n := range h.nodes {
		n.cancel()
		n.node.CloseIdleConnections()
		_ = n.srv.Shutdown()
		_ = n.ln.Close()
	}
	for _, n := range h.nodes {
		n.wg.Wait()
	}
}

func (h *harness) node(id string) *testNode {
	for _, n := range h.nodes {
		if n.id == id {
			return n
		}
	}
	h.t.Fatalf("no node %s", id)
	return nil
}

// setPeers replaces the views of the given nodes with ids.
func (h *harness) setPeers(on []*testNode, ids ...string) {
	var peers []routing.Peer
	for _, id := range ids {
		n := h.node(id)
		peers = append(peers, routing.Peer{ID: n.id, Addr: n.addr, Weight: 1})
	}
	for _, n := range on {
		n.m.Update(peers, time.Now())
	}
}

// peerReq sends a raw request to n's peer listener from address from.
func (h *harness) peerReq(t *testing.T, from net.IP, n *testNode, method, uri, body string, headers ...string) *fasthttp.Response {
	t.Helper()
	conn, err := h.net.dialFrom(from)(n.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := &fasthttp.HostClient{Addr: n.addr, Dial: func(string) (net.Conn, error) { return conn, nil }}
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.Header.SetMethod(method)
	req.SetRequestURI(uri)
	req.Header.SetHost(n.addr)
	for _, hf := range headers {
		k, v, _ := strings.Cut(hf, ": ")
		req.Header.Set(k, v)
	}
	if body != "" {
		req.SetBodyString(body)
	}
	resp := &fasthttp.Response{}
	if err := c.DoTimeout(req, resp, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	return resp
}

// gen is n's current generation as a Shield-Generation field.
func (n *testNode) gen() string {
	return "Shield-Generation: " + fmt.Sprint(n.m.View().Current.Generation())
}

func (n *testNode) counter(name string) uint64 { return n.set.GetOrCreateCounter(name).Get() }

// waitUntil polls cond for up to 10s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// forward sends GET uri from n to owner through Begin, SetForwardHead
// and Do, as the proxy does; ok false when the owner could not answer.
func (n *testNode) forward(t *testing.T, owner, uri string) (*fasthttp.Response, bool) {
	t.Helper()
	fw, ok := n.node.Begin(owner, time.Now().UnixNano())
	if !ok {
		return nil, false
	}
	if fw.Owner() != owner {
		t.Fatalf("forward to %s goes to %s", owner, fw.Owner())
	}
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.SetRequestURI(uri)
	req.Header.SetHost("example.test")
	n.node.SetForwardHead(HTTPHead(&req.Header), n.m.View().Current.Generation(), []byte("acme"), []byte("192.0.2.1"))
	req.Header.SetBytesKV(HForwarded, valueOne)
	var client fasthttp.RequestCtx
	return n.node.Do(&client, fw, req, 0)
}
