// Command origin is the bare fasthttp origin of `make bench-peers`: the
// ceiling every caching proxy is measured against, and the upstream they
// all share. It is deliberately minimal — one handler, a precomputed body,
// a few atomics — so that "the origin serving the object itself" is about
// as cheap as fasthttp can answer, and a proxy reaching 90% of it is close
// to the cost of the HTTP exchange alone.
//
// Every path outside /__origin/ answers with a body of `size` bytes (default
// 1024) sliced from one precomputed buffer, so bodies never allocate.
// Query knobs:
//
//	size=<bytes>       body length, 0..maxSize (default 1024)
//	delay=<ms>         sleep before answering (a slow origin, for collapsing)
//	cc=<value>         Cache-Control (default "public, max-age=3600"; "cc=" sends none)
//	status=<code>      response status (default 200)
//	type=<media type>  Content-Type (default application/octet-stream); with
//	                   it the body is sliced from a JSON-like text instead
//	                   (records with varying numbers: compresses about as
//	                   well as real JSON does, for the compression rows)
//
// Control endpoints, never counted, never faulted:
//
//	GET  /__origin/stats          {"total":N,"fault":"ok"|"error"}
//	POST /__origin/reset          total = 0
//	POST /__origin/fault?mode=M   ok: normal; error: every request answers 503
//
// The counter counts every non-control request when it arrives, whatever
// the fault mode: it is how the bench checks that a "hit" run never reached
// the origin and how many fetches a collapsed miss cost.
package main

import (
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// maxSize bounds size=; larger asks answer 400. It covers the 10 MiB hit
// row of bench/peers.sh; the buffer is allocated once at start.
const maxSize = 16 << 20

// body is the byte pool every response slices from; a repeating alphabet
// of prime length so a mangled body is easy to spot by eye.
var body = func() []byte {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ-"
	b := make([]byte, maxSize)
	for i := range b {
		b[i] = alphabet[i%len(alphabet)]
	}
	return b
}()

// text is the pool of type= answers: JSON-like records whose ids and
// figures change from one to the next, so gzip finds repeats but not one
// short period (the alphabet above would compress a hundredfold).
var text = func() []byte {
	b := make([]byte, 0, maxSize+128)
	for i := 0; len(b) < maxSize; i++ {
		b = fmt.Appendf(b, `{"id":%d,"name":"item-%d","price":%d.%02d,"stock":%d,"tags":["t%d","t%d"]},`+"\n",
			i, i*7919%100003, i*37%1000, i%100, i*131%9973, i%17, i%29)
	}
	return b[:maxSize]
}()

const defaultCC = "public, max-age=3600"

// origin holds the counters shared by all connections.
type origin struct {
	total atomic.Int64
	fault atomic.Bool // true: answer 503 to every counted request
}

func (o *origin) handle(ctx *fasthttp.RequestCtx) {
	path := ctx.Path()
	if len(path) > 10 && string(path[:10]) == "/__origin/" {
		o.control(ctx, string(path[10:]))
		return
	}
	o.total.Add(1)
	args := ctx.QueryArgs()
	if d := args.GetUintOrZero("delay"); d > 0 {
		time.Sleep(time.Duration(d) * time.Millisecond)
	}
	if o.fault.Load() {
		ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
		ctx.Response.Header.Set("Cache-Control", "no-store")
		ctx.SetBodyString("origin failing\n")
		return
	}
	size := 1024
	if args.Has("size") {
		size = args.GetUintOrZero("size")
	}
	if size < 0 || size > maxSize {
		ctx.Error("size out of range", fasthttp.StatusBadRequest)
		return
	}
	if s := args.GetUintOrZero("status"); s >= 200 && s <= 599 {
		ctx.SetStatusCode(s)
	}
	h := &ctx.Response.Header
	pool := body
	if ct := args.Peek("type"); len(ct) > 0 {
		h.SetContentTypeBytes(ct)
		pool = text
	} else {
		h.SetContentType("application/octet-stream")
	}
	if cc := args.Peek("cc"); cc != nil {
		if len(cc) > 0 {
			h.SetBytesV("Cache-Control", cc)
		}
	} else {
		h.Set("Cache-Control", defaultCC)
	}
	h.Set("Last-Modified", "Tue, 15 Nov 1994 12:45:26 GMT")
	// SetBodyRaw keeps a reference instead of copying: the pools are immutable.
	ctx.Response.SetBodyRaw(pool[:size])
}

func (o *origin) control(ctx *fasthttp.RequestCtx, what string) {
	switch what {
	case "stats":
		mode := "ok"
		if o.fault.Load() {
			mode = "error"
		}
		ctx.SetContentType("application/json")
		fmt.Fprintf(ctx, "{\"total\":%d,\"fault\":%q}\n", o.total.Load(), mode)
	case "reset":
		o.total.Store(0)
		ctx.SetBodyString("ok\n")
	case "fault":
		switch string(ctx.QueryArgs().Peek("mode")) {
		case "ok":
			o.fault.Store(false)
		case "error":
			o.fault.Store(true)
		default:
			ctx.Error("mode must be ok or error", fasthttp.StatusBadRequest)
			return
		}
		ctx.SetBodyString("ok\n")
	default:
		ctx.Error("unknown control endpoint", fasthttp.StatusNotFound)
	}
}

func main() {
	listen := flag.String("listen", "127.0.0.1:19000", "address to listen on (host:port)")
	timeouts := flag.Bool("timeouts", false, "set shield's default read/write/idle timeouts (10s/30s/60s): "+
		"fasthttp then sets connection deadlines on every request, a cost the bare ceiling otherwise skips")
	flag.Parse()
	if err := run(*listen, *timeouts); err != nil {
		log.Fatal(err)
	}
}

func run(listen string, timeouts bool) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("origin: listen: %w", err)
	}
	o := &origin{}
	srv := &fasthttp.Server{
		Handler:                      o.handle,
		Name:                         "bench-origin",
		DisablePreParseMultipartForm: true,
		CloseOnShutdown:              true,
	}
	if timeouts {
		srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout = 10*time.Second, 30*time.Second, 60*time.Second
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	go func() {
		<-sig
		_ = srv.Shutdown()
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("origin: serve: %w", err)
	}
	return nil
}
