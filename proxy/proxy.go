package proxy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/fastcache"
	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/admission"
	"github.com/shield-proxy/shield/cachekey"
	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/proxy/cache"
	"github.com/shield-proxy/shield/proxy/cluster"
	"github.com/shield-proxy/shield/proxy/listener"
	"github.com/shield-proxy/shield/proxy/upstream"
	"github.com/shield-proxy/shield/routing"
	"github.com/shield-proxy/shield/stale"
	"github.com/shield-proxy/shield/topk"
)

// Proxy is the request path of docs/architecture.md §1 for one node: route, admit, key,
// lookup, coalesce, fetch, store, respond. Create it with New, serve
// Handler on the public listener and AdminHandler on the admin listener,
// and call Close on shutdown (it saves the cache when cache.path is set).
type Proxy struct {
	logger *slog.Logger
	// cache holds the entries, the invalidation table, the namespace
	// versions and the rule that orders writes (proxy/cache).
	cache *cache.Cache
	heads *heads // parsed heads of recent hits (hithead.go)
	g     *globalMetrics
	fl    flights

	// rt is the configuration in force. Readers load it once per request
	// and never lock; Apply builds a new value and swaps it.
	rt atomic.Pointer[runtimeConfig]
	// connLimit is the public listener's connection limit
	// (server.max_connections, NewPublic), which Apply moves; nil until
	// the listener exists.
	connLimit atomic.Pointer[listener.Limit]

	ready    atomic.Bool
	requests atomic.Uint64 // for access-log sampling

	// cluster is nil on a single node; set once by SetCluster.
	cluster atomic.Pointer[cluster.Node]
	plog    *cluster.PurgeLog
	// hold is set while snapshot entries wait for the purge catch-up.
	hold *snapshotHold
	// top tracks this node's hottest keys (sampled; see topk).
	top *topk.Sketch
	// info heads the status page and keeps its event log.
	info statusInfo
	// reload re-reads the configuration file (set by main).
	reload atomic.Pointer[func() error]

	// bg bounds work that outlives a request (background refreshes).
	bg background
	// origins are the origins with the state reloads keep for them.
	origins *upstream.Registry

	// mu serialises Apply and guards kept and info's names.
	mu   sync.Mutex
	kept reloadKept
}

// statusInfo is what heads the admin status page, and its event log.
type statusInfo struct {
	// events keeps the last purges and reloads.
	events eventLog
	// started, nodeName and version head the page.
	started           time.Time
	nodeName, version string // guarded by Proxy.mu
}

// background bounds work that outlives a request (background refreshes,
// the cluster's loops): ctx is cancelled by Close, which then waits for wg.
type background struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// reloadKept is the request-path state a reload keeps (guarded by
// Proxy.mu; the origins' state is the upstream registry's).
type reloadKept struct {
	routeMetrics map[string]*routeMetrics // by route name
	tenants      *admission.Tenants       // nil until a config has tenants:
}

// runtimeConfig is one configuration compiled for the request path. It
// is immutable once published.
type runtimeConfig struct {
	table      *routing.Table
	routes     []*route // indexed by routing.Route.Index
	maxObject  int
	hitForMiss time.Duration
	maxWaiters int32
	waitFor    time.Duration

	// accessEvery logs one request in this many (0: access log off).
	accessEvery uint64

	// Admission: nil tenants means no admission control.
	tenants  *admission.Tenants
	idHeader []byte            // tenant from this request header, or
	apiKeyH  []byte            // an API key in this header,
	apiKeys  map[string][]byte // mapped to a tenant name

	// trusted are the clients whose forwarding fields are extended
	// (server.trusted_proxies); empty: none.
	trusted []netip.Prefix
}

// trusts reports whether the client of ctx is a trusted proxy.
func (rt *runtimeConfig) trusts(ctx *fasthttp.RequestCtx) bool {
	if len(rt.trusted) == 0 {
		return false
	}
	a, ok := netip.AddrFromSlice(ctx.RemoteIP())
	if !ok {
		return false
	}
	a = a.Unmap()
	for _, p := range rt.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// route is a route's runtime form.
type route struct {
	name       string
	rules      *cachekey.Rules
	headers    []string // key header names, in Rules order
	disabled   bool
	policy     stale.Policy
	staleOn429 bool
	// tagHeader names the response field carrying surrogate keys
	// (space-separated); exposeTags passes it on to clients.
	tagHeader  []byte
	exposeTags bool
	// targeted are the RFC 9213 fields obeyed instead of Cache-Control,
	// first present wins; forwardTargeted passes them on to clients.
	targeted        [][]byte
	forwardTargeted bool
	// forwardIgnored sends the query parameters the key ignores on cache
	// fetches too (by default they are dropped: upstreamTarget).
	forwardIgnored bool
	// codings is the Accept-Encoding preference requests are reduced to
	// (nil: forwarded as sent).
	codings [][]byte
	// aeKeyed: Accept-Encoding is one of the key headers, so a request's
	// field is reduced before keying rather than when read (encoding.go).
	aeKeyed bool
	// comp compresses at the shield (nil: off; compress.go). When set,
	// codings is nil: the origin is asked for identity.
	comp   *compression
	scoped bool   // tenant is part of the key
	tenant []byte // fixed tenant name, or nil
	origin *upstream.Origin
	m      *routeMetrics

	overload // cost, priority: overload.go
}

// New builds a proxy from a validated configuration.
func New(cfg *config.Config, logger *slog.Logger) (*Proxy, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	p := &Proxy{
		logger: logger.With("component", "proxy"),
		kept:   reloadKept{routeMetrics: make(map[string]*routeMetrics)},
		top:    topk.New(0, 0, 0),
		info:   statusInfo{started: time.Now()},
	}
	p.heads = new(heads)
	p.cache = cache.Open(cfg.Cache.Path, int(cfg.Cache.Size), int(cfg.Cache.MaxObjectSize), p.logger)
	p.openDiskTier(cfg)
	p.plog = cluster.NewPurgeLog(time.Now())
	p.holdSnapshot(cfg)
	p.g = newGlobalMetrics(p.cache.Fastcache())
	p.g.set.RegisterMetricsWriter(p.writeStateMetrics)
	p.g.set.RegisterMetricsWriter(p.writeTopKeyMetrics)
	p.g.set.RegisterMetricsWriter(p.writeDiskMetrics)
	p.g.set.RegisterMetricsWriter(p.writeTruncatedMetrics)
	p.bg.ctx, p.bg.cancel = context.WithCancel(context.Background())
	// The origins' health checks stop with the background work.
	p.origins = upstream.NewRegistry(p.bg.ctx, p.g.set, p.logger)
	if err := p.Apply(cfg); err != nil {
		return nil, err
	}
	return p, nil
}

// Apply compiles cfg and swaps it in atomically. Requests in flight finish
// with the configuration they started with; the cache, tenant buckets,
// origin budgets, breakers (whose settings did not change) and metric
// counters are kept. cache.size and cache.path need a restart.
//
// Apply is all or nothing: checkApply runs every step that can refuse cfg
// before anything kept is changed, so a rejected configuration leaves
// tenants, budgets, breakers and servers exactly as they were.
func (p *Proxy) Apply(cfg *config.Config) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := checkApply(cfg); err != nil {
		return err
	}
	rt, err := p.compileRuntime(cfg, time.Now())
	if err != nil {
		return err
	}
	origins, err := p.origins.Update(cfg)
	if err != nil {
		return err
	}
	specs := make([]routing.RouteSpec, len(cfg.Routes))
	rt.routes = make([]*route, len(cfg.Routes))
	for i, rc := range cfg.Routes {
		specs[i] = routing.RouteSpec{Name: rc.Name, Hosts: rc.Hosts, PathPrefix: rc.PathPrefix}
		r, err := p.compileRoute(rc, origins[rc.Origin], rt.maxObject)
		if err != nil {
			return err
		}
		rt.routes[i] = r
	}
	table, err := routing.NewTable(specs)
	if err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	rt.table = table
	p.rt.Store(rt)
	if l := p.connLimit.Load(); l != nil {
		l.SetMax(cfg.Server.MaxConnections)
	}
	return nil
}

// compileRuntime starts the runtime form of cfg: the cache and access-log
// settings, trusted proxies and tenants (applied to the kept table).
func (p *Proxy) compileRuntime(cfg *config.Config, now time.Time) (*runtimeConfig, error) {
	rt := &runtimeConfig{
		maxObject:  int(cfg.Cache.MaxObjectSize),
		hitForMiss: cfg.Cache.HitForMiss,
		maxWaiters: int32(cfg.Cache.MaxWaiters),
		waitFor:    cfg.Cache.WaitTimeout,
	}
	if a := cfg.Log.Access; a.Enabled && a.Sample > 0 {
		rt.accessEvery = uint64(1/a.Sample + 0.5)
	}
	for _, tp := range cfg.Server.TrustedProxies {
		pfx, err := config.ParseTrustedProxy(tp)
		if err != nil {
			return nil, fmt.Errorf("server.trusted_proxies: %w", err)
		}
		rt.trusted = append(rt.trusted, pfx)
	}
	if err := p.compileTenants(rt, cfg, now); err != nil {
		return nil, err
	}
	return rt, nil
}

// compileRoute builds route rc's runtime form, served by origin o (nil:
// rc names an origin the configuration has not). Its metric handles are
// kept across reloads by route name.
func (p *Proxy) compileRoute(rc *config.Route, o *upstream.Origin, maxObject int) (*route, error) {
	rules, err := cachekey.NewRules(rc.Cache.IgnoreQuery, rc.Cache.KeyHeaders)
	if err != nil {
		return nil, fmt.Errorf("proxy: route %q: %w", rc.Name, err)
	}
	if o == nil {
		return nil, fmt.Errorf("proxy: route %q: unknown origin %q", rc.Name, rc.Origin)
	}
	m := p.kept.routeMetrics[rc.Name]
	if m == nil {
		m = newRouteMetrics(p.g.set, rc.Name)
		p.kept.routeMetrics[rc.Name] = m
	}
	r := &route{
		name:     rc.Name,
		rules:    rules,
		headers:  rules.KeyHeaders(),
		disabled: rc.Cache.Disabled,
		policy: stale.Policy{
			DefaultTTL:           rc.Cache.DefaultTTL,
			StaleWhileRevalidate: rc.Cache.StaleWhileRevalidate,
			StaleIfError:         rc.Cache.StaleIfError,
			MaxStale:             rc.Cache.MaxStale,
			AllowSetCookie:       rc.Cache.AllowSetCookie,
		},
		staleOn429: rc.Cache.StaleOn429,
		tagHeader:  []byte(rc.Cache.SurrogateKeyHeader),
		exposeTags: rc.Cache.ExposeSurrogateKeys,
		scoped:     rc.Cache.TenantScoped,
		origin:     o,
		m:          m,
	}
	if rc.Tenant != "" {
		r.tenant = []byte(rc.Tenant)
	}
	r.overload = p.routeOverload(rc)
	for _, h := range rc.Cache.Targeted {
		r.targeted = append(r.targeted, []byte(h))
	}
	r.forwardTargeted = rc.Cache.ForwardTargeted
	r.forwardIgnored = rc.Cache.ForwardIgnoredQuery
	r.comp = newCompression(&rc.Compress, maxObject)
	if ae := rc.Cache.AcceptEncoding; len(ae) > 0 && ae[0] != "*" && r.comp == nil {
		for _, c := range ae {
			r.codings = append(r.codings, []byte(strings.ToLower(c)))
		}
	}
	for _, name := range r.headers {
		r.aeKeyed = r.aeKeyed || strings.EqualFold(name, "Accept-Encoding")
	}
	return r, nil
}

// checkApply returns the error Apply would meet part-way through, without
// changing anything: tenant limits, origin limits, breaker settings,
// origin TLS material, routes' key rules and origins, the route table.
// Apply's own checks stay as a second line.
func checkApply(cfg *config.Config) error {
	if tc := cfg.Tenants; tc != nil {
		ac := admission.Config{Default: tenantLimits(&tc.Default), Classes: make(map[string]admission.Limits, len(tc.Classes))}
		for name, l := range tc.Classes {
			ac.Classes[name] = tenantLimits(l)
		}
		if err := ac.Validate(); err != nil {
			return fmt.Errorf("proxy: tenants: %w", err)
		}
	}
	if err := upstream.Check(cfg.Origins); err != nil {
		return err
	}
	specs := make([]routing.RouteSpec, len(cfg.Routes))
	for i, rc := range cfg.Routes {
		specs[i] = routing.RouteSpec{Name: rc.Name, Hosts: rc.Hosts, PathPrefix: rc.PathPrefix}
		if _, err := cachekey.NewRules(rc.Cache.IgnoreQuery, rc.Cache.KeyHeaders); err != nil {
			return fmt.Errorf("proxy: route %q: %w", rc.Name, err)
		}
		if cfg.Origins[rc.Origin] == nil {
			return fmt.Errorf("proxy: route %q: unknown origin %q", rc.Name, rc.Origin)
		}
	}
	if _, err := routing.NewTable(specs); err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	return nil
}

// compileTenants applies cfg.Tenants to the persistent tenant table.
func (p *Proxy) compileTenants(rt *runtimeConfig, cfg *config.Config, now time.Time) error {
	tc := cfg.Tenants
	if tc == nil {
		return nil
	}
	ac := admission.Config{Default: tenantLimits(&tc.Default), Classes: make(map[string]admission.Limits, len(tc.Classes))}
	for name, l := range tc.Classes {
		ac.Classes[name] = tenantLimits(l)
	}
	if p.kept.tenants == nil {
		ts, err := admission.NewTenants(ac, 1)
		if err != nil {
			return fmt.Errorf("proxy: tenants: %w", err)
		}
		p.kept.tenants = ts
	} else if err := p.kept.tenants.Update(ac, now); err != nil {
		return fmt.Errorf("proxy: tenants: %w", err)
	}
	rt.tenants = p.kept.tenants
	switch id := tc.Identify; {
	case id.Header != "":
		rt.idHeader = []byte(id.Header)
	case id.APIKeys != nil:
		rt.apiKeyH = []byte(id.APIKeys.Header)
		rt.apiKeys = make(map[string][]byte, len(id.APIKeys.Keys))
		for k, v := range id.APIKeys.Keys {
			rt.apiKeys[k] = []byte(v)
		}
	}
	return nil
}

func tenantLimits(l *config.TenantLimits) admission.Limits {
	return admission.Limits{Rate: l.Rate, Burst: l.Burst, MaxConcurrency: l.MaxConcurrency, OriginShare: l.OriginShare}
}

// writeStateMetrics exports, at scrape time, state kept by the admission
// and breaker packages: the origins' (upstream.Registry.WriteMetrics),
// then the tenants'.
func (p *Proxy) writeStateMetrics(w io.Writer) {
	p.origins.WriteMetrics(w)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.kept.tenants != nil {
		for _, ts := range p.kept.tenants.Stats() {
			l := `{tenant="` + ts.Name + `"}`
			metrics.WriteCounterUint64(w, `shield_admission_admitted_total`+l, ts.Admitted)
			metrics.WriteGaugeUint64(w, `shield_tenant_in_flight`+l, uint64(ts.InFlight))
			metrics.WriteGaugeFloat64(w, `shield_tenant_share`+l, ts.Share)
			metrics.WriteGaugeFloat64(w, `shield_tenant_node_rate`+l, ts.NodeRate)
			metrics.WriteGaugeUint64(w, `shield_tenant_node_burst`+l, uint64(ts.NodeBurst))
			for r := admission.Reason(1); int(r) < admission.NumReasons; r++ {
				metrics.WriteCounterUint64(w, `shield_admission_rejected_total{tenant="`+ts.Name+`",reason="`+r.String()+`"}`, ts.Rejected[r])
			}
		}
	}
}

// SetReloader sets what POST /reload on the admin listener runs.
func (p *Proxy) SetReloader(f func() error) { p.reload.Store(&f) }

// SetReady flips /readyz; main sets it once listeners are up and clears it
// when draining starts.
func (p *Proxy) SetReady(v bool) { p.ready.Store(v) }

// Close stops background refreshes, waits for them, and saves the cache
// snapshot when cache.path is set. Call it after the listeners drained.
func (p *Proxy) Close() error {
	p.bg.cancel()
	p.bg.wg.Wait()
	path := p.cache.Path()
	if path == "" {
		return nil
	}
	start := time.Now()
	if err := p.cache.SaveSnapshot(); err != nil {
		return err
	}
	if err := p.plog.Save(path+".purgelog", start); err != nil {
		return err
	}
	if err := p.cache.SaveInvalidations(); err != nil {
		return err
	}
	p.logger.Info("cache snapshot saved", "path", path, "took", time.Since(start).String())
	return nil
}

// Handler is the public listener's request handler.
func (p *Proxy) Handler() fasthttp.RequestHandler { return p.serve }

// snapshotHold keeps a loaded snapshot's entries unserved until the
// node has caught up on the purges it missed (proxy/cluster/purgelog.go).
type snapshotHold struct {
	since    int64 // replay purges from here (the snapshot's save time, minus skew)
	global   int64 // the watermark to restore once caught up
	held     int64 // the watermark set while holding
	logSince int64 // the saved log's completeness, restored once caught up
}

// clockSkew widens the replay window for clocks that disagree.
const clockSkew = cluster.ClockSkew

// holdSnapshot starts holding snapshot entries when this node is in a
// cluster and loaded a non-empty snapshot: other nodes may have purged
// while it was down.
func (p *Proxy) holdSnapshot(cfg *config.Config) {
	if p.cache.Path() == "" {
		return
	}
	f, err := cluster.LoadPurgeLog(p.cache.Path() + ".purgelog")
	if err == nil {
		for _, r := range f.Records {
			p.plog.Add(r)
		}
	} else if !os.IsNotExist(err) {
		p.logger.Warn("purge log unreadable", "err", err)
	}
	var st fastcache.Stats
	p.cache.Fastcache().UpdateStats(&st)
	disk, _ := p.cache.DiskStats()
	if cfg.Cluster == nil || st.EntriesCount == 0 && disk.Objects == 0 {
		return
	}
	h := &snapshotHold{global: p.cache.Invalidations().Global.Load(), logSince: p.plog.Since()}
	if err == nil && f.SavedAt > 0 {
		h.since = f.SavedAt - int64(clockSkew)
		h.logSince = f.Since
	} else {
		h.since = 0 // unknown: only a log complete since the beginning will do
	}
	p.cache.Invalidations().InvalidateAll()
	h.held = p.cache.Invalidations().Global.Load()
	p.hold = h
}

// releaseSnapshot lets the held snapshot entries be served again (the
// purges they missed have been applied).
func (p *Proxy) releaseSnapshot() {
	h := p.hold
	// Unless a replayed "purge everything" raised it meanwhile.
	p.cache.Invalidations().Global.CompareAndSwap(h.held, h.global)
	p.plog.WidenSince(h.logSince)
}
