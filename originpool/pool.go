// Package originpool keeps the health of one origin's servers and picks
// the server for each request. It is pure logic (no network code), so
// ejection and selection are unit-tested with a fake clock.
//
// Health has two sources:
//   - passive: consecutive failures (connect errors, timeouts, failure
//     statuses — the caller's choice, shield's default 502, 503, 504) eject a
//     server for a period that doubles with each ejection in a row
//     (Config.EjectFor up to Config.MaxEjectFor); a success after the period
//     resets it. At most half of the servers (rounded down) are ejected at
//     once, so a burst that hits every server cannot empty the pool.
//   - active: an external checker reports probe results; Unhealthy failed
//     probes in a row mark a server down, Healthy good ones bring it back.
//
// Pick uses the power of two choices among the servers that are up: two
// distinct servers at random, the one with fewer requests in flight wins.
// It is almost as good as least-loaded over all servers and needs no
// global lock. When no server is up, every server is a candidate again
// (a pool that refuses to try is worse than one that tries a sick server).
package originpool

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Config tunes passive ejection and active checks. Zero values take
// the defaults below.
type Config struct {
	// EjectAfter consecutive failures eject a server. Default 5.
	EjectAfter int
	// EjectFor is the first ejection's length; each ejection in a row
	// doubles it, up to MaxEjectFor. Defaults 2s and 30s.
	EjectFor, MaxEjectFor time.Duration
	// Healthy and Unhealthy are the active-check thresholds. Defaults 2 and 3.
	Healthy, Unhealthy int
}

func (c Config) withDefaults() Config {
	if c.EjectAfter <= 0 {
		c.EjectAfter = 5
	}
	if c.EjectFor <= 0 {
		c.EjectFor = 2 * time.Second
	}
	if c.MaxEjectFor < c.EjectFor {
		c.MaxEjectFor = max(30*time.Second, c.EjectFor)
	}
	if c.Healthy <= 0 {
		c.Healthy = 2
	}
	if c.Unhealthy <= 0 {
		c.Unhealthy = 3
	}
	return c
}

// Outcome is what one request told about a server.
type Outcome uint8

const (
	// Neutral: says nothing about the server (client gone, pool full,
	// a stale keep-alive connection retried).
	Neutral Outcome = iota
	// Success: the server answered (with a status the caller does not
	// count as a failure).
	Success
	// Failure: connect error, timeout, broken answer or a failure status.
	Failure
)

// Server is one server of a pool. Its exported methods are safe for
// concurrent use.
type Server struct {
	name     string
	hash     uint64 // of name, for PickShard
	inFlight atomic.Int64
	requests atomic.Uint64
	errors   atomic.Uint64
	ejects   atomic.Uint64

	mu           sync.Mutex
	consecFail   int
	ejections    int       // ejections in a row, for the growing period
	ejectedUntil time.Time // zero: not ejected
	activeDown   bool
	probeOK      int // consecutive good probes while down
	probeFail    int // consecutive failed probes while up
}

// Name returns the server's name as given to New.
func (s *Server) Name() string { return s.name }

// InFlight returns the requests in flight to s.
func (s *Server) InFlight() int64 { return s.inFlight.Load() }

// Pool is one origin's servers. Create it with New.
type Pool struct {
	cfg     Config
	servers []*Server
}

// New returns a pool of the named servers, all up.
func New(names []string, cfg Config) *Pool {
	p := &Pool{cfg: cfg.withDefaults()}
	for _, n := range names {
		p.servers = append(p.servers, &Server{name: n, hash: nameHash(n)})
	}
	return p
}

// Servers returns the pool's servers in configuration order.
func (p *Pool) Servers() []*Server { return p.servers }

// up reports whether s may be picked at now. Callers hold s.mu.
func (s *Server) upLocked(now time.Time) bool {
	return !s.activeDown && (s.ejectedUntil.IsZero() || !now.Before(s.ejectedUntil))
}

// Up reports whether s is neither ejected nor marked down by checks.
func (s *Server) Up(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.upLocked(now)
}

// Pick returns the server for the next request, avoiding avoid (the server
// that just failed, on a retry) when another is up. It never returns nil
// for a non-empty pool.
func (p *Pool) Pick(now time.Time, avoid *Server) *Server {
	n := len(p.servers)
	switch n {
	case 0:
		return nil
	case 1:
		return p.servers[0]
	}
	var buf [16]*Server
	cand := buf[:0]
	for _, s := range p.servers {
		if s != avoid && s.Up(now) {
			cand = append(cand, s)
		}
	}
	if len(cand) == 0 {
		for _, s := range p.servers {
			if s != avoid {
				cand = append(cand, s)
			}
		}
	}
	if len(cand) == 1 {
		return cand[0]
	}
	i := rand.IntN(len(cand))
	j := rand.IntN(len(cand) - 1)
	if j >= i {
		j++
	}
	a, b := cand[i], cand[j]
	if b.inFlight.Load() < a.inFlight.Load() {
		return b
	}
	return a
}

// Start counts a request to s in flight; pair it with Done.
func (s *Server) Start() {
	s.inFlight.Add(1)
	s.requests.Add(1)
}

// Done ends a request started with Start and records its outcome.
func (p *Pool) Done(s *Server, o Outcome, now time.Time) {
	s.inFlight.Add(-1)
	switch o {
	case Success:
		s.mu.Lock()
		s.consecFail = 0
		if s.ejectedUntil.IsZero() || !now.Before(s.ejectedUntil) {
			s.ejections, s.ejectedUntil = 0, time.Time{}
		}
		s.mu.Unlock()
	case Failure:
		s.errors.Add(1)
		s.mu.Lock()
		s.consecFail++
		eject := s.consecFail >= p.cfg.EjectAfter && s.upLocked(now)
		s.mu.Unlock()
		if eject {
			p.eject(s, now)
		}
	}
}

// eject takes s out of rotation unless half the pool is out already.
func (p *Pool) eject(s *Server, now time.Time) {
	out := 0
	for _, o := range p.servers {
		if o != s && !o.Up(now) {
			out++
		}
	}
	if out+1 > len(p.servers)/2 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d := p.cfg.EjectFor << min(s.ejections, 16)
	if d > p.cfg.MaxEjectFor || d <= 0 {
		d = p.cfg.MaxEjectFor
	}
	s.ejections++
	s.consecFail = 0
	s.ejectedUntil = now.Add(d)
	s.ejects.Add(1)
}

// Probe records one active health-check result for s and reports
// whether it changed s's checked state (down or back up).
func (p *Pool) Probe(s *Server, ok bool) (changed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ok {
		s.probeFail = 0
		if s.activeDown {
			s.probeOK++
			if s.probeOK >= p.cfg.Healthy {
				s.activeDown, s.probeOK = false, 0
				return true
			}
		}
		return false
	}
	s.probeOK = 0
	if !s.activeDown {
		s.probeFail++
		if s.probeFail >= p.cfg.Unhealthy {
			s.activeDown, s.probeFail = true, 0
			return true
		}
	}
	return false
}

// Status is a read-only snapshot of one server, for metrics and the
// admin status page.
type Status struct {
	Name     string
	Up       bool // neither ejected nor down by health checks
	Ejected  bool // passive ejection in force
	Down     bool // failed active health checks
	InFlight int64
	Requests uint64 // started, including retries
	Errors   uint64 // failures (connect errors, timeouts, 5xx)
	Ejects   uint64 // times ejected
	// EjectedFor is what is left of the ejection (0 when not ejected).
	EjectedFor time.Duration
}

// Snapshot returns every server's status at now, in configuration order.
func (p *Pool) Snapshot(now time.Time) []Status {
	out := make([]Status, len(p.servers))
	for i, s := range p.servers {
		s.mu.Lock()
		st := Status{
			Name: s.name, Up: s.upLocked(now), Down: s.activeDown,
			InFlight: s.inFlight.Load(), Requests: s.requests.Load(), Errors: s.errors.Load(), Ejects: s.ejects.Load(),
		}
		if !s.ejectedUntil.IsZero() && now.Before(s.ejectedUntil) {
			st.Ejected, st.EjectedFor = true, s.ejectedUntil.Sub(now)
		}
		s.mu.Unlock()
		out[i] = st
	}
	return out
}
