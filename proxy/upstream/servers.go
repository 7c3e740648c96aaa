package upstream

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/cespare/xxhash/v2"
	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/admission"
	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/originpool"
	"github.com/shield-proxy/shield/proxy/httpx"
	"github.com/shield-proxy/shield/proxy/rawio"
)

// serverSet is one origin's servers with their health. A reload that
// leaves the server settings unchanged keeps it (connections, ejections,
// check results); otherwise a new one replaces it and the old one's
// health checks stop.
type serverSet struct {
	conf    string // fingerprint of the settings it was built from
	pool    *originpool.Pool
	servers []*server // parallel to pool.Servers()
	byPS    map[*originpool.Server]*server
	stop    context.CancelFunc // stops the health checks; nil without
	// shard is shuffle_shard (0: all servers), set at every load.
	shard atomic.Int32
}

// server is one origin server.
type server struct {
	label string // as configured, scheme included
	addr  string // host:port
	ps    *originpool.Server
	// hc pools keep-alive connections; fresh sends every request with
	// Connection: close, so each uses a new connection (it keeps none
	// idle): the retry after a stale pooled connection, and health checks.
	hc, fresh *fasthttp.HostClient
}

// pick chooses the server for a fetch of tenant t (nil: none), avoiding
// avoid on a retry: within t's shard when shuffle_shard is set.
func (ss *serverSet) pick(now time.Time, avoid *server, t *admission.Tenant) *server {
	var a *originpool.Server
	if avoid != nil {
		a = avoid.ps
	}
	if k := int(ss.shard.Load()); k > 0 {
		return ss.byPS[ss.pool.PickShard(now, a, shardKey(t), k)]
	}
	return ss.byPS[ss.pool.Pick(now, a)]
}

// snapshot returns the origin's servers' health, for the admin status page.
func (ss *serverSet) snapshot(now time.Time) []originpool.Status { return ss.pool.Snapshot(now) }

// shardKey is the shuffle-shard key of tenant t's fetches: a hash of its
// class name ("" without a tenant).
func shardKey(t *admission.Tenant) uint64 {
	if t == nil {
		return xxhash.Sum64String("")
	}
	return xxhash.Sum64String(t.Name())
}

// serverFingerprint covers every setting the clients and the pool are
// built from.
func serverFingerprint(oc *config.Origin) string {
	return fmt.Sprintf("%q|%+v|%s|%s|%s|%d|%d|%q|%+v", oc.Servers, oc.TLS, oc.Timeout, oc.ConnectTimeout, oc.IdleTimeout,
		oc.MaxConcurrency, oc.MaxResponseHeaderSize, oc.HostHeader, oc.HealthCheck)
}

// originTLS builds the client TLS configuration of an origin (nil when no
// server is https://).
func originTLS(oc *config.Origin) (*tls.Config, error) {
	https := false
	for _, s := range oc.Servers {
		https = https || config.IsHTTPS(s)
	}
	if !https {
		return nil, nil
	}
	t := oc.TLS
	c := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: t.InsecureSkipVerify} //nolint:gosec // opt-in, warned about at load
	if t.CAFile != "" {
		pool, err := config.LoadCAPool(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls.ca_file: %w", err)
		}
		c.RootCAs = pool
	}
	if t.CertFile != "" {
		crt, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls client certificate: %w", err)
		}
		c.Certificates = []tls.Certificate{crt}
	}
	return c, nil
}

// newServerSet builds the servers of origin name; ctx bounds its health
// checks.
func (r *Registry) newServerSet(ctx context.Context, name string, oc *config.Origin) (*serverSet, error) {
	base, err := originTLS(oc)
	if err != nil {
		return nil, fmt.Errorf("proxy: origin %q: %w", name, err)
	}
	if base != nil && base.InsecureSkipVerify {
		r.logger.Warn("origin TLS certificates are not verified (tls.insecure_skip_verify)", "origin", name)
	}
	ss := &serverSet{conf: serverFingerprint(oc), byPS: make(map[*originpool.Server]*server, len(oc.Servers))}
	pc := originpool.Config{}
	if hc := oc.HealthCheck; hc != nil {
		pc.Healthy, pc.Unhealthy = hc.Healthy, hc.Unhealthy
	}
	ss.pool = originpool.New(oc.Servers, pc)
	for i, label := range oc.Servers {
		addr := config.StripScheme(label)
		var tc *tls.Config
		if config.IsHTTPS(label) {
			tc = base.Clone()
			switch host, _, _ := net.SplitHostPort(addr); {
			case oc.TLS.ServerName != "":
				tc.ServerName = oc.TLS.ServerName
			case oc.HostHeader != "":
				tc.ServerName = oc.HostHeader
			default:
				tc.ServerName = host
			}
		}
		tlsErrs := r.set.GetOrCreateCounter(`shield_origin_tls_errors_total{origin="` + name + `",server="` + label + `"}`)
		dial := r.originDialer(name, label, addr, tc, oc.ConnectTimeout, tlsErrs)
		s := &server{label: label, addr: addr, ps: ss.pool.Servers()[i],
			hc: newHostClient(addr, dial, oc, oc.IdleTimeout), fresh: newHostClient(addr, dial, oc, oc.IdleTimeout)}
		ss.servers = append(ss.servers, s)
		ss.byPS[s.ps] = s
	}
	if hc := oc.HealthCheck; hc != nil {
		cctx, cancel := context.WithCancel(ctx)
		ss.stop = cancel
		host := oc.HostHeader
		for _, s := range ss.servers {
			go r.checkHealth(cctx, name, ss.pool, s, hc, host)
		}
	}
	return ss, nil
}

func newHostClient(addr string, dial fasthttp.DialFuncWithTimeout, oc *config.Origin, idle time.Duration) *fasthttp.HostClient {
	return &fasthttp.HostClient{
		Addr:        addr,
		Name:        "shield",
		DialTimeout: dial,
		// The budget (admission.Origin) bounds in-flight fetches, bodies
		// included; the pool only needs to be as large.
		MaxConns: oc.MaxConcurrency,
		// Close pooled connections before the origin does: a connection
		// the origin closed while idle costs a retry on a new one.
		MaxIdleConnDuration: idle,
		// LIFO reuses the most recently used connection, the one least
		// likely to have been closed by the origin's idle timer.
		ConnPoolStrategy: fasthttp.LIFO,
		// Per-read/write bounds; the whole fetch is bounded by the
		// deadline passed to DoDeadline.
		ReadTimeout:  oc.Timeout,
		WriteTimeout: oc.Timeout,
		// No hidden retries: they multiply origin load and hide
		// failures from the breaker. shield retries explicitly: a stale
		// keep-alive connection on a new connection, a refused one on
		// another server inside the retry budget.
		MaxIdemponentCallAttempts: 1,
		ReadBufferSize:            int(oc.MaxResponseHeaderSize),
		// Bodies are streamed so that objects above max_object_size
		// pass through without being buffered whole.
		StreamResponseBody: true,
		// Forward the path exactly as received: the cache key uses
		// the raw path, so the origin must see the same bytes.
		DisablePathNormalizing:   true,
		NoDefaultUserAgentHeader: true,
	}
}

// originDialer connects to addr within the connect timeout (or the
// request's remaining time, if shorter) and, for https:// servers, does
// the TLS handshake within the request's remaining time. fasthttp sees the TLS
// connection as a plain one, so an origin's close_notify on an idle
// connection reads as the EOF that triggers the stale-connection retry.
// Certificate errors are logged (at most once per 10s per server) and
// counted.
func (r *Registry) originDialer(origin, label, addr string, tc *tls.Config, connect time.Duration, tlsErrs *metrics.Counter) fasthttp.DialFuncWithTimeout {
	var lastLog atomic.Int64
	return func(_ string, remaining time.Duration) (net.Conn, error) {
		d := connect
		if remaining > 0 && remaining < d {
			d = remaining
		}
		start := time.Now()
		c, err := fasthttp.DialTimeout(addr, d)
		if err != nil {
			return nil, err
		}
		// Reads and writes are raw system calls, under TLS too, as on
		// the public listener (proxy/rawio: sysmon stays asleep).
		c = rawio.Wrap(c)
		if tc == nil {
			return httpx.NewTrackedConn(c), nil
		}
		// connect_timeout bounds the TCP dial; the handshake gets what
		// is left of the request's time (the fetch timeout).
		tconn, err := httpx.Handshake(c, tc, start.Add(max(d, remaining)))
		if err != nil {
			tlsErrs.Inc()
			if now := time.Now().UnixNano(); now-lastLog.Load() > int64(10*time.Second) {
				lastLog.Store(now)
				r.logger.Error("origin TLS handshake failed", "origin", origin, "server", label,
					"server_name", tc.ServerName, "kind", tlsErrorKind(err), "err", err)
			}
			return nil, fmt.Errorf("tls handshake with %s: %w", label, err)
		}
		return httpx.NewTrackedConn(tconn), nil
	}
}

// tlsErrorKind names a handshake failure for the log line.
func tlsErrorKind(err error) string {
	var (
		ua x509.UnknownAuthorityError
		he x509.HostnameError
		ci x509.CertificateInvalidError
		cv *tls.CertificateVerificationError
	)
	switch {
	case errors.As(err, &ua):
		return "unknown-authority"
	case errors.As(err, &he):
		return "hostname-mismatch"
	case errors.As(err, &ci):
		return "certificate-invalid"
	case errors.As(err, &cv):
		return "certificate-verification"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	return "handshake"
}

// checkHealth probes s every interval with GET path until ctx ends; a
// 2xx or 3xx within the timeout is healthy. Transitions are logged.
func (r *Registry) checkHealth(ctx context.Context, origin string, pool *originpool.Pool, s *server, hc *config.HealthCheck, host string) {
	if host == "" {
		host = s.addr
	}
	t := time.NewTicker(hc.Interval)
	defer t.Stop()
	for {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.SetRequestURI(hc.Path)
		req.Header.SetHost(host)
		req.SetConnectionClose()
		err := s.fresh.DoTimeout(req, resp, hc.Timeout)
		ok := err == nil && resp.StatusCode() >= 200 && resp.StatusCode() < 400
		_ = resp.CloseBodyStream()
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
		if before := s.ps.Up(time.Now()); pool.Probe(s.ps, ok) {
			lvl := slog.LevelWarn
			if !before {
				lvl = slog.LevelInfo
			}
			r.logger.Log(ctx, lvl, "origin server health changed", "origin", origin, "server", s.label,
				"healthy", !before, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
