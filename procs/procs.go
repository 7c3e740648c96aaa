// Package procs sizes the Go runtime's processor count (GOMAXPROCS) to
// the work the process has, between one and the count it started with.
//
// A Go process whose processors are not all busy pays for them anyway:
// a processor that runs out of goroutines spins looking for work, then
// its thread sleeps on a futex, and the next goroutine made ready (a
// connection turning readable) wakes it again; on a virtual machine each
// sleep and wake-up is costly. Measured on this project's 2-core bench
// machine, shared with the load generator: on a cluster edge forwarding
// every request, one processor instead of two cut the CPU per request
// over the three nodes by 22 % and raised the edge's request rate by
// 13 % — the second processor bought no CPU, only wake-ups. On a 100 KiB
// disk hit it cut CPU by 9 % but served 4 % fewer requests: that rate is
// bound by latency, and one processor left the machine idle more often.
//
// CPU used cannot tell these apart (a processor starved by other
// processes looks as busy as a useful one), so the governor tries: every
// few seconds it moves the count for one window, moves it back for the
// next, and keeps the move only if the work rate (requests served, from
// the caller) in the trial's window, against the mean of the windows on
// either side of it, says so — fewer while the rate holds at no more CPU
// per request, more only when it rises. The windows on both sides cancel
// a load that changes steadily across the trial (a run warming up). A
// failed trial backs off (4 windows, doubling to 64), and so does a move
// that the next move kept undoes (the noise of a window). When
// goroutines queue for busy processors (the runtime's scheduling
// latency past 10 ms at the 99th percentile), the count returns to its
// ceiling at once, without a trial.
//
// The cost is latency at the margin: with fewer processors, goroutines
// made ready together run one after the other. A GOMAXPROCS environment
// variable means the operator chose: the governor does not start.
package procs

import (
	"context"
	"log/slog"
	"math"
	"os"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Window is the default measure: one trial lasts this long.
const Window = time.Second

// Governor is a running governor; Stop ends it.
type Governor struct {
	work   func() uint64
	window time.Duration
	log    *slog.Logger
	ceil   int

	procs   atomic.Int32
	changes atomic.Uint64
	events  [events]atomic.Uint64 // what the steps did, by event

	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}
}

// Start governs the processor count from now until Stop, with work as
// the count of work done so far (it must not decrease, except across a
// reload: a window in which it does is not judged) and window as the
// measure (0: Window). It starts nothing when the GOMAXPROCS environment
// variable is set or the process has one processor (Running reports
// which).
func Start(work func() uint64, window time.Duration, log *slog.Logger) *Governor {
	if window <= 0 {
		window = Window
	}
	g := &Governor{work: work, window: window, log: log, ceil: runtime.GOMAXPROCS(0),
		stop: make(chan struct{}), done: make(chan struct{})}
	g.procs.Store(int32(g.ceil))
	if os.Getenv("GOMAXPROCS") != "" || g.ceil < 2 {
		close(g.done)
		return g
	}
	go g.run()
	return g
}

// Running reports whether the governor sets the processor count.
func (g *Governor) Running() bool {
	select {
	case <-g.done:
		return false
	default:
		return true
	}
}

// Procs is the processor count the governor set last (the ceiling until
// it sets one).
func (g *Governor) Procs() int { return int(g.procs.Load()) }

// Ceiling is the most processors the governor uses: GOMAXPROCS at Start.
func (g *Governor) Ceiling() int { return g.ceil }

// Changes counts the processor count's changes so far.
func (g *Governor) Changes() uint64 { return g.changes.Load() }

// Stats counts what the governor did since Start: trials started, and
// how they ended — kept, failed (undone), inconclusive (undone: the load
// changed during the trial, not counted against it) — and surges (the
// ceiling restored at once). Trials started but not ended are in
// Trials only.
type Stats struct {
	Trials, Kept, Failed, Inconclusive, Surges uint64
}

// Stats returns the governor's counts so far.
func (g *Governor) Stats() Stats {
	return Stats{Trials: g.events[trial].Load(), Kept: g.events[kept].Load(), Failed: g.events[undone].Load(),
		Inconclusive: g.events[inconclusive].Load(), Surges: g.events[surged].Load()}
}

// Stop ends the governor and gives the runtime its ceiling back.
func (g *Governor) Stop() {
	g.stopOnce.Do(func() { close(g.stop) })
	<-g.done
}

func (g *Governor) run() {
	defer close(g.done)
	defer runtime.GOMAXPROCS(g.ceil)
	c := newController(g.ceil)
	m := newMeter(g.work)
	t := time.NewTicker(g.window)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
		}
		s := m.measure()
		from := g.Procs()
		n := c.step(s)
		g.events[c.event].Add(1)
		if n != from {
			runtime.GOMAXPROCS(n)
			g.procs.Store(int32(n))
			g.changes.Add(1)
		}
		if g.log == nil || c.event == none {
			continue
		}
		// Trials are debug lines; a count kept or a surge is what an
		// operator sees.
		level := slog.LevelDebug
		if c.event == kept || c.event == surged {
			level = slog.LevelInfo
		}
		if c.event == kept {
			from = c.origin
		}
		g.log.Log(context.Background(), level, "processor count", "event", eventNames[c.event], "procs", n, "from", from,
			"requests_per_s", int(s.work), "cpu", math.Round(s.cpu*100)/100, "sched_wait_p99", time.Duration(s.wait*1e9))
	}
}

var eventNames = [events]string{none: "", trial: "trial", back: "trial measured", kept: "kept", undone: "undone",
	inconclusive: "inconclusive", surged: "surge"}

// meter measures windows: the work count, the process's CPU time and
// the runtime's scheduling latencies, each as the difference from the
// last measure.
type meter struct {
	work     func() uint64
	lastWork uint64
	lastCPU  time.Duration
	lastAt   time.Time
	lat      [1]metrics.Sample
	lastLat  []uint64
}

const latencies = "/sched/latencies:seconds"

func newMeter(work func() uint64) *meter {
	m := &meter{work: work}
	m.lat[0].Name = latencies
	m.measure()
	return m
}

func (m *meter) measure() sample {
	now, w, cpu := time.Now(), m.work(), cpuTime()
	metrics.Read(m.lat[:])
	var wait float64
	if m.lat[0].Value.Kind() == metrics.KindFloat64Histogram {
		h := m.lat[0].Value.Float64Histogram()
		wait = quantile(h.Buckets, h.Counts, m.lastLat, 0.99)
		m.lastLat = append(m.lastLat[:0], h.Counts...)
	}
	dt := now.Sub(m.lastAt).Seconds()
	s := sample{ok: !m.lastAt.IsZero() && w >= m.lastWork && cpu >= m.lastCPU && dt > 0, wait: wait}
	if s.ok {
		s.work = float64(w-m.lastWork) / dt
		s.cpu = (cpu - m.lastCPU).Seconds() / dt
	}
	m.lastWork, m.lastCPU, m.lastAt = w, cpu, now
	return s
}

// quantile is the q-quantile of the counts added since last (a
// histogram's earlier counts, or nil), as the upper bound of its bucket;
// 0 when nothing was added.
func quantile(buckets []float64, counts, last []uint64, q float64) float64 {
	var total uint64
	for i, n := range counts {
		if i < len(last) {
			n -= last[i]
		}
		total += n
	}
	if total == 0 {
		return 0
	}
	need := uint64(math.Ceil(float64(total) * q))
	var seen uint64
	for i, n := range counts {
		if i < len(last) {
			n -= last[i]
		}
		seen += n
		if seen >= need && n > 0 {
			return buckets[i+1]
		}
	}
	return buckets[len(buckets)-1]
}

// cpuTime is the user and system CPU time the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
