package routing

import (
	"math"
	"slices"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func ids(s *PeerSet) []string {
	var out []string
	for _, p := range s.Peers() {
		out = append(out, p.ID)
	}
	return out
}

func TestNewMembershipStartsSolo(t *testing.T) {
	m := NewMembership(Peer{ID: "me", Addr: "127.0.0.1:7070"}, 0, nil)
	v := m.View()
	if v.Current.Len() != 1 || v.Current.Self() == nil || v.Previous != nil {
		t.Fatalf("initial view = %v (previous %v), want just self", ids(v.Current), v.Previous)
	}
	if m.overlap != DefaultOverlap {
		t.Errorf("overlap = %v, want default %v", m.overlap, DefaultOverlap)
	}
	if _, isSelf := v.Current.Owner(42); !isSelf {
		t.Error("solo set does not own every key")
	}
	defer func() {
		if recover() == nil {
			t.Error("NewMembership with an empty self ID did not panic")
		}
	}()
	NewMembership(Peer{}, 0, nil)
}

func TestMembershipUpdate(t *testing.T) {
	self := Peer{ID: "b", Addr: "10.0.0.2:7070"}
	abc := []Peer{{ID: "a", Addr: "10.0.0.1:7070"}, self, {ID: "c", Addr: "10.0.0.3:7070"}}
	tests := []struct {
		name        string
		first       []Peer // applied before the update under test; nil = none
		update      []Peer
		wantChanged bool
		wantIDs     []string
		wantSelf    bool
	}{
		{"grow", nil, abc, true, []string{"a", "b", "c"}, true},
		{"same set is no change", abc, []Peer{abc[2], abc[0], abc[1]}, false, []string{"a", "b", "c"}, true},
		{"weight 0 equals 1", abc, []Peer{{ID: "a", Addr: "10.0.0.1:7070", Weight: 1}, self, abc[2]}, false, []string{"a", "b", "c"}, true},
		{"self not passing yet", nil, []Peer{abc[0], abc[2]}, true, []string{"a", "c"}, false},
		{"empty becomes solo", abc, nil, true, []string{"b"}, true},
		{"empty id dropped", nil, []Peer{{ID: ""}, abc[0]}, true, []string{"a"}, false},
		{"bad weight becomes 1", abc, []Peer{{ID: "a", Addr: "10.0.0.1:7070", Weight: math.NaN()}, self, {ID: "c", Addr: "10.0.0.3:7070", Weight: -3}}, false, []string{"a", "b", "c"}, true},
		{"duplicate id keeps smallest addr", nil, []Peer{{ID: "a", Addr: "10.0.0.9:7070"}, {ID: "a", Addr: "10.0.0.1:7070"}, self}, true, []string{"a", "b"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := NewMembership(self, 10*time.Second, nil)
			if tt.first != nil {
				m.Update(tt.first, t0)
			}
			before := m.View()
			changed := m.Update(tt.update, t0.Add(time.Second))
			v := m.View()
			if changed != tt.wantChanged {
				t.Errorf("Update changed = %v, want %v", changed, tt.wantChanged)
			}
			if got := ids(v.Current); !slices.Equal(got, tt.wantIDs) {
				t.Errorf("peers = %v, want %v", got, tt.wantIDs)
			}
			if (v.Current.Self() != nil) != tt.wantSelf {
				t.Errorf("Self() = %v, want present %v", v.Current.Self(), tt.wantSelf)
			}
			if !changed && v != before {
				t.Error("unchanged Update replaced the View")
			}
			if changed && (v.Previous != before.Current || !v.PreviousUntil.Equal(t0.Add(11*time.Second))) {
				t.Errorf("previous = %v until %v, want the old set until %v", v.Previous, v.PreviousUntil, t0.Add(11*time.Second))
			}
		})
	}
}

func TestDuplicateResolutionIsOrderFree(t *testing.T) {
	x := Peer{ID: "a", Addr: "10.0.0.9:7070"}
	y := Peer{ID: "a", Addr: "10.0.0.1:7070"}
	m1 := NewMembership(Peer{ID: "s"}, 0, nil)
	m2 := NewMembership(Peer{ID: "t"}, 0, nil)
	m1.Update([]Peer{x, y}, t0)
	m2.Update([]Peer{y, x}, t0)
	if g1, g2 := m1.View().Current.Generation(), m2.View().Current.Generation(); g1 != g2 {
		t.Fatalf("nodes resolved a duplicate differently: %#x vs %#x", g1, g2)
	}
	if got := m1.View().Current.Lookup("a").Addr; got != y.Addr {
		t.Errorf("kept %s, want %s", got, y.Addr)
	}
}

func TestViewAccepts(t *testing.T) {
	m := NewMembership(Peer{ID: "a"}, 10*time.Second, nil)
	m.Update([]Peer{{ID: "a"}, {ID: "b"}}, t0)
	g1 := m.View().Current.Generation()
	m.Update([]Peer{{ID: "a"}, {ID: "b"}, {ID: "c"}}, t0)
	g2 := m.View().Current.Generation()
	v := m.View()
	tests := []struct {
		name string
		gen  uint64
		now  time.Time
		want bool
	}{
		{"current", g2, t0, true},
		{"current long after", g2, t0.Add(time.Hour), true},
		{"previous inside overlap", g1, t0.Add(9 * time.Second), true},
		{"previous at end of overlap", g1, t0.Add(10 * time.Second), false},
		{"previous after overlap", g1, t0.Add(time.Minute), false},
		{"unknown", g1 ^ g2 ^ 1, t0, false},
		{"zero", 0, t0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := v.Accepts(tt.gen, tt.now); got != tt.want {
				t.Errorf("Accepts(%#x, +%v) = %v, want %v", tt.gen, tt.now.Sub(t0), got, tt.want)
			}
		})
	}
	// A second change inside the window forgets the oldest generation.
	m.Update([]Peer{{ID: "a"}}, t0.Add(time.Second))
	if m.View().Accepts(g1, t0.Add(2*time.Second)) {
		t.Error("generation two changes old still accepted")
	}
	if !m.View().Accepts(g2, t0.Add(2*time.Second)) {
		t.Error("previous generation not accepted inside the window")
	}
}

func TestViewPreviousOwner(t *testing.T) {
	m := NewMembership(Peer{ID: "node-00"}, 10*time.Second, nil)
	m.Update(testPeers(3, 1), t0)
	m.Update(testPeers(4, 1), t0)
	v := m.View()
	moved, stayed := 0, 0
	for _, d := range testDigests(2000) {
		cur, _ := v.Current.Owner(d)
		old, _ := v.Previous.Owner(d)
		got, isSelf, ok := v.PreviousOwner(d, t0.Add(time.Second))
		if ok != (old.ID != cur.ID) {
			t.Fatalf("PreviousOwner(%#x) ok = %v; owner %s → %s", d, ok, old.ID, cur.ID)
		}
		if ok {
			moved++
			if got.ID != old.ID || isSelf != (old.ID == "node-00") {
				t.Fatalf("PreviousOwner(%#x) = %s (self %v), want %s", d, got.ID, isSelf, old.ID)
			}
		} else {
			stayed++
		}
		if _, _, ok := v.PreviousOwner(d, t0.Add(10*time.Second)); ok {
			t.Fatalf("PreviousOwner(%#x) answered after the overlap window", d)
		}
	}
	if moved == 0 || stayed == 0 {
		t.Fatalf("moved %d, stayed %d: test digests do not exercise both cases", moved, stayed)
	}
	solo := NewMembership(Peer{ID: "x"}, 0, nil).View()
	if _, _, ok := solo.PreviousOwner(1, t0); ok {
		t.Error("PreviousOwner answered with no previous set")
	}
}

func TestSubscribe(t *testing.T) {
	m := NewMembership(Peer{ID: "a"}, 0, nil)
	var got []int
	unsubscribe := m.Subscribe(func(v *View) { got = append(got, v.Current.Len()) })
	m.Update([]Peer{{ID: "a"}, {ID: "b"}}, t0)
	m.Update([]Peer{{ID: "b"}, {ID: "a"}}, t0) // no change: no call
	m.Update([]Peer{{ID: "a"}, {ID: "b"}, {ID: "c"}}, t0)
	unsubscribe()
	m.Update([]Peer{{ID: "a"}}, t0)
	if want := []int{1, 2, 3}; !slices.Equal(got, want) {
		t.Errorf("subscriber saw set sizes %v, want %v", got, want)
	}
}

// TestConcurrentReaders runs readers against a writer; with -race it checks
// that the View is published safely and always usable.
func TestConcurrentReaders(t *testing.T) {
	m := NewMembership(Peer{ID: "node-00"}, time.Second, nil)
	done := make(chan struct{})
	var wg sync.WaitGroup
	for r := range 4 {
		wg.Go(func() {
			for i := uint64(0); ; i++ {
				select {
				case <-done:
					return
				default:
				}
				v := m.View()
				if p, _ := v.Current.Owner(i * uint64(r+1)); p == nil {
					t.Error("nil owner")
					return
				}
				v.Accepts(v.Current.Generation(), t0)
			}
		})
	}
	for i := range 200 {
		m.Update(testPeers(1+i%7, 1), t0.Add(time.Duration(i)*time.Millisecond))
	}
	close(done)
	wg.Wait()
}
