//go:build !race

package proxy

import (
	"bufio"
	"bytes"
	"testing"
)

// TestDiskHitAllocs: a fresh hit on a disk tier entry, through the
// handler with its body stream read and written as the server does and
// closed (giving back its pooled cache.DiskBody), allocates nothing. (The
// race detector adds allocations, hence the build tag; sendfile's side is
// proxy/listener's TestFileSectionSentAllocs.)
func TestDiskHitAllocs(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 100<<10/16)
	p, _, _ := diskProxy(t, body)
	serve(p, get(t, "/big"))
	ctx := get(t, "/big")
	h := p.Handler()
	bw := bufio.NewWriterSize(new(copySink), 4096)
	streamed := true
	allocs := testing.AllocsPerRun(200, func() {
		ctx.Response.Reset() // closes the previous hit's body stream
		h(ctx)
		streamed = streamed && ctx.Response.IsBodyStream()
		_ = ctx.Response.Write(bw)
		_ = bw.Flush()
	})
	ctx.Response.Reset()
	if !streamed {
		t.Fatal("a hit was not answered from the disk tier's file")
	}
	if allocs != 0 {
		t.Errorf("disk HIT = %v allocs/op, want 0", allocs)
	}
}
