package breaker

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// model is a slow reference of the breaker's state machine, written from the
// package doc rather than from gobreaker. It holds while no time passes in
// the closed state (FuzzBreaker only waits when the breaker is open), so the
// rolling window never rolls and "the window" is "since the last change".
type model struct {
	s                      Settings
	state                  State
	gen                    int
	succ, fail, consecFail uint32 // closed
	admitted, ignored      uint32 // half-open probes
	consecSucc             uint32 // half-open
	changes                []transition
}

func (m *model) set(to State) {
	m.changes = append(m.changes, transition{m.state, to})
	m.state = to
	m.gen++
	m.succ, m.fail, m.consecFail, m.admitted, m.ignored, m.consecSucc = 0, 0, 0, 0, 0, 0
}

// allow returns the error Allow must return.
func (m *model) allow() error {
	switch m.state {
	case Open:
		return ErrOpen
	case HalfOpen:
		if m.admitted-m.ignored >= m.s.HalfOpenProbes {
			return ErrTooManyProbes
		}
		m.admitted++
	}
	return nil
}

func (m *model) done(gen int, o Outcome) {
	if gen != m.gen {
		return // an outcome from before the last state change
	}
	switch m.state {
	case Closed:
		switch o {
		case Success:
			m.succ++
			m.consecFail = 0
		case Failure:
			m.fail++
			m.consecFail++
			decided := m.succ + m.fail
			// Consecutive failures decide below MinRequests, the
			// ratio from there on (breaker.go, readyToTrip).
			trip := m.consecFail >= m.s.ConsecutiveFailures
			if decided >= m.s.MinRequests {
				trip = float64(m.fail) >= m.s.FailureRatio*float64(decided)
			}
			if trip {
				m.set(Open)
			}
		}
	case HalfOpen:
		switch o {
		case Success:
			m.consecSucc++
			if m.consecSucc >= m.s.HalfOpenProbes {
				m.set(Closed)
			}
		case Failure:
			m.set(Open)
		case Ignored:
			m.ignored++
		}
	}
}

// FuzzBreaker drives a Breaker and the model with the same operations and
// checks that they agree on every Allow, state, transition and RetryAfter.
// data[0:4] choose the settings; each later byte is an operation.
func FuzzBreaker(f *testing.F) {
	f.Add([]byte{2, 3, 5, 1, 0, 0, 2, 2, 0, 0, 3, 3})
	f.Add([]byte{4, 9, 4, 2, 0, 0, 0, 2, 2, 2, 2, 7, 0, 0, 0, 6, 1, 1, 0, 2})
	f.Add([]byte{0, 0, 0, 0, 0, 2, 4, 0, 0, 0, 1, 6, 7, 0, 3, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 4 {
			return
		}
		s := Settings{
			ConsecutiveFailures: 1 + uint32(data[0]%8),
			MinRequests:         1 + uint32(data[1]%10),
			FailureRatio:        float64(1+data[2]%10) / 10,
			HalfOpenProbes:      1 + uint32(data[3]%4),
			OpenFor:             time.Second,
		}
		synctest.Test(t, func(t *testing.T) {
			m := &model{s: s}
			rec := &recorder{}
			b := New("fuzz", s, rec.onChange)
			type pending struct {
				c   Call
				gen int
			}
			var calls []pending
			for i, op := range data[4:] {
				switch op % 8 {
				case 0, 1: // Allow
					c, err := b.Allow()
					want := m.allow()
					if !errors.Is(err, want) || (want == nil) != (err == nil) {
						t.Fatalf("op %d: Allow() = %v, want %v (model %+v)", i, err, want, m)
					}
					if err == nil {
						calls = append(calls, pending{c, m.gen})
					}
				case 2, 3, 4: // Done on the call chosen by the high bits
					if len(calls) == 0 {
						continue
					}
					j := int(op>>3) % len(calls)
					p := calls[j]
					calls = append(calls[:j], calls[j+1:]...)
					o := Outcome(op%8 - 2)
					p.c.Done(o)
					m.done(p.gen, o)
				case 5: // Done(Failure) on the oldest, to trip more often
					if len(calls) == 0 {
						continue
					}
					p := calls[0]
					calls = calls[1:]
					p.c.Done(Failure)
					m.done(p.gen, Failure)
				case 6, 7: // wait out OpenFor, only when open (see model)
					if m.state != Open {
						continue
					}
					if got := b.RetryAfter(time.Now()); got != s.OpenFor {
						t.Fatalf("op %d: RetryAfter just after opening = %v, want %v", i, got, s.OpenFor)
					}
					time.Sleep(s.OpenFor + time.Nanosecond)
					m.set(HalfOpen) // gobreaker moves lazily, on the next look
				}
				if got := b.State(); got != m.state {
					t.Fatalf("op %d: State() = %v, model %v", i, got, m.state)
				}
			}
			got := rec.transitions()
			if len(got) != len(m.changes) {
				t.Fatalf("onChange calls = %v, model %v", got, m.changes)
			}
			var want [numStates]uint64
			for i, tr := range m.changes {
				if got[i] != tr {
					t.Fatalf("onChange call %d = %v, model %v", i, got[i], tr)
				}
				want[tr.to]++
			}
			if st := b.Stats(); st.Transitions != want {
				t.Fatalf("Stats().Transitions = %v, model %v", st.Transitions, want)
			}
			for _, p := range calls {
				p.c.Done(Ignored)
			}
		})
	})
}

// refBudget is a slow reference for RetryBudget: it keeps every event with
// its bucket number and scans them all.
type refBudget struct {
	ratio, floor float64
	width        time.Duration
	started      bool
	base         time.Time
	latest       int64
	events       []refEvent
}

type refEvent struct {
	bucket int64
	retry  bool
}

func (r *refBudget) at(now time.Time) int64 {
	if !r.started {
		r.started, r.base = true, now
	}
	r.latest = max(r.latest, int64(now.Sub(r.base)/r.width))
	return r.latest
}

func (r *refBudget) record(now time.Time) {
	r.events = append(r.events, refEvent{r.at(now), false})
}

func (r *refBudget) tryRetry(now time.Time) bool {
	e := r.at(now)
	var fetches, retries float64
	for _, ev := range r.events {
		if e-ev.bucket >= retryBuckets {
			continue
		}
		if ev.retry {
			retries++
		} else {
			fetches++
		}
	}
	if retries+1 > max(r.ratio*fetches, r.floor) {
		return false
	}
	r.events = append(r.events, refEvent{e, true})
	return true
}

// FuzzRetryBudget checks RetryBudget against refBudget. data[0:2] choose
// ratio and floor; each later byte moves the clock (signed, so it can go
// back) and records a fetch or tries a retry.
func FuzzRetryBudget(f *testing.F) {
	f.Add([]byte{2, 3, 0, 8, 16, 1, 130, 255, 9, 33})
	f.Add([]byte{10, 0, 4, 4, 4, 4, 5, 5, 5, 5, 200, 201, 7})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		const window = 10 * time.Second
		ratio, minPerSec := float64(data[0]%11)/10, float64(data[1]%4)/2
		r := NewRetryBudget(ratio, minPerSec, window)
		ref := &refBudget{ratio: ratio, floor: minPerSec * window.Seconds(), width: window / retryBuckets}
		now := t0
		for i, op := range data[2:] {
			// Steps of a third of a bucket, -16..15, so buckets and
			// the window are crossed both ways.
			now = now.Add(time.Duration(int8(op)>>3) * window / retryBuckets / 3)
			if op&1 == 0 {
				r.Record(now)
				ref.record(now)
				continue
			}
			if got, want := r.TryRetry(now), ref.tryRetry(now); got != want {
				t.Fatalf("op %d at %v: TryRetry = %v, reference %v", i, now.Sub(t0), got, want)
			}
		}
	})
}
