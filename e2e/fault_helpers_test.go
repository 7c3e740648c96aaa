package e2e

// Helpers of the fault, partition and soak tests: a tally of answers that
// tells "answered from a stored copy" from "lost", a load generator whose
// targets and tally can be switched between phases while it runs, and
// restarts of a Consul agent or a shield with the arguments it was first
// started with.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// faultReadLimit is how much of a body faultGet reads: every demo-origin
// body of these tests is smaller, except a huge-mode one, which is cut
// there on purpose.
const faultReadLimit = 256 << 10

// faultGet is doHTTP for GET with Host host (none: the URL's), reading at
// most faultReadLimit bytes of the body: a longer body is closed unread
// (no error); a shorter one must arrive whole.
func faultGet(c *http.Client, host, url, tenant string) (result, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return result{}, err
	}
	if host != "" {
		req.Host = host
	}
	if tenant != "" {
		req.Header.Set(faultTenantHeader, tenant)
	}
	resp, err := c.Do(req)
	if err != nil {
		return result{}, fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, faultReadLimit))
	if err != nil {
		return result{}, fmt.Errorf("GET %s: read body: %w", url, err)
	}
	return result{status: resp.StatusCode, header: resp.Header, body: body}, nil
}

// faultTenantHeader carries the tenant of a request; paths asked with a
// tenant carry vary=<it>, so the origin's body echoes the tenant and a
// foreign tenant's answer is told apart.
const faultTenantHeader = "X-Tenant-ID"

// faultMaxLost bounds how many lost answers a tally keeps verbatim.
const faultMaxLost = 20

// faultTally counts the answers of one phase of a fault test:
//
//   - ok: 200 with the right body, not a stale stand-in;
//   - stale: 200 with the right body from a stale stored copy
//     (Cache-Status "hit" and "fwd=stale": standing in for a failed
//     fetch, or served while it is revalidated);
//   - 5xx: an error answer from shield (502, 503, 504);
//   - lost: no answer (transport error, a body cut short), a wrong body
//     (not naming the requested path), another status, or — for a key
//     that had a stored copy — a 5xx, since stale-if-error should have
//     served the copy.
type faultTally struct {
	name string

	mu                                sync.Mutex // guards the fields below
	sent, ok, stale, fiveXX, lost     int
	storedSent, storedFiveXX, wrongBd int
	why                               []string       // lost answers, the first faultMaxLost
	fiveWhy                           []string       // 5xx answers for keys without a stored copy, likewise
	staleWhy                          map[string]int // Cache-Status detail of stale answers
	answered                          map[string]int // 200s (ok or stale) by the node asked
	maxLatency                        time.Duration
}

func newFaultTally(name string) *faultTally { return &faultTally{name: name} }

// add records the answer to GET path (query excluded from the check) for
// tenant ("" = none); stored says the key had a stored copy inside
// stale-if-error.
func (f *faultTally) add(what, path, tenant string, stored bool, r result, err error, took time.Duration) {
	verdict := faultVerdict(path, tenant, r, err)
	f.mu.Lock()
	defer f.mu.Unlock()
	if verdict == "ok" || verdict == "stale" {
		if f.answered == nil {
			f.answered = map[string]int{}
		}
		f.answered[what]++
	}
	f.sent++
	f.maxLatency = max(f.maxLatency, took)
	if stored {
		f.storedSent++
	}
	switch verdict {
	case "ok":
		f.ok++
		return
	case "stale":
		f.stale++
		if f.staleWhy == nil {
			f.staleWhy = map[string]int{}
		}
		f.staleWhy[detail(r.header)]++
		return
	case "5xx":
		f.fiveXX++
		if !stored {
			if len(f.fiveWhy) < faultMaxLost {
				f.fiveWhy = append(f.fiveWhy, fmt.Sprintf("%s %s tenant %q: %v", what, path, tenant, r))
			}
			return
		}
		f.storedFiveXX++
		verdict = fmt.Sprintf("%d although a stored copy existed (%s)", r.status, r.header.Get("Cache-Status"))
	case "wrong body", "another tenant's body":
		f.wrongBd++
	}
	f.lost++
	if len(f.why) < faultMaxLost {
		f.why = append(f.why, fmt.Sprintf("%s %s tenant %q: %s: %v %v", what, path, tenant, verdict, r, err))
	}
}

// faultVerdict classifies one answer; see faultTally.
func faultVerdict(path, tenant string, r result, err error) string {
	switch {
	case err != nil:
		return "no answer"
	case r.status >= 500:
		return "5xx"
	case r.status != http.StatusOK:
		return fmt.Sprintf("status %d", r.status)
	case !faultBodyNames(path, r.body):
		return "wrong body"
	case tenant != "" && !faultBodyTenant(tenant, r.body):
		return "another tenant's body"
	}
	cs := r.header.Get("Cache-Status")
	if strings.Contains(cs, "hit") && strings.Contains(cs, "fwd=stale") {
		return "stale"
	}
	return "ok"
}

// faultBodyNames reports whether body is the demo origin's answer for
// path: its JSON names that path. A huge-mode body, read only in part,
// opens with the path too.
func faultBodyNames(path string, body []byte) bool {
	path, _, _ = strings.Cut(path, "?")
	if prefix := `{"path":` + faultJSONString(path) + `,"huge":"`; bytes.HasPrefix(body, []byte(prefix)) {
		return true
	}
	var res resource
	return json.Unmarshal(body, &res) == nil && res.Path == path
}

// faultBodyTenant reports whether body echoes tenant as its
// X-Tenant-ID.
func faultBodyTenant(tenant string, body []byte) bool {
	var res resource
	return json.Unmarshal(body, &res) == nil && res.Vary[http.CanonicalHeaderKey(faultTenantHeader)] == tenant
}

func faultJSONString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// check fails t if any answer was lost, and, with noFiveXX (the origin
// was reachable throughout), if any was a 5xx.
func (f *faultTally) check(t *testing.T, noFiveXX bool) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lost > 0 {
		t.Errorf("%s: %d of %d answers lost (%d wrong bodies, %d 5xx for stored keys); first: %s",
			f.name, f.lost, f.sent, f.wrongBd, f.storedFiveXX, strings.Join(f.why, "; "))
	}
	if noFiveXX && f.fiveXX > 0 {
		t.Errorf("%s: %d of %d answers 5xx with the origin reachable; first: %s",
			f.name, f.fiveXX, f.sent, strings.Join(f.fiveWhy, "; "))
	}
}

// total is how many answers were tallied.
func (f *faultTally) total() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sent
}

// faultTable renders tallies as the figures table of the report.
func faultTable(title string, tallies ...*faultTally) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s\n| phase | sent | stored-key requests | ok | stale | 5xx | lost | max latency | stale because | 200s by node asked |\n|---|---|---|---|---|---|---|---|---|---|\n", title)
	for _, f := range tallies {
		f.mu.Lock()
		why := make([]string, 0, len(f.staleWhy))
		for d, n := range f.staleWhy {
			why = append(why, fmt.Sprintf("%s×%d", d, n))
		}
		sort.Strings(why)
		by := make([]string, 0, len(f.answered))
		for n, c := range f.answered {
			by = append(by, fmt.Sprintf("%s:%d", n, c))
		}
		sort.Strings(by)
		fmt.Fprintf(&sb, "| %s | %d | %d | %d | %d | %d | %d | %v | %s | %s |\n",
			f.name, f.sent, f.storedSent, f.ok, f.stale, f.fiveXX, f.lost, f.maxLatency.Round(time.Millisecond),
			strings.Join(why, " "), strings.Join(by, " "))
		f.mu.Unlock()
	}
	return sb.String()
}

// faultLoad is a bounded closed-loop load: workers send GETs until stopped
// or until maxRequests were sent, to targets picked per request. The
// target list and the tally can be swapped while it runs, so one load
// spans the phases of a test.
type faultLoad struct {
	tally atomic.Pointer[faultTally]
	sent  atomic.Int64
	stop  chan struct{}
	wg    sync.WaitGroup
	halt  func()

	// mu makes "pick a target, count it in flight" atomic with respect
	// to setTargets: once setTargets returns, no request to a target it
	// removed can start any more, and waitIdle sees all that did.
	mu       sync.RWMutex
	targets  []faultTarget
	inFlight sync.Map // node → *atomic.Int64
}

// faultTarget is where one request goes: a base URL (http://addr), the
// request target, and whether the key had a stored copy.
type faultTarget struct {
	node   string // for the log and waitIdle
	base   string
	path   string
	tenant string // "" = no tenant header
	stored bool
}

// faultLimit bounds a load: its loops stop by themselves after max
// requests, and at rate requests per second (all workers together) it
// leaves CPU for the processes under test (a 2-core machine runs three
// shields, Consul and the origin besides).
type faultLimit struct {
	rate float64
	max  int64
}

// faultDefaultLimit is the limit of the fault and partition tests.
var faultDefaultLimit = faultLimit{rate: 1500, max: 500_000}

// startFaultLoad starts workers on c. Stopping waits for the requests in
// flight; it also runs at cleanup.
func startFaultLoad(t *testing.T, c *http.Client, workers int, limit faultLimit, tally *faultTally, targets []faultTarget) *faultLoad {
	t.Helper()
	l := &faultLoad{stop: make(chan struct{})}
	limiter := rate.NewLimiter(rate.Limit(limit.rate), workers)
	ctx, cancel := context.WithCancel(context.Background())
	l.tally.Store(tally)
	l.setTargets(targets)
	for w := range workers {
		l.wg.Go(func() {
			for i := w; ; i += workers {
				select {
				case <-l.stop:
					return
				default:
				}
				if limiter.Wait(ctx) != nil || l.sent.Add(1) > limit.max {
					return
				}
				tg, ok := l.pick(i)
				if !ok {
					time.Sleep(clusterPollEvery)
					continue
				}
				tally := l.tally.Load() // the phase the request was sent in
				start := time.Now()
				r, err := faultGet(c, clusterHost, tg.base+tg.path, tg.tenant)
				tally.add(tg.node, tg.path, tg.tenant, tg.stored, r, err, time.Since(start))
				l.counter(tg.node).Add(-1)
			}
		})
	}
	l.halt = sync.OnceFunc(func() { close(l.stop); cancel(); l.wg.Wait() })
	t.Cleanup(l.halt)
	return l
}

// setTargets replaces the targets of later requests.
func (l *faultLoad) setTargets(ts []faultTarget) {
	l.mu.Lock()
	l.targets = ts
	l.mu.Unlock()
}

// pick returns the i-th target (round robin), counted in flight.
func (l *faultLoad) pick(i int) (faultTarget, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if len(l.targets) == 0 {
		return faultTarget{}, false
	}
	tg := l.targets[i%len(l.targets)]
	l.counter(tg.node).Add(1)
	return tg, true
}

func (l *faultLoad) counter(node string) *atomic.Int64 {
	c, _ := l.inFlight.LoadOrStore(node, new(atomic.Int64))
	return c.(*atomic.Int64)
}

// waitIdle polls until no request to node is in flight: after setTargets
// dropped it, the node can be killed without taking a client's request
// with it.
func (l *faultLoad) waitIdle(t *testing.T, node string) {
	t.Helper()
	eventually(t, "no request in flight to "+node, func() bool { return l.counter(node).Load() == 0 })
}

// phase makes later requests count in a new tally and returns it.
func (l *faultLoad) phase(name string) *faultTally {
	f := newFaultTally(name)
	l.tally.Store(f)
	return f
}

// answeredBy is how many requests to node were answered 200.
func (f *faultTally) answeredBy(node string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.answered[node]
}

// waitSent polls until the load has sent at least n more requests than
// when called, so every phase carries traffic.
func (l *faultLoad) waitSent(t *testing.T, n int64) {
	t.Helper()
	from := l.sent.Load()
	eventually(t, fmt.Sprintf("%d more requests", n), func() bool { return l.sent.Load()-from >= n })
}

// clusterTargets is every (node, path) pair, round robin over nodes.
func clusterTargets(nodes []*clusterNode, paths []string, stored bool) []faultTarget {
	out := make([]faultTarget, 0, len(nodes)*len(paths))
	for _, p := range paths {
		for _, n := range nodes {
			out = append(out, faultTarget{node: n.id(), base: "http://" + n.cfg.Listen, path: p, stored: stored})
		}
	}
	return out
}

// faultRestartConsul starts a new agent with the killed one's arguments:
// the same ports, an empty state (dev mode keeps none), and waits for its
// leader.
func (ce *clusterEnv) faultRestartConsul() {
	ce.t.Helper()
	old := ce.consul
	if !old.proc.exited() {
		ce.t.Fatalf("faultRestartConsul: the old agent still runs")
	}
	args := old.proc.cmd.Args
	proc := startDirProcess(ce.t, "consul (restarted)", ce.t.TempDir(), args[0], args[1:]...)
	if !waitConsulLeader(proc, old.addr) {
		ce.t.Fatalf("restarted consul at %s: no leader after %v", old.addr, startTimeout)
	}
	ce.consul = &consulAgent{proc: proc, addr: old.addr}
}

// faultRestart starts n again with the arguments (config file, so the
// same ports and node id) it was first started with, and waits for its
// /readyz. The previous process must have exited.
func (n *clusterNode) faultRestart(t *testing.T) {
	t.Helper()
	if !n.proc.exited() {
		t.Fatalf("faultRestart %s: still running", n.id())
	}
	args := n.proc.cmd.Args
	n.proc = startProcess(t, "shield "+n.id()+" (restarted)", args[0], args[1:]...)
	n.proc.waitReady(t, "http://"+n.cfg.Admin+"/readyz")
}

// faultOwned returns the paths of paths that owner[p] says node owns.
func faultOwned(owner map[string]string, paths []string, node string) []string {
	var out []string
	for _, p := range paths {
		if owner[p] == node {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}
