package proxy

import (
	"bufio"
	"bytes"
	"net/http"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/proxy/httpx"
)

// copySink stands for a connection: it copies what it is given, as the
// kernel copies a write into the socket's buffer, into a fixed buffer.
type copySink struct{ buf [64 << 10]byte }

func (s *copySink) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		p = p[copy(s.buf[:], p):]
	}
	return n, nil
}

// warmLargeHit stores an n-byte object at /hit?id=42 in memory and
// returns the proxy and a ctx whose request hits it.
func warmLargeHit(tb testing.TB, n int) (*Proxy, *fasthttp.RequestCtx) {
	tb.Helper()
	body := bytes.Repeat([]byte("0123456789abcdef"), n/16)
	o := newTestOrigin(tb, func(w http.ResponseWriter, r *http.Request, _ int64) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(body)
	})
	p := newTestProxy(tb, o.addr(), func(c *config.Config) {
		c.Cache.Size = 256 << 20
		c.Cache.MaxObjectSize = 8 << 20
	})
	ctx := hitCtx(tb)
	serve(p, ctx)
	if cs := ctx.Response.Header.Peek("Cache-Status"); !bytes.Contains(cs, []byte("stored")) {
		tb.Fatalf("warming request: Cache-Status = %q, want a stored miss", cs)
	}
	ctx.Response.Reset()
	return p, ctx
}

// benchmarkLargeHit is a hit on an n-byte object through the handler,
// with the answer written as the server writes it (fasthttp's
// Response.Write into a 4 KiB bufio.Writer, the server's default) to a
// sink that copies it: reading the entry and sending its body are both
// counted, whichever way the body goes (the response's buffer, or a body
// stream read piece by piece).
func benchmarkLargeHit(b *testing.B, n int) {
	p, ctx := warmLargeHit(b, n)
	h := p.Handler()
	bw := bufio.NewWriterSize(new(copySink), 4096)
	b.SetBytes(int64(n))
	b.ReportAllocs()
	for b.Loop() {
		ctx.Response.Reset()
		h(ctx)
		got := ctx.Response.Header.ContentLength() // a body stream's
		if !ctx.Response.IsBodyStream() {
			got = len(ctx.Response.Body())
		}
		if !bytes.HasPrefix(ctx.Response.Header.PeekBytes(httpx.HCacheStatus), hitPrefix) || got != n {
			b.Fatalf("Cache-Status = %q, %d bytes; want a hit of %d", ctx.Response.Header.PeekBytes(httpx.HCacheStatus), got, n)
		}
		if err := ctx.Response.Write(bw); err != nil {
			b.Fatal(err)
		}
		if err := bw.Flush(); err != nil {
			b.Fatal(err)
		}
	}
	ctx.Response.Reset()
}

// BenchmarkHit100K: a 100 KiB object in memory (four pieces,
// proxy/cache/store.go), read and written.
func BenchmarkHit100K(b *testing.B) { benchmarkLargeHit(b, 100<<10) }

// BenchmarkHit1M: a 1 MiB object in memory, read and written.
func BenchmarkHit1M(b *testing.B) { benchmarkLargeHit(b, 1<<20) }
