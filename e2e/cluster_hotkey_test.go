package e2e

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"
)

// A hot key at the edge, and a purge that must reach every copy of it.
const (
	hotRequests = 4000 // through one edge, for one key owned elsewhere
	hotWorkers  = 32
)

// TestClusterNearCopyAndPurge: one key owned by n2 and hammered through
// n1 becomes hot there: n1 keeps near copies and answers most requests
// itself, so n2 sees far fewer forwards than n1 answered. The near copies
// live up to hot_key_max_age (10s here, so one is surely still held when
// the purge comes). Then a purge by URL on n3 — which holds no copy —
// reaches the owner and n1's near copy: the next request through every
// node gets the origin's next answer, fetched once.
func TestClusterNearCopyAndPurge(t *testing.T) {
	t.Parallel()
	ce := newClusterEnv(t, 3, withHotKeyMaxAge(10*time.Second))
	n1, n2, n3 := ce.nodes[0], ce.nodes[1], ce.nodes[2]
	cands := keyPaths("hot", 12)
	owner := ce.owners(n1, cands) // warms each key on its owner
	key := ""
	for _, p := range cands {
		if owner[p] == n2.id() {
			key = p
			break
		}
	}
	if key == "" {
		t.Fatalf("%s owns none of %d keys: %v", n2.id(), len(cands), owner)
	}
	allRequests := labelled("shield_requests_total", nil)
	nearHits := plain("shield_near_copy_hits_total")
	nearStored := plain("shield_near_copies_stored_total")
	before1, before2 := ce.scrape(n1), ce.scrape(n2)

	tally := ce.sendAll([]*clusterNode{n1}, repeatPaths([]string{key}, hotRequests), hotWorkers)
	after1, after2 := ce.scrape(n1), ce.scrape(n2)
	hits := nearHits(after1) - nearHits(before1)
	stored := nearStored(after1) - nearStored(before1)
	forwards := after1.peerOK(n2.id()) - before1.peerOK(n2.id())
	ownerSaw := allRequests(after2) - allRequests(before2)
	t.Logf("%s (owner %s) × %d through %s, %d concurrent: %s; %s near copies stored %v, near-copy hits %v, forwards to %s %v; "+
		"%s answered %v requests; origin fetches %d",
		key, n2.id(), hotRequests, n1.id(), hotWorkers, tally, n1.id(), stored, hits, n2.id(), forwards,
		n2.id(), ownerSaw, ce.e.stats().ByPath[key])
	if bad := tally.bad(); len(bad) > 0 {
		t.Errorf("hot key: answers other than 200 (%s): %v", tally, bad)
	}
	if hits == 0 || stored == 0 {
		t.Errorf("%s: near copies stored %v, hits %v, want both > 0 for a key asked %d times", n1.id(), stored, hits, hotRequests)
	}
	if ownerSaw*2 > hotRequests {
		t.Errorf("owner %s answered %v of %d requests for the hot key, want far fewer (at most half): near copies did not absorb the load",
			n2.id(), ownerSaw, hotRequests)
	}
	ce.e.wantOriginCount(key, 1)

	// n1 holds a near copy now: one more request through it is a local hit.
	r, err := ce.get(n1, key)
	if err != nil {
		t.Fatal(err)
	}
	wantHit(t, key+" via "+n1.id()+" before the purge", r)
	if got := nearHits(ce.scrape(n1)) - nearHits(after1); got != 1 {
		t.Fatalf("%s via %s before the purge: near-copy hits +%v, want +1: no near copy held, the purge would prove nothing",
			key, n1.id(), got)
	}
	if n := decode(t, r).N; n != 1 {
		t.Fatalf("%s before the purge: n=%d, want 1", key, n)
	}

	purge := "http://" + clusterHost + key
	pr, err := doHTTP(ce.e.client, http.MethodPost, "http://"+n3.cfg.Admin+"/purge?url="+url.QueryEscape(purge))
	if err != nil {
		t.Fatal(err)
	}
	var answer struct {
		Purge struct{ Kind, Target string }
		Peers map[string]int
	}
	if pr.status != http.StatusOK || json.Unmarshal(pr.body, &answer) != nil {
		t.Fatalf("POST /purge on %s: %v, want 200 with JSON", n3.id(), pr)
	}
	t.Logf("purge %s on %s: %s", purge, n3.id(), pr.body)
	for _, n := range []*clusterNode{n1, n2} {
		if st := answer.Peers[n.id()]; st != http.StatusOK {
			t.Errorf("purge answer: peer %s status %d, want 200 (answer %s)", n.id(), st, pr.body)
		}
	}

	for i, n := range []*clusterNode{n1, n2, n3} {
		r, err := ce.get(n, key)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			wantForwarded(t, key+" via "+n.id()+" first after the purge", r)
		}
		if got := decode(t, r).N; got != 2 {
			t.Errorf("%s via %s after the purge: n=%d, want 2 (the origin's next answer, not the purged one) — %v",
				key, n.id(), got, r)
		}
	}
	ce.e.wantOriginCount(key, 2)
}
