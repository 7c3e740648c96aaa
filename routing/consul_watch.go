package routing

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"time"

	"github.com/hashicorp/consul/api"
)

// Run watches the passing instances of the service with blocking queries
// and feeds them to the Membership until ctx is done; then it returns nil,
// having cancelled the query in flight. Run is called once.
//
// Per Consul's blocking-query notes: the index is reset to 0 when it goes
// backwards and kept above 0; query starts are at least a second apart (a
// flapping index cannot make the loop spin); a returned query is no
// guarantee of change, and an unchanged set does not change the generation.
// On errors the loop backs off exponentially from 0.5s to 30s with jitter
// (not consul/api/watch's 180s: a shield wants to see its peers again
// quickly) and keeps the last good set.
func (c *Consul) Run(ctx context.Context) error {
	defer c.transport.CloseIdleConnections()
	var (
		index     uint64
		failures  int
		lastStart time.Time
	)
	for {
		if !lastStart.IsZero() && !c.refreshWant.Load() {
			if !c.wait(ctx, c.minGap-time.Since(lastStart)) {
				return nil
			}
		}
		if c.refreshWant.Swap(false) {
			index = 0 // a non-blocking read of the current set
		}
		lastStart = time.Now()
		entries, meta, err := c.query(ctx, index)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, errRefresh) {
			continue
		}
		if err != nil {
			failures++
			// A restarted agent starts its indexes over: block on ours
			// and we would not hear from it for a whole wait time.
			index = 0
			c.markDown(err)
			if !c.wait(ctx, backoff(failures, c.backoffBase, c.backoffMax)) {
				return nil
			}
			continue
		}
		failures = 0
		c.markUp()
		index = nextIndex(index, meta.LastIndex)
		c.m.Update(c.peersFrom(entries), time.Now())
		c.ensureRegistered(ctx, entries)
	}
}

// query runs one (blocking, unless index is 0) health query. Refresh can
// cancel it with errRefresh; a hung agent is cut off after the wait time
// plus Consul's jitter (wait/16) plus slack.
func (c *Consul) query(ctx context.Context, index uint64) ([]*api.ServiceEntry, *api.QueryMeta, error) {
	qctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	tctx, cancelT := context.WithTimeout(qctx, c.cfg.WaitTime+c.cfg.WaitTime/16+5*time.Second)
	defer cancelT()
	c.mu.Lock()
	c.cancelQuery = cancel
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.cancelQuery = nil
		c.mu.Unlock()
	}()
	opts := &api.QueryOptions{WaitIndex: index, WaitTime: c.cfg.WaitTime, AllowStale: true}
	entries, meta, err := c.client.Health().Service(c.cfg.Service, "", true, opts.WithContext(tctx))
	if err != nil {
		if cause := context.Cause(qctx); errors.Is(cause, errRefresh) {
			return nil, nil, errRefresh
		}
		return nil, nil, fmt.Errorf("routing: consul health %q: %w", c.cfg.Service, err)
	}
	return entries, meta, nil
}

// nextIndex is the index for the next blocking query after one sent with
// prev returned got: reset to 0 (a fresh, non-blocking read) when the index
// went backwards, e.g. after a Consul snapshot restore or a read from another
// server; else never 0, which would make every query return at once.
func nextIndex(prev, got uint64) uint64 {
	switch {
	case got < prev:
		return 0
	case got == 0:
		return 1
	default:
		return got
	}
}

// backoff is the wait after the n-th consecutive failure (n ≥ 1): base·2^(n−1)
// capped at ceiling, of which a random half is dropped ("equal jitter") so that
// nodes that lost Consul together do not come back in lockstep.
func backoff(n int, base, ceiling time.Duration) time.Duration {
	d := ceiling
	if n < 32 {
		d = min(base<<(n-1), ceiling)
	}
	half := d / 2
	return half + rand.N(half+1)
}

// wait sleeps for d (no-op if d ≤ 0) and reports false if ctx ended. A
// Refresh cuts it short.
func (c *Consul) wait(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		case <-c.wake:
			if c.refreshWant.Load() {
				return true
			}
		}
	}
}

// peersFrom turns passing service entries into peers: ID = service ID,
// Addr = service address (or the node's when empty) and port, Weight =
// Meta["weight"] (missing → 1; invalid → 1, logged once per peer and value).
func (c *Consul) peersFrom(entries []*api.ServiceEntry) []Peer {
	peers := make([]Peer, 0, len(entries))
	for _, e := range entries {
		if e == nil || e.Service == nil {
			continue
		}
		host := e.Service.Address
		if host == "" && e.Node != nil {
			host = e.Node.Address
		}
		peers = append(peers, Peer{
			ID:     e.Service.ID,
			Addr:   net.JoinHostPort(host, strconv.Itoa(e.Service.Port)),
			Weight: c.weight(e.Service.ID, e.Service.Meta["weight"]),
		})
	}
	return peers
}

// weight parses a Meta["weight"] value.
func (c *Consul) weight(id, s string) float64 {
	if s == "" {
		return 1
	}
	w, err := strconv.ParseFloat(s, 64)
	if err == nil && validWeight(w) {
		delete(c.warnedWeight, id)
		return w
	}
	if c.warnedWeight[id] != s {
		c.warnedWeight[id] = s
		c.logger.Warn("routing: invalid weight in consul meta, using 1", "peer", id, "weight", s)
	}
	return 1
}

// markUp records a successful query, logging the transition once.
func (c *Consul) markUp() {
	c.lastErr.Store(nil)
	switch c.reach.Swap(reachUp) {
	case reachDown:
		c.logger.Info("routing: consul reachable again", "service", c.cfg.Service)
	case reachUnknown:
		c.logger.Info("routing: consul watch started", "service", c.cfg.Service)
	}
}

// markDown records a failed query, logging the transition once.
func (c *Consul) markDown(err error) {
	c.lastErr.Store(&errBox{err})
	if c.reach.Swap(reachDown) != reachDown {
		c.logger.Warn("routing: consul unreachable, keeping last known peer set",
			"service", c.cfg.Service, "generation", c.m.View().Current.Generation(), "err", err)
	}
}

// ensureRegistered re-registers this node when the healthy set lacks it
// and the agent no longer knows its service — an agent restarted without
// state (dev mode) or one that dropped the service. It checks at most once
// per check interval and never after Deregister (a leaving node).
func (c *Consul) ensureRegistered(ctx context.Context, entries []*api.ServiceEntry) {
	if !c.registered.Load() || c.leaving.Load() {
		return
	}
	for _, e := range entries {
		if e.Service != nil && e.Service.ID == c.self.ID {
			return
		}
	}
	now := time.Now()
	if last := c.lastEnsure.Load(); last != 0 && now.Sub(time.Unix(0, last)) < c.cfg.CheckInterval {
		return
	}
	c.lastEnsure.Store(now.UnixNano())
	services, err := c.client.Agent().ServicesWithFilterOpts("", (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return
	}
	if _, ok := services[c.self.ID]; ok {
		return // registered; its check has not passed yet
	}
	c.logger.Warn("routing: this node is no longer registered in consul; registering again", "peer", c.self.ID)
	_ = c.Register(ctx)
}
