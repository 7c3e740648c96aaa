package admission

import (
	"testing"
	"time"
)

func benchTenants(b *testing.B, l Limits) *Tenants {
	b.Helper()
	ts, err := NewTenants(Config{Default: l, Classes: map[string]Limits{"acme": l}}, 3)
	if err != nil {
		b.Fatal(err)
	}
	return ts
}

func BenchmarkLookup(b *testing.B) {
	ts := benchTenants(b, Limits{Rate: 1, MaxConcurrency: 1})
	name := []byte("acme")
	b.ReportAllocs()
	for b.Loop() {
		ts.Lookup(name)
	}
}

func BenchmarkAdmitAllowed(b *testing.B) {
	ts := benchTenants(b, Limits{Rate: 1e9, Burst: 1e9, MaxConcurrency: 1 << 20})
	tn := ts.Lookup([]byte("acme"))
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		if r, _ := tn.Admit(now); r != None {
			b.Fatalf("Admit = %v", r)
		}
		tn.Done()
	}
}

func BenchmarkAdmitRejectedRate(b *testing.B) {
	ts := benchTenants(b, Limits{Rate: 1, Burst: 1, MaxConcurrency: 1 << 20})
	tn := ts.Lookup([]byte("acme"))
	now := time.Now()
	tn.Admit(now)
	b.ReportAllocs()
	for b.Loop() {
		if r, _ := tn.Admit(now); r != Rate {
			b.Fatalf("Admit = %v", r)
		}
	}
}

func BenchmarkAdmitAllowedParallel(b *testing.B) {
	ts := benchTenants(b, Limits{Rate: 1e9, Burst: 1e9, MaxConcurrency: 1 << 20})
	tn := ts.Lookup([]byte("acme"))
	now := time.Now()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if r, _ := tn.Admit(now); r == None {
				tn.Done()
			}
		}
	})
}

func BenchmarkOriginAcquireRelease(b *testing.B) {
	ts := benchTenants(b, Limits{Rate: 1, MaxConcurrency: 1, OriginShare: 0.5})
	tn := ts.Lookup([]byte("acme"))
	o := mustOrigin(b, OriginLimits{MaxConcurrency: 256, MaxRate: 1e9, SlowStart: 30 * time.Second})
	now := time.Now()
	o.StartRamp(now.Add(-time.Minute))
	b.ReportAllocs()
	for b.Loop() {
		if r, _ := o.Acquire(now, tn); r != None {
			b.Fatalf("Acquire = %v", r)
		}
		o.Release(tn)
	}
}

func BenchmarkOriginAcquireRejected(b *testing.B) {
	ts := benchTenants(b, Limits{Rate: 1, MaxConcurrency: 1})
	tn := ts.Lookup([]byte("acme"))
	o := mustOrigin(b, OriginLimits{MaxConcurrency: 1})
	now := time.Now()
	o.Acquire(now, nil)
	b.ReportAllocs()
	for b.Loop() {
		if r, _ := o.Acquire(now, tn); r != Concurrency {
			b.Fatalf("Acquire = %v", r)
		}
	}
}
