package admission

import (
	"testing"
	"time"
)

// mustTenants builds a table with one class "acme" and the default class.
func mustTenants(t *testing.T, acme, def Limits, peers int) *Tenants {
	t.Helper()
	ts, err := NewTenants(Config{Default: def, Classes: map[string]Limits{"acme": acme}}, peers)
	if err != nil {
		t.Fatalf("NewTenants: %v", err)
	}
	return ts
}

var defLimits = Limits{Rate: 1, Burst: 1, MaxConcurrency: 1}

// step is one Admit at t0+at; done releases the slot right away.
type step struct {
	at         time.Duration
	want       Reason
	wantRetry  time.Duration
	done       bool
	wantTokens float64 // after the step; checked when ≥ 0
}

func runSteps(t *testing.T, tn *Tenant, steps []step) {
	t.Helper()
	for i, s := range steps {
		r, ra := tn.Admit(at(s.at))
		if r != s.want || ra != s.wantRetry {
			t.Fatalf("step %d: Admit(t0+%v) = %v, %v; want %v, %v", i, s.at, r, ra, s.want, s.wantRetry)
		}
		if r == None && s.done {
			tn.Done()
		}
		if s.wantTokens >= 0 {
			if got := tn.Tokens(at(s.at)); !near(got, s.wantTokens) {
				t.Fatalf("step %d: Tokens(t0+%v) = %v, want %v", i, s.at, got, s.wantTokens)
			}
		}
	}
}

func near(a, b float64) bool { d := a - b; return d < 1e-9 && d > -1e-9 }

func TestAdmitBucket(t *testing.T) {
	tests := []struct {
		name  string
		l     Limits
		steps []step
	}{
		{
			name: "burst then refill",
			l:    Limits{Rate: 2, Burst: 3, MaxConcurrency: 100},
			steps: []step{
				{0, None, 0, true, 2},
				{0, None, 0, true, 1},
				{0, None, 0, true, 0},
				{0, Rate, time.Second, true, 0}, // (1-0)/2 = 0.5 s → 1 s
				{250 * time.Millisecond, Rate, time.Second, true, 0.5},
				{500 * time.Millisecond, None, 0, true, 0},
				{2 * time.Second, None, 0, true, 2}, // 3 tokens clamped at burst, minus 1
			},
		},
		{
			name: "slow rate gives long Retry-After",
			l:    Limits{Rate: 0.25, Burst: 1, MaxConcurrency: 100},
			steps: []step{
				{0, None, 0, true, 0},
				{0, Rate, 4 * time.Second, true, 0},                                // 1/0.25
				{time.Second, Rate, 3 * time.Second, true, 0.25},                   // 0.75/0.25
				{3500 * time.Millisecond, Rate, time.Second, true, 0.875},          // 0.5 s → 1 s
				{3900 * time.Millisecond, Rate, time.Second, true, 0.975},          // 0.1 s → 1 s
				{4 * time.Second, None, 0, true, 0},                                // exactly one token
				{5 * time.Second, Rate, 3 * time.Second, true, 0.25},               // 0.75/0.25
				{5*time.Second + time.Nanosecond, Rate, 3 * time.Second, true, -1}, // just under 3 s
			},
		},
		{
			name: "tiny rate is capped",
			l:    Limits{Rate: 1e-9, Burst: 1, MaxConcurrency: 100},
			steps: []step{
				{0, None, 0, true, 0},
				{0, Rate, MaxRetryAfter, true, 0},
			},
		},
		{
			name: "concurrency limit, no token spent on refusal",
			l:    Limits{Rate: 1, Burst: 5, MaxConcurrency: 2},
			steps: []step{
				{0, None, 0, false, 4},
				{0, None, 0, false, 3},
				{0, Concurrency, time.Second, false, 3},
				{0, Concurrency, time.Second, false, 3},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := mustTenants(t, tt.l, defLimits, 1)
			runSteps(t, ts.Lookup([]byte("acme")), tt.steps)
		})
	}
}

func TestAdmitDoneAndStats(t *testing.T) {
	ts := mustTenants(t, Limits{Rate: 1, Burst: 2, MaxConcurrency: 1}, defLimits, 1)
	tn := ts.Lookup([]byte("acme"))
	if r, _ := tn.Admit(t0); r != None {
		t.Fatalf("first Admit = %v, want none", r)
	}
	if r, _ := tn.Admit(t0); r != Concurrency {
		t.Fatalf("second Admit while first in flight = %v, want concurrency", r)
	}
	tn.Done()
	tn.Done() // unmatched: ignored
	if got := tn.InFlight(); got != 0 {
		t.Fatalf("InFlight after extra Done = %d, want 0", got)
	}
	if r, _ := tn.Admit(t0); r != None {
		t.Fatalf("Admit after Done = %v, want none", r)
	}
	tn.Done()
	if r, _ := tn.Admit(t0); r != Rate {
		t.Fatalf("Admit with empty bucket = %v, want rate", r)
	}
	s := tn.Stats()
	want := TenantStats{
		Name:     "acme",
		Limits:   Limits{Rate: 1, Burst: 2, MaxConcurrency: 1, OriginShare: 1},
		Admitted: 2,
		Rejected: ReasonCounts{Rate: 1, Concurrency: 1},
		Share:    1, NodeRate: 1, NodeBurst: 2,
	}
	if s != want {
		t.Fatalf("Stats() = %+v, want %+v", s, want)
	}
}
