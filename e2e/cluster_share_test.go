package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// How keys spread over the cluster: each node's share of the cache, and
// how many keys a join moves. Every key is requested once per phase, so no
// key is ever hot and no near copy is made: a node's cache entries are
// exactly the keys it owns (the demo origin sends no Vary, so one entry
// per key).
const (
	shareKeys    = 3000
	shareWorkers = 24 // concurrent requests while warming or re-reading
	// Each of three equal nodes owns about a third; ±30% is far outside
	// the binomial spread (σ ≈ 26 keys) yet catches a skewed hash.
	shareMin, shareMax = 700, 1300
	// A fourth equal node takes about a quarter of the keys.
	movedMin, movedMax = 0.18, 0.32
)

// TestClusterSharesAndJoin: 3,000 cold keys asked through all three
// nodes reach the origin once each and end up split about evenly, each
// node holding about a third. Then a fourth node joins; once every node
// routes by the four and the short overlap window is over (no read-through
// to the previous owner), reading all keys again fetches only the keys
// that moved, about a quarter, all onto the new node; and no old node
// answers a key it no longer owns from its own store.
func TestClusterSharesAndJoin(t *testing.T) {
	t.Parallel()
	ce := newClusterEnv(t, 3, withOverlap(100*time.Millisecond))
	three := slices.Clone(ce.nodes)
	paths := keyPaths("share", shareKeys)

	start := time.Now()
	tally := ce.sendAll(three, paths, shareWorkers)
	warmTook := time.Since(start)
	if bad := tally.bad(); len(bad) > 0 {
		t.Errorf("warming %d keys: answers other than 200 (%s): %s", len(paths), tally, strings.Join(bad, "; "))
	}
	fetched, extra := ce.originFetches(paths)
	if fetched != shareKeys || len(extra) > 0 {
		t.Errorf("warming: %d origin fetches for %d keys, want one each; keys not fetched once: %.300s",
			fetched, shareKeys, strings.Join(extra, " "))
	}
	entries := ce.each("shield_cache_entries", three...)
	near := ce.sumOver(plain("shield_near_copies_stored_total"), three...)
	sum := 0.0
	for _, n := range three {
		sum += entries[n.id()]
	}
	t.Logf("warming %d keys through 3 nodes (%d concurrent) took %v: %s; origin fetches %d; "+
		"cache entries n1=%v n2=%v n3=%v (sum %v); near copies stored %v",
		shareKeys, shareWorkers, warmTook.Round(time.Millisecond), tally, fetched,
		entries["n1"], entries["n2"], entries["n3"], sum, near)
	for _, n := range three {
		if e := entries[n.id()]; e < shareMin || e > shareMax {
			t.Errorf("%s holds %v entries of %d keys, want about a third, in [%d, %d]",
				n.id(), e, shareKeys, shareMin, shareMax)
		}
	}
	if sum != shareKeys+near {
		t.Errorf("entries sum to %v, want one per key (%d) plus near copies (%v)", sum, shareKeys, near)
	}

	// The join.
	prevGen := expectedGeneration(t, three...)
	n4 := ce.addNode()
	converged := ce.waitConverged("after n4 joined", ce.nodes...)
	closed := ce.waitOverlapClosed(prevGen, ce.nodes...)
	readThrough := labelled("shield_peer_read_through_total", nil)
	rtBefore := ce.sumOver(readThrough, ce.nodes...)
	rr := ce.rereadAfterJoin(paths, three, n4)
	rt := ce.sumOver(readThrough, ce.nodes...) - rtBefore
	after := ce.each("shield_cache_entries", ce.nodes...)
	frac := float64(rr.fetched) / shareKeys
	t.Logf("n4 joined: converged in %v, overlap closed %v later; %s; origin re-fetches %d → moved %.3f; "+
		"entries n1=%v n2=%v n3=%v n4=%v; read-throughs %v",
		converged.Round(time.Millisecond), closed.Round(time.Millisecond), rr, rr.fetched, frac,
		after["n1"], after["n2"], after["n3"], after[n4.id()], rt)
	rr.check(t)
	if rr.oldLocal != 0 {
		t.Errorf("old nodes answered %v requests for keys they no longer own from their own store "+
			"(counted in shield_near_copy_hits_total, though no key was hot): a non-owner edge serves any fresh local entry "+
			"instead of forwarding, so a previous owner keeps serving its full-lifetime copy after the join", rr.oldLocal)
	}
	if frac < movedMin || frac > movedMax {
		t.Errorf("the join moved %d of %d keys (%.3f), want about a quarter, in [%.2f, %.2f]",
			rr.fetched, shareKeys, frac, movedMin, movedMax)
	}
	if after[n4.id()] != float64(rr.fetched) {
		t.Errorf("n4 holds %v entries, want exactly the %d re-fetched keys: a key moved between old nodes", after[n4.id()], rr.fetched)
	}
	if rt != 0 {
		t.Errorf("%v read-throughs after the overlap window closed, want 0", rt)
	}
}

// joinReread is what re-reading every key after a join showed.
type joinReread struct {
	spread, direct *statusTally  // answers: through every node in turn; through the new node
	took           time.Duration // both passes
	fetched        int64         // origin fetches beyond the warm-up's one per key
	oldLocal       float64       // old nodes' shield_near_copy_hits_total during the spread pass
	overFetched    []string      // keys fetched more than twice
}

// rereadAfterJoin reads every key (warmed once each) twice more: first
// through all nodes in turn, as clients would; then through the new node
// alone, an edge that holds nothing, so every answer comes from the key's
// owner under the new set and every key that moved has reached the new
// node by the end. Nothing is hot (one request per key and pass), so an
// old node answering a key from its own store while not owning it
// (counted as a near-copy hit) is serving a copy the cluster no longer
// routes to it.
func (ce *clusterEnv) rereadAfterJoin(paths []string, old []*clusterNode, joined *clusterNode) joinReread {
	ce.t.Helper()
	nearHits := plain("shield_near_copy_hits_total")
	before := ce.sumOver(nearHits, old...)
	start := time.Now()
	var rr joinReread
	rr.spread = ce.sendAll(ce.nodes, paths, shareWorkers)
	rr.oldLocal = ce.sumOver(nearHits, old...) - before
	rr.direct = ce.sendAll([]*clusterNode{joined}, paths, shareWorkers)
	rr.took = time.Since(start)
	total, _ := ce.originFetches(paths)
	rr.fetched = total - int64(len(paths))
	byPath := ce.e.stats().ByPath
	for _, p := range paths {
		if c := byPath[p]; c > 2 {
			rr.overFetched = append(rr.overFetched, fmt.Sprintf("%s=%d", p, c))
		}
	}
	return rr
}

func (rr joinReread) String() string {
	return fmt.Sprintf("re-read %v: through all nodes %s, then through the new node %s; old nodes answered %v non-owned keys locally",
		rr.took.Round(time.Millisecond), rr.spread, rr.direct, rr.oldLocal)
}

// check fails t for any answer other than a 200 or a key fetched more
// than once after the join.
func (rr joinReread) check(t *testing.T) {
	t.Helper()
	for _, pass := range []struct {
		name  string
		tally *statusTally
	}{{"through all nodes", rr.spread}, {"through the new node", rr.direct}} {
		if bad := pass.tally.bad(); len(bad) > 0 {
			t.Errorf("re-reading %s after the join: answers other than 200 (%s): %s", pass.name, pass.tally, strings.Join(bad, "; "))
		}
	}
	if len(rr.overFetched) > 0 {
		t.Errorf("keys fetched more than once after the join: %.300s", strings.Join(rr.overFetched, " "))
	}
}

// TestClusterJoinReadThrough: with a long overlap, the keys a join moves
// are read through from their previous owner instead of the origin. Every
// moved key lands on the new node once, either way: read-through hits +
// origin re-fetches = the new node's entries, about a quarter of the keys.
func TestClusterJoinReadThrough(t *testing.T) {
	t.Parallel()
	const overlap = 30 * time.Second // far longer than the test's re-read
	ce := newClusterEnv(t, 3, withOverlap(overlap))
	paths := keyPaths("through", shareKeys)
	tally := ce.sendAll(ce.nodes, paths, shareWorkers)
	if bad := tally.bad(); len(bad) > 0 {
		t.Fatalf("warming %d keys: answers other than 200 (%s): %s", len(paths), tally, strings.Join(bad, "; "))
	}
	if fetched, _ := ce.originFetches(paths); fetched != shareKeys {
		t.Fatalf("warming: %d origin fetches for %d keys, want one each", fetched, shareKeys)
	}

	n4 := ce.addNode()
	joined := time.Now()
	converged := ce.waitConverged("after n4 joined", ce.nodes...)
	rtHit := labelled("shield_peer_read_through_total", map[string]string{"outcome": "hit"})
	rtMiss := labelled("shield_peer_read_through_total", map[string]string{"outcome": "miss"})
	hits, misses := -ce.sumOver(rtHit, ce.nodes...), -ce.sumOver(rtMiss, ce.nodes...)
	rr := ce.rereadAfterJoin(paths, ce.nodes[:3], n4)
	inside := time.Since(joined)
	hits += ce.sumOver(rtHit, ce.nodes...)
	misses += ce.sumOver(rtMiss, ce.nodes...)
	n4Entries := ce.each("shield_cache_entries", n4)[n4.id()]
	t.Logf("n4 joined, converged in %v; %s, ending %v after n4 was ready (overlap %v); "+
		"read-throughs meanwhile: hits %v, misses %v; origin re-fetches %d; n4 entries %v",
		converged.Round(time.Millisecond), rr, inside.Round(time.Millisecond), overlap,
		hits, misses, rr.fetched, n4Entries)
	if inside >= overlap {
		t.Fatalf("the re-read ended %v after the join, past the %v overlap: nothing measured", inside, overlap)
	}
	rr.check(t)
	if hits+float64(rr.fetched) != n4Entries {
		t.Errorf("read-through hits %v + origin re-fetches %d = %v, want n4's entries %v (each moved key arrives once)",
			hits, rr.fetched, hits+float64(rr.fetched), n4Entries)
	}
	if frac := n4Entries / shareKeys; frac < movedMin || frac > movedMax {
		t.Errorf("n4 took %v of %d keys (%.3f), want about a quarter, in [%.2f, %.2f]", n4Entries, shareKeys, frac, movedMin, movedMax)
	}
	if hits == 0 {
		t.Errorf("no moved key was read through from its previous owner inside the %v overlap (%v misses, %d origin re-fetches)",
			overlap, misses, rr.fetched)
	}
}
