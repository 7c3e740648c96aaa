package proxy

import (
	"errors"
	"io"
	"log/slog"
	"net"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/proxy/httpx"
	"github.com/shield-proxy/shield/proxy/listener"
	"github.com/shield-proxy/shield/routing"
)

// PublicServer is the fasthttp server for the public listener, with the
// settings the hit path depends on. cmd/shield and the benchmark wrapper
// both serve through it, so measurements see the production settings.
func (p *Proxy) PublicServer(s config.Server, logger *slog.Logger) *fasthttp.Server {
	return &fasthttp.Server{
		Handler:      p.Handler(),
		ReadTimeout:  s.ReadTimeout,
		WriteTimeout: s.WriteTimeout,
		IdleTimeout:  s.IdleTimeout,
		// ReadBufferSize bounds the request line and headers.
		ReadBufferSize:     int(s.MaxHeaderSize),
		MaxRequestBodySize: int(s.MaxBodySize),
		// Server comes from the origin or the cached entry. So does
		// Date: a stored answer keeps the origin's Date and its Age
		// says how long it was stored (RFC 9110 §6.6.1, RFC 9111 §4);
		// fasthttp would replace it with the sending time, so its
		// default is off and the handler dates what has no Date.
		NoDefaultDate:                true,
		NoDefaultServerHeader:        true,
		NoDefaultContentType:         true,
		DisablePreParseMultipartForm: true,
		CloseOnShutdown:              true,
		// ReduceMemoryUsage stays off on purpose: with it the server
		// returns each response's body buffer to fasthttp's pool, which
		// drops buffers whose capacity outgrew their length — exactly
		// what the hit path hands back (entry = body + metadata) — so
		// every hit would allocate (BenchmarkHitPooledBody).
		ReduceMemoryUsage: false,
		Logger:            httpx.SlogPrinter{L: logger},
		ErrorHandler:      requestError,
	}
}

// PeerServer is the fasthttp server for the peer listener.
func (p *Proxy) PeerServer(s config.Server, logger *slog.Logger) *fasthttp.Server {
	return &fasthttp.Server{
		Handler:               p.PeerHandler(),
		ReadTimeout:           s.ReadTimeout,
		WriteTimeout:          s.WriteTimeout,
		IdleTimeout:           s.IdleTimeout,
		ReadBufferSize:        int(s.MaxHeaderSize),
		NoDefaultDate:         true, // the owner's stored Date reaches the edge
		NoDefaultServerHeader: true,
		NoDefaultContentType:  true,
		Logger:                httpx.SlogPrinter{L: logger},
	}
}

// ClusterOptionsFor maps the cluster block to the proxy's options.
func ClusterOptionsFor(cfg *config.Config) ClusterOptions {
	cc := cfg.Cluster
	return ClusterOptions{
		Secret:        cc.Secret,
		PeerTimeout:   cc.PeerTimeout,
		HotKeyRate:    cc.HotKeyRate,
		HotKeyMaxAge:  cc.HotKeyMaxAge,
		HandoffKeys:   cc.HandoffKeys,
		UsageInterval: cc.UsageInterval,
		Transport:     cc.Transport,
		MaxBody:       int(cfg.Cache.MaxObjectSize) + 1<<20,
		// Consul views change node by node; a static list is known to
		// all from the start.
		DynamicMembership: cc.Membership == "consul",
	}
}

// StaticPeers is the cluster block's static peer list.
func StaticPeers(cc *config.Cluster) []routing.Peer {
	peers := make([]routing.Peer, 0, len(cc.Peers))
	for _, pc := range cc.Peers {
		peers = append(peers, routing.Peer{ID: pc.ID, Addr: pc.Addr, Weight: pc.Weight})
	}
	return peers
}

// requestError answers requests fasthttp could not parse: 408 for a
// request not read within read_timeout, 413 for a body over
// server.max_body_size, 431 for headers over max_header_size, 400
// otherwise — never reaching the origin.
func requestError(ctx *fasthttp.RequestCtx, err error) {
	status, msg := fasthttp.StatusBadRequest, "bad request\n"
	var small *fasthttp.ErrSmallBuffer
	var netErr net.Error
	switch {
	case errors.As(err, &netErr) && netErr.Timeout():
		// fasthttp must answer something; 408 is the honest answer
		// (RFC 9110 §15.5.9), not 400.
		status, msg = fasthttp.StatusRequestTimeout, "request timeout\n"
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		status, msg = fasthttp.StatusRequestEntityTooLarge, "request body too large\n"
	case errors.As(err, &small):
		status, msg = fasthttp.StatusRequestHeaderFieldsTooLarge, "request header too large\n"
	}
	ctx.Response.Reset()
	ctx.SetStatusCode(status)
	ctx.SetContentType("text/plain; charset=utf-8")
	cacheStatus{fwd: "bypass", detail: "bad-request"}.set(&ctx.Response.Header)
	ctx.Response.Header.Set("Cache-Control", "no-store")
	ctx.SetConnectionClose()
	ctx.SetBodyString(msg)
}

// NewPublic builds the public listener's servers for s: PublicServer for
// HTTP/1.x and, with server.http2 or server.h2c, HTTP/2 beside it
// (proxy/listener).
func (p *Proxy) NewPublic(s config.Server, logger *slog.Logger) *listener.Public {
	pub := listener.New(p.PublicServer(s, logger), s, logger)
	if l := pub.Limit(); l != nil {
		p.connLimit.Store(l)
		p.g.set.RegisterMetricsWriter(func(w io.Writer) {
			metrics.WriteGaugeUint64(w, `shield_connections_open`, uint64(max(0, l.Open())))
			metrics.WriteGaugeUint64(w, `shield_connections_max`, uint64(l.Max()))
			metrics.WriteCounterUint64(w, `shield_connections_refused_total`, l.Refused())
		})
	}
	return pub
}
