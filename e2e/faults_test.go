package e2e

// Fault tests with real processes: an origin that fails in each way the
// demo origin can (hang, reset, dribble, garbage, a huge body, 5xx), a peer
// that hangs (SIGSTOP) or dies (kill -9) while requests flow and comes
// back, Consul restarted under load, a node killed and restarted under
// load. Each logs a figures table (see faultTally) and fails on any lost
// answer: no answer, a wrong body, or a 5xx for a key with a stored copy.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// faultCC makes every stored copy stale at once (max-age=0) and usable for
// five minutes when the origin fails, so each request after the warm-up
// goes to the origin and meets the fault with a stored copy in hand.
const faultCC = "public, max-age=0, stale-if-error=300"

// TestFaultOrigin: for each origin fault, keys warmed before the fault are
// answered from their stored copy (stale) or, for a huge body, streamed
// through; cold keys get a 5xx (or the streamed body); nothing is lost;
// shield lets go of the origin (its in-flight gauge returns to 0); shield's
// memory stays bounded; and once the fault ends, keys are fetched fresh
// again.
func TestFaultOrigin(t *testing.T) {
	t.Parallel()
	tests := []struct {
		mode string
		// storedVerdict is what a stored key must get: a stale stand-in,
		// or for huge (a 200 from the origin, too large to store) the
		// streamed answer.
		storedVerdict string
		coldVerdict   string
	}{
		{"hang", "stale", "5xx"},
		{"reset", "stale", "5xx"},
		{"slow", "stale", "5xx"},
		{"garbage", "stale", "5xx"},
		{"error", "stale", "5xx"},
		{"huge", "ok", "ok"},
	}
	const (
		warmKeys   = 8
		coldKeys   = 4
		rounds     = 3
		concurrent = 3
	)
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			t.Parallel()
			e := newProtectEnv(t, protectConfig{
				Timeout: "1s",
				Breaker: "consecutive_failures: 5, open_for: 1s",
			})
			base := "/fault-" + tt.mode
			warm := keyPaths(strings.TrimPrefix(base, "/")+"/warm", warmKeys, "cc", faultCC)
			cold := keyPaths(strings.TrimPrefix(base, "/")+"/cold", coldKeys, "cc", faultCC)
			for _, p := range warm {
				if r := e.get(p); r.status != http.StatusOK || !strings.Contains(r.header.Get("Cache-Status"), "stored") {
					t.Fatalf("warm %s: %v, want 200 stored", p, r)
				}
			}

			e.fault(tt.mode)
			tally := newFaultTally(tt.mode)
			verdicts := map[string]int{}
			var mu sync.Mutex
			for range rounds {
				var wg sync.WaitGroup
				for _, set := range []struct {
					paths  []string
					stored bool
					want   string
				}{{warm, true, tt.storedVerdict}, {cold, false, tt.coldVerdict}} {
					for _, p := range set.paths {
						for range concurrent {
							wg.Go(func() {
								start := time.Now()
								r, err := faultGet(e.client, "", "http://"+e.cfg.Listen+p, "")
								tally.add("shield", p, "", set.stored, r, err, time.Since(start))
								v := faultVerdict(p, "", r, err)
								mu.Lock()
								defer mu.Unlock()
								if v != set.want {
									verdicts[fmt.Sprintf("stored=%v got %s want %s", set.stored, v, set.want)]++
								}
							})
						}
					}
				}
				wg.Wait()
			}
			t.Log(faultTable("origin fault "+tt.mode+" (shield timeout 1s):", tally))
			tally.check(t, false)
			for what, n := range verdicts {
				t.Errorf("mode %s: %d answers: %s", tt.mode, n, what)
			}

			// shield let go of every origin request, and its memory
			// stayed bounded even by a body announced as 1 TiB.
			e.awaitOrigin("origin in-flight back to 0", func(s originStats) bool { return s.InFlight == 0 })
			const limit = 32<<20*12/10 + 64<<20
			if rss := soakRSS(t, e.shield.cmd.Process.Pid); rss > limit {
				t.Errorf("mode %s: shield RSS %d MiB, above cache.size×1.2+64MiB = %d MiB", tt.mode, rss>>20, limit>>20)
			}

			// Recovery: the breaker closes (open_for 1s) and a cold key is
			// fetched fresh, then every warm key too.
			e.fault("ok")
			fresh := func(p string) func(result) bool {
				return func(r result) bool {
					return r.status == http.StatusOK && faultBodyNames(p, r.body) &&
						strings.Contains(r.header.Get("Cache-Status"), "fwd-status=200")
				}
			}
			probe := target(base+"/after", "cc", faultCC)
			e.pollUntil(probe, 100*time.Millisecond, startTimeout, "a fresh answer after the fault", fresh(probe))
			for _, p := range warm {
				if r := e.get(p); !fresh(p)(r) {
					t.Errorf("after the fault: %s = %v, want a fresh 200", p, r)
				}
			}
		})
	}
}

// faultClusterKeys are the paths of the peer fault tests: a short origin
// delay keeps requests in flight on their owner when it is stopped or
// killed.
func faultClusterKeys(prefix string, n int) []string {
	return keyPaths(prefix, n, "cc", faultCC, "delay", "150")
}

// TestFaultPeerHang: the owner of some keys is frozen (SIGSTOP) while
// requests for all keys flow to the other two nodes: every request is
// answered 200 with its own body (forwards to the frozen node time out and
// fall back to a local fetch), Consul drops the frozen node, and after
// SIGCONT it rejoins and answers again.
func TestFaultPeerHang(t *testing.T) {
	t.Parallel()
	ce := newClusterEnv(t, 3)
	a, b, c := ce.nodes[0], ce.nodes[1], ce.nodes[2]
	paths := faultClusterKeys("peer-hang", 24)
	owner := ce.owners(a, paths)
	if len(faultOwned(owner, paths, c.id())) == 0 {
		t.Fatalf("%s owns none of %d keys: %v", c.id(), len(paths), owner)
	}
	survivors := []*clusterNode{a, b}

	load := startFaultLoad(t, ce.e.client, 8, faultDefaultLimit, newFaultTally("before"), clusterTargets(ce.nodes, paths, true))
	before := load.tally.Load()
	load.waitSent(t, 100)
	load.setTargets(clusterTargets(survivors, paths, true))
	load.waitIdle(t, c.id())

	frozen := load.phase(c.id() + " frozen (SIGSTOP)")
	c.proc.signal(t, syscall.SIGSTOP)
	t.Cleanup(func() { _ = c.proc.cmd.Process.Signal(syscall.SIGCONT) }) // before the kill at cleanup
	took := ce.waitConverged(c.id()+" frozen", survivors...)
	load.waitSent(t, 100)

	thawed := load.phase(c.id() + " thawed (SIGCONT), rejoining")
	c.proc.signal(t, syscall.SIGCONT)
	rejoin := ce.waitConverged(c.id()+" thawed", ce.nodes...)
	load.setTargets(clusterTargets(ce.nodes, paths, true))
	after := load.phase("after rejoin")
	load.waitSent(t, 100)
	load.halt()

	t.Log(faultTable(fmt.Sprintf("peer %s frozen: survivors converged in %v, rejoined %v after SIGCONT:",
		c.id(), took.Round(time.Millisecond), rejoin.Round(time.Millisecond)), before, frozen, thawed, after))
	for _, f := range []*faultTally{before, frozen, thawed, after} {
		f.check(t, true)
	}
}

// TestFaultPeerKilledAndRestarted: the owner of some keys is killed -9
// while requests to it are in flight, requests go on to the other two;
// then it is restarted on the same config and takes its share back. No
// request to a live node is lost, none gets a 5xx (the origin is up).
func TestFaultPeerKilledAndRestarted(t *testing.T) {
	t.Parallel()
	ce := newClusterEnv(t, 3)
	a, b, c := ce.nodes[0], ce.nodes[1], ce.nodes[2]
	paths := faultClusterKeys("peer-kill", 24)
	owner := ce.owners(a, paths)
	owned := faultOwned(owner, paths, c.id())
	if len(owned) == 0 {
		t.Fatalf("%s owns none of %d keys: %v", c.id(), len(paths), owner)
	}
	survivors := []*clusterNode{a, b}

	// Clients of the survivors ask mostly for c's keys, so forwards are
	// in flight on c at the kill.
	load := startFaultLoad(t, ce.e.client, 12, faultDefaultLimit, newFaultTally("before"),
		append(clusterTargets(survivors, owned, true), clusterTargets(ce.nodes, paths, true)...))
	before := load.tally.Load()
	load.waitSent(t, 100)
	forwardedBefore := 0.0
	for _, n := range survivors {
		forwardedBefore += ce.scrape(n).sum("shield_peer_requests_total", map[string]string{"peer": c.id()})
	}

	// Requests already sent to c itself die with it: they are the
	// clients' loss, not shield's, so c leaves the targets first.
	load.setTargets(append(clusterTargets(survivors, owned, true), clusterTargets(survivors, paths, true)...))
	load.waitIdle(t, c.id())
	killed := load.phase(c.id() + " killed -9")
	c.proc.signal(t, syscall.SIGKILL)
	c.proc.wait(t)
	took := ce.waitConverged(c.id()+" killed", survivors...)
	load.waitSent(t, 100)

	restarted := load.phase(c.id() + " restarted")
	c.faultRestart(t)
	rejoin := ce.waitConverged(c.id()+" restarted", ce.nodes...)
	load.setTargets(clusterTargets(ce.nodes, paths, true))
	after := load.phase("after rejoin")
	load.waitSent(t, 100)
	load.halt()

	forwardErrors := 0.0
	for _, n := range survivors {
		forwardErrors += ce.scrape(n).sum("shield_peer_requests_total", map[string]string{"peer": c.id(), "outcome": "error"})
	}
	t.Log(faultTable(fmt.Sprintf("peer %s (owner of %d/%d keys) killed -9 under load: converged in %v; restarted, rejoined in %v; "+
		"forwards to it before the kill %v, failed forwards to it %v:",
		c.id(), len(owned), len(paths), took.Round(time.Millisecond), rejoin.Round(time.Millisecond), forwardedBefore, forwardErrors),
		before, killed, restarted, after))
	if forwardedBefore == 0 {
		t.Errorf("no request was forwarded to %s before the kill: the fault was not exercised", c.id())
	}
	for _, f := range []*faultTally{before, killed, restarted, after} {
		f.check(t, true)
	}
	// The restarted node serves its keys again.
	for _, p := range owned {
		if r, err := ce.get(c, p); err != nil || r.status != http.StatusOK || !faultBodyNames(p, r.body) {
			t.Errorf("%s via restarted %s: %v %v", p, c.id(), r, err)
		}
	}
}

// TestFaultConsulRestart: the Consul agent is killed under load and a new
// one (dev mode: empty) started on the same ports. Requests are answered
// throughout, and the nodes register again with the new agent, so the
// cluster converges on all three nodes.
func TestFaultConsulRestart(t *testing.T) {
	t.Parallel()
	ce := newClusterEnv(t, 3)
	paths := faultClusterKeys("consul-restart", 24)
	ce.owners(ce.nodes[0], paths) // warm: every key stored on its owner
	load := startFaultLoad(t, ce.e.client, 8, faultDefaultLimit, newFaultTally("before"), clusterTargets(ce.nodes, paths, true))
	before := load.tally.Load()
	load.waitSent(t, 100)

	down := load.phase("consul killed")
	ce.consul.kill(t)
	ce.faultWaitConsul(false, clusterConverge)
	load.waitSent(t, 100)

	up := load.phase("consul restarted (empty)")
	restarted := time.Now()
	ce.faultRestartConsul()
	ce.faultWaitConsul(true, faultConsulRecover)
	// Re-registration: every node must be listed again. Poll the
	// agent's catalog and the nodes' views until both agree.
	var registered []string
	deadline := time.Now().Add(clusterConverge)
	for time.Now().Before(deadline) {
		registered = ce.faultRegistered()
		if len(registered) == len(ce.nodes) && len(ce.lagging(ce.nodes...)) == 0 {
			break
		}
		time.Sleep(clusterPollEvery)
	}
	lagging := ce.lagging(ce.nodes...)
	after := load.phase("after restart")
	load.waitSent(t, 100)
	load.halt()

	t.Log(faultTable(fmt.Sprintf("consul killed and restarted under load; %v after the restart %d of %d nodes registered %v:",
		time.Since(restarted).Round(time.Millisecond), len(registered), len(ce.nodes), registered), before, down, up, after))
	for _, f := range []*faultTally{before, down, up, after} {
		f.check(t, true)
	}
	if len(registered) != len(ce.nodes) || len(lagging) > 0 {
		t.Errorf("after a Consul restart the nodes did not register again within %v: the new agent lists %d of %d (%v); "+
			"node views: %s", clusterConverge, len(registered), len(ce.nodes), registered, strings.Join(lagging, "; "))
	}
}

// faultConsulRecover bounds how long nodes take to see a restarted Consul
// agent. A node's watch query carries the old agent's raft index; the new
// agent's index is lower, so the query blocks there for its whole wait
// time (shield's default: 30s, plus up to 1/16 of jitter) before the
// index resets.
const faultConsulRecover = 45 * time.Second

// faultWaitConsul polls until every node reports shield_consul_reachable
// as want, failing after within.
func (ce *clusterEnv) faultWaitConsul(want bool, within time.Duration) {
	ce.t.Helper()
	wantV := 0.0
	if want {
		wantV = 1
	}
	deadline := time.Now().Add(within)
	for {
		n := 0
		for _, node := range ce.nodes {
			if v, ok := ce.scrape(node).value("shield_consul_reachable"); ok && v == wantV {
				n++
			}
		}
		if n == len(ce.nodes) {
			return
		}
		if time.Now().After(deadline) {
			ce.t.Fatalf("only %d of %d nodes report shield_consul_reachable %v after %v", n, len(ce.nodes), wantV, within)
		}
		time.Sleep(clusterPollEvery)
	}
}

// faultRegistered lists the service IDs the Consul agent knows for the
// cluster's service (passing or not).
func (ce *clusterEnv) faultRegistered() []string {
	ce.t.Helper()
	svc := ce.nodes[0].cfg.Service
	r, err := doHTTP(ce.e.client, http.MethodGet, "http://"+ce.consul.addr+"/v1/health/service/"+svc)
	if err != nil || r.status != http.StatusOK {
		return nil
	}
	var entries []struct{ Service struct{ ID string } }
	if err := json.Unmarshal(r.body, &entries); err != nil {
		ce.t.Fatalf("consul health of %s: %v in %.200q", svc, err, r.body)
	}
	ids := make([]string, 0, len(entries))
	for _, e := range entries {
		ids = append(ids, e.Service.ID)
	}
	sort.Strings(ids)
	return ids
}
