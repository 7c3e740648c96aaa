//go:build !race

package routing

import (
	"testing"
	"time"
)

// TestHotPathAllocs asserts that what the proxy does per request allocates
// nothing: read the View, pick the owner, check a generation.
func TestHotPathAllocs(t *testing.T) {
	weighted := testPeers(16, 1)
	weighted[3].Weight = 2
	sets := map[string][]Peer{"N=3": testPeers(3, 1), "N=16": testPeers(16, 1), "weighted N=16": weighted}
	for name, peers := range sets {
		t.Run(name, func(t *testing.T) {
			m := NewMembership(peers[0], time.Second, nil)
			m.Update(peers, t0)
			m.Update(peers[1:], t0)
			digests := testDigests(64)
			now := t0.Add(time.Millisecond)
			var i int
			allocs := testing.AllocsPerRun(1000, func() {
				v := m.View()
				d := digests[i%len(digests)]
				i++
				if p, _ := v.Current.Owner(d); p == nil {
					t.Fatal("nil owner")
				}
				v.PreviousOwner(d, now)
				v.Accepts(v.Current.Generation(), now)
			})
			if allocs != 0 {
				t.Errorf("View+Owner+PreviousOwner+Accepts = %v allocs/op, want 0", allocs)
			}
		})
	}
}

// TestMatchAllocs: routing a request allocates nothing, whatever its
// spelling (percent-encoding, encoded slashes).
func TestMatchAllocs(t *testing.T) {
	tab := spellingTable(t, true)
	for _, path := range []string{"/admin/x", "/%61dmin/x", "/api/v1/a%2Fb", "/api%2Fv1/x"} {
		allocs := testing.AllocsPerRun(1000, func() { _, _ = tab.Resolve([]byte("Host.example:80"), []byte(path)) })
		if allocs != 0 {
			t.Errorf("Resolve(%q) = %v allocs/op, want 0", path, allocs)
		}
	}
}
