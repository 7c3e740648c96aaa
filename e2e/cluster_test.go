package e2e

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// TestClusterOneFetchPerKey: three shields in one Consul service agree on
// the peer set, and a cold key asked of all three at once (20 concurrent
// requests on each, origin delay 100ms) reaches the origin once: the
// non-owners forward to the owner, which coalesces. Afterwards every node
// answers every key from cache.
func TestClusterOneFetchPerKey(t *testing.T) {
	t.Parallel()
	ce := newClusterEnv(t, 3)
	paths := keyPaths("one", 30, "delay", "100")
	ce.wantOneFetchPerKey("cold keys", ce.nodes, 20, paths)

	for _, p := range paths {
		for _, n := range ce.nodes {
			r, err := ce.get(n, p)
			if err != nil {
				t.Fatal(err)
			}
			wantHit(t, p+" again via "+n.id(), r)
		}
	}
	if total, extra := ce.originFetches(paths); len(extra) > 0 {
		t.Errorf("after the hits: %d origin fetches, keys not fetched once: %s", total, strings.Join(extra, " "))
	}

	viaPeer := 0
	var figures []string
	for _, n := range ce.nodes {
		m := ce.scrape(n)
		peer := m.answeredByPeer()
		if peer > 0 {
			viaPeer++
		}
		figures = append(figures, n.id()+": cache=peer "+ftoa(peer)+
			", forwards ok "+ftoa(m.sum("shield_peer_requests_total", map[string]string{"outcome": "ok"}))+
			", error "+ftoa(m.sum("shield_peer_requests_total", map[string]string{"outcome": "error"}))+
			", misdirected "+ftoa(m.sum("shield_peer_requests_total", map[string]string{"outcome": "misdirected"})))
	}
	t.Logf("peer answers: %s", strings.Join(figures, "; "))
	if viaPeer < 2 {
		t.Errorf("%d nodes answered through a peer (shield_requests_total{cache=\"peer\"} > 0), want at least 2", viaPeer)
	}
}

// TestClusterPeerListener: the peer listener refuses requests without the
// shared secret (403, counted) and requests routed by another generation
// (421 naming the node's own, counted), and serves a request with both
// right.
func TestClusterPeerListener(t *testing.T) {
	t.Parallel()
	ce := newClusterEnv(t, 2)
	n := ce.nodes[0]
	gen := strconv.FormatUint(expectedGeneration(t, ce.nodes...), 10)
	const (
		forbidden   = "shield_peer_forbidden_total"
		misdirected = "shield_peer_misdirected_total"
	)
	tests := []struct {
		name       string
		hdr        []string
		wantStatus int
		counted    string // the counter that must go up by one, if any
	}{
		{"no secret", []string{"Shield-Generation", gen}, http.StatusForbidden, forbidden},
		{"wrong secret", []string{"Shield-Auth", "not-the-cluster-secret-0123", "Shield-Generation", gen}, http.StatusForbidden, forbidden},
		{"secret prefix", []string{"Shield-Auth", clusterSecret[:16], "Shield-Generation", gen}, http.StatusForbidden, forbidden},
		{"empty secret", []string{"Shield-Auth", "", "Shield-Generation", gen}, http.StatusForbidden, forbidden},
		{"wrong generation", []string{"Shield-Auth", clusterSecret, "Shield-Generation", "12345"}, http.StatusMisdirectedRequest, misdirected},
		{"no generation", []string{"Shield-Auth", clusterSecret}, http.StatusMisdirectedRequest, misdirected},
		{"current generation", []string{"Shield-Auth", clusterSecret, "Shield-Generation", gen}, http.StatusOK, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ce := ce.on(t)
			before := ce.scrape(n)
			path := "/peer/" + strings.ReplaceAll(tt.name, " ", "-")
			hdr := append([]string{"Host", clusterHost}, tt.hdr...)
			r, err := doHTTP(ce.e.client, http.MethodGet, "http://"+n.cfg.Peer+path, hdr...)
			if err != nil {
				t.Fatal(err)
			}
			if r.status != tt.wantStatus {
				t.Errorf("status %d, want %d (%v)", r.status, tt.wantStatus, r)
			}
			if tt.wantStatus == http.StatusMisdirectedRequest && r.header.Get("Shield-Generation") != gen {
				t.Errorf("421 Shield-Generation %q, want the node's current generation %s", r.header.Get("Shield-Generation"), gen)
			}
			if tt.wantStatus == http.StatusOK {
				if res := decode(t, r); res.Path != path {
					t.Errorf("body for path %q, want %q", res.Path, path)
				}
			}
			after := ce.scrape(n)
			for _, c := range []string{forbidden, misdirected} {
				b, okB := before.value(c)
				a, okA := after.value(c)
				want := 0.0
				if c == tt.counted {
					want = 1
				}
				if !okB || !okA || a-b != want {
					t.Errorf("%s went %v → %v (exposed: %v, %v), want +%v", c, b, a, okB, okA, want)
				}
			}
		})
	}
}

// TestClusterJoin: a fourth shield registering in the service joins every
// node's peer set, takes a share of the keys, and the cluster still makes
// one origin fetch per cold key.
func TestClusterJoin(t *testing.T) {
	t.Parallel()
	ce := newClusterEnv(t, 3)
	n4 := ce.addNode()
	took := ce.waitConverged("after n4 joined", ce.nodes...)
	t.Logf("4 nodes converged %v after n4 was ready", took)

	ce.wantOneFetchPerKey("cold keys after the join", ce.nodes, 15, keyPaths("join", 30, "delay", "100"))

	toN4 := 0.0
	for _, n := range ce.nodes[:3] {
		toN4 += ce.scrape(n).peerOK(n4.id())
	}
	answered := ce.scrape(n4).answeredByPeer()
	t.Logf("forwards to n4 (ok): %v; n4 answers via a peer: %v", toN4, answered)
	if toN4 == 0 {
		t.Errorf("no node forwarded to n4: it owns no key after joining")
	}
	if answered == 0 {
		t.Errorf("n4 answered nothing through a peer: it does not forward to the owners")
	}
}

func ftoa(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
