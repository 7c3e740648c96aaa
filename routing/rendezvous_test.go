package routing

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"testing"

	"github.com/cespare/xxhash/v2"
)

var updateVectors = flag.Bool("update-vectors", false, "rewrite testdata/rendezvous.json from the current implementation")

// testPeers returns n peers named node-00… with the given weight.
func testPeers(n int, weight float64) []Peer {
	ps := make([]Peer, n)
	for i := range ps {
		ps[i] = Peer{ID: fmt.Sprintf("node-%02d", i), Addr: fmt.Sprintf("10.0.0.%d:7070", i+1), Weight: weight}
	}
	return ps
}

// testDigests returns n key digests as cachekey would make them: xxhash of
// distinct key bytes.
func testDigests(n int) []uint64 {
	ds := make([]uint64, n)
	for i := range ds {
		ds[i] = xxhash.Sum64String("GET|example.com|/item/" + strconv.Itoa(i))
	}
	return ds
}

func mustSet(t testing.TB, self string, peers []Peer) *PeerSet {
	t.Helper()
	s, err := NewPeerSet(self, peers)
	if err != nil {
		t.Fatalf("NewPeerSet: %v", err)
	}
	return s
}

// referenceOwner is a slow, literal reading of the definition in
// rendezvous.go, written independently of Owner's loops: compute every
// node's hash from its ID, its k, and its score, then take the best with the
// smaller ID winning ties.
func referenceOwner(peers []Peer, digest uint64) string {
	type cand struct {
		id    string
		k     uint64
		score float64
	}
	norm := func(w float64) float64 {
		if w == 0 {
			return 1
		}
		return w
	}
	equal := true
	cs := make([]cand, 0, len(peers))
	for _, p := range peers {
		w := norm(p.Weight)
		equal = equal && w == norm(peers[0].Weight)
		z := digest ^ xxhash.Sum64String(p.ID)
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		z ^= z >> 31
		k := z>>11 | 1
		u := float64(k) / (1 << 53)
		cs = append(cs, cand{id: p.ID, k: k, score: -w / math.Log(u)})
	}
	slices.SortFunc(cs, func(a, b cand) int {
		if equal {
			if a.k != b.k {
				if a.k > b.k {
					return -1
				}
				return 1
			}
		} else if a.score != b.score {
			if a.score > b.score {
				return -1
			}
			return 1
		}
		if a.id < b.id {
			return -1
		}
		return 1
	})
	return cs[0].id
}

func TestOwnerMatchesReference(t *testing.T) {
	tests := []struct {
		name  string
		peers []Peer
	}{
		{"one", testPeers(1, 1)},
		{"three equal", testPeers(3, 1)},
		{"sixteen equal", testPeers(16, 2.5)},
		{"weighted", []Peer{{ID: "a", Weight: 1}, {ID: "b", Weight: 2}, {ID: "c", Weight: 0.5}, {ID: "d", Weight: 7}}},
		{"zero means one", []Peer{{ID: "a"}, {ID: "b", Weight: 1}, {ID: "c"}}},
	}
	digests := append(testDigests(20000), 0, math.MaxUint64, 1, nodeHash("a"), nodeHash("node-00"))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustSet(t, "", tt.peers)
			for _, d := range digests {
				got, _ := s.Owner(d)
				if want := referenceOwner(tt.peers, d); got.ID != want {
					t.Fatalf("Owner(%#x) = %q, want %q", d, got.ID, want)
				}
			}
		})
	}
}

// TestEqualWeightIntegerFormAgreesWithFormula checks the claim that lets
// Owner skip math.Log for equal weights: the float score picks the same node.
func TestEqualWeightIntegerFormAgreesWithFormula(t *testing.T) {
	peers := testPeers(16, 1)
	s := mustSet(t, "", peers)
	for _, d := range testDigests(50000) {
		best, bestScore := -1, 0.0
		for i := range s.peers {
			if sc := score(draw(d, s.nodeHash[i]), 1); best < 0 || sc > bestScore {
				best, bestScore = i, sc
			}
		}
		if got := s.ownerIndex(d); got != best {
			t.Fatalf("digest %#x: integer form picks %d, formula picks %d", d, got, best)
		}
	}
}

// vectorFile is testdata/rendezvous.json. uint64 values are hex strings
// because JSON numbers lose precision above 2^53.
type vectorFile struct {
	Comment string       `json:"comment"`
	Cases   []vectorCase `json:"cases"`
}

type vectorCase struct {
	Name       string            `json:"name"`
	Peers      []Peer            `json:"peers"`
	Generation string            `json:"generation"`
	NodeHashes map[string]string `json:"node_hashes"`
	Keys       []vectorDigest    `json:"keys"`
}

type vectorDigest struct {
	Digest string `json:"digest"`
	Owner  string `json:"owner"`
}

func hex64(v uint64) string { return fmt.Sprintf("%#016x", v) }

const vectorPath = "testdata/rendezvous.json"

// makeVectors computes the vector file from the current implementation;
// it is only used with -update-vectors.
func makeVectors(t *testing.T) vectorFile {
	sets := []struct {
		name  string
		peers []Peer
	}{
		{"single", []Peer{{ID: "solo", Addr: "127.0.0.1:7070", Weight: 1}}},
		{"three equal", []Peer{{ID: "a", Addr: "10.0.0.1:7070", Weight: 1}, {ID: "b", Addr: "10.0.0.2:7070", Weight: 1}, {ID: "c", Addr: "10.0.0.3:7070", Weight: 1}}},
		{"five equal weight 3", []Peer{{ID: "shield-1", Addr: "10.1.0.1:7070", Weight: 3}, {ID: "shield-2", Addr: "10.1.0.2:7070", Weight: 3}, {ID: "shield-3", Addr: "10.1.0.3:7070", Weight: 3}, {ID: "shield-4", Addr: "10.1.0.4:7070", Weight: 3}, {ID: "shield-5", Addr: "10.1.0.5:7070", Weight: 3}}},
		{"weighted", []Peer{{ID: "a", Addr: "10.0.0.1:7070", Weight: 1}, {ID: "b", Addr: "10.0.0.2:7070", Weight: 2}, {ID: "c", Addr: "10.0.0.3:7070", Weight: 0.5}, {ID: "d", Addr: "10.0.0.4:7070", Weight: 4}}},
	}
	digests := append([]uint64{0, 1, math.MaxUint64, nodeHash("a"), nodeHash("shield-1")}, testDigests(27)...)
	f := vectorFile{Comment: "Weighted rendezvous test vectors; see rendezvous.go for the definition. digest = cachekey digest, owner = winning peer id; generation = PeerSet.Generation. Regenerate with: go test ./routing -run TestRendezvousVectors -update-vectors"}
	for _, st := range sets {
		s := mustSet(t, "", st.peers)
		c := vectorCase{Name: st.name, Peers: st.peers, Generation: hex64(s.Generation()), NodeHashes: map[string]string{}}
		for _, p := range st.peers {
			c.NodeHashes[p.ID] = hex64(nodeHash(p.ID))
		}
		for _, d := range digests {
			c.Keys = append(c.Keys, vectorDigest{Digest: hex64(d), Owner: referenceOwner(st.peers, d)})
		}
		f.Cases = append(f.Cases, c)
	}
	return f
}

func TestRendezvousVectors(t *testing.T) {
	if *updateVectors {
		b, err := json.MarshalIndent(makeVectors(t), "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(vectorPath, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(vectorPath)
	if err != nil {
		t.Fatal(err)
	}
	var f vectorFile
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", vectorPath, err)
	}
	if len(f.Cases) == 0 {
		t.Fatalf("%s: no cases", vectorPath)
	}
	for _, c := range f.Cases {
		t.Run(c.Name, func(t *testing.T) {
			s := mustSet(t, "", c.Peers)
			if got := hex64(s.Generation()); got != c.Generation {
				t.Errorf("Generation() = %s, want %s", got, c.Generation)
			}
			if len(c.NodeHashes) != len(c.Peers) {
				t.Errorf("%d node hashes for %d peers", len(c.NodeHashes), len(c.Peers))
			}
			for id, h := range c.NodeHashes {
				if got := hex64(nodeHash(id)); got != h {
					t.Errorf("nodeHash(%q) = %s, want %s", id, got, h)
				}
			}
			for _, k := range c.Keys {
				d, err := strconv.ParseUint(k.Digest, 0, 64)
				if err != nil {
					t.Fatalf("digest %q: %v", k.Digest, err)
				}
				if got, _ := s.Owner(d); got.ID != k.Owner {
					t.Errorf("Owner(%s) = %q, want %q", k.Digest, got.ID, k.Owner)
				}
			}
		})
	}
}

// FuzzOwner checks, for arbitrary digests and weights, that Owner agrees
// with the reference and does not depend on the order peers are given in
// nor on which node is self.
func FuzzOwner(f *testing.F) {
	f.Add(uint64(0), 1.0, 1.0, 1.0, uint8(0))
	f.Add(uint64(math.MaxUint64), 1.0, 2.0, 3.0, uint8(1))
	f.Add(uint64(0x9e3779b97f4a7c15), 0.001, 1000.0, 1.0, uint8(5))
	f.Add(nodeHash("p1"), 1e-300, 1e300, 0.0, uint8(2))
	f.Fuzz(func(t *testing.T, digest uint64, w1, w2, w3 float64, perm uint8) {
		peers := []Peer{{ID: "p1", Weight: w1}, {ID: "p2", Weight: w2}, {ID: "p3", Weight: w3}}
		s, err := NewPeerSet("p2", peers)
		for _, w := range []float64{w1, w2, w3} {
			if w != 0 && !validWeight(w) {
				if err == nil {
					t.Fatalf("NewPeerSet accepted weight %v", w)
				}
				return
			}
		}
		if err != nil {
			t.Fatalf("NewPeerSet(%v, %v, %v): %v", w1, w2, w3, err)
		}
		got, isSelf := s.Owner(digest)
		if want := referenceOwner(peers, digest); got.ID != want {
			t.Fatalf("Owner(%#x) = %q, reference %q", digest, got.ID, want)
		}
		if isSelf != (got.ID == "p2") {
			t.Fatalf("isSelf = %v for owner %q, self p2", isSelf, got.ID)
		}
		// Any other order and self give the same owner and generation.
		shuffled := slices.Clone(peers)
		for i := range shuffled {
			j := int(perm>>uint(i)) % len(shuffled)
			shuffled[i], shuffled[j] = shuffled[j], shuffled[i]
		}
		s2, err := NewPeerSet("p3", shuffled)
		if err != nil {
			t.Fatal(err)
		}
		if got2, _ := s2.Owner(digest); got2.ID != got.ID {
			t.Fatalf("owner depends on input order: %q vs %q", got2.ID, got.ID)
		}
		if s2.Generation() != s.Generation() {
			t.Fatalf("generation depends on order or self: %#x vs %#x", s2.Generation(), s.Generation())
		}
	})
}
