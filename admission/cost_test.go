package admission

import (
	"testing"
	"time"
)

// TestAdmitNCost: a request costing n takes n tokens, is refused (for
// rate, with a Retry-After for n tokens) when fewer are there, and a cost
// above the node's burst is charged as the whole burst (admitted from a
// full bucket only, never refused forever).
func TestAdmitNCost(t *testing.T) {
	ts := mustTenants(t, Limits{Rate: 1, Burst: 10, MaxConcurrency: 100}, defLimits, 1)
	a := ts.Lookup([]byte("acme"))
	for i := range 2 {
		if r, _ := a.AdmitN(at(0), 5); r != None {
			t.Fatalf("cost-5 request %d from a bucket of 10: %v", i+1, r)
		}
		a.Done()
	}
	if got := a.Tokens(at(0)); !near(got, 0) {
		t.Fatalf("tokens after 2×5 = %v, want 0", got)
	}
	r, ra := a.AdmitN(at(2*time.Second), 5)
	if r != Rate || ra != 3*time.Second {
		t.Fatalf("cost 5 with 2 tokens = %v, %v; want rate, 3s", r, ra)
	}
	if r, _ := a.AdmitN(at(2*time.Second), 2); r != None {
		t.Fatalf("cost 2 with 2 tokens = %v, want admitted", r)
	}
	a.Done()
	if a.InFlight() != 0 {
		t.Fatalf("in flight %d after refusals and Done", a.InFlight())
	}
	// Cost 0 or less counts as 1.
	if r, _ := a.AdmitN(at(3*time.Second), 0); r != None {
		t.Fatalf("cost 0 with 1 token = %v", r)
	}
	a.Done()
	// Demand is in tokens: 5+5+2+1 admitted, 5 refused.
	if d, adm := a.usage(); d != 18 || adm != 13 {
		t.Fatalf("usage = %d demanded, %d admitted; want 18, 13", d, adm)
	}

	// Three nodes: this one's burst is ceil(10/3) = 4; a cost of 5 takes
	// the full bucket of 4.
	ts3 := mustTenants(t, Limits{Rate: 3, Burst: 10, MaxConcurrency: 100}, defLimits, 3)
	b := ts3.Lookup([]byte("acme"))
	if r, _ := b.AdmitN(at(0), 5); r != None {
		t.Fatalf("cost 5 over a node burst of 4, full bucket: %v, want admitted", r)
	}
	b.Done()
	if got := b.Tokens(at(0)); !near(got, 0) {
		t.Fatalf("tokens after an over-burst cost = %v, want 0", got)
	}
	if r, _ := b.AdmitN(at(time.Second), 5); r != Rate {
		t.Fatalf("cost 5 with 1 of 4 tokens: %v, want rate", r)
	}
}

// TestAdmitNAllocs: a costly request allocates nothing either.
func TestAdmitNAllocs(t *testing.T) {
	ts := mustTenants(t, Limits{Rate: 1e9, Burst: 1 << 30, MaxConcurrency: 100}, defLimits, 1)
	a := ts.Lookup([]byte("acme"))
	now := time.Now()
	if n := testing.AllocsPerRun(1000, func() {
		if r, _ := a.AdmitN(now, 7); r == None {
			a.Done()
		}
	}); n != 0 {
		t.Fatalf("AdmitN allocates %v per call", n)
	}
}
