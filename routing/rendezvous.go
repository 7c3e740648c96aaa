package routing

import (
	"math"

	"github.com/cespare/xxhash/v2"
)

// Weighted rendezvous hashing (highest random weight), logarithmic method.
// The exact definition, which every node must compute identically and
// which testdata/rendezvous.json pins:
//
//	nodeHash(id)  = xxhash64(id), seed 0                 (precomputed per set)
//	h(d, id)      = mix64(d XOR nodeHash(id))            d = key digest (cachekey)
//	k(d, id)      = (h >> 11) | 1                        odd, in [1, 2^53)
//	u(d, id)      = k / 2^53                             uniform in (0, 1), exact in float64
//	score(d, id)  = −weight(id) / ln(u)                  > 0
//	owner(d)      = the peer with the highest score; on a tie, the smaller ID
//
// mix64 is the splitmix64 finaliser (Stafford "Mix13"):
//
//	z = (z XOR z>>30) × 0xbf58476d1ce4e5b9
//	z = (z XOR z>>27) × 0x94d049bb133111eb
//	z = z XOR z>>31
//
// Why it honours weights: for u uniform in (0,1), E = −ln(u)/w is
// exponentially distributed with rate w, and the smallest of independent
// exponentials is the i-th with probability w_i / Σ w. The highest score is
// the smallest E, so node i owns a w_i / Σ w share of keys. Because each
// score depends only on the key and its own node, adding a node moves only
// the keys it now wins (≈ w_new/Σw of them, all onto the new node) and
// removing one moves only the keys it owned.
//
// Equal weights: the score is then a strictly increasing function of k, so
// the owner is defined as the peer with the highest k (ties: smaller ID). This
// integer form is exact, needs no floating point and gives the same answer
// on every CPU; it is also what Owner computes in that case. With unequal
// weights Owner evaluates the formula above with math.Log; the only way two
// architectures could disagree is on a score tie to the last bit, which has
// probability ~2^-50 per key and only ever causes a miss (a 421), never a
// wrong answer.

// nodeHash is the per-node half of h, computed once per PeerSet.
func nodeHash(id string) uint64 { return xxhash.Sum64String(id) }

// mix64 is the splitmix64 finaliser: a bijection on uint64 with full
// avalanche, so keys that differ in one bit get unrelated scores.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// draw is k(d, id) for a precomputed node hash.
func draw(digest, nodeHash uint64) uint64 { return mix64(digest^nodeHash)>>11 | 1 }

// score is −w / ln(k / 2^53).
func score(k uint64, w float64) float64 {
	return -w / math.Log(float64(k)*0x1p-53)
}

// Owner returns the peer that owns the key with the given digest (from
// cachekey) and whether that peer is the local node. It is on the hot path:
// no locks, no allocations, N mixes (and N logarithms when weights differ).
// The returned Peer must not be modified.
func (s *PeerSet) Owner(digest uint64) (owner *Peer, isSelf bool) {
	best := s.ownerIndex(digest)
	return &s.peers[best], best == s.self
}

// ownerIndex is Owner as an index into s.peers. Peers are in ID order and
// only a strictly greater draw replaces the best so far, so ties go to the
// smaller ID as the definition says.
func (s *PeerSet) ownerIndex(digest uint64) int {
	best := 0
	if s.equalWeights {
		bestK := draw(digest, s.nodeHash[0])
		for i := 1; i < len(s.nodeHash); i++ {
			if k := draw(digest, s.nodeHash[i]); k > bestK {
				best, bestK = i, k
			}
		}
		return best
	}
	bestScore := score(draw(digest, s.nodeHash[0]), s.weight[0])
	for i := 1; i < len(s.nodeHash); i++ {
		if sc := score(draw(digest, s.nodeHash[i]), s.weight[i]); sc > bestScore {
			best, bestScore = i, sc
		}
	}
	return best
}
