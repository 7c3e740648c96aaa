package heapfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
)

func TestPercentFor(t *testing.T) {
	for _, tc := range []struct {
		floor, live, scanned uint64
		want                 int
	}{
		{64 << 20, 16 << 20, 16 << 20, 300},   // goal 16 + 16 × 3 = 64 MiB
		{64 << 20, 16 << 20, 24 << 20, 200},   // stacks and globals count
		{64 << 20, 32 << 20, 32 << 20, 100},   // GOGC 100's goal reaches the floor
		{64 << 20, 100 << 20, 100 << 20, 100}, // past it: GOGC 100
		{64 << 20, 0, 0, 1600},                // nothing measured: the runtime's 4 MiB minimum × 16
		{64 << 20, 1 << 20, 1 << 20, 1600},    // a tiny heap: the same bound
		{1 << 62, 1, 1, 1<<31 - 1},            // clamped
	} {
		if got := percentFor(tc.floor, tc.live, tc.scanned); got != tc.want {
			t.Errorf("percentFor(%d, %d, %d) = %d, want %d", tc.floor, tc.live, tc.scanned, got, tc.want)
		}
	}
}

// cycles is the number of GC cycles so far.
func cycles() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

var sink []byte

// churn allocates n bytes of garbage in 64 KiB pieces.
func churn(n int) {
	for i := 0; i < n; i += 64 << 10 {
		sink = make([]byte, 64<<10)
	}
	sink = nil
}

// TestFloor: with a 128 MiB floor, allocating 1 GiB of garbage runs the
// collector about 1 GiB / 128 MiB times, where GOGC 100 over this test's
// few MiB of live heap runs it hundreds of times; the floor follows the
// cycles (its percentage is set after each), and Stop gives GOGC 100 back.
func TestFloor(t *testing.T) {
	t.Setenv("GOGC", "") // the floor stands back for an operator's GOGC
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)
	runtime.GC()

	c0 := cycles()
	churn(1 << 30)
	without := cycles() - c0

	f := Start(128 << 20)
	if !f.Running() {
		t.Fatal("a 128 MiB floor without GOGC is not running")
	}
	if f.Percent() <= 100 {
		t.Fatalf("percent %d after Start, want over 100 (live heap well under 64 MiB)", f.Percent())
	}
	c0 = cycles()
	churn(1 << 30)
	with := cycles() - c0
	f.Stop()
	t.Logf("GC cycles for 1 GiB of garbage: %d with a 128 MiB floor, %d without", with, without)
	if with < 4 || with > 16 || with*4 > without {
		t.Errorf("%d cycles with the floor (%d without), want 4 to 16 (1 GiB / 128 MiB, give or take) and a quarter of those without", with, without)
	}
	if p := debug.SetGCPercent(100); p != 100 {
		t.Errorf("GOGC %d after Stop, want 100", p)
	}
	// A stopped floor's pending cleanup sets nothing more.
	debug.SetGCPercent(50)
	runtime.GC()
	runtime.GC()
	if p := debug.SetGCPercent(100); p != 50 {
		t.Errorf("GOGC %d after cycles past Stop, want the 50 set since", p)
	}
}

// TestZeroFloor: a floor of 0 changes nothing.
func TestZeroFloor(t *testing.T) {
	old := debug.SetGCPercent(77)
	defer debug.SetGCPercent(old)
	f := Start(0)
	runtime.GC()
	f.Stop()
	if p := debug.SetGCPercent(old); p != 77 {
		t.Errorf("GOGC %d, want 77 untouched", p)
	}
}

// TestGOGCSet: with a GOGC environment variable the operator paces the
// collector: the floor does not start and leaves the percentage alone.
func TestGOGCSet(t *testing.T) {
	t.Setenv("GOGC", "150")
	old := debug.SetGCPercent(150)
	defer debug.SetGCPercent(old)
	f := Start(128 << 20)
	runtime.GC()
	if f.Running() {
		t.Error("the floor runs although GOGC is set")
	}
	f.Stop()
	if p := debug.SetGCPercent(old); p != 150 {
		t.Errorf("GOGC %d, want the operator's 150 untouched", p)
	}
}
