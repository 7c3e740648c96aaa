// Command demo-origin is a small HTTP origin for trying shield by hand
// (`make run`) and for the e2e tests. It is deliberately plain net/http: it
// stands for "somebody else's API" and must not share code with the proxy.
//
// Every path outside /__origin/ answers 200 with a JSON body
//
//	{"path":..., "uri":..., "query":..., "n":<per-path count>, "time":<RFC3339Nano>, "vary":{...}}
//
// whose "n" and "time" change on every request, so a client can tell a
// cached answer from a fresh one; "path" is decoded, "uri" the request
// target exactly as received. Query parameters shape the response:
//
//	cc=<Cache-Control>   default "public, max-age=60"; "cc=" sends no Cache-Control
//	status=<code>        response status (200..599)
//	delay=<ms>           wait before answering; a client that gives up ends the wait
//	size=<bytes>         body of exactly that many bytes (see pad below)
//	vary=<A[,B]>         sets Vary and echoes those request headers in "vary"
//	setcookie=1          Set-Cookie: sid=<random>
//	etag=1               ETag "v<version>", version per path, bumped by /__origin/bump
//	lm=1                 Last-Modified fixed per path (moved to now by /__origin/bump)
//	expires=<secs>       Expires: now+secs, with a Date from the same instant
//	chunked=1            no Content-Length; the body is flushed in pieces
//	rate=<bytes/s>       the body is sent at that rate, in flushed pieces of at most
//	                     64 KiB (with its Content-Length unless chunked=1); the answer's
//	                     X-Origin-First-Byte (RFC 3339, ns) says when sending began,
//	                     X-Origin-Body-Sha256 (hex) what the body is
//	cdncc=<value>        CDN-Cache-Control: value (RFC 9213 targeted field)
//	dateago=<secs>       Date: now−secs (an answer generated earlier)
//	hints=<n>            n × 103 Early Hints (Link: </style.css>) before the answer
//	hintpad=<bytes>      each 103 also carries X-Pad: that many bytes
//	interim=<c[,c]>      unsolicited 1xx heads (100, 102, 104, …) before the 103s
//	headers=1            echoes every request field in "headers" (name: values joined by ", ")
//
// If-None-Match matching the current ETag (with etag=1), or If-Modified-Since
// not before Last-Modified (with lm=1 and no If-None-Match), answers 304.
//
// Padding: with size=N the JSON gains a "pad" string whose byte i is
// padAlphabet[i%len(padAlphabet)]; the alphabet's length is prime so a body
// with a reordered, lost or repeated chunk of any power-of-two size no
// longer matches a fresh copy. A size smaller than the JSON envelope
// truncates the envelope (the body is then not valid JSON).
//
// Counting: every non-control request counts once in "total" and in
// "by_path" when it arrives, whatever the fault mode or outcome; 304 answers
// also count in "not_modified". /__origin/reset zeroes the counters but keeps
// ETag versions, Last-Modified times and the fault mode.
//
// Control endpoints (JSON answers, never counted, never faulted):
//
//	GET  /__origin/stats               counters, in-flight gauge and fault mode
//	POST /__origin/reset               zero the counters
//	POST /__origin/fault?mode=M        ok | error (500) | unavailable (503) | hang | reset | slow | throttle | garbage | huge
//	POST /__origin/fault?mode=M&prefix=/p/
//	                                   the same, only for paths starting with /p/ (the
//	                                   longest such prefix wins over the global mode;
//	                                   mode=ok removes the prefix's fault)
//	POST /__origin/bump?path=/x        new ETag version and Last-Modified for /x
//
// On SIGTERM or SIGINT the server stops accepting, ends hanging and
// dribbling requests, waits for the others and exits 0.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// shutdownTimeout bounds the graceful drain; delays are test-sized, so a
// request still running after this is a bug worth an error exit.
const shutdownTimeout = 10 * time.Second

func main() {
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr, logger); err != nil {
		logger.Error("demo-origin failed", "err", err)
		os.Exit(1)
	}
}

// run serves until ctx is cancelled, then shuts down gracefully. It returns
// nil after a clean shutdown.
func run(ctx context.Context, args []string, stderr io.Writer, logger *slog.Logger) error {
	fs := flag.NewFlagSet("demo-origin", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:9000", "address to listen on (host:port)")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("demo-origin: flags: %w", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("demo-origin: unexpected arguments %q", fs.Args())
	}

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("demo-origin: listen: %w", err)
	}
	o := newOrigin(logger, time.Now())
	srv := &http.Server{
		Handler:           o,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	logger.Info("demo-origin listening", "addr", ln.Addr().String())

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	select {
	case err := <-serveErr:
		return fmt.Errorf("demo-origin: serve: %w", err)
	case <-ctx.Done():
	}
	logger.Info("demo-origin shutting down")
	// Requests that would otherwise never finish (hang, slow) end first;
	// Shutdown then waits for the rest, e.g. a delay= request, to complete.
	o.stop()
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
		return fmt.Errorf("demo-origin: shutdown: %w", err)
	}
	if err := <-serveErr; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("demo-origin: serve: %w", err)
	}
	logger.Info("demo-origin stopped")
	return nil
}
