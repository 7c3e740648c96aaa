package admission

import (
	"math"
	"math/rand"
	"strings"
	"testing"
	"testing/quick"
	"time"
)

// TestSharesShapes pins the shares for the traffic shapes the fleet must
// handle: 3 nodes, rate 100/s, 200/s offered.
func TestSharesShapes(t *testing.T) {
	floor := FleetReserve / 3
	tests := []struct {
		name   string
		demand []float64
		silent int
		want   []float64
	}{
		{"idle: rate/n", []float64{0, 0, 0}, 0, []float64{1. / 3, 1. / 3, 1. / 3}},
		{"even", []float64{66, 66, 66}, 0, []float64{1. / 3, 1. / 3, 1. / 3}},
		{"90/10", []float64{180, 20, 0}, 0, []float64{floor + 0.95*0.9, floor + 0.95*0.1, floor}},
		{"single", []float64{200, 0, 0}, 0, []float64{floor + 0.95, floor, floor}},
		{"under the rate: demand plus even headroom", []float64{40, 10, 0}, 0,
			[]float64{floor + 0.95*(40+50./3)/100, floor + 0.95*(10+50./3)/100, floor + 0.95*(50./3)/100}},
		{"alone: rate/n", []float64{500}, 2, []float64{1. / 3}},
		{"one silent: the others split 2/3", []float64{200, 0}, 1, []float64{floor + (2./3 - 2*floor), floor}},
	}
	for _, tt := range tests {
		got := Shares(nil, tt.demand, tt.silent, 100)
		for i := range tt.want {
			if math.Abs(got[i]-tt.want[i]) > 1e-9 {
				t.Errorf("%s: Shares(%v, silent %d) = %v, want %v", tt.name, tt.demand, tt.silent, got, tt.want)
				break
			}
		}
	}
}

// TestSharesProperties: for any demand (including garbage), any number of
// silent nodes and any rate, the known nodes' shares plus silent/n sum
// to at most 1, every share is at least FleetReserve/n, and the fleet's
// enforced rate for the known nodes (for offered = demand) is within 10 %
// of what a central bucket would admit.
func TestSharesProperties(t *testing.T) {
	prop := func(raw []float64, silent8 uint8, rate16 uint16, scale uint8) bool {
		if len(raw) == 0 {
			raw = []float64{0}
		}
		if len(raw) > 50 {
			raw = raw[:50]
		}
		silent := int(silent8 % 10)
		rate := 1 + float64(rate16)
		demand := make([]float64, len(raw))
		for i, d := range raw {
			demand[i] = math.Abs(math.Mod(d, float64(scale)+1)) * rate / 10 // a few × rate in total
		}
		n := float64(len(demand) + silent)
		s := Shares(nil, demand, silent, rate)
		sum := float64(silent) / n
		for _, v := range s {
			if v < FleetReserve/n-1e-12 || math.IsNaN(v) {
				t.Logf("share %v below floor %v (demand %v silent %d)", v, FleetReserve/n, demand, silent)
				return false
			}
			sum += v
		}
		if sum > 1+1e-9 {
			t.Logf("shares %v + silent %d/%v sum to %v", s, silent, n, sum)
			return false
		}
		// What the known nodes admit against what one bucket would, for
		// the capacity left to them.
		capacity := rate * float64(len(demand)) / n
		var admitted, total float64
		for i, d := range demand {
			admitted += min(d, s[i]*rate)
			total += d
		}
		want := min(total, capacity)
		if admitted < 0.9*want-1e-9 || admitted > want+1e-9 {
			t.Logf("admitted %v, central bucket %v (demand %v silent %d rate %v)", admitted, want, demand, silent, rate)
			return false
		}
		return true
	}
	if err := quick.Check(prop, &quick.Config{MaxCount: 5000, Rand: rand.New(rand.NewSource(14))}); err != nil {
		t.Fatal(err)
	}
}

// TestSharesGarbageDemand: NaN, ±Inf and negative demand count as 0.
func TestSharesGarbageDemand(t *testing.T) {
	s := Shares(nil, []float64{math.NaN(), math.Inf(1), -5, math.Inf(-1)}, 0, 100)
	for _, v := range s {
		if math.Abs(v-0.25) > 1e-12 {
			t.Fatalf("Shares(garbage) = %v, want 1/4 each", s)
		}
	}
	if s := Shares(nil, []float64{1, 2}, 0, math.Inf(1)); math.Abs(s[0]+s[1]-1) > 1e-12 {
		t.Fatalf("Shares at an infinite rate = %v, want a sum of 1", s)
	}
}

// simNode is one node of a simulated fleet driving the real Tenants and
// Fleet, exchanging reports every tick.
type simNode struct {
	id      string
	ts      *Tenants
	fleet   *Fleet
	offered float64 // requests per second sent to this node
}

// simulate runs ticks of 1 s on nodes (each admitting its offered load
// at evenly spaced instants), delivering reports except from nodes in
// mute, and returns the fleet's admitted count per tick.
func simulate(t *testing.T, nodes []*simNode, start time.Time, ticks int, mute map[string]bool) []uint64 {
	t.Helper()
	ids := make([]string, len(nodes))
	for i, n := range nodes {
		ids[i] = n.id
	}
	var out []uint64
	const steps = 100
	for tick := 0; tick < ticks; tick++ {
		base := start.Add(time.Duration(tick) * time.Second)
		before := uint64(0)
		for _, n := range nodes {
			before += n.ts.Default().admitted.Load()
		}
		acc := make([]float64, len(nodes))
		for step := 0; step < steps; step++ {
			now := base.Add(time.Duration(step) * time.Second / steps)
			for i, n := range nodes {
				if mute[n.id] {
					continue
				}
				acc[i] += n.offered / steps
				for ; acc[i] >= 1; acc[i]-- {
					if r, _ := n.ts.Default().Admit(now); r == None {
						n.ts.Default().Done()
					}
				}
			}
		}
		end := base.Add(time.Second)
		reports := make([]Report, len(nodes))
		for i, n := range nodes {
			reports[i] = n.fleet.Observe(n.ts, end)
		}
		for i, from := range nodes {
			if mute[from.id] {
				continue
			}
			for _, to := range nodes {
				if to != from && !mute[to.id] {
					to.fleet.Receive(reports[i], to.ts, end)
				}
			}
		}
		for _, n := range nodes {
			if !mute[n.id] {
				n.fleet.Apply(n.ts, ids, end)
			}
		}
		after := uint64(0)
		for _, n := range nodes {
			after += n.ts.Default().admitted.Load()
		}
		out = append(out, after-before)
	}
	return out
}

func newSimFleet(t *testing.T, n int, rate float64) []*simNode {
	t.Helper()
	nodes := make([]*simNode, n)
	for i := range nodes {
		ts, err := NewTenants(Config{Default: Limits{Rate: rate, MaxConcurrency: 1000}}, n)
		if err != nil {
			t.Fatal(err)
		}
		id := string(rune('a' + i))
		nodes[i] = &simNode{id: id, ts: ts, fleet: NewFleet(id, time.Second)}
	}
	return nodes
}

// TestFleetConverges: on fixed demand of any skew, the simulated fleet
// admits within ±10 % of the rate per 5 s once 3 s have passed, and keeps
// doing so when the skew switches.
func TestFleetConverges(t *testing.T) {
	rng := rand.New(rand.NewSource(14))
	nodes := newSimFleet(t, 3, 100)
	start := time.Unix(1_700_000_000, 0)
	shapes := [][]float64{{1, 1, 1}, {.9, .1, 0}, {1, 0, 0}, {0, .1, .9}}
	for i := 0; i < 20; i++ {
		var w []float64
		if i < len(shapes) {
			w = shapes[i]
		} else {
			w = []float64{rng.Float64(), rng.Float64(), rng.Float64() * float64(rng.Intn(2))}
		}
		var sum float64
		for _, x := range w {
			sum += x
		}
		offered := 150 + rng.Float64()*300
		for j, n := range nodes {
			n.offered = offered * w[j] / sum
		}
		per := simulate(t, nodes, start, 8, nil)
		start = start.Add(8 * time.Second)
		var got uint64
		for _, c := range per[3:] {
			got += c
		}
		if got < 450 || got > 550 {
			t.Errorf("shape %d %v at %.0f/s: admitted %d in 5 s after 3 s (per second %v), want 500 ± 10 %%", i, w, offered, got, per)
		}
	}
}

// TestFleetSilentPeer: a peer that stops reporting is assumed to hold
// 1/n; the others never admit more than the rate, and once it has been
// silent for StaleIntervals they share the rest by demand.
func TestFleetSilentPeer(t *testing.T) {
	nodes := newSimFleet(t, 3, 100)
	start := time.Unix(1_700_000_000, 0)
	nodes[0].offered, nodes[1].offered, nodes[2].offered = 20, 20, 200 // c holds most
	simulate(t, nodes, start, 5, nil)
	nodes[0].offered, nodes[1].offered = 150, 150
	per := simulate(t, nodes, start.Add(5*time.Second), 10, map[string]bool{"c": true})
	for i, c := range per {
		if c > 100 {
			t.Errorf("second %d with c silent: a+b admitted %d, more than the rate (per second %v)", i, c, per)
		}
	}
	var last uint64
	for _, c := range per[5:] {
		last += c
	}
	if want := 5 * 200. / 3; math.Abs(float64(last)-want) > 0.1*want {
		t.Errorf("a+b with c silent admitted %d in 5 s, want about %.0f (2/3 of the rate)", last, want)
	}
	if s := nodes[0].ts.Default().Share() + nodes[1].ts.Default().Share(); s > 2./3+1e-9 {
		t.Errorf("a+b shares %v with c silent, want ≤ 2/3", s)
	}
}

// TestFleetJoinStartsAtRateOverN: a node that has heard from nobody
// enforces rate/n.
func TestFleetJoinStartsAtRateOverN(t *testing.T) {
	ts, _ := NewTenants(Config{Default: Limits{Rate: 90, MaxConcurrency: 1}}, 3)
	f := NewFleet("a", time.Second)
	now := time.Unix(1_700_000_000, 0)
	f.Observe(ts, now)
	for range 500 {
		ts.Default().Admit(now)
		ts.Default().Done()
	}
	f.Observe(ts, now.Add(time.Second))
	if silent := f.Apply(ts, []string{"a", "b", "c"}, now.Add(time.Second)); silent != 2 {
		t.Fatalf("Apply: %d silent, want 2", silent)
	}
	if r, _ := ts.Default().NodeLimits(); math.Abs(r-30) > 1e-9 {
		t.Fatalf("joining node rate %v, want 30 (rate/n)", r)
	}
}

// TestFleetForgetsDepartedPeers: memory follows the membership.
func TestFleetForgetsDepartedPeers(t *testing.T) {
	ts, _ := NewTenants(Config{Default: Limits{Rate: 90, MaxConcurrency: 1}}, 3)
	f := NewFleet("a", time.Second)
	now := time.Unix(1_700_000_000, 0)
	for _, id := range []string{"b", "c", "d"} {
		f.Receive(Report{Node: id, Window: time.Second, Classes: []ClassUsage{{Name: DefaultClass, Demanded: 5}, {Name: "unknown-class", Demanded: 5}}}, ts, now)
	}
	f.Apply(ts, []string{"a", "b"}, now)
	if len(f.peers) != 1 || f.peers["b"] == nil {
		t.Fatalf("peers after Apply = %v, want only b", f.peers)
	}
	if _, ok := f.peers["b"].demand["unknown-class"]; ok {
		t.Fatal("a class this node does not have was kept")
	}
}

func TestReportRoundTrip(t *testing.T) {
	r := Report{Node: "node one/ü", Window: 1500 * time.Millisecond, Classes: []ClassUsage{
		{Name: "default", Demanded: 10, Admitted: 3}, {Name: "a b\nc%", Demanded: 1 << 40, Admitted: 1 << 40}}}
	b := AppendReport(nil, r)
	got, err := ParseReport(b)
	if err != nil {
		t.Fatalf("ParseReport(%q): %v", b, err)
	}
	if got.Node != r.Node || got.Window != r.Window || len(got.Classes) != 2 || got.Classes[0] != r.Classes[0] || got.Classes[1] != r.Classes[1] {
		t.Fatalf("round trip: %+v, want %+v", got, r)
	}
	for _, bad := range []string{"", "shield-usage/1 a 1000", "shield-usage/2 a 1000\n", "shield-usage/1 a 0\n",
		"shield-usage/1 a 1000\nx 1 2\n", "shield-usage/1 a 1000\nx 1\n", "shield-usage/1 %zz 1000\n", "shield-usage/1 a 1000\nx 1 1"} {
		if _, err := ParseReport([]byte(bad)); err == nil || !strings.Contains(err.Error(), "usage report") {
			t.Errorf("ParseReport(%q) = %v, want a usage report error", bad, err)
		}
	}
}

func FuzzParseReport(f *testing.F) {
	f.Add(AppendReport(nil, Report{Node: "n1", Window: time.Second, Classes: []ClassUsage{{Name: "default", Demanded: 3, Admitted: 2}}}))
	f.Add([]byte("shield-usage/1 n2 1000\n"))
	f.Add([]byte("shield-usage/1 n%20 99\na%0A 1 1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseReport(b)
		if err != nil {
			return
		}
		again, err := ParseReport(AppendReport(nil, r))
		if err != nil {
			t.Fatalf("re-parse of a parsed report failed: %v", err)
		}
		if again.Node != r.Node || again.Window != r.Window || len(again.Classes) != len(r.Classes) {
			t.Fatalf("round trip changed the report: %+v → %+v", r, again)
		}
	})
}
