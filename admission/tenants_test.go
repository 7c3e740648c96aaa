package admission

import (
	"strings"
	"testing"
	"time"
)

func TestLookup(t *testing.T) {
	ts, err := NewTenants(Config{
		Default: defLimits,
		Classes: map[string]Limits{"acme": {Rate: 5, MaxConcurrency: 5}, "Beta": {Rate: 7, MaxConcurrency: 7}},
	}, 1)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		in   []byte
		want string
	}{
		{[]byte("acme"), "acme"},
		{[]byte("Beta"), "Beta"},
		{[]byte("beta"), DefaultClass}, // exact match only
		{[]byte("unknown"), DefaultClass},
		{[]byte(""), DefaultClass},
		{nil, DefaultClass},
		{[]byte("default"), DefaultClass},
	}
	for _, tt := range tests {
		if got := ts.Lookup(tt.in).Name(); got != tt.want {
			t.Errorf("Lookup(%q).Name() = %q, want %q", tt.in, got, tt.want)
		}
	}
	if ts.Lookup([]byte("x")) != ts.Default() || ts.Lookup([]byte("y")) != ts.Default() {
		t.Errorf("unknown tenants do not share the default class")
	}
}

func TestNewTenantsInvalid(t *testing.T) {
	_, err := NewTenants(Config{Default: Limits{}}, 1)
	if err == nil || !strings.HasPrefix(err.Error(), "admission: ") {
		t.Fatalf("NewTenants(invalid) error = %v, want an admission: error", err)
	}
}

// TestSetPeers drives one bucket through membership changes at fixed
// instants; wantTokens and the node limits are what the fleet division
// (rate/n, ceil(burst/n)) and an unbroken bucket give.
func TestSetPeers(t *testing.T) {
	type op struct {
		at         time.Duration
		peers      int // SetPeers when > 0
		take       int // Admits (each Done at once) that must all succeed
		wantRate   float64
		wantBurst  int
		wantTokens float64
	}
	tests := []struct {
		name string
		ops  []op
	}{
		{
			name: "1→3→1 full bucket is clamped, then refills at the restored rate",
			ops: []op{
				{0, 0, 0, 30, 30, 30},
				{0, 3, 0, 10, 10, 10},
				{0, 1, 0, 30, 30, 10}, // no tokens minted by the change
				{500 * time.Millisecond, 0, 0, 30, 30, 25},
				{time.Second, 0, 0, 30, 30, 30},
			},
		},
		{
			name: "1→3→1 drained bucket stays drained",
			ops: []op{
				{0, 0, 25, 30, 30, 5},
				{0, 3, 0, 10, 10, 5},
				{100 * time.Millisecond, 0, 0, 10, 10, 6}, // refills at rate/3
				{100 * time.Millisecond, 1, 0, 30, 30, 6},
				{200 * time.Millisecond, 0, 0, 30, 30, 9}, // then at the full rate
			},
		},
		{
			name: "below 1 counts as 1, ceil of burst",
			ops: []op{
				{0, 4, 0, 7.5, 8, 8},
				{0, 0, 8, 7.5, 8, 0},
				{0, -2, 0, 30, 30, 0},
				{time.Second, 0, 0, 30, 30, 30},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := mustTenants(t, Limits{Rate: 30, Burst: 30, MaxConcurrency: 100}, defLimits, 1)
			tn := ts.Lookup([]byte("acme"))
			for i, o := range tt.ops {
				now := at(o.at)
				if o.peers != 0 {
					ts.SetPeers(o.peers, now)
				}
				for j := 0; j < o.take; j++ {
					if r, _ := tn.Admit(now); r != None {
						t.Fatalf("op %d: Admit %d = %v, want none", i, j, r)
					}
					tn.Done()
				}
				r, b := tn.NodeLimits()
				if !near(r, o.wantRate) || b != o.wantBurst {
					t.Errorf("op %d: NodeLimits() = %v, %d; want %v, %d", i, r, b, o.wantRate, o.wantBurst)
				}
				if got := tn.Tokens(now); !near(got, o.wantTokens) {
					t.Errorf("op %d: Tokens(t0+%v) = %v, want %v", i, o.at, got, o.wantTokens)
				}
			}
			if p := ts.Peers(); p < 1 {
				t.Errorf("Peers() = %d, want ≥ 1", p)
			}
		})
	}
}

func TestSetPeersAppliesToEveryClass(t *testing.T) {
	ts := mustTenants(t, Limits{Rate: 30, Burst: 30, MaxConcurrency: 1}, Limits{Rate: 6, Burst: 6, MaxConcurrency: 1}, 1)
	ts.SetPeers(3, t0)
	for _, tc := range []struct {
		name     string
		wantRate float64
	}{{"acme", 10}, {"other", 2}} {
		if r, _ := ts.Lookup([]byte(tc.name)).NodeLimits(); !near(r, tc.wantRate) {
			t.Errorf("Lookup(%q) rate after SetPeers(3) = %v, want %v", tc.name, r, tc.wantRate)
		}
	}
}

func TestUpdate(t *testing.T) {
	ts, err := NewTenants(Config{
		Default: Limits{Rate: 10, Burst: 10, MaxConcurrency: 5},
		Classes: map[string]Limits{
			"keep": {Rate: 10, Burst: 10, MaxConcurrency: 5},
			"gone": {Rate: 10, Burst: 10, MaxConcurrency: 5},
		},
	}, 2)
	if err != nil {
		t.Fatal(err)
	}
	keep, def := ts.Lookup([]byte("keep")), ts.Default()
	for _, tn := range []*Tenant{keep, def} {
		for range 4 { // 5 tokens per node (burst 10 / 2 peers) → 1 left
			if r, _ := tn.Admit(t0); r != None {
				t.Fatalf("%s: Admit = %v, want none", tn.Name(), r)
			}
			tn.Done()
		}
	}
	// One request stays in flight across the reload.
	if r, _ := keep.Admit(t0); r != None {
		t.Fatal("keep: last Admit refused")
	}
	if err := ts.Update(Config{
		Default: Limits{Rate: 40, Burst: 40, MaxConcurrency: 5},
		Classes: map[string]Limits{
			"keep": {Rate: 20, Burst: 40, MaxConcurrency: 1, OriginShare: 0.5},
			"new":  {Rate: 20, Burst: 40, MaxConcurrency: 5},
		},
	}, at(100*time.Millisecond)); err != nil {
		t.Fatalf("Update: %v", err)
	}

	if got := ts.Lookup([]byte("keep")); got != keep {
		t.Errorf("Lookup(keep) after reload is a new Tenant, want the same one")
	}
	if got := ts.Default(); got != def {
		t.Errorf("Default() after reload is a new Tenant, want the same one")
	}
	if got := ts.Lookup([]byte("gone")).Name(); got != DefaultClass {
		t.Errorf("Lookup(gone) after reload = %q, want %q", got, DefaultClass)
	}
	now := at(100 * time.Millisecond)
	tests := []struct {
		name       string
		tn         *Tenant
		wantTokens float64 // old rate until the reload instant, not refilled
		wantBurst  int
	}{
		{"keep", keep, 0 + 0.5, 20},               // 0 left + 100 ms at 5/s
		{"default", def, 1 + 0.5, 20},             // 1 left + 100 ms at 5/s
		{"new", ts.Lookup([]byte("new")), 20, 20}, // starts full
	}
	for _, tt := range tests {
		if got := tt.tn.Tokens(now); !near(got, tt.wantTokens) {
			t.Errorf("%s: Tokens after reload = %v, want %v", tt.name, got, tt.wantTokens)
		}
		if _, b := tt.tn.NodeLimits(); b != tt.wantBurst {
			t.Errorf("%s: burst after reload = %d, want %d", tt.name, b, tt.wantBurst)
		}
	}
	// The in-flight request survives and counts against the new limit 1.
	if got := keep.InFlight(); got != 1 {
		t.Fatalf("keep InFlight after reload = %d, want 1", got)
	}
	if r, _ := keep.Admit(at(time.Second)); r != Concurrency {
		t.Errorf("keep Admit with 1 in flight and new limit 1 = %v, want concurrency", r)
	}
	keep.Done()
	if s := keep.Stats(); s.Limits.OriginShare != 0.5 || s.InFlight != 0 {
		t.Errorf("keep Stats after reload = %+v, want share 0.5 and nothing in flight", s)
	}

	names := []string{}
	for _, s := range ts.Stats() {
		names = append(names, s.Name)
	}
	if got, want := strings.Join(names, ","), "default,keep,new"; got != want {
		t.Errorf("Stats() names = %s, want %s", got, want)
	}
}

func TestUpdateInvalidKeepsOld(t *testing.T) {
	ts := mustTenants(t, Limits{Rate: 10, MaxConcurrency: 5}, defLimits, 1)
	before := ts.Lookup([]byte("acme"))
	err := ts.Update(Config{Default: defLimits, Classes: map[string]Limits{"other": {Rate: 0, MaxConcurrency: 1}}}, t0)
	if err == nil || !strings.Contains(err.Error(), "reload rejected") {
		t.Fatalf("Update(invalid) = %v, want a reload rejected error", err)
	}
	if ts.Lookup([]byte("acme")) != before {
		t.Errorf("invalid Update replaced the table")
	}
	if r, _ := before.NodeLimits(); r != 10 {
		t.Errorf("invalid Update changed the rate to %v", r)
	}
}
