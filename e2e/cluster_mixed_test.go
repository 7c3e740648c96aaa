package e2e

// A rolling upgrade, run for real: a Consul cluster of two nodes of this
// tree and one of the previous release — the last before the multiplexed
// peer transport (cluster.transport: mux) — built by the test from the
// repository's history. The previous release speaks HTTP only on its
// peer listener and answers the mux preface as HTTP; docs/configuration.md
// (cluster.transport) says an edge then reaches it over HTTP, and
// switches to mux once the node is upgraded.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shield-proxy/shield/config"
)

// prevRelease is the commit of the previous release: the last before
// proxy/cluster/mux*.go (prevReleaseBinary checks that it has none).
const prevRelease = "c68f252"

// muxSwitchWithin bounds how long an edge takes to reach an upgraded peer
// over mux: its first request after the peer rejoined the view dials in
// the background, a dial every second at most.
const muxSwitchWithin = 20 * time.Second

// prevReleaseBinary returns the shield binary of prevRelease, built from
// the repository's history (git archive, go build with the module cache)
// once per machine into ~/.cache/shield/shield-<prevRelease>. A checkout
// without that commit (a shallow clone) fails the test: under CI nothing
// may skip, and a developer needs the history to run it.
func prevReleaseBinary(t *testing.T) string {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("git", "-C", root, "rev-parse", "--verify", "--quiet", prevRelease+"^{commit}").Output()
	if err != nil {
		t.Fatalf("the previous release, commit %s, is not in the history of %s (%v): a shallow clone? "+
			"The mixed-release test builds it from git history; fetch the full history (git fetch --unshallow)", prevRelease, root, err)
	}
	commit := strings.TrimSpace(string(out))
	files, err := exec.Command("git", "-C", root, "ls-tree", "-r", "--name-only", commit, "--", "proxy/cluster").Output()
	if err != nil {
		t.Fatalf("git ls-tree %s: %v", prevRelease, err)
	}
	for f := range strings.FieldsSeq(string(files)) {
		if ok, _ := path.Match("mux*.go", path.Base(f)); ok {
			t.Fatalf("commit %s has %s: it is not the release before the multiplexed peer transport", prevRelease, f)
		}
	}
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatalf("no home directory for the build cache: %v", err)
	}
	bin := filepath.Join(home, ".cache", "shield", "shield-"+prevRelease)
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return bin
	}
	buildPrevRelease(t, root, commit, bin)
	return bin
}

// buildPrevRelease builds commit's cmd/shield into bin: its tree from git
// archive into a temporary directory, go build there (the module cache
// serves its dependencies), then a rename, so a concurrent run never
// starts a half-written binary.
func buildPrevRelease(t *testing.T, root, commit, bin string) {
	t.Helper()
	start := time.Now()
	src := t.TempDir()
	tarball, err := exec.Command("git", "-C", root, "archive", "--format=tar", commit).Output()
	if err != nil {
		t.Fatalf("git archive %s: %v", commit, err)
	}
	untar := exec.Command("tar", "-x", "-C", src)
	untar.Stdin = bytes.NewReader(tarball)
	if out, err := untar.CombinedOutput(); err != nil {
		t.Fatalf("unpack %s: %v\n%s", commit, err, out)
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(bin), filepath.Base(bin)+".tmp*")
	if err != nil {
		t.Fatal(err)
	}
	_ = tmp.Close()
	defer os.Remove(tmp.Name()) // gone after the rename; left by a failed build
	build := exec.Command("go", "build", "-trimpath", "-buildvcs=false",
		"-ldflags", "-X main.version="+prevRelease, "-o", tmp.Name(), "./cmd/shield")
	build.Dir = src
	build.Env = append(os.Environ(), "GOFLAGS=-mod=readonly")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build of the previous release %s: %v\n%s", prevRelease, err, out)
	}
	if err := os.Rename(tmp.Name(), bin); err != nil {
		t.Fatal(err)
	}
	t.Logf("built the previous release %s into %s in %v", prevRelease, bin, time.Since(start).Round(time.Second))
}

// prevReleaseConfig renders a node's configuration for the previous
// release: only the settings the harness sets, no defaults — this tree's
// complete configuration names settings the previous release does not
// know (cluster.transport, cache.disk), and its decoder rejects unknown
// fields. The file is checked with the previous release's -check-config
// before the node starts on it.
func prevReleaseConfig(bin string) func(clusterNodeConfig, *testing.T) string {
	return func(cfg clusterNodeConfig, t *testing.T) string {
		t.Helper()
		sparse := &config.Config{}
		for _, o := range cfg.opts(t) {
			if o.sparse == nil || o.exact != nil || o.yaml != "" {
				t.Fatalf("%s: prevReleaseConfig writes sparse settings only", cfg.NodeID)
			}
			o.sparse(sparse)
		}
		doc := toNode(t, sparse)
		pruneZero(doc)
		text := encode(t, doc)
		file := writeFile(t, cfg.NodeID+"-"+prevRelease+".yaml", text)
		if out, err := exec.Command(bin, "-check-config", file).CombinedOutput(); err != nil {
			t.Fatalf("the previous release %s rejects the configuration written for it: %v\n%s\n%s", prevRelease, err, out, text)
		}
		full := writeFile(t, cfg.NodeID+"-full.yaml", cfg.config(t))
		if out, err := exec.Command(bin, "-check-config", full).CombinedOutput(); err != nil {
			t.Logf("as expected, the previous release rejects this tree's complete configuration: %s", bytes.TrimSpace(out))
		}
		return text
	}
}

// TestClusterMixedRelease runs a cluster of n1, n2 (this tree) and n3
// (the previous release) on one Consul agent. Keys owned by either
// release are served through the other, concurrent misses across the
// nodes make one origin fetch per key, purges cross releases both ways,
// and a node of this tree forwards to n3 over HTTP and to the other new
// node over mux (shield_peer_transport_total). Then n3 is upgraded in
// place (same id and ports, this tree's binary) and both edges switch to
// mux with it.
func TestClusterMixedRelease(t *testing.T) {
	// Built (the first time on a machine, about a minute and a half on
	// 2 cores) before t.Parallel: while this test runs alone, so the
	// compile does not slow down the timing-sensitive tests running in
	// parallel.
	prev := prevReleaseBinary(t)
	t.Parallel()
	ce := newClusterEnv(t, 2)
	n1, n2 := ce.nodes[0], ce.nodes[1]
	n3 := ce.addNodeAs(prevRelease, prev, prevReleaseConfig(prev))
	took := ce.waitConverged("n1, n2 and "+n3.id()+" on "+prevRelease, ce.nodes...)
	t.Logf("%s (%s) joined n1 and n2: converged in %v", n3.id(), prevRelease, took.Round(time.Millisecond))

	byOwner := ce.keysByOwner(n1, keyPaths("mixed", 30))
	oldKeys, newKeys := byOwner[n3.id()], byOwner[n2.id()]
	if len(oldKeys) < 2 || len(newKeys) < 2 || len(byOwner[n1.id()]) == 0 {
		t.Fatalf("want ≥ 2 of 30 keys owned by each of %s and %s, and one by %s: %v", n3.id(), n2.id(), n1.id(), byOwner)
	}

	// Served across releases, each answer relayed from its owner.
	ce.wantRelayed(n2, n3, oldKeys[0], 1)
	ce.wantRelayed(n3, n2, newKeys[0], 1)

	ce.wantMixedCoalescing(n3)

	// Purges, this tree → the previous release and back.
	ce.wantPurgeHonoured(n1, n3, oldKeys[1])
	ce.wantPurgeHonoured(n3, n2, newKeys[1])

	for _, edge := range []*clusterNode{n1, n2} {
		other := n2
		if edge == n2 {
			other = n1
		}
		ce.waitMux(edge, other, byOwner[other.id()][0])
		ce.wantTransports(edge, map[*clusterNode][]string{n3: oldKeys, other: byOwner[other.id()]}, map[*clusterNode]string{n3: "http", other: "mux"})
		if m := ce.scrape(edge); m.transport(n3.id(), "mux") != 0 || m.transport(n3.id(), "http") == 0 {
			t.Errorf("%s → %s (%s): %v forwards over mux, %v over http; want none over mux",
				edge.id(), n3.id(), prevRelease, m.transport(n3.id(), "mux"), m.transport(n3.id(), "http"))
		}
	}

	ce.upgrade(n3)
	for _, edge := range []*clusterNode{n1, n2} {
		ce.waitMux(edge, n3, oldKeys[0])
	}
	ce.waitMux(n3, n2, newKeys[0])
	ce.wantTransports(n1, map[*clusterNode][]string{n3: oldKeys, n2: newKeys}, map[*clusterNode]string{n3: "mux", n2: "mux"})
}

// TestClusterMixedReleaseMostlyOld is the first step of a rolling
// upgrade: n1 of this tree joins n2 and n3 of the previous release. n1
// serves and is served by both, misses coalesce and purges cross both
// ways, and n1 reaches both over HTTP; once n2 is upgraded, n1 and n2
// talk mux while both still reach n3 over HTTP.
func TestClusterMixedReleaseMostlyOld(t *testing.T) {
	prev := prevReleaseBinary(t) // before t.Parallel, as in TestClusterMixedRelease
	t.Parallel()
	ce := newClusterEnv(t, 1)
	n1 := ce.nodes[0]
	n2 := ce.addNodeAs(prevRelease, prev, prevReleaseConfig(prev))
	n3 := ce.addNodeAs(prevRelease, prev, prevReleaseConfig(prev))
	took := ce.waitConverged("n1 with n2 and n3 on "+prevRelease, ce.nodes...)
	t.Logf("n1 joined n2 and n3 (%s): converged in %v", prevRelease, took.Round(time.Millisecond))

	byOwner := ce.keysByOwner(n1, keyPaths("mostly-old", 36))
	for _, n := range ce.nodes {
		if len(byOwner[n.id()]) < 2 {
			t.Fatalf("want ≥ 2 of 36 keys owned by each node: %v", byOwner)
		}
	}
	k1, k2, k3 := byOwner[n1.id()], byOwner[n2.id()], byOwner[n3.id()]
	ce.wantRelayed(n2, n3, k3[0], 1) // previous release → previous release
	ce.wantRelayed(n3, n1, k1[0], 1) // previous release → this tree
	ce.wantRelayed(n1, n2, k2[0], 1) // this tree → previous release
	ce.wantMixedCoalescing(n2, n3)
	ce.wantPurgeHonoured(n1, n3, k3[1])
	ce.wantPurgeHonoured(n2, n1, k1[1])
	ce.wantTransports(n1, map[*clusterNode][]string{n2: k2, n3: k3}, map[*clusterNode]string{n2: "http", n3: "http"})

	ce.upgrade(n2)
	ce.waitMux(n1, n2, k2[0])
	ce.waitMux(n2, n1, k1[0])
	ce.wantTransports(n1, map[*clusterNode][]string{n2: k2, n3: k3}, map[*clusterNode]string{n2: "mux", n3: "http"})
	ce.wantTransports(n2, map[*clusterNode][]string{n1: k1, n3: k3}, map[*clusterNode]string{n1: "mux", n3: "http"})
}

// keysByOwner warms paths through via and groups them by owner.
func (ce *clusterEnv) keysByOwner(via *clusterNode, paths []string) map[string][]string {
	ce.t.Helper()
	out := map[string][]string{}
	owners := ce.owners(via, paths)
	for _, p := range paths {
		out[owners[p]] = append(out[owners[p]], p)
	}
	return out
}

// wantRelayed requests p, cached on owner, through edge: a 200 with the
// origin's body for p (its n-th fetch), relayed from owner (the edge's
// Cache-Status member and its forwarded-ok counter).
func (ce *clusterEnv) wantRelayed(edge, owner *clusterNode, p string, n int64) {
	t := ce.t
	t.Helper()
	before := ce.scrape(edge).peerOK(owner.id())
	r, err := ce.get(edge, p)
	if err != nil || r.status != http.StatusOK {
		t.Fatalf("GET %s via %s (owner %s): %v %v", p, edge.id(), owner.id(), r, err)
	}
	if body := decode(t, r); body.Path != p || body.N != n {
		t.Errorf("GET %s via %s: body for %s (fetch %d), want %s (fetch %d)", p, edge.id(), body.Path, body.N, p, n)
	}
	// The owner's member, then the edge's (a field line of its own).
	if cs := strings.Join(r.header.Values("Cache-Status"), ", "); !strings.Contains(cs, "shield-edge; detail=peer-"+owner.id()) {
		t.Errorf("GET %s via %s: Cache-Status %q, want a member relayed from %s", p, edge.id(), cs, owner.id())
	}
	if after := ce.scrape(edge).peerOK(owner.id()); after != before+1 {
		t.Errorf("GET %s via %s: forwarded ok to %s %v → %v, want one more", p, edge.id(), owner.id(), before, after)
	}
	if got := ce.e.stats().ByPath[p]; got != n {
		t.Errorf("origin fetches of %s = %d, want %d", p, got, n)
	}
}

// wantMixedCoalescing sends concurrent misses for cold keys through
// every node at once: one origin fetch per key, whichever release owns
// it and whichever the edge runs. Some keys must be owned by the nodes
// of the previous release (old), some by this tree's.
func (ce *clusterEnv) wantMixedCoalescing(old ...*clusterNode) {
	ce.t.Helper()
	paths := keyPaths("mixed-coalesce", 16)
	ce.wantOneFetchPerKey("misses across releases", ce.nodes, 4, paths)
	owned := map[string]int{}
	for _, o := range ce.owners(ce.nodes[0], paths) {
		owned[o]++
	}
	onOld := 0
	for _, n := range old {
		onOld += owned[n.id()]
	}
	if onOld == 0 || onOld == len(paths) {
		ce.t.Fatalf("owners of the coalescing keys %v: want some on the previous release's nodes and some on this tree's", owned)
	}
	ce.t.Logf("coalescing keys by owner: %v", owned)
}

// wantPurgeHonoured purges p (cached on owner, fetched once) at at's
// admin listener and checks that owner drops it: its next GET fetches
// again. When the purge's answer says owner acknowledged it, the first
// GET must; otherwise (a slow machine) owner gets it from its queue.
func (ce *clusterEnv) wantPurgeHonoured(at, owner *clusterNode, p string) {
	t := ce.t
	t.Helper()
	if got := ce.e.stats().ByPath[p]; got != 1 {
		t.Fatalf("origin fetches of %s before the purge = %d, want 1", p, got)
	}
	res, err := doHTTP(ce.e.client, http.MethodPost, "http://"+at.cfg.Admin+"/purge?url="+url.QueryEscape("http://"+clusterHost+p))
	if err != nil || res.status != http.StatusOK {
		t.Fatalf("POST /purge %s on %s: %v %v", p, at.id(), res, err)
	}
	var ans struct {
		Peers   map[string]int `json:"peers"`
		Pending []string       `json:"pending"`
	}
	if err := json.Unmarshal(res.body, &ans); err != nil {
		t.Fatalf("purge answer of %s: %v: %s", at.id(), err, res.body)
	}
	acked := ans.Peers[owner.id()] == http.StatusOK
	refetched := func() bool {
		r, err := ce.get(owner, p)
		if err != nil || r.status != http.StatusOK {
			t.Fatalf("GET %s on %s after the purge: %v %v", p, owner.id(), r, err)
		}
		switch n := decode(t, r).N; n {
		case 1:
			return false
		case 2:
			return true
		default:
			t.Fatalf("GET %s on %s after the purge: fetch %d, want 2", p, owner.id(), n)
			return false
		}
	}
	if acked {
		t.Logf("purge of %s at %s: %s", p, at.id(), bytes.TrimSpace(res.body))
		if !refetched() {
			t.Fatalf("%s acknowledged the purge of %s issued at %s (%s), then served its old copy", owner.id(), p, at.id(), res.body)
		}
	} else {
		t.Logf("purge at %s: %s had not acknowledged it when it answered (%s); polling", at.id(), owner.id(), bytes.TrimSpace(res.body))
		eventually(t, owner.id()+" honouring the purge of "+p+" issued at "+at.id(), refetched)
	}
	// Every other node now gets the owner's new copy.
	for _, n := range ce.nodes {
		if n != owner && n != at {
			if body := decode(t, mustGet(t, ce, n, p)); body.N != 2 {
				t.Errorf("GET %s via %s after the purge at %s: fetch %d, want 2", p, n.id(), at.id(), body.N)
			}
		}
	}
}

// mustGet is a GET that must answer 200.
func mustGet(t *testing.T, ce *clusterEnv, n *clusterNode, p string) result {
	t.Helper()
	r, err := ce.get(n, p)
	if err != nil || r.status != http.StatusOK {
		t.Fatalf("GET %s via %s: %v %v", p, n.id(), r, err)
	}
	return r
}

// transport reads edge's shield_peer_transport_total for peer.
func (m promText) transport(peer, transport string) float64 {
	return m.sum("shield_peer_transport_total", map[string]string{"peer": peer, "transport": transport})
}

// waitMux requests p (owned by owner) through edge until edge forwards
// to owner over mux: the first requests go over HTTP while the
// connection is dialled in the background.
func (ce *clusterEnv) waitMux(edge, owner *clusterNode, p string) {
	t := ce.t
	t.Helper()
	start := time.Now()
	before := ce.scrape(edge)
	sent := 0
	for {
		mustGet(t, ce, edge, p)
		sent++
		m := ce.scrape(edge)
		if m.transport(owner.id(), "mux") > before.transport(owner.id(), "mux") {
			t.Logf("%s → %s over mux after %v (%d requests; %v over http meanwhile)", edge.id(), owner.id(),
				time.Since(start).Round(time.Millisecond), sent, m.transport(owner.id(), "http")-before.transport(owner.id(), "http"))
			return
		}
		if time.Since(start) > muxSwitchWithin {
			t.Fatalf("%s forwards to %s over HTTP still, %v and %d requests later: shield_peer_transport_total mux %v → %v, http %v → %v",
				edge.id(), owner.id(), muxSwitchWithin, sent, before.transport(owner.id(), "mux"), m.transport(owner.id(), "mux"),
				before.transport(owner.id(), "http"), m.transport(owner.id(), "http"))
		}
		time.Sleep(clusterPollEvery)
	}
}

// wantTransports forwards each of keys[owner] through edge once and
// checks that every one went over want[owner] and none over the other
// transport.
func (ce *clusterEnv) wantTransports(edge *clusterNode, keys map[*clusterNode][]string, want map[*clusterNode]string) {
	t := ce.t
	t.Helper()
	before := ce.scrape(edge)
	for _, ps := range keys {
		for _, p := range ps {
			mustGet(t, ce, edge, p)
		}
	}
	after := ce.scrape(edge)
	var got []string
	for owner, ps := range keys {
		other := map[string]string{"mux": "http", "http": "mux"}[want[owner]]
		d := after.transport(owner.id(), want[owner]) - before.transport(owner.id(), want[owner])
		o := after.transport(owner.id(), other) - before.transport(owner.id(), other)
		got = append(got, fmt.Sprintf("%s: %v %s, %v %s", owner.id(), d, want[owner], o, other))
		if d != float64(len(ps)) || o != 0 {
			t.Errorf("%s forwarded %d keys to %s: %v over %s and %v over %s, want all over %s",
				edge.id(), len(ps), owner.id(), d, want[owner], o, other, want[owner])
		}
	}
	t.Logf("%s forwards by transport: %s", edge.id(), strings.Join(got, "; "))
}

// upgrade stops n (gracefully: it leaves Consul) and starts it again on
// this tree's binary with the same id and ports, its configuration now
// this tree's.
func (ce *clusterEnv) upgrade(n *clusterNode) {
	t := ce.t
	t.Helper()
	var rest []*clusterNode
	for _, o := range ce.nodes {
		if o != n {
			rest = append(rest, o)
		}
	}
	n.proc.terminate(t)
	ce.waitConverged("after "+n.id()+" left for its upgrade", rest...)
	if code := n.proc.wait(t); code != 0 {
		t.Fatalf("%s (%s) exited %d after SIGTERM, want 0", n.id(), prevRelease, code)
	}
	n.proc = startProcess(t, "shield "+n.id()+" (upgraded)", binPath(t, "shield"), "-config", writeFile(t, n.id()+"-upgraded.yaml", n.cfg.config(t)))
	n.proc.waitReady(t, "http://"+n.cfg.Admin+"/readyz")
	took := ce.waitConverged("after "+n.id()+" came back upgraded", ce.nodes...)
	t.Logf("%s upgraded to this tree: converged in %v", n.id(), took.Round(time.Millisecond))
}
