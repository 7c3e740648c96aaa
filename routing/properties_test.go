package routing

import (
	"fmt"
	"math"
	"testing"
)

// The distribution properties of rendezvous hashing, checked over many
// keys. Tolerances are relative: ±5% of the expected count, which for 100k
// keys is more than four standard deviations at every N tested.

const propertyKeys = 100_000

// propertyDigests runs under -short too: the whole file takes well under
// a second, so there is nothing to gain by skipping it.
func propertyDigests(t *testing.T) []uint64 {
	t.Helper()
	return testDigests(propertyKeys)
}

// within reports whether got is within frac of want, relatively.
func within(got, want, frac float64) bool { return math.Abs(got-want) <= frac*want }

func TestLoadFollowsEqualWeights(t *testing.T) {
	digests := propertyDigests(t)
	for n := 3; n <= 16; n++ {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			s := mustSet(t, "", testPeers(n, 1))
			counts := make(map[string]int, n)
			for _, d := range digests {
				p, _ := s.Owner(d)
				counts[p.ID]++
			}
			want := float64(len(digests)) / float64(n)
			for _, p := range s.Peers() {
				if got := float64(counts[p.ID]); !within(got, want, 0.05) {
					t.Errorf("%s owns %v keys, want %.0f ±5%%", p.ID, got, want)
				}
			}
		})
	}
}

func TestLoadFollowsWeights(t *testing.T) {
	digests := propertyDigests(t)
	tests := []struct {
		name    string
		weights []float64
	}{
		{"1-2-3-4", []float64{1, 2, 3, 4}},
		{"one heavy", []float64{1, 1, 1, 1, 4}},
		{"fractional", []float64{0.5, 1.5, 1, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			peers := testPeers(len(tt.weights), 0)
			var total float64
			for i, w := range tt.weights {
				peers[i].Weight = w
				total += w
			}
			s := mustSet(t, "", peers)
			counts := make(map[string]int)
			for _, d := range digests {
				p, _ := s.Owner(d)
				counts[p.ID]++
			}
			for _, p := range peers {
				want := float64(len(digests)) * p.Weight / total
				if got := float64(counts[p.ID]); !within(got, want, 0.05) {
					t.Errorf("%s (weight %v) owns %v keys, want %.0f ±5%%", p.ID, p.Weight, got, want)
				}
			}
		})
	}
}

func TestAddingNodeMovesOnlyToIt(t *testing.T) {
	digests := propertyDigests(t)
	for n := 3; n <= 16; n++ {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			peers := testPeers(n+1, 1)
			before := mustSet(t, "", peers[:n])
			after := mustSet(t, "", peers)
			newID := peers[n].ID
			moved := 0
			for _, d := range digests {
				a, _ := before.Owner(d)
				b, _ := after.Owner(d)
				if a.ID == b.ID {
					continue
				}
				if b.ID != newID {
					t.Fatalf("key %#x moved %s → %s, not to the new node %s", d, a.ID, b.ID, newID)
				}
				moved++
			}
			want := float64(len(digests)) / float64(n+1)
			if !within(float64(moved), want, 0.05) {
				t.Errorf("%d keys moved, want %.0f ±5%% (1/(N+1))", moved, want)
			}
		})
	}
}

func TestRemovingNodeMovesOnlyItsKeys(t *testing.T) {
	digests := propertyDigests(t)
	for _, weighted := range []bool{false, true} {
		for n := 3; n <= 16; n++ {
			t.Run(fmt.Sprintf("N=%d/weighted=%v", n, weighted), func(t *testing.T) {
				peers := testPeers(n, 1)
				if weighted {
					for i := range peers {
						peers[i].Weight = float64(1 + i%3)
					}
				}
				gone := peers[n/2].ID
				rest := append(append([]Peer(nil), peers[:n/2]...), peers[n/2+1:]...)
				before := mustSet(t, "", peers)
				after := mustSet(t, "", rest)
				for _, d := range digests {
					a, _ := before.Owner(d)
					b, _ := after.Owner(d)
					if a.ID != gone && a.ID != b.ID {
						t.Fatalf("key %#x moved %s → %s though only %s left", d, a.ID, b.ID, gone)
					}
					if b.ID == gone {
						t.Fatalf("key %#x still owned by removed %s", d, gone)
					}
				}
			})
		}
	}
}

// TestSequentialDigests guards the mixer: even digests that differ only in
// their low bits (not what cachekey produces, but a cheap adversary) spread
// evenly.
func TestSequentialDigests(t *testing.T) {
	const n = 7
	s := mustSet(t, "", testPeers(n, 1))
	counts := make([]int, n)
	for d := range uint64(propertyKeys) {
		counts[s.ownerIndex(d)]++
	}
	want := float64(propertyKeys) / n
	for i, c := range counts {
		if !within(float64(c), want, 0.05) {
			t.Errorf("peer %d owns %d sequential keys, want %.0f ±5%%", i, c, want)
		}
	}
}
