package procs

// sample is one window's measure.
type sample struct {
	work float64 // units of work done per second (requests served)
	cpu  float64 // CPU the process used, in cores (user + system)
	wait float64 // the 99th percentile of the time goroutines waited for a processor, in seconds
	ok   bool    // false when the window could not be measured (the work count went back)
}

// The controller's rules. A trial moves the processor count for one
// window, then moves it back for one more, and keeps the move only when
// the work rate says it helped, the trial window against the mean of the
// windows on either side of it (a bracket: a load that rises or falls
// steadily across the three — a run warming up, a burst fading — moves
// both sides of the bracket, not the trial's result): fewer processors
// are kept while the rate holds (within keepDown, about the noise of a
// window's rate) at no more CPU per unit of work, more only when the
// rate rises by keepUp. A failed trial waits twice as long as the last
// before the next one in its direction, up to maxWait.
const (
	keepDown = 0.97
	keepUp   = 1.02
	busy     = 0.85 // CPU per processor at which more processors are tried first
	fits     = 1.1  // a trial down needs the CPU used to fit in the fewer processors, within this
	dropped  = 0.8  // a trial whose rate falls below this share of the windows around it (or rises past its inverse, unless busy before a trial up) is inconclusive
	steady   = 0.9  // a trial whose windows on either side differ by more than this ratio is inconclusive
	minWait  = 4    // windows between trials that succeed
	maxWait  = 64   // windows between trials that keep failing
	// surge is the goroutines' wait for a processor (99th percentile of
	// a window) past which, with the processors busy, the count goes back
	// to its ceiling at once: a backlog is growing, and the next trial
	// may be a minute away. Busy matters: on a machine shared with other
	// processes a goroutine also waits while its thread is descheduled
	// (5 ms at the 99th percentile with two processors on the bench
	// machine), which more processors do not cure.
	surge = 0.010
)

const (
	down = iota
	up
)

// event is what one step did, for the governor's log.
type event int

const (
	none         event = iota
	trial              // a trial started
	back               // a trial's window measured, the count back for the bracket's other side
	kept               // a trial ended, its count kept
	undone             // a trial ended, undone: it failed
	inconclusive       // a trial ended, undone: the load changed during it (not a failure)
	surged             // the count went back to its ceiling (surge)
	events             // how many there are
)

// controller decides the processor count window by window; it holds no
// clock and no runtime, so that its decisions can be tested on samples.
type controller struct {
	procs, max int
	from       int    // during a trial, the count it moved from; else 0
	to         int    // during a trial, the count it tries
	base       sample // the window before the trial
	tried      sample // the trial's window, once measured
	backAt     bool   // the trial's window is measured: this window is the bracket's other side
	wait       [2]int // windows before the next trial down, windows with work before the next up
	event      event  // what the last step did
	origin     int    // the count the last trial moved from
	fails      [2]int // failed trials down and up (never forgiven: judge)
	lastKept   int    // the direction of the last trial kept (none: -1)
}

func newController(max int) *controller {
	return &controller{procs: max, max: max, wait: [2]int{minWait, minWait}, lastKept: -1}
}

// step takes the window just measured and returns the count for the
// next one.
func (c *controller) step(s sample) int {
	c.event = none
	if c.from != 0 {
		if !c.backAt {
			// The trial's window: measured, the count goes back for the
			// window after it (judged then), unless it says nothing.
			c.tried, c.procs = s, c.from
			if !s.ok || s.wait > surge {
				// Unmeasured, or goroutines queued at the trial's
				// count: failed, without a window after it.
				c.judge(s, sample{})
				return c.procs
			}
			c.backAt, c.event = true, back
			return c.procs
		}
		c.backAt = false
		if !s.ok {
			// The window after cannot be measured (a reload): the
			// trial cannot be judged, which is not its failure.
			d := c.direction()
			c.event, c.from, c.wait[d] = inconclusive, 0, c.backoff(d)
			return c.procs
		}
		c.judge(c.tried, s)
		return c.procs
	}
	if !s.ok {
		return c.procs
	}
	if s.wait > surge && s.cpu >= busy*float64(c.procs) && c.procs < c.max {
		// Goroutines queue for a processor: no trial, all of them now,
		// and a trial down waits as after a failure.
		c.procs, c.event = c.max, surged
		c.fails[down]++
		c.wait[down] = c.backoff(down)
		return c.procs
	}
	// A trial down waits for windows, a trial up for windows with work:
	// an idle spell does not use up its wait. More processors are tried
	// even when those in use are not busy, because a rate bound by
	// latency (processors idle while the process waits for its peers)
	// can still gain from them; when they are busy, up goes first.
	serving := s.work > 0
	c.wait[down] = max(0, c.wait[down]-1)
	if serving {
		c.wait[up] = max(0, c.wait[up]-1)
	}
	canUp := c.procs < c.max && serving && c.wait[up] == 0
	lower := c.procs - max(1, c.procs/4)
	canDown := c.procs > 1 && c.wait[down] == 0 && s.cpu <= fits*float64(lower)
	var to int
	switch {
	case canUp && (s.cpu >= busy*float64(c.procs) || !canDown):
		to = min(c.max, 2*c.procs)
	case canDown:
		to = lower
	default:
		return c.procs
	}
	c.from, c.to, c.origin, c.base, c.procs, c.event = c.procs, to, c.procs, s, to, trial
	return to
}

// judge ends a trial with the window measured at its count (s) and the
// window after it, back at the count it moved from (after). The count
// is c.from now; a trial kept moves it to c.to.
func (c *controller) judge(s, after sample) {
	d := c.direction()
	// The reference: the mean of the windows on either side.
	ref := sample{work: (c.base.work + after.work) / 2, cpu: (c.base.cpu + after.cpu) / 2}
	ok := after.ok
	if d == down {
		// Fewer processors: the rate holds, and each request costs no
		// more CPU (a rate bound by latency loses a little of both at
		// once; a contended one gains both).
		ok = ok && s.work >= keepDown*ref.work && s.work*ref.cpu >= ref.work*s.cpu
	} else {
		ok = ok && s.work > 0 && s.work >= keepUp*ref.work
	}
	c.event = undone
	busyBefore := c.base.cpu >= busy*float64(c.from)
	moved := func(a, b float64) bool { return a < steady*b || a > b/steady }
	// More processors never make a request cheaper (they add wake-ups
	// and spinning): requests that cost markedly less CPU in a trial up
	// were another mix of work, a load that changed.
	cheaper := d == up && s.cpu*ref.work < keepDown*ref.cpu*s.work
	if after.ok && (moved(after.work, c.base.work) || cheaper ||
		s.work < dropped*ref.work || s.work > ref.work/dropped && !(d == up && busyBefore)) {
		// The rate moved by more than a count can explain — between
		// the bracket's sides, at the same count (by more than a tenth:
		// a reference that moves that much cannot show the 2-3 % a
		// trial is judged on; a load generator's run that ends in the
		// window after); a fall in the trial (a fit test stands before
		// every trial down); a rise where the processors were not busy
		// before; cheaper requests with more processors — so the load
		// changed during the trial, which says nothing either way.
		// Undone, not a failure.
		c.event = inconclusive
		c.from = 0
		c.wait[d] = c.backoff(d)
		return
	}
	if ok {
		c.procs = c.to
		c.event = kept
		if c.lastKept == 1-d {
			// A round trip: the move the other way was kept too, so one
			// of the two was the noise of a window's rate. Either way the
			// first gained nothing lasting: it counts as failed, and the
			// pair is closed (the next move kept starts afresh).
			c.fails[1-d]++
			c.lastKept = -1
		} else {
			c.lastKept = d
		}
	} else {
		c.fails[d]++
	}
	// A direction's failures are never forgiven (a process whose best
	// count changes is found by the trials that keep coming, and by the
	// surge rule): without that, two moves each kept by noise would
	// reset each other and the count would wander.
	c.wait[d] = c.backoff(d)
	c.wait[1-d] = max(c.wait[1-d], c.backoff(1-d))
	c.from = 0
}

// direction is the current trial's: down or up.
func (c *controller) direction() int {
	if c.to < c.from {
		return down
	}
	return up
}

// backoff is the wait before the next trial in direction d.
func (c *controller) backoff(d int) int {
	return min(maxWait, minWait<<min(c.fails[d], 8))
}
