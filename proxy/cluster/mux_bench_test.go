package cluster

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/routing"
)

// BenchmarkForwardTCP forwards requests from one node to another over
// loopback TCP, 32 at a time per core, with each transport: what the
// in-memory harness cannot show, the system calls per request.
func BenchmarkForwardTCP(b *testing.B) {
	for _, transport := range []string{TransportHTTP, TransportMux} {
		b.Run(transport, func(b *testing.B) {
			edge := tcpPair(b, transport)
			if transport == TransportMux {
				deadline := time.Now().Add(5 * time.Second)
				for !edge.MuxOpen("b") {
					if time.Now().After(deadline) {
						b.Fatal("no mux connection")
					}
					benchForward(b, edge)
					time.Sleep(time.Millisecond)
				}
			}
			b.ReportAllocs()
			b.SetParallelism(32)
			cpu := processCPU()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					benchForward(b, edge)
				}
			})
			b.StopTimer()
			// Both nodes run in this process: CPU per request over the
			// edge and the owner together.
			b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}

func benchForward(b testing.TB, edge *Node) {
	fw, ok := edge.Begin("b", time.Now().UnixNano())
	if !ok {
		b.Fatal("breaker open")
	}
	req := fasthttp.AcquireRequest()
	req.SetRequestURI("/bench")
	req.Header.SetHost("example.test")
	edge.SetForwardHead(HTTPHead(&req.Header), edge.View().Current.Generation(), []byte("acme"), []byte("192.0.2.1"))
	resp, ok := edge.Do(nil, fw, req, 0)
	fasthttp.ReleaseRequest(req)
	if !ok {
		b.Fatal("forward failed")
	}
	fasthttp.ReleaseResponse(resp)
}

// tcpPair runs nodes a and b on loopback listeners and returns a.
func tcpPair(b testing.TB, transport string) *Node {
	nodes, _ := tcpNodes(b, transport)
	return nodes[0]
}

// tcpNodes runs nodes a and b on loopback listeners and returns them
// with their peer listeners (Node.Listener's).
func tcpNodes(b testing.TB, transport string) (nodes [2]*Node, peerLns [2]net.Listener) {
	var lns [2]net.Listener
	var peers []routing.Peer
	for i, id := range []string{"a", "b"} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		lns[i] = ln
		peers = append(peers, routing.Peer{ID: id, Addr: ln.Addr().String(), Weight: 1})
	}
	var wg sync.WaitGroup
	for i := range peers {
		local := newFakeLocal(peers[i].ID)
		local.quiet = true
		m := routing.NewMembership(peers[i], time.Minute, nil)
		m.Update(peers, time.Now())
		ctx, cancel := context.WithCancel(context.Background())
		env := Env{Log: local.plog, Metrics: metrics.NewSet(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Ctx: ctx, WG: &wg}
		n := New(m, &fakeSource{}, local, Options{Secret: testSecret, PeerTimeout: 5 * time.Second, MaxBody: 1 << 20, Transport: transport}, env)
		srv := &fasthttp.Server{Handler: n.PeerHandler, NoDefaultDate: true}
		peerLns[i] = n.Listener(lns[i])
		go func() { _ = srv.Serve(peerLns[i]) }()
		nodes[i] = n
		b.Cleanup(func() {
			cancel()
			n.CloseIdleConnections()
			_ = srv.Shutdown()
			wg.Wait()
		})
	}
	return nodes, peerLns
}

// processCPU is the process's user and system CPU time so far, in ns.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
