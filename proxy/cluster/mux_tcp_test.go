package cluster

import (
	"net"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/proxy/rawio"
)

// tcpForward forwards one request from edge to b over loopback TCP and
// reports whether b's answer came back (the body fakeLocal's quiet
// ServePeer writes).
func tcpForward(edge *Node) bool {
	fw, ok := edge.Begin("b", time.Now().UnixNano())
	if !ok {
		return false
	}
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.SetRequestURI("/raw")
	req.Header.SetHost("example.test")
	edge.SetForwardHead(HTTPHead(&req.Header), edge.View().Current.Generation(), []byte("acme"), []byte("192.0.2.1"))
	resp, ok := edge.Do(nil, fw, req, 0)
	if !ok {
		return false
	}
	defer fasthttp.ReleaseResponse(resp)
	return string(resp.Body()) == "served by b"
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// ownerConns returns the owner's multiplexed connections (its peer
// listener's open servers).
func ownerConns(pl net.Listener) []net.Conn {
	l := pl.(*peerListener)
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []net.Conn
	for s := range l.open {
		out = append(out, s.conn)
	}
	return out
}

// TestMuxRawTCP: on plain TCP both ends of a multiplexed connection read
// and write with raw system calls (proxy/rawio), and keep their
// behaviour: answers arrive whole, the owner's connection breaking fails
// the edge's at once (its
// read sees the end) and the edge dials again, and the owner's graceful
// close stops its reader through the read deadline.
func TestMuxRawTCP(t *testing.T) {
	nodes, pls := tcpNodes(t, TransportMux)
	edge := nodes[0]
	waitFor(t, "the mux connection", func() bool {
		tcpForward(edge)
		return edge.MuxOpen("b")
	})
	mc := edge.Peer("b").mux.cur.Load()
	if _, ok := mc.conn.(*rawio.Conn); !ok {
		t.Fatalf("the edge's mux connection is a %T, not a raw one", mc.conn)
	}
	conns := ownerConns(pls[1])
	if len(conns) != 1 {
		t.Fatalf("the owner has %d mux connections, want 1", len(conns))
	}
	if _, ok := conns[0].(*rawio.Conn); !ok {
		t.Fatalf("the owner's mux connection is a %T, not a raw one", conns[0])
	}
	for range 200 {
		if !tcpForward(edge) {
			t.Fatal("a forwarded request was not answered")
		}
	}

	// The owner drops the connection: the edge's reader sees it at once.
	_ = conns[0].Close()
	waitFor(t, "the edge to see the owner's close", mc.closed.Load)
	waitFor(t, "a new mux connection", func() bool {
		if !tcpForward(edge) { // over HTTP until the edge dialled again
			t.Fatal("a forwarded request after the close was not answered")
		}
		cur := edge.Peer("b").mux.cur.Load()
		return cur != nil && cur != mc
	})

	// The owner closes gracefully: its reader, waiting in a raw read,
	// stops at the read deadline drain sets; the edge's connection ends.
	mc = edge.Peer("b").mux.cur.Load()
	_ = pls[1].Close()
	waitFor(t, "the owner's reader to stop", func() bool { return len(ownerConns(pls[1])) == 0 })
	waitFor(t, "the edge's connection to end", mc.closed.Load)
}
