package routing

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultOverlap is how long the previous generation stays acceptable after
// a membership change when NewMembership is given no overlap (docs/architecture.md §8).
const DefaultOverlap = 10 * time.Second

// Source feeds a Membership from somewhere: a static list or Consul. It is
// the seam between owner picking and service discovery, like groupcache's
// PeerPicker: the proxy only ever reads Membership.View.
type Source interface {
	// Run keeps the Membership current until ctx is done, then returns nil.
	Run(ctx context.Context) error
	// Refresh asks for an immediate re-read, e.g. after a peer answered 421
	// or timed out. It never blocks and is rate limited by the source.
	Refresh()
	// Reachable reports whether the source answered its last request. A
	// static source is always reachable.
	Reachable() bool
}

// View is what the proxy reads on every request: the current peer set and,
// during the overlap window after a change, the previous one. A View is
// immutable; Membership replaces it whole.
type View struct {
	// Current is never nil.
	Current *PeerSet
	// Previous is the set Current replaced, or nil. It only counts while
	// now is before PreviousUntil.
	Previous      *PeerSet
	PreviousUntil time.Time
}

// Accepts reports whether a peer request stamped with generation gen may be
// served: gen is the current generation, or the previous one inside the
// overlap window. Anything else gets 421 (docs/architecture.md §8). Hot: no allocations.
func (v *View) Accepts(gen uint64, now time.Time) bool {
	if gen == v.Current.generation {
		return true
	}
	return v.Previous != nil && gen == v.Previous.generation && now.Before(v.PreviousUntil)
}

// PreviousOwner returns the key's owner under the previous generation when
// the overlap window is still open and that owner differs from the current
// one, so that a miss on the new owner can ask the old owner once
// (docs/architecture.md §8). isSelf reports whether that old owner is the local node.
func (v *View) PreviousOwner(digest uint64, now time.Time) (owner *Peer, isSelf, ok bool) {
	if v.Previous == nil || !now.Before(v.PreviousUntil) {
		return nil, false, false
	}
	old, oldSelf := v.Previous.Owner(digest)
	cur, _ := v.Current.Owner(digest)
	if old.ID == cur.ID {
		return nil, false, false
	}
	return old, oldSelf, true
}

// Membership holds the live View behind an atomic pointer: readers never
// lock, writers (one Source, or a reload) build a new View and swap it.
// It keeps the set it replaced acceptable for the overlap window, and never
// lets the current set become empty: with nothing else known, the set is
// just this node (static single-node behaviour).
type Membership struct {
	self    Peer
	overlap time.Duration
	logger  *slog.Logger
	view    atomic.Pointer[View]

	mu   sync.Mutex // serialises Update and Subscribe; guards subs and next
	subs []subscriber
	next int // id of the next subscriber
}

type subscriber struct {
	id int
	fn func(*View)
}

// NewMembership starts with a set of just self. overlap ≤ 0 means
// DefaultOverlap. A nil logger discards. self.Weight 0 means 1; an invalid
// self (empty ID, bad weight) panics, as it is a wiring bug.
func NewMembership(self Peer, overlap time.Duration, logger *slog.Logger) *Membership {
	if overlap <= 0 {
		overlap = DefaultOverlap
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m := &Membership{
		self:    self,
		overlap: overlap,
		logger:  logger.With("component", "routing"),
	}
	solo := soloSet(self)
	m.self = solo.peers[0]
	m.view.Store(&View{Current: solo})
	return m
}

// View returns the current View. Lock-free and allocation-free; the result
// is immutable and stays valid (and consistent) after later updates.
func (m *Membership) View() *View { return m.view.Load() }

// Self is the local node as given to NewMembership (weight normalised).
func (m *Membership) Self() Peer { return m.self }

// Update replaces the peer set with peers at time now. It reports whether
// the generation changed; the same set again (in any order) is a no-op, so
// sources may call it on every poll.
//
// Input from discovery is not trusted to be clean: empty IDs are dropped,
// invalid weights become 1, and of several entries with one ID the one with
// the smallest (Addr, Weight) is kept, so every node resolves a conflict the
// same way. An empty result becomes the set of just self.
//
// On a change the old current set becomes Previous until now+overlap (only
// one previous generation is kept: a second change inside the window drops
// the oldest), then subscribers run.
func (m *Membership) Update(peers []Peer, now time.Time) (changed bool) {
	clean := m.sanitize(peers)
	m.mu.Lock()
	defer m.mu.Unlock()
	old := m.view.Load()
	var next *PeerSet
	if len(clean) == 0 {
		next = soloSet(m.self)
	} else {
		s, err := NewPeerSet(m.self.ID, clean)
		if err != nil { // unreachable after sanitize; keep the old set rather than guess
			m.logger.Error("routing: peer set rejected", "err", err)
			return false
		}
		next = s
	}
	if next.generation == old.Current.generation {
		return false
	}
	v := &View{Current: next, Previous: old.Current, PreviousUntil: now.Add(m.overlap)}
	m.view.Store(v)
	m.logChange(old.Current, next, len(clean) == 0)
	for _, sub := range m.subs {
		sub.fn(v)
	}
	return true
}

// Subscribe registers fn to be called with every new View, in order, and
// calls it once with the current View before returning. Calls are serialised
// with Update and run on the updating goroutine, so fn must be quick, must
// not block and must not call Update or Subscribe (e.g. store a count for
// admission's SetPeers, bump a metric). The returned func unsubscribes.
func (m *Membership) Subscribe(fn func(*View)) (unsubscribe func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	id := m.next
	m.next++
	m.subs = append(m.subs, subscriber{id: id, fn: fn})
	fn(m.view.Load())
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.subs = slices.DeleteFunc(m.subs, func(s subscriber) bool { return s.id == id })
	}
}

// sanitize applies Update's cleaning rules and returns a new slice.
func (m *Membership) sanitize(peers []Peer) []Peer {
	out := make([]Peer, 0, len(peers))
	for _, p := range peers {
		if p.ID == "" {
			m.logger.Warn("routing: dropping peer with empty id", "addr", p.Addr)
			continue
		}
		if p.Weight == 0 {
			p.Weight = 1
		}
		if !validWeight(p.Weight) {
			m.logger.Warn("routing: invalid peer weight, using 1", "peer", p.ID, "weight", p.Weight)
			p.Weight = 1
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Peer) int {
		return cmp.Or(strings.Compare(a.ID, b.ID), strings.Compare(a.Addr, b.Addr), cmp.Compare(a.Weight, b.Weight))
	})
	return slices.CompactFunc(out, func(a, b Peer) bool {
		if a.ID != b.ID {
			return false
		}
		m.logger.Warn("routing: duplicate peer id, keeping one", "peer", a.ID, "kept", a.Addr, "dropped", b.Addr)
		return true
	})
}

// logChange records a generation change: a decision worth a log line.
func (m *Membership) logChange(old, next *PeerSet, emptyInput bool) {
	var added, removed []string
	for _, p := range next.peers {
		if old.Lookup(p.ID) == nil {
			added = append(added, p.ID)
		}
	}
	for _, p := range old.peers {
		if next.Lookup(p.ID) == nil {
			removed = append(removed, p.ID)
		}
	}
	m.logger.Info("routing: peer set changed",
		slog.Uint64("generation", next.generation),
		slog.Uint64("previous_generation", old.generation),
		slog.Int("peers", next.Len()),
		slog.Bool("self_included", next.self >= 0),
		slog.Bool("solo_fallback", emptyInput),
		slog.Any("added", added),
		slog.Any("removed", removed))
}

// soloSet is the set of just self. An invalid self is a wiring bug, caught
// by NewMembership.
func soloSet(self Peer) *PeerSet {
	s, err := NewPeerSet(self.ID, []Peer{self})
	if err != nil {
		panic("routing: self peer: " + err.Error())
	}
	return s
}
