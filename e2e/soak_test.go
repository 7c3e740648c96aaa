package e2e

// The soak test: a bounded load on a three-node Consul cluster for
// SOAK_DURATION (default 30s; `make soak` runs 10m), with a node
// restarted gracefully mid-run, watching each shield's resident memory,
// goroutines and file descriptors.

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Soak parameters. The key space holds about 4× the cluster's cache
// (3 × 32MiB) so fastcache evicts all along; a quarter of the keys turn
// stale every second and are refreshed in the background.
const (
	soakDefaultDuration = 30 * time.Second
	soakKeys            = 4000
	soakMaxBody         = 64 << 10
	soakWorkers         = 8
	soakRate            = 1000     // requests per second
	soakCacheSize       = 32 << 20 // cluster_env_test.go's cache.size
	soakRSSLimit        = soakCacheSize*12/10 + 64<<20
	soakGoroutineSlack  = 10               // goroutines above the idle baseline
	soakFDSlack         = 5                // file descriptors above the idle baseline
	soakSettle          = 30 * time.Second // idle keep-alive connections close within this
)

// soakDuration reads SOAK_DURATION (a Go duration).
func soakDuration(t *testing.T) time.Duration {
	t.Helper()
	v := os.Getenv("SOAK_DURATION")
	if v == "" {
		return soakDefaultDuration
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("SOAK_DURATION=%q: want a positive Go duration like 30s or 10m", v)
	}
	return d
}

// soakStats is what the test knows of one node's process.
type soakStats struct {
	baseG, baseFD    int   // idle, before the load
	peakRSS          int64 // over the run, every process of the node
	peakG, peakFD    int
	endG, endFD      int // idle again after the load
	endRSS           int64
	samples          int
	goroutinesOnIdle bool
}

// TestSoak: no answer lost, no 5xx; each shield's RSS stays within
// cache.size × 1.2 + 64MiB; once the load stops and idle connections
// close, goroutines and file descriptors come back to their idle
// baseline — on the restarted node too, whose new process is compared
// with its predecessor's baseline.
func TestSoak(t *testing.T) {
	t.Parallel()
	duration := soakDuration(t)
	ce := newClusterEnv(t, 3)
	paths := make([]string, soakKeys)
	for i := range paths {
		size := strconv.Itoa(1024 * (1 + i%(soakMaxBody/1024)))
		if i%4 == 0 {
			paths[i] = target("/soak/"+strconv.Itoa(i), "size", size, "cc", "public, max-age=1, stale-while-revalidate=5")
		} else {
			paths[i] = target("/soak/"+strconv.Itoa(i), "size", size)
		}
	}

	stats := map[string]*soakStats{}
	for _, n := range ce.nodes {
		g, fd := ce.soakIdle(n)
		stats[n.id()] = &soakStats{baseG: g, baseFD: fd}
	}

	limit := faultLimit{rate: soakRate, max: int64(soakRate * (duration + time.Minute).Seconds())}
	load := startFaultLoad(t, ce.e.client, soakWorkers, limit, newFaultTally("soak"), clusterTargets(ce.nodes, paths, false))
	tally := load.tally.Load()
	churn := ce.nodes[1]
	others := []*clusterNode{ce.nodes[0], ce.nodes[2]}
	restartAt := time.Now().Add(duration / 2)
	end := time.Now().Add(duration)
	restarted := false
	for time.Now().Before(end) {
		for _, n := range ce.nodes {
			ce.soakSample(n, stats[n.id()])
		}
		if !restarted && time.Now().After(restartAt) {
			// Graceful churn: clients stop asking churn, it drains,
			// leaves and comes back on the same config.
			load.setTargets(clusterTargets(others, paths, false))
			load.waitIdle(t, churn.id())
			churn.proc.terminate(t)
			if code := churn.proc.wait(t); code != 0 {
				t.Errorf("%s exited %d after SIGTERM, want 0", churn.id(), code)
			}
			churn.faultRestart(t)
			ce.waitConverged("after restarting "+churn.id(), ce.nodes...)
			load.setTargets(clusterTargets(ce.nodes, paths, false))
			restarted = true
		}
		time.Sleep(time.Second) // the sampling period, not a synchronisation
	}
	load.halt()
	ce.e.client.CloseIdleConnections()

	for _, n := range ce.nodes {
		s := stats[n.id()]
		s.endRSS = soakRSS(t, n.proc.cmd.Process.Pid)
		s.goroutinesOnIdle = ce.soakSettle(n, s)
	}

	var sb strings.Builder
	fmt.Fprintf(&sb, "soak %v at ≤ %d req/s, %d keys of 1–%d KiB, %s restarted (SIGTERM) at %v; RSS limit %d MiB:\n",
		duration, soakRate, soakKeys, soakMaxBody>>10, churn.id(), duration/2, soakRSSLimit>>20)
	sb.WriteString("| node | RSS peak MiB | RSS end MiB | goroutines idle→peak→end | fds idle→peak→end | samples |\n|---|---|---|---|---|---|\n")
	for _, n := range ce.nodes {
		s := stats[n.id()]
		fmt.Fprintf(&sb, "| %s | %.1f | %.1f | %d→%d→%d | %d→%d→%d | %d |\n", n.id(),
			float64(s.peakRSS)/(1<<20), float64(s.endRSS)/(1<<20), s.baseG, s.peakG, s.endG, s.baseFD, s.peakFD, s.endFD, s.samples)
	}
	t.Log(sb.String() + "\n" + faultTable("answers:", tally))

	tally.check(t, true)
	if n := tally.total(); n < int(duration.Seconds())*soakRate/4 {
		t.Errorf("only %d requests in %v: the load did not run", n, duration)
	}
	if !restarted {
		t.Errorf("%s was not restarted during the run", churn.id())
	}
	for _, n := range ce.nodes {
		s := stats[n.id()]
		if s.peakRSS > soakRSSLimit {
			t.Errorf("%s: RSS peaked at %d MiB, above cache.size×1.2+64MiB = %d MiB", n.id(), s.peakRSS>>20, soakRSSLimit>>20)
		}
		if !s.goroutinesOnIdle {
			t.Errorf("%s: goroutines %d → %d, fds %d → %d after the load and %v of idleness: not back to the baseline (+%d goroutines, +%d fds)",
				n.id(), s.baseG, s.endG, s.baseFD, s.endFD, soakSettle, soakGoroutineSlack, soakFDSlack)
		}
	}
}

// soakIdle reads n's goroutine gauge and fd count while it is idle.
func (ce *clusterEnv) soakIdle(n *clusterNode) (goroutines, fds int) {
	ce.t.Helper()
	g, ok := ce.scrape(n).value("go_goroutines")
	if !ok {
		ce.t.Fatalf("%s: no go_goroutines in /metrics", n.id())
	}
	return int(g), soakFDs(ce.t, n.proc.cmd.Process.Pid)
}

// soakSample records n's RSS, goroutines and fds now.
func (ce *clusterEnv) soakSample(n *clusterNode, s *soakStats) {
	ce.t.Helper()
	pid := n.proc.cmd.Process.Pid
	s.peakRSS = max(s.peakRSS, soakRSS(ce.t, pid))
	g, fd := ce.soakIdle(n)
	s.peakG, s.peakFD = max(s.peakG, g), max(s.peakFD, fd)
	s.samples++
}

// soakSettle polls until n's goroutines and fds are back within slack of
// the baseline, for at most soakSettle (pooled keep-alive connections to
// the origin and the peers close when idle); it records the last values
// and reports whether they came back.
func (ce *clusterEnv) soakSettle(n *clusterNode, s *soakStats) bool {
	ce.t.Helper()
	deadline := time.Now().Add(soakSettle)
	for {
		s.endG, s.endFD = ce.soakIdle(n)
		if s.endG <= s.baseG+soakGoroutineSlack && s.endFD <= s.baseFD+soakFDSlack {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(clusterPollEvery)
	}
}
