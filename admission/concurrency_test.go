package admission

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// maxGauge tracks a value and the highest value it ever had.
type maxGauge struct{ cur, peak atomic.Int64 }

func (g *maxGauge) inc() {
	n := g.cur.Add(1)
	for {
		p := g.peak.Load()
		if n <= p || g.peak.CompareAndSwap(p, n) {
			return
		}
	}
}

func (g *maxGauge) dec() { g.cur.Add(-1) }

func TestAdmitConcurrencyNeverExceeded(t *testing.T) {
	const limit, workers, iters = 4, 32, 2000
	big := Limits{Rate: 1e9, Burst: 1e9, MaxConcurrency: limit}
	ts := mustTenants(t, big, big, 1)
	tn := ts.Lookup([]byte("acme"))
	var g maxGauge
	var admitted, refused atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range iters {
				r, _ := tn.Admit(t0)
				if r != None {
					refused.Add(1)
					continue
				}
				admitted.Add(1)
				g.inc()
				runtime.Gosched() // widen the window in which slots overlap
				if (w+i)%7 == 0 {
					ts.SetPeers(1+i%3, t0) // membership churn must not break counting
				}
				g.dec()
				tn.Done()
			}
		})
	}
	// Reloads race with Admit too.
	wg.Go(func() {
		for i := range 100 {
			cfg := Config{Default: big, Classes: map[string]Limits{"acme": big}}
			if i%2 == 0 {
				cfg.Classes["extra"] = big
			}
			if err := ts.Update(cfg, t0); err != nil {
				t.Error(err)
				return
			}
		}
	})
	wg.Wait()
	if p := g.peak.Load(); p > limit || p < 1 {
		t.Fatalf("peak in flight = %d, want 1..%d", p, limit)
	}
	if got := tn.InFlight(); got != 0 {
		t.Fatalf("InFlight after all Done = %d, want 0", got)
	}
	s := tn.Stats()
	if int64(s.Admitted) != admitted.Load() || int64(s.Rejected[Concurrency]+s.Rejected[Rate]) != refused.Load() {
		t.Fatalf("Stats() = %+v, want %d admitted and %d refused", s, admitted.Load(), refused.Load())
	}
	if admitted.Load()+refused.Load() != workers*iters {
		t.Fatalf("admitted + refused = %d, want %d", admitted.Load()+refused.Load(), workers*iters)
	}
}

func TestOriginConcurrencyNeverExceeded(t *testing.T) {
	const budget, workers, iters = 8, 32, 1000
	o := mustOrigin(t, OriginLimits{MaxConcurrency: budget, SlowStart: time.Second})
	ts, err := NewTenants(Config{
		Default: Limits{Rate: 1e9, Burst: 1e9, MaxConcurrency: 1e6},
		Classes: map[string]Limits{
			"a": {Rate: 1e9, Burst: 1e9, MaxConcurrency: 1e6, OriginShare: 0.5},
			"b": {Rate: 1e9, Burst: 1e9, MaxConcurrency: 1e6, OriginShare: 0.25},
		},
	}, 1)
	if err != nil {
		t.Fatal(err)
	}
	tenants := []*Tenant{ts.Lookup([]byte("a")), ts.Lookup([]byte("b")), nil}
	wantShare := []int64{budget / 2, budget / 4, budget}
	gauges := make([]maxGauge, len(tenants))
	var total maxGauge
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			k := w % len(tenants)
			for i := range iters {
				now := at(time.Duration(i) * time.Millisecond) // ramps, then full
				if i == iters/2 && w == 0 {
					o.StartRamp(now)
				}
				if r, _ := o.Acquire(now, tenants[k]); r != None {
					continue
				}
				total.inc()
				gauges[k].inc()
				runtime.Gosched() // widen the window in which slots overlap
				gauges[k].dec()
				total.dec()
				o.Release(tenants[k])
			}
		})
	}
	wg.Wait()
	if p := total.peak.Load(); p > budget || p < 1 {
		t.Errorf("peak origin in flight = %d, want 1..%d", p, budget)
	}
	for k, tn := range tenants {
		if p := gauges[k].peak.Load(); p > wantShare[k] {
			t.Errorf("tenant %d peak = %d, want ≤ %d", k, p, wantShare[k])
		}
		if tn != nil && o.TenantInFlight(tn) != 0 {
			t.Errorf("tenant %s still holds %d slots", tn.Name(), o.TenantInFlight(tn))
		}
	}
	if got := o.InFlight(); got != 0 {
		t.Fatalf("InFlight after all Release = %d, want 0", got)
	}
}
