//go:build !race

package admission

import (
	"testing"
	"time"
)

// TestRequestPathAllocs asserts the request path (lookup, admit, refuse,
// acquire, release) does not allocate. Excluded under -race, which
// allocates on its own.
func TestRequestPathAllocs(t *testing.T) {
	ts := mustTenants(t,
		Limits{Rate: 1e9, Burst: 1e9, MaxConcurrency: 1 << 20, OriginShare: 0.5},
		Limits{Rate: 1, Burst: 1, MaxConcurrency: 1}, 3)
	acme := []byte("acme")
	unknown := []byte("someone-else")
	empty := ts.Default()
	empty.Admit(t0) // drain the default bucket: every later Admit is refused for rate
	empty.Done()
	busy := mustTenants(t, Limits{Rate: 1e9, Burst: 1e9, MaxConcurrency: 1}, defLimits, 1).Lookup(acme)
	busy.Admit(t0) // hold the only slot: every later Admit is refused for concurrency

	o := mustOrigin(t, OriginLimits{MaxConcurrency: 64, MaxRate: 1e9, SlowStart: 30 * time.Second})
	o.StartRamp(t0)
	full := mustOrigin(t, OriginLimits{MaxConcurrency: 1, MaxRate: 1})
	full.Acquire(t0, nil)
	spent := mustOrigin(t, OriginLimits{MaxConcurrency: 10, MaxRate: 1})
	spent.Acquire(t0, nil)
	spent.Release(nil)

	tests := []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"Lookup known", func(t *testing.T) { ts.Lookup(acme) }},
		{"Lookup unknown", func(t *testing.T) { ts.Lookup(unknown) }},
		{"Admit+Done", func(t *testing.T) {
			tn := ts.Lookup(acme)
			if r, _ := tn.Admit(t0); r != None {
				t.Fatalf("Admit = %v", r)
			}
			tn.Done()
		}},
		{"Admit refused rate", func(t *testing.T) {
			if r, _ := ts.Lookup(unknown).Admit(t0); r != Rate {
				t.Fatalf("Admit = %v", r)
			}
		}},
		{"Admit refused concurrency", func(t *testing.T) {
			if r, _ := busy.Admit(t0); r != Concurrency {
				t.Fatalf("Admit = %v", r)
			}
		}},
		{"Acquire+Release", func(t *testing.T) {
			tn := ts.Lookup(acme)
			if r, _ := o.Acquire(at(time.Second), tn); r != None {
				t.Fatalf("Acquire = %v", r)
			}
			o.Release(tn)
		}},
		{"Acquire refused concurrency", func(t *testing.T) {
			if r, _ := full.Acquire(t0, ts.Lookup(acme)); r != Concurrency {
				t.Fatalf("Acquire = %v", r)
			}
		}},
		{"Acquire refused rate", func(t *testing.T) {
			if r, _ := spent.Acquire(t0, ts.Lookup(acme)); r != Rate {
				t.Fatalf("Acquire = %v", r)
			}
		}},
		{"Reason String", func(t *testing.T) { _ = Rate.String() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if n := testing.AllocsPerRun(1000, func() { tt.fn(t) }); n != 0 {
				t.Errorf("%s: %v allocs/op, want 0", tt.name, n)
			}
		})
	}
}
