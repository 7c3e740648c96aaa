package routing

import (
	"fmt"
	"testing"
)

func BenchmarkOwner(b *testing.B) {
	for _, n := range []int{3, 16} {
		for _, weighted := range []bool{false, true} {
			peers := testPeers(n, 1)
			if weighted {
				peers[0].Weight = 2
			}
			b.Run(fmt.Sprintf("N=%d/weighted=%v", n, weighted), func(b *testing.B) {
				s := mustSet(b, "", peers)
				digests := testDigests(1024)
				b.ReportAllocs()
				var i int
				for b.Loop() {
					s.Owner(digests[i&1023])
					i++
				}
			})
		}
	}
}

func BenchmarkNewPeerSet(b *testing.B) {
	for _, n := range []int{3, 16} {
		peers := testPeers(n, 1)
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := NewPeerSet("node-00", peers); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkViewAccepts(b *testing.B) {
	m := NewMembership(Peer{ID: "node-00"}, 0, nil)
	m.Update(testPeers(8, 1), t0)
	b.ReportAllocs()
	for b.Loop() {
		v := m.View()
		v.Accepts(v.Current.Generation(), t0)
	}
}
