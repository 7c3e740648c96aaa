package listener

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/proxy/httpx"
	"github.com/shield-proxy/shield/proxy/rawio"
	"github.com/valyala/fasthttp"
)

// HTTP/2 on the public listener. fasthttp speaks HTTP/1.x only, so the
// listener is shared: each new connection is classified once — by the
// protocol the TLS handshake negotiated (ALPN), or, with server.h2c, by
// whether it opens with the HTTP/2 connection preface — and handed either
// to the fasthttp server, as before, or to the standard library's HTTP/2
// server (net/http, which carries the fixes for the HTTP/2 attacks of
// recent years: rapid reset, CONTINUATION floods, HPACK bombs, settings
// and ping floods). Each HTTP/2 request is then copied into a
// fasthttp.RequestCtx and served by the same handler as HTTP/1.1, so no
// feature exists on one protocol only; the copy costs the HTTP/2 path
// allocations the HTTP/1.1 hit path does not have, and that path is
// untouched. Go's server reads each HTTP/2 connection through a filter
// (h2filter.go) that makes its answers to two kinds of frames RFC 9113's;
// a filtered TLS connection reaches net/http as a cleartext one (it
// serves TLS only on a *tls.Conn), with its TLS state in the context.

// Public is the public listener's servers: fasthttp for HTTP/1.x and,
// when server.http2 or server.h2c is on, an HTTP/2 server beside it.
type Public struct {
	// H1 serves HTTP/1.x (PublicServer).
	H1 *fasthttp.Server

	h2          *http.Server // nil: HTTP/2 off
	http2, h2c  bool
	readTimeout time.Duration
	h2lim       h2Limits
	slack       time.Duration    // how late a timeout may fire (deadline.go)
	lim         limits           // the timeouts plain connections keep (deadline.go)
	timeouts    [3]time.Duration // read, write, idle: fasthttp's on a TLS listener
	logger      *slog.Logger
	limit       *Limit // server.max_connections; nil: none

	mu  sync.Mutex
	mux *connMux // set by Serve when the listener is shared
}

// New builds the public listener's servers for s around h1, the
// HTTP/1.x server: HTTP/2 requests are served by h1's Handler, and a
// request the HTTP/2 side cannot take (a body over max_body_size) is
// answered by h1's ErrorHandler, so both protocols answer alike.
func New(h1 *fasthttp.Server, s config.Server, logger *slog.Logger) *Public {
	pub := &Public{H1: h1, http2: s.HTTP2, h2c: s.H2C, readTimeout: s.ReadTimeout, logger: logger,
		slack:    coarseSlack(s.ReadTimeout, s.WriteTimeout, s.IdleTimeout),
		timeouts: [3]time.Duration{h1.ReadTimeout, h1.WriteTimeout, h1.IdleTimeout}}
	pub.lim = newLimits(s.ReadTimeout, s.WriteTimeout, s.IdleTimeout, pub.slack)
	if s.MaxConnections > 0 { // a loaded configuration's is at least 1
		pub.limit = NewLimit(s.MaxConnections, logger)
	}
	if s.HTTP2 || s.H2C {
		pub.h2lim = newH2Limits(uint32(s.HTTP2Limits.MaxFrameSize), int(s.MaxHeaderSize))
		pub.h2 = newH2Server(h1.Handler, h1.ErrorHandler, s, logger)
	}
	return pub
}

// newH2Server is the HTTP/2 server of the public listener, with its
// limits from s: the header list is bounded like HTTP/1.1's header block
// (max_header_size), timeouts are the listener's, the rest comes from
// server.http2_limits.
func newH2Server(h fasthttp.RequestHandler, onError func(*fasthttp.RequestCtx, error), s config.Server, logger *slog.Logger) *http.Server {
	var protos http.Protocols
	// HTTP/1 stays with fasthttp: this server only ever receives
	// connections already known to speak HTTP/2.
	protos.SetHTTP2(true)
	protos.SetUnencryptedHTTP2(true)
	l := s.HTTP2Limits
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &http.Server{
		Handler:   &h2Handler{h: h, onError: onError, maxBody: int64(s.MaxBodySize), logger: httpx.SlogPrinter{L: logger}},
		Protocols: &protos,
		// The client's address, parsed once per connection, and its TLS
		// state: a filtered TLS connection reaches net/http as a
		// cleartext one (mux.go), so requests' own TLS field is nil.
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			info := &connInfo{remote: c.RemoteAddr()}
			if f, ok := c.(*h2Filter); ok {
				info.tls = f.tls
			}
			return context.WithValue(ctx, connInfoKey{}, info)
		},
		ReadTimeout:    s.ReadTimeout,
		WriteTimeout:   s.WriteTimeout,
		IdleTimeout:    s.IdleTimeout,
		MaxHeaderBytes: int(s.MaxHeaderSize),
		// OPTIONS * goes to shield's handler (400, as on HTTP/1.1), not to
		// net/http's built-in 200.
		DisableGeneralOptionsHandler: true,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams:          l.MaxConcurrentStreams,
			MaxReadFrameSize:              int(l.MaxFrameSize),
			MaxReceiveBufferPerStream:     int(l.StreamWindow),
			MaxReceiveBufferPerConnection: int(l.ConnectionWindow),
		},
		// The server's messages name protocol errors of clients (floods,
		// resets): debug level, like fasthttp's.
		ErrorLog: slog.NewLogLogger(logger.With("component", "http2").Handler(), slog.LevelDebug),
	}
}

// Limit is the listener's connection limit (server.max_connections),
// nil when it has none.
func (pub *Public) Limit() *Limit { return pub.limit }

// Serve serves ln until it is closed, over TLS when tc is set. With
// HTTP/2 off (or plain HTTP without h2c) fasthttp gets the listener
// directly, exactly as before HTTP/2 existed. On a plain listener with
// coarse deadlines the connections keep the timeouts (deadline.go) and
// fasthttp's are off; over TLS fasthttp keeps them.
func (pub *Public) Serve(ln net.Listener, tc *tls.Config) error {
	if pub.limit != nil {
		ln = pub.limit.listen(ln, tc == nil)
	}
	h := pub.H1
	h.ReadTimeout, h.WriteTimeout, h.IdleTimeout = pub.timeouts[0], pub.timeouts[1], pub.timeouts[2]
	lim := pub.lim
	if tc != nil {
		lim.slack = 0 // coarse wraps nothing
	} else if lim.slack > 0 {
		h.ReadTimeout, h.WriteTimeout, h.IdleTimeout = 0, 0, 0
	}
	shared := pub.h2 != nil && (tc != nil && pub.http2 || tc == nil && pub.h2c)
	if tc != nil {
		tc = tc.Clone()
		tc.NextProtos = []string{"http/1.1"}
		if shared {
			tc.NextProtos = []string{"h2", "http/1.1"}
		}
	}
	if !shared {
		if tc != nil {
			ln = tls.NewListener(rawio.Listener{Listener: ln}, tc)
		}
		return pub.H1.Serve(coarse(ln, lim))
	}
	m := newConnMux(ln, tc, pub.readTimeout, pub.h2lim, pub.logger)
	pub.mu.Lock()
	pub.mux = m
	pub.mu.Unlock()
	go m.run()
	go func() { _ = pub.h2.Serve(m.h2) }() // returns when the mux closes
	return pub.H1.Serve(coarse(m.h1, lim))
}

// ShutdownWithContext stops accepting connections and waits for the
// requests in flight on both protocols (HTTP/2 clients get a GOAWAY), at
// most until ctx is done.
func (pub *Public) ShutdownWithContext(ctx context.Context) error {
	var h2err error
	var wg sync.WaitGroup
	if pub.h2 != nil {
		wg.Go(func() { h2err = pub.h2.Shutdown(ctx) })
	}
	err := pub.H1.ShutdownWithContext(ctx)
	wg.Wait()
	pub.mu.Lock()
	if pub.mux != nil {
		pub.mux.close()
	}
	pub.mu.Unlock()
	return errors.Join(err, h2err)
}

// Shutdown is ShutdownWithContext without a bound.
func (pub *Public) Shutdown() error { return pub.ShutdownWithContext(context.Background()) }
