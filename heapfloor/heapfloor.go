// Package heapfloor keeps the garbage collector from running before the
// Go heap has reached a floor.
//
// shield's live heap is small: cache entries live off the Go heap (in
// fastcache's chunks and the disk tier's files), so what remains is
// connections, buffers and per-request objects, about 17 MiB under
// HTTP/2 load. With GOGC's default of 100 the collector starts a cycle
// every time that much has been allocated again, and the HTTP/2 path
// (net/http allocates per request) then runs it about 25 times a second:
// GOGC 400 instead of 100 cut the CPU of a 1 KiB HTTP/2 hit by 19 %
// (`H2=1 bench/hit-ab.sh`). A floor lets
// the heap grow to a fixed size first, as a memory budget an operator
// sets, instead of to a multiple of a live heap that is small by design.
//
// After each cycle the percentage is set so that the next goal is the
// larger of the floor and GOGC 100's goal: a heap whose live part grows
// past about half the floor is collected exactly as without one. The
// cost is at most the floor in resident memory beyond what the live heap
// needs.
package heapfloor

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// What the collector paces by: the heap marked live by the last cycle,
// and the goroutine stacks and globals it scans, which GOGC's percentage
// applies to as well (goal = live + (live + stacks + globals) × GOGC/100).
var sampled = [3]string{"/gc/heap/live:bytes", "/gc/scan/stack:bytes", "/gc/scan/globals:bytes"}

// Floor is a running floor; Stop ends it.
type Floor struct {
	floor uint64

	mu      sync.Mutex // guards the fields below
	stopped bool
	percent int // the percentage last set
	sample  [len(sampled)]metrics.Sample
}

// Start keeps the heap goal at floor bytes or more, from now until Stop.
// A floor of 0 starts nothing, and neither does a GOGC environment
// variable: the operator paces the collector (Running reports which).
func Start(floor uint64) *Floor {
	f := &Floor{floor: floor, percent: -2}
	for i, name := range sampled {
		f.sample[i].Name = name
	}
	if floor == 0 || os.Getenv("GOGC") != "" {
		f.stopped = true
		return f
	}
	f.adjust()
	f.arm()
	return f
}

// Stop returns the collector to GOGC 100. A stopped or never started
// Floor does nothing.
func (f *Floor) Stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return
	}
	f.stopped = true
	debug.SetGCPercent(100)
}

// Running reports whether the floor paces the collector (Start had a
// floor, no GOGC was set, Stop has not been called).
func (f *Floor) Running() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.stopped
}

// Percent is the percentage the floor set last (-2: none yet).
func (f *Floor) Percent() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.percent
}

// sentinel is allocated once per cycle: its cleanup runs after the cycle
// that found it unreachable, which is when the live heap is known anew.
// It is 32 bytes so that it is not a tiny allocation (those share a
// block, and a block's cleanups wait for all of it).
type sentinel [32]byte

// arm registers the next cycle's adjustment.
func (f *Floor) arm() {
	runtime.AddCleanup(new(sentinel), func(f *Floor) {
		if f.adjust() {
			f.arm()
		}
	}, f)
}

// adjust sets the percentage for the live heap the last cycle found; it
// reports false once the floor is stopped.
func (f *Floor) adjust() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return false
	}
	metrics.Read(f.sample[:])
	var v [len(sampled)]uint64
	for i, s := range f.sample {
		if s.Value.Kind() == metrics.KindUint64 {
			v[i] = s.Value.Uint64()
		}
	}
	p := percentFor(f.floor, v[0], v[0]+v[1]+v[2])
	if p != f.percent {
		debug.SetGCPercent(p)
		f.percent = p
	}
	return true
}

// percentFor is the percentage whose goal, live + scanned × p/100 (the
// scanned base being the live heap, stacks and globals), is the floor,
// and never below 100. The runtime also keeps the goal at least
// heapMinimum × p/100, which bounds p for a small live heap.
func percentFor(floor, live, scanned uint64) int {
	if live+scanned >= floor {
		return 100
	}
	p := float64(floor) / heapMinimum * 100
	if scanned > 0 {
		p = min(p, float64(floor-live)/float64(scanned)*100)
	}
	return int(max(100, min(p, math.MaxInt32)))
}

// heapMinimum is the runtime's smallest goal at GOGC 100 (4 MiB), which
// it scales with the percentage.
const heapMinimum = 4 << 20
