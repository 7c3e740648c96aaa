package admission

import (
	"slices"
	"testing"
	"time"
)

// TestFleetFailModeAllowance: a node that stops hearing from its peers
// enforces a bounded local allowance: with both peers of three silent,
// exactly rate/3 and ceil(burst/3) (never the whole rate, never zero);
// with one of three silent, at most 2/3 together with the peer it hears
// and at least FleetReserve/3. Silent names the members Apply counted.
func TestFleetFailModeAllowance(t *testing.T) {
	ts, err := NewTenants(Config{Default: Limits{Rate: 90, Burst: 30, MaxConcurrency: 10}}, 3)
	if err != nil {
		t.Fatal(err)
	}
	f := NewFleet("a", time.Second)
	members := []string{"a", "b", "c"}
	start := time.Unix(1_700_000_000, 0)
	d := ts.Default()
	// Heard from b and c, this node has all the demand.
	f.Observe(ts, start)
	for range 50 {
		d.Admit(start.Add(500 * time.Millisecond))
		d.Done()
	}
	f.Observe(ts, start.Add(time.Second))
	for _, id := range []string{"b", "c"} {
		f.Receive(Report{Node: id, Window: time.Second}, ts, start.Add(time.Second))
	}
	if n := f.Apply(ts, members, start.Add(time.Second)); n != 0 {
		t.Fatalf("silent = %d with every peer heard", n)
	}
	if s := d.Share(); s <= 1.0/3 {
		t.Fatalf("share with all demand here and peers heard = %v, want above 1/3", s)
	}
	// c goes silent.
	later := start.Add(time.Second + StaleIntervals*time.Second + time.Millisecond)
	f.Receive(Report{Node: "b", Window: time.Second}, ts, later)
	if n := f.Apply(ts, members, later); n != 1 {
		t.Fatalf("silent = %d, want 1 (c)", n)
	}
	if got := f.Silent(members, later); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("Silent = %v, want [c]", got)
	}
	if s := d.Share(); s > 2.0/3+1e-9 || s < FleetReserve/3 {
		t.Fatalf("share with c silent = %v, want in [%v, 2/3]", s, FleetReserve/3)
	}
	// Both silent: alone, exactly 1/3.
	alone := later.Add(StaleIntervals*time.Second + time.Millisecond)
	if n := f.Apply(ts, members, alone); n != 2 {
		t.Fatalf("silent = %d, want 2", n)
	}
	if got := f.Silent(members, alone); !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("Silent = %v, want [b c]", got)
	}
	r, b := d.NodeLimits()
	if s := d.Share(); s < 1.0/3-1e-9 || s > 1.0/3+1e-9 || r < 30-1e-9 || r > 30+1e-9 || b != 10 {
		t.Fatalf("alone: share %v, node rate %v, burst %d; want 1/3, 30, 10", s, r, b)
	}
	if LocalAllowance(3) != 1.0/3 || LocalAllowance(0) != 1 {
		t.Fatalf("LocalAllowance(3), (0) = %v, %v", LocalAllowance(3), LocalAllowance(0))
	}
}
