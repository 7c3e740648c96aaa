package e2e

import (
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Helpers for the cluster tests that measure shares, movement, hand-off
// and hot keys: config options, bounded-concurrency load, and metric sums
// over several nodes.

// withOverlap sets cluster.overlap on every node.
func withOverlap(d time.Duration) func(*clusterNodeConfig) {
	return func(c *clusterNodeConfig) { c.Overlap = d.String() }
}

// withHotKeyMaxAge sets cluster.hot_key_max_age on every node.
func withHotKeyMaxAge(d time.Duration) func(*clusterNodeConfig) {
	return func(c *clusterNodeConfig) { c.HotKeyMaxAge = d.String() }
}

// sendAll requests paths[i] through edges[i%len(edges)], workers requests
// at a time, and tallies the answers. The edge of a request depends only
// on its index, so a run is repeatable.
func (ce *clusterEnv) sendAll(edges []*clusterNode, paths []string, workers int) *statusTally {
	tally := newStatusTally()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(paths) {
					return
				}
				n := edges[i%len(edges)]
				r, err := ce.get(n, paths[i])
				tally.add(n.id()+" "+paths[i], r, err)
			}
		})
	}
	wg.Wait()
	return tally
}

// repeatPaths is perKey rounds of paths, interleaved (a, b, a, b, …), so
// concurrent workers hit every key at once rather than one after another.
func repeatPaths(paths []string, perKey int) []string {
	out := make([]string, 0, len(paths)*perKey)
	for range perKey {
		out = append(out, paths...)
	}
	return out
}

// each reads an unlabelled metric on every one of nodes, by node id,
// failing the test if a node does not expose it.
func (ce *clusterEnv) each(metric string, nodes ...*clusterNode) map[string]float64 {
	ce.t.Helper()
	out := make(map[string]float64, len(nodes))
	for _, n := range nodes {
		v, ok := ce.scrape(n).value(metric)
		if !ok {
			ce.t.Fatalf("%s does not expose %s", n.id(), metric)
		}
		out[n.id()] = v
	}
	return out
}

// sumOver adds up what read finds on each of nodes' /metrics.
func (ce *clusterEnv) sumOver(read func(promText) float64, nodes ...*clusterNode) float64 {
	ce.t.Helper()
	total := 0.0
	for _, n := range nodes {
		total += read(ce.scrape(n))
	}
	return total
}

// labelled reads the sum of metric's series that carry want.
func labelled(metric string, want map[string]string) func(promText) float64 {
	return func(m promText) float64 { return m.sum(metric, want) }
}

// plain reads an unlabelled metric, 0 when absent.
func plain(metric string) func(promText) float64 {
	return func(m promText) float64 {
		v, _ := m.value(metric)
		return v
	}
}

// peerAccepts asks n's peer listener whether it still accepts generation
// gen, without side effects: the probe asks for a cached copy only
// (Shield-Read-Through) of a path nobody requests, so an accepting node
// answers 504 "not cached", storing and fetching nothing, and a node past
// its overlap window answers 421.
func (ce *clusterEnv) peerAccepts(n *clusterNode, gen uint64) bool {
	ce.t.Helper()
	r, err := doHTTP(ce.e.client, http.MethodGet, "http://"+n.cfg.Peer+"/__e2e/overlap-probe",
		"Host", clusterHost, "Shield-Auth", clusterSecret,
		"Shield-Generation", strconv.FormatUint(gen, 10), "Shield-Read-Through", "1")
	if err != nil {
		ce.t.Fatalf("overlap probe on %s: %v", n.id(), err)
	}
	switch r.status {
	case http.StatusMisdirectedRequest:
		return false
	case http.StatusGatewayTimeout:
		return true
	}
	ce.t.Fatalf("overlap probe on %s: %v, want 504 (generation accepted, nothing cached) or 421", n.id(), r)
	return false
}

// waitOverlapClosed polls until none of nodes accepts generation gen any
// more: after a membership change, the previous generation's overlap
// window has closed everywhere (no read-through, no old-generation
// forwards).
func (ce *clusterEnv) waitOverlapClosed(gen uint64, nodes ...*clusterNode) time.Duration {
	ce.t.Helper()
	start := time.Now()
	for _, n := range nodes {
		for ce.peerAccepts(n, gen) {
			if time.Since(start) > clusterConverge {
				ce.t.Fatalf("%s still accepts generation %d %v later", n.id(), gen, clusterConverge)
			}
			time.Sleep(clusterPollEvery)
		}
	}
	return time.Since(start)
}
