//go:build !race

package cluster

import "testing"

// TestMuxRawTCPAllocs: a request forwarded over a multiplexed connection
// on loopback TCP, both ends reading and writing with raw system calls,
// allocates nothing on either node (both run in this process).
func TestMuxRawTCPAllocs(t *testing.T) {
	nodes, _ := tcpNodes(t, TransportMux)
	edge := nodes[0]
	waitFor(t, "the mux connection", func() bool {
		tcpForward(edge)
		return edge.MuxOpen("b")
	})
	for range 200 { // pools warm
		if !tcpForward(edge) {
			t.Fatal("a forwarded request was not answered")
		}
	}
	if n := testing.AllocsPerRun(500, func() { tcpForward(edge) }); n != 0 {
		t.Errorf("a forwarded request over raw TCP: %v allocs, want 0", n)
	}
}
