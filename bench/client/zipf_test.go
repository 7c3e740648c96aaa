package main

import "testing"

// TestWorkload checks the stream is deterministic, Zipf-shaped (rank 0 is
// the most requested key) and sized within bounds, and that the floor
// counts each distinct key once.
func TestWorkload(t *testing.T) {
	a, err := newWorkload(1000, 20000, 1.0, 7, 1024, 256<<10, 1.2)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := newWorkload(1000, 20000, 1.0, 7, 1024, 256<<10, 1.2)
	counts := map[uint32]int{}
	for i, k := range a.keys {
		if b.keys[i] != k {
			t.Fatalf("request %d: key %d then %d: the stream is not deterministic", i, k, b.keys[i])
		}
		if k >= 1000 {
			t.Fatalf("key %d out of range", k)
		}
		counts[k]++
	}
	for k, n := range counts {
		if n > counts[0] {
			t.Errorf("key %d requested %d times, more than rank 0 (%d)", k, n, counts[0])
		}
	}
	// Rank 0 gets 1/H(1000) ≈ 13.4% of the requests.
	if f := float64(counts[0]) / 20000; f < 0.12 || f > 0.15 {
		t.Errorf("rank 0 share %.3f, want ~0.134", f)
	}
	if d, _ := a.floor(); d != len(counts) {
		t.Errorf("floor %d, want %d distinct keys", d, len(counts))
	}
	for k := range uint32(1000) {
		if s := a.size(k); s < 1024 || s > 256<<10 {
			t.Fatalf("size(%d) = %d out of bounds", k, s)
		}
	}
	if _, err := newWorkload(0, 1, 1, 1, 1, 1, 1); err == nil {
		t.Error("zero keys accepted")
	}
}

// TestIndependentMisses: three infinite independent caches behind
// round-robin miss a key once per node it reaches.
func TestIndependentMisses(t *testing.T) {
	w, _ := newWorkload(1000000, 30000, 1.0, 1, 1024, 256<<10, 1.2)
	seen := map[[2]uint32]bool{}
	for i, k := range w.keys {
		seen[[2]uint32{k, uint32(i % 3)}] = true
	}
	d, _ := w.floor()
	t.Logf("floor %d, three independent infinite caches %d", d, len(seen))
}
