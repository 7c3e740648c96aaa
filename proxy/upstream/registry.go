package upstream

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/shield-proxy/shield/admission"
	"github.com/shield-proxy/shield/breaker"
	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/originpool"
)

// Registry holds every origin a configuration has named and the state a
// reload keeps for each: budget (in-flight counts, rate tokens), breaker
// (when its settings are unchanged), retry budget, servers and their
// health checks (when the server settings are unchanged), metric handles.
// An origin a later configuration drops keeps its state (and its metrics)
// but its health checks stop.
type Registry struct {
	logger *slog.Logger
	set    *metrics.Set
	// ctx bounds the health checks: they stop when it ends.
	ctx context.Context

	// mu serialises Update and guards states.
	mu     sync.Mutex
	states map[string]*state // by origin name
}

// NewRegistry returns an empty registry whose origins register their
// metrics in set and log to logger. Health checks run until ctx ends.
func NewRegistry(ctx context.Context, set *metrics.Set, logger *slog.Logger) *Registry {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Registry{logger: logger, set: set, ctx: ctx, states: make(map[string]*state)}
}

// Check returns the error Update would meet on cfg's origins, without
// changing anything: origin limits, breaker settings, TLS material.
func Check(origins map[string]*config.Origin) error {
	for name, oc := range origins {
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
	return nil
}

// Update builds the origins of cfg, by name, from the state kept for each
// (created for a new name, updated to its settings otherwise), stops the
// health checks of origins cfg no longer names and applies the overload
// settings that depend on cfg's routes (the budget reserve of high
// priority routes, shuffle_shard). Run Check first: an error part-way
// leaves the origins updated before it.
func (r *Registry) Update(cfg *config.Config) (map[string]*Origin, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	origins := make(map[string]*Origin, len(cfg.Origins))
	states := make(map[string]*state, len(cfg.Origins))
	for name, oc := range cfg.Origins {
		st, err := r.state(name, oc, now)
		if err != nil {
			return nil, err
		}
		states[name] = st
		o := &Origin{name: name, servers: st.servers, timeout: oc.Timeout, state: st,
			failStatus: breaker.NewStatusSet(breakerSettings(oc.Breaker).WithDefaults().FailureStatuses),
			maxHints:   oc.MaxEarlyHints}
		if oc.HostHeader != "" {
			o.hostHeader = []byte(oc.HostHeader)
		}
		origins[name] = o
	}
	for name, st := range r.states {
		if _, kept := cfg.Origins[name]; !kept && st.servers != nil && st.servers.stop != nil {
			st.servers.stop() // a removed origin's health checks
			st.servers.stop = nil
		}
	}
	originOverload(cfg, states)
	return origins, nil
}

// state returns the kept state for an origin, updated to oc.
func (r *Registry) state(name string, oc *config.Origin, now time.Time) (*state, error) {
	limits := originLimits(oc)
	st := r.states[name]
	fresh := st == nil
	if fresh {
		budget, err := admission.NewOrigin(name, limits)
		if err != nil {
			return nil, fmt.Errorf("proxy: origin %q: %w", name, err)
		}
		st = &state{
			budget: budget,
			retry:  breaker.NewRetryBudget(breaker.DefaultRetryRatio, breaker.DefaultRetryMinPerSec, breaker.DefaultRetryWindow),
			m:      newOriginMetrics(r.set, name),
		}
		r.states[name] = st
	} else if err := st.budget.SetLimits(limits, now); err != nil {
		return nil, fmt.Errorf("proxy: origin %q: %w", name, err)
	}
	if fresh || !reflect.DeepEqual(st.brkConf, oc.Breaker) {
		b, err := r.newBreaker(name, oc.Breaker, st.budget)
		if err != nil {
			return nil, err
		}
		st.brk.Store(b)
		st.brkConf = oc.Breaker
	}
	if st.servers == nil || st.servers.conf != serverFingerprint(oc) {
		ss, err := r.newServerSet(r.ctx, name, oc)
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

// newBreaker builds origin name's breaker (nil when disabled); closing
// after a probe starts the budget's slow start.
func (r *Registry) newBreaker(name string, bc config.Breaker, budget *admission.Origin) (*breaker.Breaker, error) {
	if bc.Disabled {
		return nil, nil
	}
	s := breakerSettings(bc)
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("proxy: origin %q: %w", name, err)
	}
	logger := r.logger
	return breaker.New(name, s, func(name string, from, to breaker.State) {
		// Runs under the breaker's lock: record only. Slow start
		// begins when a probe closes the breaker.
		if to == breaker.Closed && from == breaker.HalfOpen {
			budget.StartRamp(time.Now())
		}
		go logger.Warn("origin breaker", "origin", name, "from", from.String(), "to", to.String())
	}), nil
}

// originLimits is an origin's budget as the admission package takes it.
func originLimits(oc *config.Origin) admission.OriginLimits {
	return admission.OriginLimits{
		MaxConcurrency: oc.MaxConcurrency,
		MaxRate:        oc.MaxRate,
		SlowStart:      oc.SlowStart,
		QueueTimeout:   oc.QueueTimeout,
	}
}

// originOverload applies the per-origin overload settings of a load: the
// top of each origin's budget is kept for its high routes' fetches, on
// origins that have any (admission.Priority), and shuffle_shard.
func originOverload(cfg *config.Config, states map[string]*state) {
	high := make(map[string]bool, len(states))
	for _, rc := range cfg.Routes {
		if rc.Priority == "high" {
			high[rc.Origin] = true
		}
	}
	for name, st := range states {
		st.budget.SetReserveHigh(high[name])
		if oc := cfg.Origins[name]; oc != nil && st.servers != nil {
			st.servers.shard.Store(int32(min(max(oc.ShuffleShard, 0), len(st.servers.servers))))
		}
	}
}

// Health returns every origin's per-server health by origin name: a
// read-only snapshot for the admin status page.
func (r *Registry) Health() map[string][]originpool.Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	out := make(map[string][]originpool.Status, len(r.states))
	for name, st := range r.states {
		if st.servers != nil {
			out[name] = st.servers.snapshot(now)
		}
	}
	return out
}
