package proxy

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/shield-proxy/shield/cachekey"
	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/proxy/cache"
	"github.com/shield-proxy/shield/proxy/cluster"
	"github.com/shield-proxy/shield/routing"
)

// The cluster harness runs N proxy nodes in one process: each node's
// public and peer listeners are fasthttputil in-memory listeners on a
// fake network (memNet), peers dial each other through ClusterOptions.Dial
// from their own address (so the peer listener's address check sees the
// calling node), membership is a routing.Membership per node fed by the
// test (fakeSource), and the origin is a fasthttp server on 127.0.0.1
// counting requests (origins are dialed by TCP address).

// clusterSecret is the shared peer secret of every harness node.
const clusterSecret = "harness-secret-0123456789"

// memNet is an in-memory network of peer listeners by address.
type memNet struct {
	mu  sync.Mutex
	lns map[string]*fasthttputil.InmemoryListener // guarded by mu
}

// listen opens an in-memory listener reachable at addr.
func (n *memNet) listen(addr string) *fasthttputil.InmemoryListener {
	n.mu.Lock()
	defer n.mu.Unlock()
	ln := fasthttputil.NewInmemoryListener()
	n.lns[addr] = ln
	return ln
}

// down closes the listener at addr: dials to it fail from now on.
func (n *memNet) down(addr string) {
	n.mu.Lock()
	ln := n.lns[addr]
	delete(n.lns, addr)
	n.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
}

// dialFrom returns a dialer whose connections come from ip.
func (n *memNet) dialFrom(ip net.IP) func(addr string) (net.Conn, error) {
	return func(addr string) (net.Conn, error) {
		n.mu.Lock()
		ln := n.lns[addr]
		n.mu.Unlock()
		if ln == nil {
			return nil, fmt.Errorf("memnet: dial %s: connection refused", addr)
		}
		return ln.DialWithLocalAddr(&net.TCPAddr{IP: ip, Port: 50000})
	}
}

// fakeSource is a membership source the test drives: it counts refreshes
// and reports the reachability the test sets.
type fakeSource struct {
	refreshes   atomic.Int64
	unreachable atomic.Bool
}

func (s *fakeSource) Run(ctx context.Context) error { <-ctx.Done(); return nil }
func (s *fakeSource) Refresh()                      { s.refreshes.Add(1) }
func (s *fakeSource) Reachable() bool               { return !s.unreachable.Load() }

var _ routing.Source = (*fakeSource)(nil)

// fakeOrigin is an in-process fasthttp origin on 127.0.0.1 that counts
// requests, in total and per path.
type fakeOrigin struct {
	addr    string
	srv     *fasthttp.Server
	total   atomic.Int64
	mu      sync.Mutex
	perPath map[string]int // guarded by mu
	handler atomic.Pointer[fasthttp.RequestHandler]
}

func newFakeOrigin(t testing.TB) *fakeOrigin {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("origin listen: %v", err)
	}
	o := &fakeOrigin{addr: ln.Addr().String(), perPath: map[string]int{}}
	o.setHandler(func(ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.Set("Cache-Control", "public, max-age=3600")
		ctx.SetContentType("text/plain")
		ctx.SetBodyString("body of " + string(ctx.Path()))
	})
	o.srv = &fasthttp.Server{MaxIdleWorkerDuration: 10 * time.Millisecond, Handler: func(ctx *fasthttp.RequestCtx) {
		o.total.Add(1)
		o.mu.Lock()
		o.perPath[string(ctx.Path())]++
		o.mu.Unlock()
		(*o.handler.Load())(ctx)
	}}
	done := make(chan struct{})
	go func() { defer close(done); _ = o.srv.Serve(ln) }()
	t.Cleanup(func() {
		// Close the listener too: a Shutdown that runs before Serve
		// registered it would leave Serve blocked in Accept.
		_ = o.srv.Shutdown()
		_ = ln.Close()
		<-done
	})
	return o
}

func (o *fakeOrigin) setHandler(h fasthttp.RequestHandler) { o.handler.Store(&h) }

// hits is how many requests for path the origin received.
func (o *fakeOrigin) hits(path string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.perPath[path]
}

// testNode is one proxy of a harness cluster.
type testNode struct {
	id       string
	ip       net.IP
	peerAddr string
	cfg      *config.Config
	p        *Proxy
	m        *routing.Membership
	src      *fakeSource

	pubLn *fasthttputil.InmemoryListener
	pub   *fasthttp.Server
	peer  *fasthttp.Server
	// peerLn is the peer listener peer serves; close closes it too, in
	// case Serve had not started when Shutdown ran (Shutdown closes only
	// the listeners Serve has registered, and Serve would then wait in
	// Accept for ever).
	peerLn  net.Listener
	client  *fasthttp.HostClient // to pub
	serving sync.WaitGroup

	mu           sync.Mutex
	readThroughs []string // paths of read-through requests received; guarded by mu
}

// testCluster is N nodes over one memNet in front of one fake origin.
type testCluster struct {
	t      testing.TB
	net    *memNet
	origin *fakeOrigin
	nodes  []*testNode
}

// clusterSetup adjusts a harness cluster before it starts.
type clusterSetup struct {
	overlap time.Duration                                                           // membership overlap; 0: 10s
	yaml    string                                                                  // extra YAML inside the cluster block
	top     string                                                                  // extra top-level YAML (tenants, ...)
	opts    func(*ClusterOptions)                                                   // adjusts each node's options
	cfg     func(*config.Config)                                                    // adjusts each node's parsed config
	handler func(n *testNode, next fasthttp.RequestHandler) fasthttp.RequestHandler // wraps a peer handler
}

const clusterConfig = `
listen: 127.0.0.1:0
admin: {listen: "off"}
cache:
  size: 32MiB
  max_object_size: 64KiB
origins:
  o:
    servers: [%q]
    timeout: 2s
routes:
  - name: r
    hosts: [%q]
    origin: o
cluster:
  node_id: %s
  listen: %s
  secret: %s
  hot_key_rate: 0
%s  peers:
%s`

// newTestCluster starts ids as nodes, each a member of every node's view.
func newTestCluster(t testing.TB, setup clusterSetup, ids ...string) *testCluster {
	t.Helper()
	c := &testCluster{t: t, net: &memNet{lns: map[string]*fasthttputil.InmemoryListener{}}, origin: newFakeOrigin(t)}
	var peers strings.Builder
	for i, id := range ids {
		fmt.Fprintf(&peers, "    - {id: %s, addr: \"10.0.0.%d:7000\"}\n", id, i+1)
	}
	for i, id := range ids {
		n := &testNode{id: id, ip: net.IPv4(10, 0, 0, byte(i+1)), peerAddr: fmt.Sprintf("10.0.0.%d:7000", i+1), src: &fakeSource{}}
		raw := fmt.Sprintf(clusterConfig, c.origin.addr, testHost, id, n.peerAddr, clusterSecret, setup.yaml, peers.String()) + setup.top
		cfg, err := config.Parse("cluster.yaml", []byte(raw), nil)
		if err != nil {
			t.Fatalf("node %s config: %v", id, err)
		}
		if setup.cfg != nil {
			setup.cfg(cfg)
		}
		n.cfg = cfg
		p, err := New(cfg, nil)
		if err != nil {
			t.Fatalf("node %s: New: %v", id, err)
		}
		n.p = p
		n.m = routing.NewMembership(routing.Peer{ID: id, Addr: n.peerAddr, Weight: 1}, setup.overlap, nil)
		n.m.Update(StaticPeers(cfg.Cluster), time.Now())
		opts := ClusterOptionsFor(cfg)
		opts.Dial = c.net.dialFrom(n.ip)
		if setup.opts != nil {
			setup.opts(&opts)
		}
		p.SetCluster(n.m, n.src, opts)
		c.nodes = append(c.nodes, n)
	}
	for _, n := range c.nodes {
		n.start(c, setup.handler)
	}
	t.Cleanup(c.close)
	for _, n := range c.nodes {
		n.p.SetReady(true)
	}
	return c
}

// start opens the node's public and peer listeners.
func (n *testNode) start(c *testCluster, wrap func(*testNode, fasthttp.RequestHandler) fasthttp.RequestHandler) {
	n.pubLn = fasthttputil.NewInmemoryListener()
	n.pub = n.p.PublicServer(n.cfg.Server, nil)
	n.peer = n.p.PeerServer(n.cfg.Server, nil)
	// A stopped server's worker cleaner sleeps this long before it
	// exits; keep it short so no goroutine outlives the test.
	n.pub.MaxIdleWorkerDuration = 10 * time.Millisecond
	n.peer.MaxIdleWorkerDuration = 10 * time.Millisecond
	next := n.peer.Handler
	n.peer.Handler = func(ctx *fasthttp.RequestCtx) {
		if len(ctx.Request.Header.PeekBytes(hShieldReadThrough)) > 0 {
			n.mu.Lock()
			n.readThroughs = append(n.readThroughs, string(ctx.Path()))
			n.mu.Unlock()
		}
		next(ctx)
	}
	if wrap != nil {
		n.peer.Handler = wrap(n, n.peer.Handler)
	}
	peerLn := c.net.listen(n.peerAddr)
	n.serving.Add(2)
	go func() { defer n.serving.Done(); _ = n.pub.Serve(n.pubLn) }()
	n.peerLn = n.p.PeerListener(peerLn)
	go func() { defer n.serving.Done(); _ = n.peer.Serve(n.peerLn) }()
	n.client = &fasthttp.HostClient{
		Addr:                     "public-" + n.id,
		Dial:                     func(string) (net.Conn, error) { return n.pubLn.DialWithLocalAddr(clientAddr) },
		DisablePathNormalizing:   true,
		NoDefaultUserAgentHeader: true,
	}
}

// close stops every node and releases its connections.
func (c *testCluster) close() {
	for _, n := range c.nodes {
		n.client.CloseIdleConnections()
		if cl := n.p.cluster.Load(); cl != nil {
			cl.CloseIdleConnections()
		}
	}
	for _, n := range c.nodes {
		_ = n.pub.Shutdown()
		_ = n.peer.Shutdown()
		_ = n.pubLn.Close() // in case Serve had not started yet
		_ = n.peerLn.Close()
		c.net.down(n.peerAddr)
		n.serving.Wait()
		if err := n.p.Close(); err != nil {
			c.t.Errorf("node %s: Close: %v", n.id, err)
		}
		closeOriginConns(n.p)
	}
}

// node returns the node named id.
func (c *testCluster) node(id string) *testNode {
	for _, n := range c.nodes {
		if n.id == id {
			return n
		}
	}
	c.t.Fatalf("no node %q", id)
	return nil
}

// reply is a client's view of one response.
type reply struct {
	code        int
	cacheStatus string
	age         string
	body        string
}

// get sends a GET for path on testHost through n's public listener.
func (n *testNode) get(t testing.TB, path string, headers ...string) reply {
	t.Helper()
	return n.do(t, "GET", path, "", headers...)
}

// do sends one request through n's public listener.
func (n *testNode) do(t testing.TB, method, path, body string, headers ...string) reply {
	t.Helper()
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(method)
	req.SetRequestURI(path)
	req.Header.SetHost(testHost)
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ":")
		req.Header.Set(k, strings.TrimSpace(v))
	}
	if body != "" {
		req.SetBodyString(body)
	}
	if err := n.client.DoTimeout(req, resp, 10*time.Second); err != nil {
		t.Fatalf("%s %s via %s: %v", method, path, n.id, err)
	}
	return reply{
		code:        resp.StatusCode(),
		cacheStatus: joinValues(resp.Header.PeekAll("Cache-Status")),
		age:         string(resp.Header.Peek("Age")),
		body:        string(resp.Body()),
	}
}

// joinValues joins a field's values as one list, the way a client reads
// several fields of one name.
func joinValues(vs [][]byte) string {
	var b strings.Builder
	for i, v := range vs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.Write(v)
	}
	return b.String()
}

// key is the primary cache key of a GET for path on n.
func (n *testNode) key(t testing.TB, path string) []byte {
	t.Helper()
	return primaryKey(n.p, get(t, path))
}

// owner is the id of the node owning path's key in n's current view.
func (n *testNode) owner(t testing.TB, path string) string {
	t.Helper()
	o, _ := n.m.View().Current.Owner(cachekey.Digest(n.key(t, path)))
	return o.ID
}

// has reports whether n stores an entry of the given kind for path.
func (n *testNode) has(t testing.TB, path string, kind cache.Kind) bool {
	t.Helper()
	e, ok := stored(t, n.p, n.key(t, path))
	return ok && e.Kind == kind
}

// readThroughsReceived is the paths of read-through requests n received.
func (n *testNode) readThroughsReceived() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.readThroughs...)
}

// pathWhere returns the first path /<prefix>/<i> for which ok holds.
func pathWhere(t testing.TB, prefix string, ok func(path string) bool) string {
	t.Helper()
	for i := range 10000 {
		path := fmt.Sprintf("/%s/%d", prefix, i)
		if ok(path) {
			return path
		}
	}
	t.Fatalf("no path /%s/N satisfies the condition", prefix)
	return ""
}

// setPeers replaces the peer set of the given nodes' views with ids.
func (c *testCluster) setPeers(on []*testNode, ids ...string) {
	var peers []routing.Peer
	for _, id := range ids {
		n := c.node(id)
		peers = append(peers, routing.Peer{ID: n.id, Addr: n.peerAddr, Weight: 1})
	}
	now := time.Now()
	for _, n := range on {
		n.m.Update(peers, now)
	}
}

// peerOutcome is how many forwards from n to peer ended in o.
func (n *testNode) peerOutcome(peer string, o cluster.PeerOutcome) uint64 {
	return n.p.cluster.Load().PeerOutcomes(peer, o)
}

// cl is the node's cluster state.
func (n *testNode) cl() *cluster.Node { return n.p.cluster.Load() }

// counter is the value of n's counter name (its metric, as exported).
func (n *testNode) counter(name string) uint64 { return n.p.g.set.GetOrCreateCounter(name).Get() }

// The peer protocol's endpoints (proxy/cluster).
const (
	purgePath    = "/__shield/purge"
	purgeLogPath = "/__shield/purgelog"
	usagePath    = "/__shield/usage"
	handoffPath  = "/__shield/handoff"
)
