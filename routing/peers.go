package routing

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/cespare/xxhash/v2"
)

// Peer is one shield node as membership sees it.
type Peer struct {
	// ID names the node. It is the rendezvous input, so it must be stable
	// across restarts: a node that comes back with a new ID moves its keys.
	// In Consul mode it is the service ID.
	ID string
	// Addr is host:port of the node's peer listener (docs/architecture.md §9), the
	// address other nodes forward to. It may be empty for a node that only
	// serves itself (static single-node mode).
	Addr string
	// Weight scales the share of keys the node owns: a node of weight 2
	// owns twice the keys of a node of weight 1. Zero means 1; otherwise it
	// must be within [MinWeight, MaxWeight], which keeps every rendezvous
	// score finite and non-zero (no ties from overflow or underflow).
	Weight float64
}

// Errors returned by NewPeerSet.
var (
	ErrNoPeers       = errors.New("routing: empty peer set")
	ErrEmptyID       = errors.New("routing: peer with empty id")
	ErrDuplicateID   = errors.New("routing: duplicate peer id")
	ErrInvalidWeight = errors.New("routing: invalid peer weight")
)

// PeerSet is an immutable snapshot of the cluster: peers sorted by ID, the
// generation that names the snapshot, and where this node sits in it.
//
// A PeerSet is never modified after NewPeerSet returns, so it is shared by
// pointer between goroutines without locks; Membership swaps whole sets.
// Pointers returned by Owner and Self point into the set and must not be
// modified.
type PeerSet struct {
	peers []Peer // sorted by ID, weights normalised (0 → 1)
	// nodeHash[i] = xxhash64(peers[i].ID), precomputed so Owner does no
	// hashing of strings (see rendezvous.go).
	nodeHash []uint64
	// weight[i] = peers[i].Weight, kept contiguous for the weighted loop.
	weight []float64
	// equalWeights selects the integer-only owner loop (rendezvous.go).
	equalWeights bool
	generation   uint64
	self         int // index of the local node in peers, or -1
}

// NewPeerSet builds the snapshot for peers as seen by the node selfID.
// The input order does not matter and the slice is not retained. selfID
// need not be in peers: a node whose own health check is not yet passing
// routes every key to the others (see the package doc).
//
// It fails on an empty list, an empty or duplicate ID, or a weight outside
// [MinWeight, MaxWeight] (other than 0, which means 1).
func NewPeerSet(selfID string, peers []Peer) (*PeerSet, error) {
	if len(peers) == 0 {
		return nil, ErrNoPeers
	}
	s := &PeerSet{
		peers:        slices.Clone(peers),
		nodeHash:     make([]uint64, len(peers)),
		weight:       make([]float64, len(peers)),
		equalWeights: true,
		self:         -1,
	}
	slices.SortFunc(s.peers, func(a, b Peer) int { return strings.Compare(a.ID, b.ID) })
	for i := range s.peers {
		p := &s.peers[i]
		if p.ID == "" {
			return nil, ErrEmptyID
		}
		if i > 0 && s.peers[i-1].ID == p.ID {
			return nil, fmt.Errorf("%w: %q", ErrDuplicateID, p.ID)
		}
		if p.Weight == 0 {
			p.Weight = 1
		}
		if !validWeight(p.Weight) {
			return nil, fmt.Errorf("%w: peer %q weight %v", ErrInvalidWeight, p.ID, p.Weight)
		}
		s.nodeHash[i] = nodeHash(p.ID)
		s.weight[i] = p.Weight
		if p.Weight != s.peers[0].Weight {
			s.equalWeights = false
		}
		if p.ID == selfID {
			s.self = i
		}
	}
	s.generation = generation(s.peers)
	return s, nil
}

// Bounds of Peer.Weight. Weights are relative, so the range is far wider
// than any real ratio between two machines.
const (
	MinWeight = 1e-6
	MaxWeight = 1e6
)

// validWeight reports whether w can be used as a rendezvous weight (NaN
// fails both comparisons).
func validWeight(w float64) bool {
	return w >= MinWeight && w <= MaxWeight
}

// generation hashes the sorted, normalised peers into the 64-bit number
// that names the set on the wire (Shield-Generation). Every node computes
// the same value for the same set whatever its own ID, because self is not
// an input. Layout, for each peer in ID order:
//
//	uvarint(len(ID)) ‖ ID ‖ uvarint(len(Addr)) ‖ Addr ‖ float64bits(Weight) as 8 bytes little-endian
//
// hashed with xxhash64 (seed 0). 0 is reserved for "no generation", so a
// hash of 0 becomes 1.
func generation(peers []Peer) uint64 {
	var d xxhash.Digest
	d.Reset()
	var buf [binary.MaxVarintLen64]byte
	for _, p := range peers {
		_, _ = d.Write(binary.AppendUvarint(buf[:0], uint64(len(p.ID))))
		_, _ = d.WriteString(p.ID)
		_, _ = d.Write(binary.AppendUvarint(buf[:0], uint64(len(p.Addr))))
		_, _ = d.WriteString(p.Addr)
		_, _ = d.Write(binary.LittleEndian.AppendUint64(buf[:0], math.Float64bits(p.Weight)))
	}
	if g := d.Sum64(); g != 0 {
		return g
	}
	return 1
}

// Generation names this set; equal sets have equal generations on every
// node. It is never 0.
func (s *PeerSet) Generation() uint64 { return s.generation }

// Len is the number of peers, self included when present.
func (s *PeerSet) Len() int { return len(s.peers) }

// Peers returns a copy of the peers in ID order with normalised weights.
func (s *PeerSet) Peers() []Peer { return slices.Clone(s.peers) }

// Self returns the local node's entry, or nil when the local node is not
// in the set (e.g. its health check is not passing yet).
func (s *PeerSet) Self() *Peer {
	if s.self < 0 {
		return nil
	}
	return &s.peers[s.self]
}

// Lookup returns the peer with the given ID, or nil.
func (s *PeerSet) Lookup(id string) *Peer {
	i, ok := slices.BinarySearchFunc(s.peers, id, func(p Peer, id string) int { return strings.Compare(p.ID, id) })
	if !ok {
		return nil
	}
	return &s.peers[i]
}

// TotalWeight is the sum of the peers' weights; a node's expected share of
// keys is its Weight / TotalWeight.
func (s *PeerSet) TotalWeight() float64 {
	var t float64
	for _, w := range s.weight {
		t += w
	}
	return t
}
