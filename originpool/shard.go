package originpool

import (
	"math/rand/v2"
	"time"

	"github.com/cespare/xxhash/v2"
)

// PickShard is Pick restricted to the shard of key: the k servers (k ≥ 1)
// with the highest rendezvous score for key, so one key (a tenant) always
// uses the same k servers, keys spread evenly over all of them, and adding
// or removing a server moves only the keys whose shard it enters or leaves
// (shuffle sharding: a tenant whose requests break servers breaks only its
// own shard, and two tenants rarely share a whole one). Health and
// ejection work as in Pick, within the shard: its up servers are the
// candidates, all of them when none is up, avoid excluded unless it is
// the only one. k ≥ len(servers) is Pick.
func (p *Pool) PickShard(now time.Time, avoid *Server, key uint64, k int) *Server {
	n := len(p.servers)
	if k <= 0 || k >= n {
		return p.Pick(now, avoid)
	}
	var shardBuf [16]*Server
	shard := p.shard(shardBuf[:0], key, k)
	var buf [16]*Server
	cand := buf[:0]
	for _, s := range shard {
		if s != avoid && s.Up(now) {
			cand = append(cand, s)
		}
	}
	if len(cand) == 0 {
		for _, s := range shard {
			if s != avoid {
				cand = append(cand, s)
			}
		}
	}
	switch len(cand) {
	case 0:
		return shard[0] // a shard of one, which just failed: nothing else is ours
	case 1:
		return cand[0]
	}
	i := rand.IntN(len(cand))
	j := rand.IntN(len(cand) - 1)
	if j >= i {
		j++
	}
	a, b := cand[i], cand[j]
	if b.inFlight.Load() < a.inFlight.Load() {
		return b
	}
	return a
}

// Shard returns the k servers of key's shard, highest score first.
func (p *Pool) Shard(key uint64, k int) []*Server {
	return p.shard(nil, key, min(max(k, 1), len(p.servers)))
}

// shard appends the k servers with the highest score for key to dst,
// highest first (insertion into a k-long list: n is small).
func (p *Pool) shard(dst []*Server, key uint64, k int) []*Server {
	var scoreBuf [16]uint64
	scores := scoreBuf[:0]
	for _, s := range p.servers {
		sc := mix(key ^ s.hash)
		i := len(scores)
		if i < k {
			scores = append(scores, 0)
			dst = append(dst, nil)
		} else if sc <= scores[k-1] {
			continue
		} else {
			i = k - 1
		}
		for i > 0 && scores[i-1] < sc {
			scores[i], dst[i] = scores[i-1], dst[i-1]
			i--
		}
		scores[i], dst[i] = sc, s
	}
	return dst
}

// mix is SplitMix64's finalizer: a server's score for a key.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// nameHash is a server's identity in rendezvous scores.
func nameHash(name string) uint64 { return xxhash.Sum64String(name) }
