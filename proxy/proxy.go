package proxy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/fastcache"
	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/admission"
	"github.com/shield-proxy/shield/breaker"
	"github.com/shield-proxy/shield/cachekey"
	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/proxy/cluster"
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
	store  *store
	heads  *heads // parsed heads of recent hits (hithead.go)
	g      *globalMetrics
	fl     flights

	// rt is the configuration in force. Readers load it once per request
	// and never lock; Apply builds a new value and swaps it.
	rt atomic.Pointer[runtimeConfig]

	cachePath string
	ready     atomic.Bool
	requests  atomic.Uint64 // for access-log sampling

	// cluster is nil on a single node; set once by SetCluster.
	cluster atomic.Pointer[cluster.Node]
	ns      *namespaces
	iv      *invalidations
	stripes [64]sync.Mutex // per-key store ordering (stripe)
	ivMu    sync.Mutex     // serialises saving the invalidation table
	plog    *cluster.PurgeLog
	// hold is set while snapshot entries wait for the purge catch-up.
	hold *snapshotHold
	// top tracks this node's hottest keys (sampled; see topk).
	top *topk.Sketch
	// events keeps the last purges and reloads for the status page.
	events eventLog
	// started, nodeName and version head the status page.
	started           time.Time
	nodeName, version string // guarded by mu
	// reload re-reads the configuration file (set by main).
	reload atomic.Pointer[func() error]

	// bg bounds work that outlives a request (background refreshes):
	// cancelled by Close, which then waits for bgWG.
	bgCtx    context.Context
	bgCancel context.CancelFunc
	bgWG     sync.WaitGroup

	// mu serialises Apply and guards the state reloads keep.
	mu           sync.Mutex
	origins      map[string]*originState  // by origin name; guarded by mu
	routeMetrics map[string]*routeMetrics // by route name; guarded by mu
	tenants      *admission.Tenants       // guarded by mu; nil until a config has tenants:
}

// runtimeConfig is one configuration compiled for the request path. It
// is immutable once published.
type runtimeConfig struct {
	table      *routing.Table
	routes     []*route // indexed by routing.Route.Index
	origins    []*origin
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
	// comp compresses at the shield (nil: off; compress.go). When set,
	// codings is nil: the origin is asked for identity.
	comp   *compression
	scoped bool   // tenant is part of the key
	tenant []byte // fixed tenant name, or nil
	origin *origin
	m      *routeMetrics

	overload // cost, priority: overload.go
}

// New builds a proxy from a validated configuration.
func New(cfg *config.Config, logger *slog.Logger) (*Proxy, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	p := &Proxy{
		logger:       logger.With("component", "proxy"),
		cachePath:    cfg.Cache.Path,
		origins:      make(map[string]*originState),
		routeMetrics: make(map[string]*routeMetrics),
		top:          topk.New(0, 0, 0),
		started:      time.Now(),
	}
	p.heads = new(heads)
	p.store = openStore(cfg.Cache.Path, int(cfg.Cache.Size), int(cfg.Cache.MaxObjectSize), p.logger)
	p.ns = newNamespaces()
	p.iv = newInvalidations()
	p.plog = cluster.NewPurgeLog(time.Now())
	if p.cachePath != "" {
		if err := p.ns.load(p.cachePath + ".ns"); err != nil && !os.IsNotExist(err) {
			p.logger.Warn("namespace versions unreadable; dropping the snapshot", "err", err)
			p.iv.invalidateAll()
		}
		if err := p.iv.load(p.cachePath + ".inval"); err != nil && !os.IsNotExist(err) {
			// Without the table we cannot tell which snapshot entries
			// were purged: none of them is served.
			p.logger.Warn("invalidation table unreadable; dropping the snapshot", "err", err)
			p.iv.invalidateAll()
		}
	}
	p.holdSnapshot(cfg)
	p.g = newGlobalMetrics(p.store.c)
	p.g.set.RegisterMetricsWriter(p.writeStateMetrics)
	p.g.set.RegisterMetricsWriter(p.writeTopKeyMetrics)
	p.bgCtx, p.bgCancel = context.WithCancel(context.Background())
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
	now := time.Now()
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
			return fmt.Errorf("server.trusted_proxies: %w", err)
		}
		rt.trusted = append(rt.trusted, pfx)
	}
	if err := p.compileTenants(rt, cfg, now); err != nil {
		return err
	}
	origins := make(map[string]*origin, len(cfg.Origins))
	states := make(map[string]*originState, len(cfg.Origins))
	for name, oc := range cfg.Origins {
		st, err := p.originState(name, oc, now)
		if err != nil {
			return err
		}
		states[name] = st
		o := &origin{name: name, servers: st.servers, timeout: oc.Timeout, originState: st,
			failStatus: breaker.NewStatusSet(breakerSettings(oc.Breaker).WithDefaults().FailureStatuses),
			maxHints:   oc.MaxEarlyHints}
		if oc.HostHeader != "" {
			o.hostHeader = []byte(oc.HostHeader)
		}
		origins[name] = o
		rt.origins = append(rt.origins, o)
	}
	for name, st := range p.origins {
		if _, kept := cfg.Origins[name]; !kept && st.servers != nil && st.servers.stop != nil {
			st.servers.stop() // a removed origin's health checks
			st.servers.stop = nil
		}
	}
	specs := make([]routing.RouteSpec, len(cfg.Routes))
	rt.routes = make([]*route, len(cfg.Routes))
	for i, rc := range cfg.Routes {
		specs[i] = routing.RouteSpec{Name: rc.Name, Hosts: rc.Hosts, PathPrefix: rc.PathPrefix}
		rules, err := cachekey.NewRules(rc.Cache.IgnoreQuery, rc.Cache.KeyHeaders)
		if err != nil {
			return fmt.Errorf("proxy: route %q: %w", rc.Name, err)
		}
		o := origins[rc.Origin]
		if o == nil {
			return fmt.Errorf("proxy: route %q: unknown origin %q", rc.Name, rc.Origin)
		}
		m := p.routeMetrics[rc.Name]
		if m == nil {
			m = newRouteMetrics(p.g.set, rc.Name)
			p.routeMetrics[rc.Name] = m
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
		r.comp = newCompression(&rc.Compress, rt.maxObject)
		if ae := rc.Cache.AcceptEncoding; len(ae) > 0 && ae[0] != "*" && r.comp == nil {
			for _, c := range ae {
				r.codings = append(r.codings, []byte(strings.ToLower(c)))
			}
		}
		rt.routes[i] = r
	}
	table, err := routing.NewTable(specs)
	if err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	rt.table = table
	originOverload(cfg, states)
	p.rt.Store(rt)
	return nil
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
	for name, oc := range cfg.Origins {
		limits := originLimits(oc)
		if err := limits.Validate(); err != nil {
			return fmt.Errorf("proxy: origin %q: %w", name, err)
		}
		if !oc.Breaker.Disabled {
			if err := breakerSettings(oc.Breaker).Validate(); err != nil {
				return fmt.Errorf("proxy: origin %q: %w", name, err)
			}
		}
		if _, err := originTLS(oc); err != nil {
			return fmt.Errorf("proxy: origin %q: %w", name, err)
		}
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
	if p.tenants == nil {
		ts, err := admission.NewTenants(ac, 1)
		if err != nil {
			return fmt.Errorf("proxy: tenants: %w", err)
		}
		p.tenants = ts
	} else if err := p.tenants.Update(ac, now); err != nil {
		return fmt.Errorf("proxy: tenants: %w", err)
	}
	rt.tenants = p.tenants
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

// originState returns the kept state for an origin, updated to oc.
func (p *Proxy) originState(name string, oc *config.Origin, now time.Time) (*originState, error) {
	limits := originLimits(oc)
	st := p.origins[name]
	fresh := st == nil
	if fresh {
		budget, err := admission.NewOrigin(name, limits)
		if err != nil {
			return nil, fmt.Errorf("proxy: origin %q: %w", name, err)
		}
		st = &originState{
			budget: budget,
			retry:  breaker.NewRetryBudget(breaker.DefaultRetryRatio, breaker.DefaultRetryMinPerSec, breaker.DefaultRetryWindow),
			m:      newOriginMetrics(p.g.set, name),
		}
		p.origins[name] = st
	} else if err := st.budget.SetLimits(limits, now); err != nil {
		return nil, fmt.Errorf("proxy: origin %q: %w", name, err)
	}
	if fresh || !reflect.DeepEqual(st.brkConf, oc.Breaker) {
		var b *breaker.Breaker
		if !oc.Breaker.Disabled {
			s := breakerSettings(oc.Breaker)
			if err := s.Validate(); err != nil {
				return nil, fmt.Errorf("proxy: origin %q: %w", name, err)
			}
			budget, logger := st.budget, p.logger
			b = breaker.New(name, s, func(name string, from, to breaker.State) {
				// Runs under the breaker's lock: record only. Slow start
				// begins when a probe closes the breaker.
				if to == breaker.Closed && from == breaker.HalfOpen {
					budget.StartRamp(time.Now())
				}
				go logger.Warn("origin breaker", "origin", name, "from", from.String(), "to", to.String())
			})
		}
		st.brk.Store(b)
		st.brkConf = oc.Breaker
	}
	if st.servers == nil || st.servers.conf != serverFingerprint(oc) {
		ss, err := p.newServerSet(p.bgCtx, name, oc)
		if err != nil {
			return nil, err
		}
		if st.servers != nil && st.servers.stop != nil {
			st.servers.stop()
		}
		st.servers = ss
	}
	return st, nil
}

// writeStateMetrics exports, at scrape time, state kept by the admission
// and breaker packages.
func (p *Proxy) writeStateMetrics(w io.Writer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	for name, st := range p.origins {
		l := `{origin="` + name + `"}`
		os := st.budget.Stats(now)
		metrics.WriteGaugeUint64(w, `shield_origin_budget_limit`+l, uint64(os.Limit))
		metrics.WriteGaugeUint64(w, `shield_origin_budget_in_flight`+l, uint64(os.InFlight))
		if b := st.brk.Load(); b != nil {
			bs := b.Stats()
			metrics.WriteGaugeUint64(w, `shield_breaker_state`+l, uint64(bs.State))
			for to := breaker.Closed; to <= breaker.Open; to++ {
				metrics.WriteCounterUint64(w, `shield_breaker_transitions_total{origin="`+name+`",to="`+to.String()+`"}`, bs.Transitions[to])
			}
			metrics.WriteCounterUint64(w, `shield_breaker_rejections_total`+l, bs.RejectedOpen+bs.RejectedProbes)
		}
		if st.servers != nil {
			for _, ss := range st.servers.Snapshot(now) {
				sl := `{origin="` + name + `",server="` + ss.Name + `"}`
				up := uint64(0)
				if ss.Up {
					up = 1
				}
				metrics.WriteGaugeUint64(w, `shield_origin_server_up`+sl, up)
				metrics.WriteGaugeUint64(w, `shield_origin_server_in_flight`+sl, uint64(max(ss.InFlight, 0)))
				metrics.WriteCounterUint64(w, `shield_origin_server_requests_total`+sl, ss.Requests)
				metrics.WriteCounterUint64(w, `shield_origin_server_errors_total`+sl, ss.Errors)
				metrics.WriteCounterUint64(w, `shield_origin_server_ejections_total`+sl, ss.Ejects)
			}
		}
	}
	if p.tenants != nil {
		for _, ts := range p.tenants.Stats() {
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
	p.bgCancel()
	p.bgWG.Wait()
	if p.cachePath == "" {
		return nil
	}
	start := time.Now()
	if err := p.store.save(p.cachePath); err != nil {
		return err
	}
	if err := p.plog.Save(p.cachePath+".purgelog", start); err != nil {
		return err
	}
	if err := p.ns.save(p.cachePath + ".ns"); err != nil {
		return err
	}
	if err := p.saveInvalidations(); err != nil {
		return err
	}
	p.logger.Info("cache snapshot saved", "path", p.cachePath, "took", time.Since(start).String())
	return nil
}

// Handler is the public listener's request handler.
func (p *Proxy) Handler() fasthttp.RequestHandler { return p.serve }

// stripe is the lock ordering stores of one key.
func (p *Proxy) stripe(digest uint64) *sync.Mutex { return &p.stripes[digest%uint64(len(p.stripes))] }

// saveInvalidations persists the invalidation table and namespace
// versions beside the snapshot (after every purge, so that a crash does
// not forget one).
func (p *Proxy) saveInvalidations() error {
	if p.cachePath == "" {
		return nil
	}
	p.ivMu.Lock()
	defer p.ivMu.Unlock()
	if err := os.MkdirAll(parentDir(p.cachePath), 0o755); err != nil {
		return fmt.Errorf("proxy: save invalidations: %w", err)
	}
	if err := p.ns.save(p.cachePath + ".ns"); err != nil {
		return err
	}
	return p.iv.save(p.cachePath + ".inval")
}

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
	if p.cachePath == "" {
		return
	}
	f, err := cluster.LoadPurgeLog(p.cachePath + ".purgelog")
	if err == nil {
		for _, r := range f.Records {
			p.plog.Add(r)
		}
	} else if !os.IsNotExist(err) {
		p.logger.Warn("purge log unreadable", "err", err)
	}
	var st fastcache.Stats
	p.store.c.UpdateStats(&st)
	if cfg.Cluster == nil || st.EntriesCount == 0 {
		return
	}
	h := &snapshotHold{global: p.iv.global.Load(), logSince: p.plog.Since()}
	if err == nil && f.SavedAt > 0 {
		h.since = f.SavedAt - int64(clockSkew)
		h.logSince = f.Since
	} else {
		h.since = 0 // unknown: only a log complete since the beginning will do
	}
	p.iv.invalidateAll()
	h.held = p.iv.global.Load()
	p.hold = h
}

// releaseSnapshot lets the held snapshot entries be served again (the
// purges they missed have been applied).
func (p *Proxy) releaseSnapshot() {
	h := p.hold
	// Unless a replayed "purge everything" raised it meanwhile.
	p.iv.global.CompareAndSwap(h.held, h.global)
	p.plog.WidenSince(h.logSince)
}
