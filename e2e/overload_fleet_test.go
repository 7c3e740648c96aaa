package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestFleetLimiterFailMode: two statically joined shields exchanging
// usage every 200ms, tenant acme at 100/s (burst 10) fleet-wide. With n2
// SIGSTOPped, n1 stops hearing from it: it logs the fail mode naming n2,
// shield_usage_fail_mode goes to 1, and it enforces the bounded local
// allowance, half the rate: offered 200/s for 3 s it admits about 50/s
// (not 0, not the whole rate). When n2 runs again n1 logs the end and the
// gauge returns to 0.
func TestFleetLimiterFailMode(t *testing.T) {
	t.Parallel()
	originAddr := freeAddr(t)
	origin := startProcess(t, "demo-origin", binPath(t, "demo-origin"), "-listen", originAddr)
	origin.waitReady(t, "http://"+originAddr+"/__origin/stats")
	type node struct{ listen, admin, peer string }
	nodes := make([]node, 2)
	var peers []string
	for i := range nodes {
		nodes[i] = node{freeAddr(t), freeAddr(t), freeAddr(t)}
		peers = append(peers, fmt.Sprintf("{ id: n%d, addr: %s }", i+1, nodes[i].peer))
	}
	procs := make([]*process, len(nodes))
	for i, n := range nodes {
		cfg := fmt.Sprintf(`listen: %s
admin: { listen: %s }
cache: { size: 32MiB, max_object_size: 1MiB }
origins:
  demo: { servers: [%s], timeout: 2s }
routes:
  - { name: demo, hosts: ["*"], path_prefix: /, origin: demo, cache: { disabled: true } }
tenants:
  identify: { header: X-Tenant-ID }
  default: { rate: 10000, max_concurrency: 1000 }
  classes:
    acme: { rate: 100, burst: 10, max_concurrency: 1000 }
cluster:
  node_id: n%d
  listen: %s
  secret: %q
  usage_interval: 200ms
  membership: static
  peers: [%s]
`, n.listen, n.admin, originAddr, i+1, n.peer, clusterSecret, strings.Join(peers, ", "))
		path := writeFile(t, fmt.Sprintf("n%d.yaml", i+1), cfg)
		procs[i] = startProcess(t, fmt.Sprintf("shield n%d", i+1), binPath(t, "shield"), "-config", path)
	}
	for i, n := range nodes {
		procs[i].waitReady(t, "http://"+n.admin+"/readyz")
	}
	client := newClient()
	t.Cleanup(client.CloseIdleConnections)
	metric := func(name string, labels ...string) float64 {
		r, err := doHTTP(client, http.MethodGet, "http://"+nodes[0].admin+"/metrics")
		if err != nil || r.status != http.StatusOK {
			t.Fatalf("n1 /metrics: %v %v", r, err)
		}
		if len(labels) == 0 {
			v, _ := promText(r.body).value(name)
			return v
		}
		return seriesValue(r.body, name, labels...)
	}
	// Both heard: some reports received, no fail mode.
	eventually(t, "n1 to receive n2's usage reports", func() bool {
		return metric("shield_usage_reports_total", "outcome", "received") > 0
	})
	time.Sleep(time.Second) // past the start-up grace (4 intervals)
	if v := metric("shield_usage_fail_mode"); v != 0 {
		t.Fatalf("shield_usage_fail_mode = %v with both nodes up", v)
	}

	procs[1].signal(t, syscall.SIGSTOP)
	stopped := true
	t.Cleanup(func() {
		if stopped {
			_ = procs[1].cmd.Process.Signal(syscall.SIGCONT)
		}
	})
	eventually(t, "n1 to enter fail mode", func() bool { return metric("shield_usage_fail_mode") == 1 })
	// The gauge moves before the line reaches n1's stderr pipe: poll the
	// log as well rather than read it once.
	logged := func(parts ...string) func() bool {
		return func() bool {
			out := procs[0].stderr.String() + procs[0].stdout.String()
		lines:
			for _, l := range strings.Split(out, "\n") {
				for _, p := range parts {
					if !strings.Contains(l, p) {
						continue lines
					}
				}
				return true
			}
			return false
		}
	}
	eventually(t, "n1 to log the fail mode naming n2", logged("fail mode: members not heard from", "n2"))
	if s := metric("shield_tenant_share", "tenant", "acme"); s != 0.5 {
		t.Errorf("n1's acme share in fail mode = %v, want 0.5 (n2 assumed to hold 1/2)", s)
	}
	// Offer 200/s to n1 for 3 s.
	const offered, secs = 200, 3
	admitted, refused := 0, 0
	tick := time.NewTicker(time.Second / offered)
	start := time.Now()
	for time.Since(start) < secs*time.Second {
		<-tick.C
		r, err := doHTTP(client, http.MethodGet, "http://"+nodes[0].listen+"/fm", "X-Tenant-ID", "acme")
		switch {
		case err != nil:
			t.Fatal(err)
		case r.status == http.StatusOK:
			admitted++
		case r.status == http.StatusTooManyRequests:
			refused++
		default:
			t.Fatalf("answer %v, want 200 or 429", r)
		}
	}
	tick.Stop()
	took := time.Since(start).Seconds()
	want := 50*took + 5 // half the rate, plus half the burst
	t.Logf("fail mode: n1 admitted %d, refused %d in %.1fs (allowance 50/s + burst 5: %.0f)", admitted, refused, took, want)
	if admitted < int(0.8*want) || admitted > int(1.1*want)+2 {
		t.Errorf("n1 admitted %d in %.1fs in fail mode, want about %.0f (half the rate)", admitted, took, want)
	}

	procs[1].signal(t, syscall.SIGCONT)
	stopped = false
	eventually(t, "n1 to leave fail mode", func() bool { return metric("shield_usage_fail_mode") == 0 })
	eventually(t, "n1 to log the end of the fail mode", logged("fail mode over"))
	if v := metric("shield_usage_fail_mode_entered_total"); v != 1 {
		t.Errorf("shield_usage_fail_mode_entered_total = %v, want 1", v)
	}
}
