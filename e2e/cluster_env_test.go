package e2e

// The cluster harness. Each cluster test has its own Consul dev agent,
// demo origin and shields, and its own Consul service name, so cluster
// tests share nothing and run in parallel. Nodes are n1, n2, … in start
// order; every request carries the same Host (clusterHost), since keys
// include it. Convergence is polled on each node's /metrics against the
// generation the routing package computes for the expected set, and a
// key's owner is found by watching the forwarding counters, never by
// re-implementing the key format.

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/routing"
)

// Cluster test parameters. The check interval is the shortest Consul
// takes, so a killed node leaves the passing set within about 1-2s; the
// overlap is short so a graceful leave takes about 2s.
const (
	clusterHost      = "cluster.test" // one Host everywhere: keys include it
	clusterSecret    = "e2e-cluster-secret-0123456789"
	clusterConverge  = 20 * time.Second // bound on membership convergence
	clusterPollEvery = 50 * time.Millisecond
)

// clusterNodeConfig is one node's generated config.
type clusterNodeConfig struct {
	NodeID, Listen, Admin, Peer string
	Origin, Consul, Service     string
	Secret                      string
	// Set by newClusterEnv options; "" keeps the harness default.
	Overlap      string // cluster.overlap, default 2s
	HotKeyMaxAge string // cluster.hot_key_max_age, default shield's
	CachePath    string // cache.path, default none (no snapshot)
	// Edit, when set, adjusts the generated configuration last.
	Edit func(*config.Config)
}

// config is the node's configuration file: demoNode plus a Consul
// cluster block. The secret is written literally: a ${VAR} would need an
// environment per process, which the harness's startProcess does not take.
func (cfg clusterNodeConfig) config(t *testing.T) string {
	t.Helper()
	return buildConfig(t, cfg.opts(t)...)
}

// opts are the settings config writes, before defaults.
func (cfg clusterNodeConfig) opts(t *testing.T) []confOpt {
	t.Helper()
	overlap, maxAge := 2*time.Second, time.Duration(0)
	if cfg.Overlap != "" {
		overlap = mustDuration(t, cfg.Overlap)
	}
	if cfg.HotKeyMaxAge != "" {
		maxAge = mustDuration(t, cfg.HotKeyMaxAge)
	}
	return []confOpt{demoNode(cfg.Listen, cfg.Admin, cfg.Origin), with(func(c *config.Config) {
		c.Server.DrainTimeout = 6 * time.Second
		c.Cache.Path = cfg.CachePath
		c.Cluster = &config.Cluster{
			NodeID: cfg.NodeID, Listen: cfg.Peer, Secret: cfg.Secret,
			Overlap: overlap, HotKeyMaxAge: maxAge, Membership: "consul",
			Consul: config.ClusterConsul{Address: cfg.Consul, Service: cfg.Service, CheckInterval: time.Second},
		}
		if cfg.Edit != nil {
			cfg.Edit(c)
		}
	})}
}

// mustDuration parses a Go duration a test wrote.
func mustDuration(t *testing.T, s string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("duration %q: %v", s, err)
	}
	return d
}

// clusterNode is one running shield of a cluster test.
type clusterNode struct {
	cfg  clusterNodeConfig
	proc *process
}

func (n *clusterNode) id() string { return n.cfg.NodeID }

// clusterEnv is one cluster test's world: a demo origin, a Consul agent
// and shields registered under a service name of their own.
type clusterEnv struct {
	t      *testing.T
	e      *env // the origin side of the harness: stats, client
	consul *consulAgent
	nodes  []*clusterNode // every node started, in start order
	opts   []func(*clusterNodeConfig)
}

// newClusterEnv starts an origin, a Consul agent and n shields (n1..nN),
// and waits until every node routes by the same, complete peer set. opts
// adjust every node's config, including nodes added later.
func newClusterEnv(t *testing.T, n int, opts ...func(*clusterNodeConfig)) *clusterEnv {
	t.Helper()
	return newClusterEnvWith(t, startConsul(t), n, opts...)
}

// newClusterEnvWith is newClusterEnv with a Consul agent the test started
// (to put something between it and some nodes).
func newClusterEnvWith(t *testing.T, consul *consulAgent, n int, opts ...func(*clusterNodeConfig)) *clusterEnv {
	t.Helper()
	e := &env{t: t, originAddr: freeAddr(t), client: newClient()}
	t.Cleanup(e.client.CloseIdleConnections)
	e.origin = startProcess(t, "demo-origin", binPath(t, "demo-origin"), "-listen", e.originAddr)
	e.origin.waitReady(t, "http://"+e.originAddr+"/__origin/stats")
	ce := &clusterEnv{t: t, e: e, consul: consul, opts: opts}
	for range n {
		ce.addNode()
	}
	if n > 0 {
		ce.waitConverged("initial membership", ce.nodes...)
	}
	return ce
}

// on returns a view of ce that reports to t, for use inside a subtest:
// FailNow must be called from the goroutine running the failing test.
func (ce *clusterEnv) on(t *testing.T) *clusterEnv {
	c := *ce
	c.t, c.e = t, ce.e.on(t)
	return &c
}

// addNode starts the next node (n<k>) and waits for its /readyz; it does
// not wait for the cluster to see it.
func (ce *clusterEnv) addNode() *clusterNode {
	ce.t.Helper()
	return ce.addNodeAs("", binPath(ce.t, "shield"), clusterNodeConfig.config)
}

// addNodeAs is addNode with another shield binary (release names it in
// the process's name, "" for this tree's) and the configuration render
// writes for it.
func (ce *clusterEnv) addNodeAs(release, bin string, render func(clusterNodeConfig, *testing.T) string) *clusterNode {
	t := ce.t
	t.Helper()
	cfg := clusterNodeConfig{
		NodeID:  "n" + strconv.Itoa(len(ce.nodes)+1),
		Listen:  freeAddr(t),
		Admin:   freeAddr(t),
		Peer:    freeAddr(t),
		Origin:  ce.e.originAddr,
		Consul:  ce.consul.addr,
		Service: "shield-" + strings.ReplaceAll(t.Name(), "/", "-"),
		Secret:  clusterSecret,
	}
	for _, o := range ce.opts {
		o(&cfg)
	}
	path := writeFile(t, cfg.NodeID+".yaml", render(cfg, t))
	node := &clusterNode{cfg: cfg}
	name := "shield " + cfg.NodeID
	if release != "" {
		name += " (" + release + ")"
	}
	node.proc = startProcess(t, name, bin, "-config", path)
	node.proc.waitReady(t, "http://"+cfg.Admin+"/readyz")
	ce.nodes = append(ce.nodes, node)
	return node
}

// expectedGeneration is the generation of the set of nodes, computed by
// the routing package's documented algorithm from what each node
// registers (id, peer address, weight 1): an independent check that the
// nodes agree on the right set, not just on some set.
func expectedGeneration(t *testing.T, nodes ...*clusterNode) uint64 {
	t.Helper()
	peers := make([]routing.Peer, len(nodes))
	for i, n := range nodes {
		peers[i] = routing.Peer{ID: n.id(), Addr: n.cfg.Peer, Weight: 1}
	}
	set, err := routing.NewPeerSet("", peers)
	if err != nil {
		t.Fatalf("peer set of %d nodes: %v", len(nodes), err)
	}
	return set.Generation()
}

// generationGauge is how shield_cluster_generation shows a generation:
// its top 53 bits, so the float64 gauge holds it exactly.
func generationGauge(gen uint64) float64 { return float64(gen >> 11) }

// waitConverged polls until every one of nodes reports exactly nodes as
// its peer set: shield_cluster_peers = len(nodes) and
// shield_cluster_generation = that set's generation. It returns how long
// it took.
func (ce *clusterEnv) waitConverged(what string, nodes ...*clusterNode) time.Duration {
	ce.t.Helper()
	start := time.Now()
	for {
		lagging := ce.lagging(nodes...)
		if len(lagging) == 0 {
			return time.Since(start)
		}
		if time.Since(start) > clusterConverge {
			ce.t.Fatalf("%s: not converged after %v on %d nodes (want peers=%d generation=%v): %s",
				what, clusterConverge, len(nodes), len(nodes),
				generationGauge(expectedGeneration(ce.t, nodes...)), strings.Join(lagging, "; "))
		}
		time.Sleep(clusterPollEvery)
	}
}

// lagging lists the nodes (with what they report) whose peer set is not
// exactly nodes or whose purge sync is pending; empty means converged.
func (ce *clusterEnv) lagging(nodes ...*clusterNode) []string {
	ce.t.Helper()
	want := generationGauge(expectedGeneration(ce.t, nodes...))
	var out []string
	for _, n := range nodes {
		m := ce.scrape(n)
		peers, _ := m.value("shield_cluster_peers")
		gen, _ := m.value("shield_cluster_generation")
		// Converged includes purge sync: until it, a node serves nothing
		// from its cache (proxy/cluster/purgesync.go).
		pending, _ := m.value("shield_purge_sync_pending")
		if peers != float64(len(nodes)) || gen != want || pending != 0 {
			out = append(out, fmt.Sprintf("%s: peers=%v generation=%v purge_sync_pending=%v", n.id(), peers, gen, pending))
		}
	}
	return out
}

// promText is one /metrics scrape.
type promText []byte

// scrape reads n's /metrics, failing the test if it cannot.
func (ce *clusterEnv) scrape(n *clusterNode) promText {
	ce.t.Helper()
	r, err := doHTTP(ce.e.client, http.MethodGet, "http://"+n.cfg.Admin+"/metrics")
	if err != nil || r.status != http.StatusOK {
		ce.t.Fatalf("%s: GET /metrics: %v %v", n.id(), r, err)
	}
	return promText(r.body)
}

// value is the sample of an unlabelled metric.
func (m promText) value(metric string) (float64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(m))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), metric+" ")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return 0, false
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		return v, err == nil
	}
	return 0, false
}

// sum adds up every series of metric whose labels include want; absent
// series count 0.
func (m promText) sum(metric string, want map[string]string) float64 {
	total := 0.0
	sc := bufio.NewScanner(bytes.NewReader(m))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), metric+"{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok || !hasLabels(labels, want) {
			continue
		}
		if fields := strings.Fields(value); len(fields) > 0 {
			if v, err := strconv.ParseFloat(fields[0], 64); err == nil {
				total += v
			}
		}
	}
	return total
}

// peerOK is how many requests node has forwarded to peer with outcome ok.
func (m promText) peerOK(peer string) float64 {
	return m.sum("shield_peer_requests_total", map[string]string{"peer": peer, "outcome": "ok"})
}

// answeredByPeer is shield_requests_total{cache="peer"} over all routes.
func (m promText) answeredByPeer() float64 {
	return m.sum("shield_requests_total", map[string]string{"cache": "peer"})
}

// get sends one GET for path to n's public listener with the cluster's
// Host.
func (ce *clusterEnv) get(n *clusterNode, path string) (result, error) {
	return doHTTP(ce.e.client, http.MethodGet, "http://"+n.cfg.Listen+path, "Host", clusterHost)
}

// fanOut sends perNode GETs for path to each of nodes, all released at
// once, and returns every answer (or its transport error).
func (ce *clusterEnv) fanOut(nodes []*clusterNode, perNode int, path string) ([]result, []error) {
	total := perNode * len(nodes)
	results, errs := make([]result, total), make([]error, total)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range total {
		n := nodes[i%len(nodes)]
		wg.Go(func() {
			<-start
			results[i], errs[i] = ce.get(n, path)
		})
	}
	close(start)
	wg.Wait()
	return results, errs
}

// twoKeysOwnedBy returns two paths with prefix that owner owns (found and
// warmed through via), each a hit on its owner: a target for the test to
// act on and an untouched control.
func (ce *clusterEnv) twoKeysOwnedBy(via, owner *clusterNode, prefix string) (target, control string) {
	t := ce.t
	t.Helper()
	cands := keyPaths(prefix, 16)
	owners := ce.owners(via, cands) // warms each key on its owner
	var keys []string
	for _, p := range cands {
		if owners[p] == owner.id() {
			keys = append(keys, p)
		}
	}
	if len(keys) < 2 {
		t.Fatalf("%s owns %d of %d keys, want ≥ 2: %v", owner.id(), len(keys), len(cands), owners)
	}
	for _, p := range keys[:2] {
		r, err := ce.get(owner, p)
		if err != nil || !parseCacheStatus(r.header).hit {
			t.Fatalf("warm %s on its owner: %v %v, want a hit", p, r, err)
		}
	}
	return keys[0], keys[1]
}

// owners finds which node owns each path by observation: each path is
// requested once through via (warming it), and the owner is the peer
// whose forwarded-ok counter on via went up, or via itself if none did.
// Every answer must be a 200.
func (ce *clusterEnv) owners(via *clusterNode, paths []string) map[string]string {
	ce.t.Helper()
	owner := make(map[string]string, len(paths))
	before := ce.scrape(via)
	for _, p := range paths {
		r, err := ce.get(via, p)
		if err != nil || r.status != http.StatusOK {
			ce.t.Fatalf("warm %s via %s: %v %v", p, via.id(), r, err)
		}
		after := ce.scrape(via)
		owner[p] = via.id()
		for _, n := range ce.nodes {
			if n != via && after.peerOK(n.id()) > before.peerOK(n.id()) {
				owner[p] = n.id()
			}
		}
		before = after
	}
	return owner
}

// statusTally counts answers by status, and transport errors apart.
type statusTally struct {
	mu       sync.Mutex // guards the fields below
	byStatus map[int]int
	errors   []string
}

func newStatusTally() *statusTally { return &statusTally{byStatus: map[int]int{}} }

func (s *statusTally) add(what string, r result, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.errors = append(s.errors, fmt.Sprintf("%s: %v", what, err))
		return
	}
	s.byStatus[r.status]++
}

// total is the number of requests tallied, errors included.
func (s *statusTally) total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.errors)
	for _, c := range s.byStatus {
		n += c
	}
	return n
}

// bad lists every answer that is not a 200 and every transport error.
func (s *statusTally) bad() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := append([]string(nil), s.errors...)
	for st, c := range s.byStatus {
		if st != http.StatusOK {
			out = append(out, fmt.Sprintf("%d × status %d", c, st))
		}
	}
	sort.Strings(out)
	return out
}

func (s *statusTally) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	codes := make([]int, 0, len(s.byStatus))
	for st := range s.byStatus {
		codes = append(codes, st)
	}
	sort.Ints(codes)
	var sb strings.Builder
	for i, st := range codes {
		if i > 0 {
			sb.WriteString(", ")
		}
		fmt.Fprintf(&sb, "%d×%d", s.byStatus[st], st)
	}
	fmt.Fprintf(&sb, "; %d transport errors", len(s.errors))
	return sb.String()
}

// originFetches is how many requests reached the origin for each of
// paths (by path, query excluded).
func (ce *clusterEnv) originFetches(paths []string) (total int64, extra []string) {
	ce.t.Helper()
	s := ce.e.stats()
	for _, p := range paths {
		path, _, _ := strings.Cut(p, "?")
		n := s.ByPath[path]
		total += n
		if n != 1 {
			extra = append(extra, fmt.Sprintf("%s=%d", path, n))
		}
	}
	return total, extra
}

// keyPaths makes n distinct request targets /prefix/i?kv...; each is a
// separate cache key and a separate origin path.
func keyPaths(prefix string, n int, kv ...string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = target("/"+prefix+"/"+strconv.Itoa(i), kv...)
	}
	return out
}

// wantOneFetchPerKey requests each cold path from every one of nodes at
// once, perNode times each, one path after the other, and fails unless
// every answer is a 200 and the origin saw each path exactly once. It
// returns the tally of answers.
func (ce *clusterEnv) wantOneFetchPerKey(what string, nodes []*clusterNode, perNode int, paths []string) *statusTally {
	ce.t.Helper()
	tally := newStatusTally()
	for _, p := range paths {
		results, errs := ce.fanOut(nodes, perNode, p)
		for i := range results {
			tally.add(p, results[i], errs[i])
		}
	}
	if bad := tally.bad(); len(bad) > 0 {
		ce.t.Errorf("%s: answers other than 200 (%s): %s", what, tally, strings.Join(bad, "; "))
	}
	total, extra := ce.originFetches(paths)
	if total != int64(len(paths)) || len(extra) > 0 {
		ce.t.Errorf("%s: %d keys × %d nodes × %d requests made %d origin fetches, want %d (one per key); keys not fetched once: %s",
			what, len(paths), len(nodes), perNode, total, len(paths), strings.Join(extra, " "))
	}
	ce.t.Logf("%s: %d keys × %d nodes × %d concurrent requests: %s; origin fetches %d",
		what, len(paths), len(nodes), perNode, tally, total)
	return tally
}
