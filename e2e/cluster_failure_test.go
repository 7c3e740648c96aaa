package e2e

import (
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestClusterOwnerKilled: after kill -9 of one node, requests for the
// keys it owned, sent to the survivors, are all answered 200 — while
// Consul still lists the dead node (forwards fail fast and are served
// locally) and after the survivors converge on the two of them.
func TestClusterOwnerKilled(t *testing.T) {
	t.Parallel()
	ce := newClusterEnv(t, 3)
	a, b, c := ce.nodes[0], ce.nodes[1], ce.nodes[2]
	paths := keyPaths("owned", 30)
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
	survivors := []*clusterNode{a, b}
	round := func(tally *statusTally) {
		for _, p := range owned {
			for _, n := range survivors {
				r, err := ce.get(n, p)
				tally.add(n.id()+" "+p, r, err)
			}
		}
	}

	killed := time.Now()
	c.proc.signal(t, syscall.SIGKILL)
	c.proc.wait(t)
	gap := newStatusTally()
	rounds := 0
	for {
		round(gap)
		rounds++
		if len(ce.lagging(survivors...)) == 0 {
			break
		}
		if time.Since(killed) > clusterConverge {
			t.Fatalf("survivors did not converge within %v of the kill: %s (gap answers: %s)",
				clusterConverge, strings.Join(ce.lagging(survivors...), "; "), gap)
		}
	}
	gapTook := time.Since(killed)
	after := newStatusTally()
	round(after)

	forwardErrors := 0.0
	for _, n := range survivors {
		forwardErrors += ce.scrape(n).sum("shield_peer_requests_total", map[string]string{"peer": c.id(), "outcome": "error"})
	}
	fetches, _ := ce.originFetches(owned)
	t.Logf("%s owned %d of %d keys; kill → survivors converged in %v: %d requests in %d rounds during the gap (%s); "+
		"%d after (%s); failed forwards to %s: %v; origin fetches for its keys: %d",
		c.id(), len(owned), len(paths), gapTook.Round(time.Millisecond), gap.total(), rounds, gap,
		after.total(), after, c.id(), forwardErrors, fetches)
	if forwardErrors == 0 {
		t.Errorf("no forward to the dead %s failed: the survivors never routed to it, so the gap before Consul noticed was not exercised", c.id())
	}
	if bad := gap.bad(); len(bad) > 0 {
		t.Errorf("during the gap: %s", strings.Join(bad, "; "))
	}
	if bad := after.bad(); len(bad) > 0 {
		t.Errorf("after convergence: %s", strings.Join(bad, "; "))
	}
}

// TestClusterConsulLost: with the Consul agent killed, every node reports
// Consul unreachable but keeps its last known peer set, and keeps
// serving: hits stay hits, and a cold key is still fetched once for the
// whole cluster.
func TestClusterConsulLost(t *testing.T) {
	t.Parallel()
	ce := newClusterEnv(t, 3)
	gen := generationGauge(expectedGeneration(t, ce.nodes...))
	warm := keyPaths("warm", 10, "delay", "100")
	ce.wantOneFetchPerKey("warm-up", ce.nodes, 5, warm)
	changes := map[string]float64{}
	for _, n := range ce.nodes {
		changes[n.id()], _ = ce.scrape(n).value("shield_cluster_generation_changes_total")
	}

	killed := time.Now()
	ce.consul.kill(t)
	during := newStatusTally()
	for {
		for i, n := range ce.nodes {
			p := warm[(i+during.total())%len(warm)]
			r, err := ce.get(n, p)
			during.add(n.id()+" "+p, r, err)
		}
		unreachable := 0
		for _, n := range ce.nodes {
			if v, ok := ce.scrape(n).value("shield_consul_reachable"); ok && v == 0 {
				unreachable++
			}
		}
		if unreachable == len(ce.nodes) {
			break
		}
		if time.Since(killed) > clusterConverge {
			t.Fatalf("only %d of %d nodes report shield_consul_reachable 0 %v after Consul was killed",
				unreachable, len(ce.nodes), clusterConverge)
		}
		time.Sleep(clusterPollEvery)
	}
	t.Logf("all nodes report Consul unreachable %v after the kill; %d requests meanwhile: %s",
		time.Since(killed).Round(time.Millisecond), during.total(), during)
	if bad := during.bad(); len(bad) > 0 {
		t.Errorf("while Consul went away: %s", strings.Join(bad, "; "))
	}

	for _, p := range warm {
		for _, n := range ce.nodes {
			r, err := ce.get(n, p)
			if err != nil {
				t.Fatal(err)
			}
			wantHit(t, p+" via "+n.id()+" without Consul", r)
		}
	}
	ce.wantOneFetchPerKey("cold keys without Consul", ce.nodes, 10, keyPaths("cold", 10, "delay", "100"))

	for _, n := range ce.nodes {
		m := ce.scrape(n)
		peers, _ := m.value("shield_cluster_peers")
		g, _ := m.value("shield_cluster_generation")
		ch, _ := m.value("shield_cluster_generation_changes_total")
		if peers != 3 || g != gen || ch != changes[n.id()] {
			t.Errorf("%s without Consul: peers=%v generation=%v generation changes %v → %v; want the last known set kept (3, %v, unchanged)",
				n.id(), peers, g, changes[n.id()], ch, gen)
		}
	}
}

// TestClusterGracefulLeave: a node sent SIGTERM deregisters, serves
// through the overlap and exits 0; the others converge on the remaining
// two, and requests to them meanwhile (including for the leaver's keys)
// are all answered 200.
func TestClusterGracefulLeave(t *testing.T) {
	t.Parallel()
	ce := newClusterEnv(t, 3)
	a, b, c := ce.nodes[0], ce.nodes[1], ce.nodes[2]
	paths := keyPaths("leave", 30)
	owner := ce.owners(a, paths)
	owned := 0
	for _, p := range paths {
		if owner[p] == c.id() {
			owned++
		}
	}
	survivors := []*clusterNode{a, b}

	// Load on the survivors for the whole leave: 4 workers, each asking
	// every key of both survivors in turn, until stopped.
	tally := newStatusTally()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	stopLoad := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopLoad) // also on a Fatal below
	for w := range 4 {
		wg.Go(func() {
			for i := w; ; i += 4 {
				select {
				case <-stop:
					return
				default:
				}
				n, p := survivors[i%2], paths[(i/2)%len(paths)]
				r, err := ce.get(n, p)
				tally.add(n.id()+" "+p, r, err)
			}
		})
	}

	left := time.Now()
	c.proc.terminate(t)
	took := ce.waitConverged("after n3 left", survivors...)
	code := c.proc.wait(t)
	exited := time.Since(left)
	stopLoad()

	forwardErrors := 0.0
	for _, n := range survivors {
		forwardErrors += ce.scrape(n).sum("shield_peer_requests_total", map[string]string{"peer": c.id(), "outcome": "error"})
	}
	t.Logf("%s owned %d of %d keys; after SIGTERM: survivors converged in %v, %s exited %d after %v; "+
		"%d requests to the survivors meanwhile: %s; failed forwards to %s: %v",
		c.id(), owned, len(paths), took.Round(time.Millisecond), c.id(), code, exited.Round(time.Millisecond),
		tally.total(), tally, c.id(), forwardErrors)
	if code != 0 {
		t.Errorf("%s exited %d after SIGTERM, want 0", c.id(), code)
	}
	if tally.total() == 0 {
		t.Errorf("no request was made during the leave")
	}
	if bad := tally.bad(); len(bad) > 0 {
		t.Errorf("during the leave: %s", strings.Join(bad, "; "))
	}

	// The survivors route nothing to the departed node any more.
	before := map[string]float64{}
	for _, n := range survivors {
		before[n.id()] = ce.scrape(n).sum("shield_peer_requests_total", map[string]string{"peer": c.id()})
	}
	for _, p := range paths {
		for _, n := range survivors {
			if r, err := ce.get(n, p); err != nil || r.status != http.StatusOK {
				t.Errorf("%s via %s after the leave: %v %v", p, n.id(), r, err)
			}
		}
	}
	for _, n := range survivors {
		if now := ce.scrape(n).sum("shield_peer_requests_total", map[string]string{"peer": c.id()}); now != before[n.id()] {
			t.Errorf("%s still forwards to %s after converging: %v → %v", n.id(), c.id(), before[n.id()], now)
		}
	}
}
