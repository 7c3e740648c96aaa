package topk

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

// zipfStream draws n keys from a Zipf distribution over keys distinct
// keys (exponent s) and returns them with their exact counts.
func zipfStream(n, keys int, s float64, seed uint64) ([]uint64, map[uint64]uint64) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	z := rand.NewZipf(r, s, 1, uint64(keys-1))
	stream := make([]uint64, n)
	exact := map[uint64]uint64{}
	for i := range stream {
		k := z.Uint64()
		stream[i] = k
		exact[k]++
	}
	return stream, exact
}

func keyOf(k uint64) []byte { return []byte(fmt.Sprintf("/item/%d", k)) }

// digestOf scrambles k so that slot order says nothing about rank.
func digestOf(k uint64) uint64 { return (k + 1) * 0x9e3779b97f4a7c15 }

// TestZipfAccuracy measures the sketch against exact counts: 1M requests
// over 100k keys, Zipf exponent 1.1, the default 1-in-16 sampling. The
// stated accuracy: every true top-20 key is among the sketch's top 30 and
// at least 18 of them in its top 20, and each true top-20 key's estimate
// is within 25% of its exact count (the sampling alone gives the #20 key,
// ~300 sampled requests, a standard error near 6%; measured worst cases
// are 5-15%).
func TestZipfAccuracy(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			stream, exact := zipfStream(1_000_000, 100_000, 1.1, seed)
			s := New(DefaultSlots, DefaultSample, time.Hour)
			now := time.Unix(1e9, 0)
			keys := map[uint64][]byte{}
			for _, k := range stream {
				if keys[k] == nil {
					keys[k] = keyOf(k)
				}
				s.Observe(digestOf(k), k%2 == 0, false, now, keys[k])
			}
			type kc struct {
				key   string
				count uint64
			}
			var truth []kc
			for k, c := range exact {
				truth = append(truth, kc{string(keyOf(k)), c})
			}
			slices.SortFunc(truth, func(a, b kc) int { return int(b.count) - int(a.count) })
			top := s.Top(30, now)
			rank := map[string]int{}
			est := map[string]Entry{}
			for i, e := range top {
				rank[e.Key] = i
				est[e.Key] = e
			}
			in20, worst := 0, 0.0
			for i, tk := range truth[:20] {
				r, ok := rank[tk.key]
				if !ok {
					t.Errorf("true rank %d %s (count %d) missing from the sketch's top 30", i+1, tk.key, tk.count)
					continue
				}
				if r < 20 {
					in20++
				}
				rel := math.Abs(float64(est[tk.key].Count)-float64(tk.count)) / float64(tk.count)
				worst = max(worst, rel)
				if rel > 0.25 {
					t.Errorf("true rank %d %s: estimate %d (±%d), exact %d: %.1f%% off", i+1, tk.key, est[tk.key].Count, est[tk.key].Error, tk.count, 100*rel)
				}
			}
			if in20 < 18 {
				t.Errorf("only %d of the true top 20 in the sketch's top 20", in20)
			}
			t.Logf("%d/20 of the true top 20 in the sketch's top 20; worst relative error %.1f%%; true #20 count %d, #1 %d", in20, 100*worst, truth[19].count, truth[0].count)
		})
	}
}

// TestWindow: keys that stop arriving leave within two windows.
func TestWindow(t *testing.T) {
	s := New(8, 1, time.Second)
	t0 := time.Unix(1e9, 0)
	for range 100 {
		s.Observe(1, true, false, t0, []byte("old"))
	}
	if top := s.Top(1, t0); len(top) != 1 || top[0].Key != "old" || top[0].Count != 100 || top[0].Hits != 100 {
		t.Fatalf("Top = %+v, want old:100", top)
	}
	s.Observe(2, false, true, t0.Add(1500*time.Millisecond), []byte("new"))
	if top := s.Top(2, t0.Add(1500*time.Millisecond)); len(top) != 2 || top[0].Key != "old" {
		t.Fatalf("after one window Top = %+v, want old still reported from the previous epoch", top)
	}
	top := s.Top(2, t0.Add(2500*time.Millisecond))
	if len(top) != 1 || top[0].Key != "new" || !top[0].Flag {
		t.Fatalf("after two windows Top = %+v, want only new (flagged)", top)
	}
	if top := s.Top(2, t0.Add(10*time.Second)); len(top) != 0 {
		t.Fatalf("after silence Top = %+v, want empty", top)
	}
}

// TestEvictionBound: with more keys than slots, the smallest slot is
// replaced and its count kept as the newcomer's error bound.
func TestEvictionBound(t *testing.T) {
	s := New(2, 1, time.Hour)
	now := time.Unix(1e9, 0)
	for range 5 {
		s.Observe(1, false, false, now, []byte("a"))
	}
	s.Observe(2, false, false, now, []byte("b"))
	s.Observe(3, false, false, now, []byte("c"), []byte("/x")) // evicts b (count 1)
	top := s.Top(5, now)
	if len(top) != 2 || top[0].Key != "a" || top[0].Count != 5 || top[1].Key != "c/x" || top[1].Count != 2 || top[1].Error != 1 {
		t.Fatalf("Top = %+v, want a:5 and c:2±1", top)
	}
	long := make([]byte, 1000)
	s.Observe(4, false, false, now, long, long)
	for _, e := range s.Top(5, now) {
		if len(e.Key) > MaxKeyLen {
			t.Fatalf("kept %d key bytes, want at most %d", len(e.Key), MaxKeyLen)
		}
	}
}

func TestObserveAllocs(t *testing.T) {
	s := New(0, 0, 0)
	now := time.Now()
	key := []byte("/some/key")
	var i uint64
	if n := testing.AllocsPerRun(10000, func() {
		i++
		s.Observe(i%500, true, false, now, key, key)
	}); n != 0 {
		t.Fatalf("Observe allocates %.1f per call, want 0", n)
	}
}

// TestConcurrent runs Observe and Top together (run with -race).
func TestConcurrent(t *testing.T) {
	s := New(16, 2, 10*time.Millisecond)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20000 {
				s.Observe(uint64(i%37+g), true, i%2 == 0, time.Now(), []byte("k"))
			}
		}()
	}
	for range 50 {
		for _, e := range s.Top(10, time.Now()) {
			if e.Key != "k" {
				t.Errorf("key %q", e.Key)
			}
		}
	}
	wg.Wait()
	if s.Total() == 0 {
		t.Fatal("nothing counted")
	}
}

func BenchmarkObserve(b *testing.B) {
	s := New(0, 0, 0)
	now := time.Now()
	key := []byte("/some/key")
	b.RunParallel(func(pb *testing.PB) {
		var i uint64
		for pb.Next() {
			i++
			s.Observe(i%1000, false, false, now, key)
		}
	})
}

// TestSampleRate: Sample picks every observation with sample 1 and about
// one in sample otherwise (within five standard deviations).
func TestSampleRate(t *testing.T) {
	for _, sample := range []int{1, 2, 16, 1000} {
		s := New(8, sample, time.Hour)
		const n = 400000
		got := 0
		for range n {
			if s.Sample() {
				got++
			}
		}
		p := 1 / float64(sample)
		want, sd := n*p, math.Sqrt(n*p*(1-p))
		if math.Abs(float64(got)-want) > 5*sd+0.5 {
			t.Errorf("sample %d: %d of %d picked, want %.0f ± %.0f", sample, got, n, want, 5*sd)
		}
	}
}
