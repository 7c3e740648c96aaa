//go:build !race

package admission

import (
	"testing"
	"time"
)

// TestAcquireWaitAllocs: taking a free slot at any priority, and a refusal
// that does not wait, allocate nothing (only waiting does).
func TestAcquireWaitAllocs(t *testing.T) {
	o := mustOrigin(t, OriginLimits{MaxConcurrency: 64, QueueTimeout: time.Second})
	o.SetReserveHigh(true)
	full := mustOrigin(t, OriginLimits{MaxConcurrency: 2})
	full.AcquireWait(t0, nil, High)
	for _, p := range []Priority{Low, Normal, High} {
		if n := testing.AllocsPerRun(1000, func() {
			if r, _ := o.AcquireWait(t0, nil, p); r != None {
				t.Fatalf("AcquireWait = %v", r)
			}
			o.Release(nil)
		}); n != 0 {
			t.Errorf("AcquireWait(%v) of a free slot: %v allocs", p, n)
		}
		if n := testing.AllocsPerRun(1000, func() { full.AcquireWait(t0, nil, Low) }); n != 0 {
			t.Errorf("AcquireWait refused without waiting: %v allocs", n)
		}
	}
}
