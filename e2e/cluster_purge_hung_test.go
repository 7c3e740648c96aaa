package e2e

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shield-proxy/shield/config"
)

// Purges with one peer hung.
const (
	hungPurges   = 120 // URL purges measured while one peer is stopped
	hungKeysHeld = 6   // keys the hung peer owns and holds, purged during the hang
)

// TestClusterPurgeHungPeer: a peer whose process is stopped (SIGSTOP: it
// holds its connections and answers nothing — a real hang) must not hold
// purges up. n3 is stopped; then hungPurges URL purges of keys owned by
// n1 and n2 are issued on n1 and n2 in turn. Each POST /purge answers
// fast (p99 under 1s; it used to wait the 5s peer timeout), names n3 as
// pending and the other live node as having it, and the purged copy is
// gone from both live nodes when it answers. The latency from POST to
// "visible on both live nodes" is logged (p50/p99). Keys n3 owns and
// holds are purged during the hang too; after SIGCONT n3 must never
// serve one of them — neither at once (it does not know yet what it
// missed) nor once it has synced (it got the purges, not just a refetch).
// Consul's check is 5s (timeout 5s), so n3 stays in the view throughout:
// delivery, not membership, is what is tested.
func TestClusterPurgeHungPeer(t *testing.T) {
	t.Parallel()
	ce := newClusterEnv(t, 3, func(c *clusterNodeConfig) {
		c.Edit = func(cfg *config.Config) { cfg.Cluster.Consul.CheckInterval = 5 * time.Second }
	})
	n1, n2, n3 := ce.nodes[0], ce.nodes[1], ce.nodes[2]
	cands := keyPaths("hung", 3*hungPurges)
	owner := ce.owners(n1, cands) // warms each key on its owner
	var live, held []string
	for _, p := range cands {
		switch owner[p] {
		case n3.id():
			held = append(held, p)
		default:
			live = append(live, p)
		}
	}
	if len(live) < hungPurges || len(held) < 2*hungKeysHeld {
		t.Fatalf("of %d keys %d are owned by n1/n2 (want ≥ %d) and %d by n3 (want ≥ %d)",
			len(cands), len(live), hungPurges, len(held), 2*hungKeysHeld)
	}
	live, held = live[:hungPurges], held[:2*hungKeysHeld]
	for _, p := range held {
		r, err := ce.get(n3, p)
		if err != nil || !parseCacheStatus(r.header).hit || decode(t, r).N != 1 {
			t.Fatalf("%s on its owner %s before the hang: %v %v, want a hit with n=1", p, n3.id(), r, err)
		}
	}

	n3.proc.signal(t, syscall.SIGSTOP)
	stopped := true
	resume := func() {
		if stopped {
			n3.proc.signal(t, syscall.SIGCONT)
			stopped = false
		}
	}
	t.Cleanup(resume) // a failing test must not leave it stopped

	purge := func(via *clusterNode, key string) (purgeAnswer, time.Duration) {
		t.Helper()
		target := "http://" + clusterHost + key
		start := time.Now()
		r, err := doHTTP(ce.e.client, http.MethodPost, "http://"+via.cfg.Admin+"/purge?url="+url.QueryEscape(target))
		took := time.Since(start)
		var a purgeAnswer
		if err != nil || r.status != http.StatusOK || json.Unmarshal(r.body, &a) != nil {
			t.Fatalf("POST /purge %s on %s: %v %v, want 200 with JSON", key, via.id(), r, err)
		}
		return a, took
	}
	var postTimes, visibleTimes []time.Duration
	hangStart := time.Now()
	for i, key := range live {
		via, other := n1, n2
		if i%2 == 1 {
			via, other = n2, n1
		}
		start := time.Now()
		a, took := purge(via, key)
		postTimes = append(postTimes, took)
		if !slices.Contains(a.Pending, n3.id()) || a.Peers[other.id()] != http.StatusOK || slices.Contains(a.Pending, other.id()) {
			t.Fatalf("purge %d of %s on %s: answer %+v, want %s pending and %s with status 200", i, key, via.id(), a, n3.id(), other.id())
		}
		// The answer means the live nodes have it: the first GET through
		// each already misses the purged copy (n=1).
		for _, n := range []*clusterNode{via, other} {
			r, err := ce.get(n, key)
			if err != nil || r.status != http.StatusOK {
				t.Fatalf("%s via %s after its purge: %v %v", key, n.id(), r, err)
			}
			if got := decode(t, r).N; got < 2 {
				t.Fatalf("%s via %s right after POST /purge answered: n=%d (%v), want ≥ 2: the purged copy was served", key, n.id(), got, r)
			}
		}
		visibleTimes = append(visibleTimes, time.Since(start))
	}
	// And the keys the hung peer holds.
	for i, key := range held {
		a, _ := purge([]*clusterNode{n1, n2}[i%2], key)
		if !slices.Contains(a.Pending, n3.id()) {
			t.Fatalf("purge of %s (held by the hung %s): answer %+v, want it pending", key, n3.id(), a)
		}
	}
	hung := time.Since(hangStart)
	p50, p99 := quantile(postTimes, 0.50), quantile(postTimes, 0.99)
	v50, v99 := quantile(visibleTimes, 0.50), quantile(visibleTimes, 0.99)
	t.Logf("%d URL purges, 3 nodes, %s stopped (%v): POST /purge answered p50 %v p99 %v max %v; POST until visible on both live nodes p50 %v p99 %v max %v",
		len(live), n3.id(), hung.Round(time.Millisecond), p50, p99, slices.Max(postTimes), v50, v99, slices.Max(visibleTimes))
	if p99 >= time.Second {
		t.Errorf("POST /purge with a hung peer: p99 %v, want well under 1s", p99)
	}
	m := ce.scrape(n1)
	if v, _ := m.value("shield_purge_answered_pending_total"); v < float64(len(live)/2) {
		t.Errorf("%s: shield_purge_answered_pending_total %v, want ≥ %d", n1.id(), v, len(live)/2)
	}
	if v, _ := m.value("shield_purge_queue_length"); v == 0 {
		t.Errorf("%s: shield_purge_queue_length 0 while %s is stopped, want its purges queued", n1.id(), n3.id())
	}

	resume()
	// At once: n3 does not know what it missed; it must not serve a copy
	// from before the purges (n=1), however soon it is asked.
	for _, key := range held[:hungKeysHeld] {
		r, err := ce.get(n3, key)
		if err != nil || r.status != http.StatusOK {
			t.Fatalf("%s via %s just after SIGCONT: %v %v", key, n3.id(), r, err)
		}
		if got := decode(t, r).N; got < 2 {
			t.Errorf("%s via %s just after SIGCONT: n=%d (%v), want ≥ 2: the purged copy was served", key, n3.id(), got, r)
		}
	}
	// Once it has noticed it did not run and resynced, its cache is open
	// again and it has the purges themselves: the keys not asked for
	// since are misses (fetched anew, n ≥ 2), then hits.
	eventually(t, n3.id()+" noticed it did not run and synced again", func() bool {
		if !strings.Contains(n3.proc.stderr.String(), "process did not run") {
			return false
		}
		v, ok := ce.scrape(n3).value("shield_purge_sync_pending")
		return ok && v == 0
	})
	if v, _ := ce.scrape(n3).value("shield_process_stalls_total"); v < 1 {
		t.Errorf("%s: shield_process_stalls_total = %v after its stop, want ≥ 1", n3.id(), v)
	}
	for _, key := range held[hungKeysHeld:] {
		r, err := ce.get(n3, key)
		if err != nil || r.status != http.StatusOK {
			t.Fatalf("%s via %s after it synced: %v %v", key, n3.id(), r, err)
		}
		if got := decode(t, r).N; got < 2 {
			t.Errorf("%s via %s after it synced: n=%d (%v), want ≥ 2: the purge did not reach it", key, n3.id(), got, r)
		}
		if r, err := ce.get(n3, key); err != nil || !parseCacheStatus(r.header).hit {
			t.Errorf("%s via %s asked again: %v %v, want a hit (its cache open again)", key, n3.id(), r, err)
		}
	}
	eventually(t, "n1's and n2's purge queues drained", func() bool {
		a, _ := ce.scrape(n1).value("shield_purge_queue_length")
		b, _ := ce.scrape(n2).value("shield_purge_queue_length")
		return a == 0 && b == 0
	})
}

// quantile is the q-quantile (nearest rank) of ds.
func quantile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}
