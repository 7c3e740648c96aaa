package main

import (
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"
)

// controlPrefix marks the origin's own endpoints; they are neither counted
// nor affected by faults, so a test can always read the counters.
const controlPrefix = "/__origin/"

// Fault modes set by POST /__origin/fault.
const (
	modeOK    = "ok"
	modeError = "error"
	modeHang  = "hang"
	modeReset = "reset"
	modeSlow  = "slow"
	// modeUnavailable answers 503 Service Unavailable: an origin that is
	// down or overloaded on every path (what opens shield's breaker; the
	// 500 of modeError is an application's error and does not).
	modeUnavailable = "unavailable"
	// modeThrottle answers 429 Too Many Requests with Retry-After, as an
	// origin shedding load does; shield may serve stale on it only when
	// the route says so (stale_on_429).
	modeThrottle = "throttle"
	// modeGarbage answers bytes that are not HTTP and closes: a broken
	// backend or a wrong service on the port.
	modeGarbage = "garbage"
	// modeHuge announces a Content-Length far beyond any sane
	// max_object_size and streams a body that never ends in practice: a
	// proxy that buffers whole responses runs out of memory on it.
	modeHuge = "huge"
)

// validMode reports whether mode is one POST /__origin/fault accepts.
func validMode(mode string) bool {
	switch mode {
	case modeOK, modeError, modeUnavailable, modeHang, modeReset, modeSlow, modeThrottle, modeGarbage, modeHuge:
		return true
	}
	return false
}

// origin is the demo origin's handler and all of its state.
type origin struct {
	logger  *slog.Logger
	started time.Time // default Last-Modified of every path, whole seconds

	stopOnce sync.Once
	stopped  chan struct{} // closed by stop: hang and slow requests end

	mu          sync.Mutex // guards every field below
	mode        string
	prefixModes map[string]string // path prefix → fault mode, over mode
	total       int64
	notModified int64
	byPath      map[string]int64
	inFlight    int64
	maxInFlight int64
	bumps       map[string]int64     // ETag version - 1, per path
	lastMod     map[string]time.Time // Last-Modified set by bump, per path
}

func newOrigin(logger *slog.Logger, now time.Time) *origin {
	return &origin{
		logger:      logger,
		started:     now.UTC().Truncate(time.Second),
		stopped:     make(chan struct{}),
		mode:        modeOK,
		prefixModes: make(map[string]string),
		byPath:      make(map[string]int64),
		bumps:       make(map[string]int64),
		lastMod:     make(map[string]time.Time),
	}
}

// stop ends requests that would otherwise never finish, so a graceful
// shutdown does not wait for them.
func (o *origin) stop() { o.stopOnce.Do(func() { close(o.stopped) }) }

// ServeHTTP dispatches control endpoints and counts everything else.
func (o *origin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, controlPrefix) {
		o.serveControl(w, r)
		return
	}
	n, mode := o.arrive(r.URL.Path)
	defer o.leave()
	switch mode {
	case modeError:
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "fault mode error"})
	case modeUnavailable:
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "fault mode unavailable"})
	case modeHang:
		o.hang(r)
	case modeReset:
		o.reset(w)
	case modeThrottle:
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusTooManyRequests, map[string]string{"error": "fault mode throttle"})
	case modeGarbage:
		o.garbage(w)
	case modeHuge:
		o.huge(w, r)
	default:
		o.serveResource(w, r, n, mode == modeSlow)
	}
}

// arrive counts a request for path and returns its per-path number and
// the fault mode in force for path when it arrived: that of the longest
// prefix with a fault of its own, else the global mode.
func (o *origin) arrive(path string) (n int64, mode string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.total++
	o.byPath[path]++
	o.inFlight++
	o.maxInFlight = max(o.maxInFlight, o.inFlight)
	mode, longest := o.mode, -1
	for prefix, m := range o.prefixModes {
		if len(prefix) > longest && strings.HasPrefix(path, prefix) {
			mode, longest = m, len(prefix)
		}
	}
	return o.byPath[path], mode
}

func (o *origin) leave() {
	o.mu.Lock()
	o.inFlight--
	o.mu.Unlock()
}

func (o *origin) countNotModified() {
	o.mu.Lock()
	o.notModified++
	o.mu.Unlock()
}

// validators returns the current ETag version and Last-Modified of path.
func (o *origin) validators(path string) (version int64, lastMod time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	lm, ok := o.lastMod[path]
	if !ok {
		lm = o.started
	}
	return o.bumps[path] + 1, lm
}
