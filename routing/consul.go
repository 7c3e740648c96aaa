package routing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"
)

// Consul defaults (docs/architecture.md §8).
const (
	DefaultConsulService         = "shield"
	DefaultConsulCheckInterval   = 5 * time.Second
	DefaultConsulDeregisterAfter = time.Minute // Consul's own minimum
	DefaultConsulWaitTime        = 30 * time.Second
	// maxConsulWaitTime is Consul's cap on a blocking query's wait.
	maxConsulWaitTime = 10 * time.Minute
)

// ConsulConfig configures Consul membership. The zero value works against
// a local agent with defaults.
type ConsulConfig struct {
	// Address of the Consul agent's HTTP API, "host:port" or a URL
	// ("https://…", "unix://…"). Empty: CONSUL_HTTP_ADDR, else
	// 127.0.0.1:8500 (consul/api's default).
	Address string
	// Service is the service name every node registers and watches.
	// Default "shield".
	Service string
	// Token is the ACL token. Empty: CONSUL_HTTP_TOKEN, else none.
	Token string
	// CheckInterval is how often Consul calls HealthURL. Default 5s. A node
	// leaves the healthy set about one interval after it fails.
	CheckInterval time.Duration
	// DeregisterAfter removes a node whose check stays critical this long
	// (DeregisterCriticalServiceAfter). Default 1m, Consul's minimum.
	DeregisterAfter time.Duration
	// WaitTime bounds one blocking query. Changes are seen at once whatever
	// its value; it sets how long a silently dead agent goes unnoticed (the
	// query also times out at WaitTime + WaitTime/16 + 5s). Default 30s,
	// at most 10m.
	WaitTime time.Duration
	// HealthURL is the admin /healthz URL Consul checks over HTTP. Empty
	// registers no check, so the node always counts as healthy: only for
	// tests.
	HealthURL string
	// Meta is added to the registration's service meta. "weight" is always
	// set from the local Peer; "version" defaults to the binary's module
	// version.
	Meta map[string]string
}

// Consul is the membership source backed by a Consul agent: it registers
// this node as a service with an HTTP health check and watches the passing
// instances with blocking queries. While Consul is unreachable the last
// known good peer set stays in force (static stability); Reachable and
// LastError report it.
type Consul struct {
	cfg    ConsulConfig
	self   Peer
	m      *Membership
	logger *slog.Logger
	client *api.Client
	// registered is set by a successful Register, leaving by
	// Deregister; ensureRegistered re-registers only in between.
	registered atomic.Bool
	leaving    atomic.Bool
	lastEnsure atomic.Int64    // unix ns of the last registration check
	transport  *http.Transport // closed idle on Run's exit

	// Timing, from the package defaults; tests shorten them.
	backoffBase time.Duration // first retry delay after an error
	backoffMax  time.Duration // retry delay cap
	minGap      time.Duration // minimum time between query starts
	refreshGap  time.Duration // minimum time between honoured Refresh calls

	reach       atomic.Int32 // reachUnknown, reachUp or reachDown
	lastErr     atomic.Pointer[errBox]
	lastRefresh atomic.Int64  // unix nanoseconds of the last honoured Refresh
	refreshWant atomic.Bool   // a Refresh is pending for the watch loop
	wake        chan struct{} // buffered(1): interrupts the loop's waits

	mu          sync.Mutex              // guards cancelQuery
	cancelQuery context.CancelCauseFunc // cancels the in-flight query, or nil

	warnedWeight map[string]string // peer → bad weight already logged; Run's goroutine only
}

type errBox struct{ err error }

const (
	reachUnknown int32 = iota
	reachUp
	reachDown
)

// errRefresh is the cause given to a blocking query cancelled by Refresh.
var errRefresh = errors.New("routing: consul refresh requested")

// NewConsul checks cfg, applies defaults and builds the Consul client. self
// is the local node (its Addr is what peers dial) and must be m's self. It
// does not contact Consul: call Register, then Run.
func NewConsul(cfg ConsulConfig, self Peer, m *Membership, logger *slog.Logger) (*Consul, error) {
	if self.ID != m.Self().ID {
		return nil, fmt.Errorf("routing: consul self %q is not membership self %q", self.ID, m.Self().ID)
	}
	if self.Weight == 0 {
		self.Weight = 1
	}
	if !validWeight(self.Weight) {
		return nil, fmt.Errorf("routing: consul self %q: %w %v", self.ID, ErrInvalidWeight, self.Weight)
	}
	if _, _, err := splitAddr(self.Addr); err != nil {
		return nil, fmt.Errorf("routing: consul self %q: %w", self.ID, err)
	}
	if cfg.Service == "" {
		cfg.Service = DefaultConsulService
	}
	if cfg.CheckInterval == 0 {
		cfg.CheckInterval = DefaultConsulCheckInterval
	}
	if cfg.DeregisterAfter == 0 {
		cfg.DeregisterAfter = DefaultConsulDeregisterAfter
	}
	if cfg.WaitTime == 0 {
		cfg.WaitTime = DefaultConsulWaitTime
	}
	if cfg.CheckInterval < 0 || cfg.DeregisterAfter < 0 || cfg.WaitTime < 0 || cfg.WaitTime > maxConsulWaitTime {
		return nil, fmt.Errorf("routing: consul: bad durations (check_interval %v, deregister_after %v, wait_time %v; wait_time at most %v)",
			cfg.CheckInterval, cfg.DeregisterAfter, cfg.WaitTime, maxConsulWaitTime)
	}
	cfg.Meta = maps.Clone(cfg.Meta)

	ac := api.DefaultConfig()
	if cfg.Address != "" {
		ac.Address = cfg.Address
	}
	if cfg.Token != "" {
		ac.Token = cfg.Token
	}
	transport := ac.Transport
	client, err := api.NewClient(ac)
	if err != nil {
		return nil, fmt.Errorf("routing: consul client: %w", err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Consul{
		cfg:          cfg,
		self:         self,
		m:            m,
		logger:       logger.With("component", "routing"),
		client:       client,
		transport:    transport,
		backoffBase:  500 * time.Millisecond,
		backoffMax:   30 * time.Second,
		minGap:       time.Second,
		refreshGap:   time.Second,
		wake:         make(chan struct{}, 1),
		warnedWeight: make(map[string]string),
	}, nil
}

// splitAddr splits a peer address into the host and port Consul stores.
// The host may be empty: Consul then advertises the agent's node address.
func splitAddr(addr string) (string, int, error) {
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("peer address %q: %w", addr, err)
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("peer address %q: bad port", addr)
	}
	return host, port, nil
}

// registration is the service definition Register sends.
func (c *Consul) registration() *api.AgentServiceRegistration {
	host, port, _ := splitAddr(c.self.Addr) // checked by NewConsul
	meta := maps.Clone(c.cfg.Meta)
	if meta == nil {
		meta = make(map[string]string, 2)
	}
	meta["weight"] = strconv.FormatFloat(c.self.Weight, 'g', -1, 64)
	if meta["version"] == "" {
		meta["version"] = buildVersion()
	}
	reg := &api.AgentServiceRegistration{
		ID:      c.self.ID,
		Name:    c.cfg.Service,
		Address: host,
		Port:    port,
		Meta:    meta,
	}
	if c.cfg.HealthURL != "" {
		reg.Check = &api.AgentServiceCheck{
			Name:                           c.cfg.Service + " healthz",
			HTTP:                           c.cfg.HealthURL,
			Method:                         http.MethodGet,
			Interval:                       c.cfg.CheckInterval.String(),
			Timeout:                        min(c.cfg.CheckInterval, 5*time.Second).String(),
			DeregisterCriticalServiceAfter: c.cfg.DeregisterAfter.String(),
		}
	}
	return reg
}

// buildVersion is the main module's version, "(devel)" for local builds.
func buildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "unknown"
}

// Register adds (or replaces, checks included) this node's service on the
// local agent. The node joins the healthy set once its check passes.
func (c *Consul) Register(ctx context.Context) error {
	opts := api.ServiceRegisterOpts{ReplaceExistingChecks: true}.WithContext(ctx)
	if err := c.client.Agent().ServiceRegisterOpts(c.registration(), opts); err != nil {
		err = fmt.Errorf("routing: consul register %q: %w", c.self.ID, err)
		c.lastErr.Store(&errBox{err})
		return err
	}
	c.registered.Store(true)
	c.logger.Info("routing: registered in consul", "service", c.cfg.Service, "peer", c.self.ID, "addr", c.self.Addr)
	return nil
}

// Deregister removes this node's service (and its check) from the local
// agent: the first step of a graceful leave, so peers stop sending to us.
func (c *Consul) Deregister(ctx context.Context) error {
	c.leaving.Store(true)
	if err := c.client.Agent().ServiceDeregisterOpts(c.self.ID, (&api.QueryOptions{}).WithContext(ctx)); err != nil {
		err = fmt.Errorf("routing: consul deregister %q: %w", c.self.ID, err)
		c.lastErr.Store(&errBox{err})
		return err
	}
	c.logger.Info("routing: deregistered from consul", "service", c.cfg.Service, "peer", c.self.ID)
	return nil
}

// Reachable reports whether the last query to Consul succeeded. It is false
// until the first one does.
func (c *Consul) Reachable() bool { return c.reach.Load() == reachUp }

// LastError is the error of the last failed Consul call, or nil once a
// watch query succeeds again.
func (c *Consul) LastError() error {
	if b := c.lastErr.Load(); b != nil {
		return b.err
	}
	return nil
}

// Refresh makes the watch loop re-read the healthy set now, with a
// non-blocking query, e.g. after a peer answered 421 or timed out. Calls
// closer together than a second (refreshGap) are dropped, so a burst of
// 421s costs Consul one query. It never blocks.
func (c *Consul) Refresh() {
	now := time.Now().UnixNano()
	last := c.lastRefresh.Load()
	if now-last < int64(c.refreshGap) || !c.lastRefresh.CompareAndSwap(last, now) {
		return
	}
	c.refreshWant.Store(true)
	select {
	case c.wake <- struct{}{}:
	default:
	}
	c.mu.Lock()
	if c.cancelQuery != nil {
		c.cancelQuery(errRefresh)
	}
	c.mu.Unlock()
}

var _ Source = (*Consul)(nil)
