package routing

import (
	"errors"
	"math"
	"slices"
	"testing"
)

func TestNewPeerSetValidation(t *testing.T) {
	tests := []struct {
		name    string
		peers   []Peer
		wantErr error
	}{
		{"empty", nil, ErrNoPeers},
		{"empty id", []Peer{{ID: "a"}, {ID: ""}}, ErrEmptyID},
		{"duplicate id", []Peer{{ID: "a", Addr: "x:1"}, {ID: "b"}, {ID: "a", Addr: "y:1"}}, ErrDuplicateID},
		{"negative weight", []Peer{{ID: "a", Weight: -1}}, ErrInvalidWeight},
		{"nan weight", []Peer{{ID: "a", Weight: math.NaN()}}, ErrInvalidWeight},
		{"inf weight", []Peer{{ID: "a", Weight: math.Inf(1)}}, ErrInvalidWeight},
		{"too heavy", []Peer{{ID: "a", Weight: MaxWeight * 10}}, ErrInvalidWeight},
		{"too light", []Peer{{ID: "a", Weight: MinWeight / 10}}, ErrInvalidWeight},
		{"bounds ok", []Peer{{ID: "a", Weight: MinWeight}, {ID: "b", Weight: MaxWeight}}, nil},
		{"ok", []Peer{{ID: "b", Weight: 2}, {ID: "a"}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := NewPeerSet("a", tt.peers)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("NewPeerSet error = %v, want %v", err, tt.wantErr)
			}
			if err == nil && s.Len() != len(tt.peers) {
				t.Fatalf("Len() = %d, want %d", s.Len(), len(tt.peers))
			}
		})
	}
}

func TestPeerSetAccessors(t *testing.T) {
	in := []Peer{{ID: "c", Addr: "c:1", Weight: 3}, {ID: "a", Addr: "a:1"}, {ID: "b", Addr: "b:1", Weight: 2}}
	orig := slices.Clone(in)
	s := mustSet(t, "b", in)
	in[0].ID = "mutated" // the set must not alias the input
	got := s.Peers()
	wantIDs := []string{"a", "b", "c"}
	for i, p := range got {
		if p.ID != wantIDs[i] {
			t.Fatalf("Peers()[%d].ID = %q, want %q (sorted)", i, p.ID, wantIDs[i])
		}
	}
	if got[0].Weight != 1 {
		t.Errorf("weight 0 normalised to %v, want 1", got[0].Weight)
	}
	got[0].ID = "mutated" // nor expose its internals
	if s.Peers()[0].ID != "a" {
		t.Error("Peers() returned the internal slice")
	}
	if self := s.Self(); self == nil || self.ID != "b" {
		t.Errorf("Self() = %v, want b", self)
	}
	if p := s.Lookup("c"); p == nil || p.Addr != orig[0].Addr {
		t.Errorf("Lookup(c) = %v", p)
	}
	if p := s.Lookup("zz"); p != nil {
		t.Errorf("Lookup(zz) = %v, want nil", p)
	}
	if w := s.TotalWeight(); w != 6 {
		t.Errorf("TotalWeight() = %v, want 6", w)
	}
	absent := mustSet(t, "x", orig)
	if absent.Self() != nil {
		t.Errorf("Self() = %v for a node not in the set", absent.Self())
	}
	for _, d := range testDigests(1000) {
		if _, isSelf := absent.Owner(d); isSelf {
			t.Fatalf("Owner(%#x) isSelf for a node not in the set", d)
		}
		owner, isSelf := s.Owner(d)
		if isSelf != (owner.ID == "b") {
			t.Fatalf("Owner(%#x) = %s, isSelf %v", d, owner.ID, isSelf)
		}
	}
}

func TestGeneration(t *testing.T) {
	base := []Peer{{ID: "a", Addr: "10.0.0.1:7070", Weight: 1}, {ID: "b", Addr: "10.0.0.2:7070", Weight: 1}}
	gen := func(self string, peers []Peer) uint64 { return mustSet(t, self, peers).Generation() }
	g := gen("a", base)
	if g == 0 {
		t.Fatal("generation 0 is reserved")
	}
	same := []struct {
		name  string
		self  string
		peers []Peer
	}{
		{"other self", "b", base},
		{"self absent", "zz", base},
		{"reordered", "a", []Peer{base[1], base[0]}},
		{"weight 0 is 1", "a", []Peer{{ID: "a", Addr: "10.0.0.1:7070"}, base[1]}},
	}
	for _, tt := range same {
		t.Run("same/"+tt.name, func(t *testing.T) {
			if got := gen(tt.self, tt.peers); got != g {
				t.Errorf("generation %#x, want %#x", got, g)
			}
		})
	}
	differ := []struct {
		name  string
		peers []Peer
	}{
		{"addr", []Peer{{ID: "a", Addr: "10.0.0.9:7070", Weight: 1}, base[1]}},
		{"weight", []Peer{{ID: "a", Addr: "10.0.0.1:7070", Weight: 2}, base[1]}},
		{"id", []Peer{{ID: "aa", Addr: "10.0.0.1:7070", Weight: 1}, base[1]}},
		{"removed", base[:1]},
		{"added", append(slices.Clone(base), Peer{ID: "c", Addr: "10.0.0.3:7070"})},
		// Length prefixes keep field boundaries: moving a byte from ID to
		// Addr must change the hash.
		{"boundary", []Peer{{ID: "a1", Addr: "0.0.0.1:7070", Weight: 1}, base[1]}},
	}
	for _, tt := range differ {
		t.Run("differ/"+tt.name, func(t *testing.T) {
			if got := gen("a", tt.peers); got == g {
				t.Errorf("generation unchanged (%#x) after changing %s", got, tt.name)
			}
		})
	}
}
