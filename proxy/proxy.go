package proxy

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/cachekey"
	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/routing"
	"github.com/shield-proxy/shield/stale"
)

// Proxy is the request path of DESIGN §1 for one node: route, key, lookup,
// coalesce, fetch, store, respond. Create it with New, serve Handler on
// the public listener and AdminHandler on the admin listener, and call
// Close on shutdown (it saves the cache when cache.path is set).
type Proxy struct {
	logger *slog.Logger
	store  *store
	g      *globalMetrics
	fl     flights

	// rt is the routes and origins in force. Readers load it once per
	// request and never lock; Apply builds a new value and swaps it.
	rt atomic.Pointer[runtimeConfig]

	cachePath string
	ready     atomic.Bool

	// bgCtx bounds work that outlives a request (none yet on the hit
	// path; background refreshes later); cancelled by Close.
	bgCtx    context.Context
	bgCancel context.CancelFunc

	mu sync.Mutex // serialises Apply
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
	set        *metrics.Set
}

// route is a route's runtime form.
type route struct {
	name     string
	rules    *cachekey.Rules
	headers  []string // key header names, in Rules order
	disabled bool
	policy   stale.Policy
	allowSC  bool
	origin   *origin
	m        *routeMetrics
}

// New builds a proxy from a validated configuration.
func New(cfg *config.Config, logger *slog.Logger) (*Proxy, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	p := &Proxy{
		logger:    logger.With("component", "proxy"),
		cachePath: cfg.Cache.Path,
	}
	p.store = openStore(cfg.Cache.Path, int(cfg.Cache.Size), p.logger)
	p.g = newGlobalMetrics(p.store.c)
	p.bgCtx, p.bgCancel = context.WithCancel(context.Background())
	if err := p.Apply(cfg); err != nil {
		return nil, err
	}
	return p, nil
}

// Apply compiles cfg and swaps it in atomically. Requests in flight finish
// with the configuration they started with; the cache is kept. Changing
// cache.size or cache.path needs a restart and is ignored here.
func (p *Proxy) Apply(cfg *config.Config) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	rt, err := compile(cfg)
	if err != nil {
		return err
	}
	p.rt.Store(rt)
	return nil
}

func compile(cfg *config.Config) (*runtimeConfig, error) {
	set := metrics.NewSet()
	origins := make(map[string]*origin, len(cfg.Origins))
	for name, oc := range cfg.Origins {
		origins[name] = newOrigin(name, oc, cfg.Cache.MaxObjectSize, set)
	}
	specs := make([]routing.RouteSpec, len(cfg.Routes))
	routes := make([]*route, len(cfg.Routes))
	for i, rc := range cfg.Routes {
		specs[i] = routing.RouteSpec{Name: rc.Name, Hosts: rc.Hosts, PathPrefix: rc.PathPrefix}
		rules, err := cachekey.NewRules(rc.Cache.IgnoreQuery, rc.Cache.KeyHeaders)
		if err != nil {
			return nil, fmt.Errorf("proxy: route %q: %w", rc.Name, err)
		}
		o := origins[rc.Origin]
		if o == nil {
			return nil, fmt.Errorf("proxy: route %q: unknown origin %q", rc.Name, rc.Origin)
		}
		routes[i] = &route{
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
			allowSC: rc.Cache.AllowSetCookie,
			origin:  o,
			m:       newRouteMetrics(set, rc.Name),
		}
	}
	table, err := routing.NewTable(specs)
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	return &runtimeConfig{
		table:      table,
		routes:     routes,
		maxObject:  int(cfg.Cache.MaxObjectSize),
		hitForMiss: cfg.Cache.HitForMiss,
		maxWaiters: int32(cfg.Cache.MaxWaiters),
		waitFor:    cfg.Cache.WaitTimeout,
		set:        set,
	}, nil
}

// SetReady flips /readyz; main sets it once listeners are up and clears it
// when draining starts.
func (p *Proxy) SetReady(v bool) { p.ready.Store(v) }

// Close stops background work and saves the cache snapshot when
// cache.path is set. Call it after the listeners have drained.
func (p *Proxy) Close() error {
	p.bgCancel()
	if p.cachePath == "" {
		return nil
	}
	start := time.Now()
	if err := p.store.save(p.cachePath); err != nil {
		return err
	}
	p.logger.Info("cache snapshot saved", "path", p.cachePath, "took", time.Since(start).String())
	return nil
}

// Handler is the public listener's request handler.
func (p *Proxy) Handler() fasthttp.RequestHandler { return p.serve }
