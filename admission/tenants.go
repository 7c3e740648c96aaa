package admission

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Tenants is the tenant table of one node. Lookups are lock-free: the
// table is an immutable map behind an atomic pointer, replaced whole by
// Update. The Tenant values it points to are kept across updates.
type Tenants struct {
	mu    sync.Mutex // serialises Update and SetPeers; readers never take it
	peers int        // live peers, ≥ 1; guarded by mu
	tab   atomic.Pointer[table]
}

// table is one configuration's view; never modified after it is stored.
type table struct {
	classes map[string]*Tenant
	def     *Tenant
	all     []*Tenant // default first, then classes by name (for Stats)
}

// NewTenants builds the table from cfg for a fleet of peers live nodes
// (values below 1 count as 1). Every bucket starts full.
func NewTenants(cfg Config, peers int) (*Tenants, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ts := &Tenants{peers: max(1, peers)}
	ts.tab.Store(buildTable(cfg, nil, ts.peers, time.Time{}))
	return ts, nil
}

// buildTable makes the table for cfg, reusing (and re-limiting at now)
// the tenants of old that cfg keeps, at their current share; new ones
// start at 1/peers. cfg must be valid.
func buildTable(cfg Config, old *table, peers int, now time.Time) *table {
	reuse := func(name string, l Limits) *Tenant {
		l = l.withDefaults()
		var t *Tenant
		if old != nil {
			if name == DefaultClass {
				t = old.def
			} else {
				t = old.classes[name]
			}
		}
		if t == nil {
			return newTenant(name, l, 1/float64(peers))
		}
		t.apply(l, t.Share(), now)
		return t
	}
	tab := &table{classes: make(map[string]*Tenant, len(cfg.Classes))}
	tab.def = reuse(DefaultClass, cfg.Default)
	names := make([]string, 0, len(cfg.Classes))
	for name := range cfg.Classes {
		names = append(names, name)
	}
	sort.Strings(names)
	tab.all = append(tab.all, tab.def)
	for _, name := range names {
		t := reuse(name, cfg.Classes[name])
		tab.classes[name] = t
		tab.all = append(tab.all, t)
	}
	return tab
}

// Lookup returns the class of tenant name; an unknown or empty name gets
// the default class. It never allocates.
func (ts *Tenants) Lookup(name []byte) *Tenant {
	tab := ts.tab.Load()
	if t, ok := tab.classes[string(name)]; ok {
		return t
	}
	return tab.def
}

// Default returns the default class.
func (ts *Tenants) Default() *Tenant { return ts.tab.Load().def }

// Update replaces the limits with cfg at now. Classes that remain keep their
// bucket (tokens advanced to now, then clamped to the new burst) and their
// in-flight count; new classes start full; removed ones disappear. An
// invalid cfg changes nothing.
func (ts *Tenants) Update(cfg Config, now time.Time) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("admission: reload rejected: %w", err)
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.tab.Store(buildTable(cfg, ts.tab.Load(), ts.peers, now))
	return nil
}

// SetPeers sets the number of live peers (values below 1 count as 1) and
// resets every class's share to 1/n at now, keeping bucket state. The
// usage exchange (Fleet) then moves shares to follow demand.
func (ts *Tenants) SetPeers(n int, now time.Time) {
	n = max(1, n)
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if n == ts.peers {
		return
	}
	ts.peers = n
	for _, t := range ts.tab.Load().all {
		t.apply(*t.limits.Load(), 1/float64(n), now)
	}
}

// SetShares sets each class's share to share(t) at now, keeping bucket
// state (tokens are advanced at the old rate, then clamped to the new
// burst; nothing is minted). Values outside (0, 1] and NaN are clamped to
// (0, 1]; an unchanged share costs nothing.
func (ts *Tenants) SetShares(now time.Time, share func(t *Tenant) float64) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for _, t := range ts.tab.Load().all {
		s := share(t)
		switch {
		case !(s > minShare):
			s = minShare
		case s > 1:
			s = 1
		}
		if s != t.Share() {
			t.apply(*t.limits.Load(), s, now)
		}
	}
}

// minShare keeps a share positive: a zero rate would make the bucket
// refuse forever and its Retry-After meaningless.
const minShare = 1e-6

// classes returns the current classes, default first (read-only).
func (ts *Tenants) classes() []*Tenant { return ts.tab.Load().all }

// Peers returns the live peer count the rates are divided by.
func (ts *Tenants) Peers() int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.peers
}

// Stats returns a snapshot per configured class, the default class first,
// then by name. It allocates; call it at scrape time, not per request.
func (ts *Tenants) Stats() []TenantStats {
	all := ts.tab.Load().all
	out := make([]TenantStats, len(all))
	for i, t := range all {
		out[i] = t.Stats()
	}
	return out
}
