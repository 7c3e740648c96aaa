package e2e

import (
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Where a departed owner's keys go: refetched by their new owner after a
// crash, handed over by the leaver after a graceful leave.

// TestClusterKilledOwnerRefetch adds to TestClusterOwnerKilled what
// happens once the survivors have converged: each key the killed node
// owned is a miss on its new owner (one origin fetch), then a hit there
// and through the other survivor; it is stored once, on the new owner
// only; every answer is a 200, and the survivors' generation changed.
func TestClusterKilledOwnerRefetch(t *testing.T) {
	t.Parallel()
	ce := newClusterEnv(t, 3)
	a, b, c := ce.nodes[0], ce.nodes[1], ce.nodes[2]
	survivors := []*clusterNode{a, b}
	paths := keyPaths("refetch", 30)
	owner := ce.owners(a, paths)
	var owned []string
	for _, p := range paths {
		if owner[p] == c.id() {
			owned = append(owned, p)
		}
	}
	if len(owned) == 0 {
		t.Fatalf("%s owns none of %d keys: %v", c.id(), len(paths), owner)
	}
	changes := ce.each("shield_cluster_generation_changes_total", survivors...)
	entries := ce.each("shield_cache_entries", survivors...)

	killed := time.Now()
	c.proc.signal(t, syscall.SIGKILL)
	c.proc.wait(t)
	// No request for the dead node's keys until the survivors agree: a
	// request in the gap is served locally by its edge (and stored
	// there), which TestClusterOwnerKilled covers.
	took := ce.waitConverged("survivors after the kill", survivors...)

	tally := newStatusTally()
	took2 := map[string]int{} // keys each survivor took over
	for i, p := range owned {
		edge, other := survivors[i%2], survivors[1-i%2]
		before := ce.scrape(edge)
		r, err := ce.get(edge, p)
		tally.add(edge.id()+" "+p, r, err)
		if err != nil {
			t.Fatal(err)
		}
		wantForwarded(t, p+" first request after the kill, via "+edge.id(), r)
		if n := decode(t, r).N; n != 2 {
			t.Errorf("%s via %s: origin count n=%d, want 2 (fetched again)", p, edge.id(), n)
		}
		newOwner := edge
		if ce.scrape(edge).peerOK(other.id()) > before.peerOK(other.id()) {
			newOwner = other
		}
		took2[newOwner.id()]++
		for _, n := range []*clusterNode{newOwner, edge, other} {
			r, err := ce.get(n, p)
			tally.add(n.id()+" "+p, r, err)
			if err != nil {
				t.Fatal(err)
			}
			wantHit(t, p+" again via "+n.id()+" (new owner "+newOwner.id()+")", r)
			if n := decode(t, r).N; n != 2 {
				t.Errorf("%s hit via %s: n=%d, want 2", p, newOwner.id(), n)
			}
		}
	}
	fetches, _ := ce.originFetches(owned)
	after := ce.each("shield_cache_entries", survivors...)
	gained := map[string]float64{}
	for _, n := range survivors {
		gained[n.id()] = after[n.id()] - entries[n.id()]
	}
	now := ce.each("shield_cluster_generation_changes_total", survivors...)
	t.Logf("%s owned %d of %d keys; killed → survivors converged in %v (%v after the kill); "+
		"afterwards %d requests: %s; origin fetches for its keys %d (2 each wanted); taken over by %v; entries gained %v; "+
		"generation changes %v → %v",
		c.id(), len(owned), len(paths), took.Round(time.Millisecond), time.Since(killed).Round(time.Millisecond),
		tally.total(), tally, fetches, took2, gained, changes, now)
	if bad := tally.bad(); len(bad) > 0 {
		t.Errorf("after convergence: %s", strings.Join(bad, "; "))
	}
	if fetches != int64(2*len(owned)) {
		t.Errorf("%d origin fetches for %d keys, want 2 each (warm-up, then once on the new owner)", fetches, len(owned))
	}
	for _, n := range survivors {
		if gained[n.id()] != float64(took2[n.id()]) {
			t.Errorf("%s gained %v entries, want the %d keys it took over (stored on the owner only)",
				n.id(), gained[n.id()], took2[n.id()])
		}
		if now[n.id()] <= changes[n.id()] {
			t.Errorf("%s: shield_cluster_generation_changes_total %v → %v, want it to grow", n.id(), changes[n.id()], now[n.id()])
		}
	}
}

// Hand-off load: enough requests per key, through the owner, that its
// sampled hot-key table (1 in 16 requests) surely tracks every one.
const (
	handoffKeys    = 10
	handoffPerKey  = 2000
	handoffWorkers = 32
)

// handedOff is the leaver's log line after its hand-off.
var handedOff = regexp.MustCompile(`handed off hot entries.*entries[=":]+(\d+)`)

// TestClusterHandoff: a node made to serve ~10 keys hot and then sent
// SIGTERM (overlap 1s) pushes them to their new owners before it exits 0:
// afterwards each is a hit through both survivors, the origin sees no
// new fetch, and the survivors count the entries received.
func TestClusterHandoff(t *testing.T) {
	t.Parallel()
	ce := newClusterEnv(t, 3, withOverlap(time.Second))
	a, b, c := ce.nodes[0], ce.nodes[1], ce.nodes[2]
	survivors := []*clusterNode{a, b}
	cands := keyPaths("handoff", 4*handoffKeys)
	owner := ce.owners(c, cands) // also warms each key on its owner
	var hot []string
	for _, p := range cands {
		if owner[p] == c.id() && len(hot) < handoffKeys {
			hot = append(hot, p)
		}
	}
	if len(hot) < handoffKeys/2 {
		t.Fatalf("%s owns only %d of %d keys: %v", c.id(), len(hot), len(cands), owner)
	}

	start := time.Now()
	tally := ce.sendAll([]*clusterNode{c}, repeatPaths(hot, handoffPerKey), handoffWorkers)
	loadTook := time.Since(start)
	if bad := tally.bad(); len(bad) > 0 {
		t.Fatalf("hot load: answers other than 200 (%s): %s", tally, strings.Join(bad, "; "))
	}
	fetchedBefore, extra := ce.originFetches(hot)
	if len(extra) > 0 {
		t.Fatalf("hot load: keys not fetched once: %s", strings.Join(extra, " "))
	}
	receivedBefore := ce.sumOver(plain("shield_handoff_entries_received_total"), survivors...)

	left := time.Now()
	c.proc.terminate(t)
	converged := ce.waitConverged("after "+c.id()+" left", survivors...)
	code := c.proc.wait(t)
	exited := time.Since(left)
	sent := "?"
	if m := handedOff.FindStringSubmatch(c.proc.stdout.String() + c.proc.stderr.String()); m != nil {
		sent = m[1]
	}
	got := ce.sumOver(plain("shield_handoff_entries_received_total"), survivors...) - receivedBefore

	hits := newStatusTally()
	for _, p := range hot {
		for _, n := range survivors {
			r, err := ce.get(n, p)
			hits.add(n.id()+" "+p, r, err)
			if err != nil {
				t.Fatal(err)
			}
			wantHit(t, p+" via "+n.id()+" after the hand-off", r)
		}
	}
	fetchedAfter, _ := ce.originFetches(hot)
	t.Logf("%d hot keys owned by %s, %d requests each through it in %v (%s); SIGTERM → survivors converged in %v, "+
		"%s exited %d after %v, logged %s entries handed off; survivors received %v; then %s; origin fetches %d → %d",
		len(hot), c.id(), handoffPerKey, loadTook.Round(time.Millisecond), tally, converged.Round(time.Millisecond),
		c.id(), code, exited.Round(time.Millisecond), sent, got, hits, fetchedBefore, fetchedAfter)
	if code != 0 {
		t.Errorf("%s exited %d after SIGTERM, want 0", c.id(), code)
	}
	if got == 0 {
		t.Errorf("survivors received no hand-off entry (shield_handoff_entries_received_total unchanged)")
	}
	if fetchedAfter != fetchedBefore {
		t.Errorf("origin fetches for the hot keys went %d → %d: the new owners fetched instead of taking the hand-off",
			fetchedBefore, fetchedAfter)
	}
	if bad := hits.bad(); len(bad) > 0 {
		t.Errorf("after the hand-off: %s", strings.Join(bad, "; "))
	}
}
