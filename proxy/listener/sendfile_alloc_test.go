//go:build !race

package listener

import (
	"bytes"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/config"
)

// TestFileSectionSentAllocs: a FileSection answer sent with sendfile on
// a kept-alive connection allocates nothing (server and client in this
// process; the connection's sendfile state is made once, at its first
// section). The race detector adds allocations, hence the build tag.
func TestFileSectionSentAllocs(t *testing.T) {
	const n = 100 << 10
	content := bytes.Repeat([]byte("section!"), n/8)
	f := openContent(t, content)
	var read atomic.Int64
	sec := &testSection{f: f, read: &read}
	timeouts := config.Server{ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second}
	h1 := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		sec.off, sec.n = 0, n
		ctx.SetBodyStream(sec, n)
	}, ReadTimeout: timeouts.ReadTimeout, WriteTimeout: timeouts.WriteTimeout, IdleTimeout: timeouts.IdleTimeout}
	ln := servePlain(t, New(h1, timeouts, nil))
	c := &fasthttp.HostClient{Addr: ln.Addr().String(), MaxConns: 1, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://" + ln.Addr().String() + "/")
	for range 3 { // the connection, its buffers and its sendfile state
		if err := c.Do(req, resp); err != nil {
			t.Fatal(err)
		}
	}
	read.Store(0)
	var err error
	allocs := testing.AllocsPerRun(100, func() {
		if err == nil {
			err = c.Do(req, resp)
		}
	})
	if err != nil || !bytes.Equal(resp.Body(), content) {
		t.Fatalf("GET: %v, %d bytes", err, len(resp.Body()))
	}
	if r := read.Load(); r > 101*n/10 {
		t.Errorf("%d bytes of 101 answers read through Read: sendfile was not used", r)
	}
	if allocs != 0 {
		t.Errorf("a FileSection answer = %v allocs/op, want 0", allocs)
	}
}
