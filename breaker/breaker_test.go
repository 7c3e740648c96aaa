package breaker

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// transition is one onChange call.
type transition struct{ from, to State }

// recorder collects onChange calls.
type recorder struct {
	mu  sync.Mutex
	got []transition
}

func (r *recorder) onChange(_ string, from, to State) {
	r.mu.Lock()
	r.got = append(r.got, transition{from, to})
	r.mu.Unlock()
}

func (r *recorder) transitions() []transition {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]transition(nil), r.got...)
}

// newTest returns a breaker and its onChange recorder. Call it inside a
// synctest bubble so that gobreaker's clock is the bubble's.
func newTest(s Settings) (*Breaker, *recorder) {
	rec := &recorder{}
	return New("origin", s, rec.onChange), rec
}

// report runs one admitted call per outcome.
func report(t *testing.T, b *Breaker, outs ...Outcome) {
	t.Helper()
	for i, o := range outs {
		c, err := b.Allow()
		if err != nil {
			t.Fatalf("call %d (%v): Allow() = %v, want admitted (state %v)", i, o, err, b.State())
		}
		c.Done(o)
	}
}

func repeat(o Outcome, n int) []Outcome {
	out := make([]Outcome, n)
	for i := range out {
		out[i] = o
	}
	return out
}

func wantState(t *testing.T, b *Breaker, want State) {
	t.Helper()
	if got := b.State(); got != want {
		t.Fatalf("State() = %v, want %v", got, want)
	}
}

func TestTripConsecutiveFailures(t *testing.T) {
	for _, k := range []uint32{1, 3, DefaultConsecutiveFailures} {
		t.Run(fmt.Sprint(k), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// MinRequests high so only the consecutive rule can trip.
				b, rec := newTest(Settings{ConsecutiveFailures: k, MinRequests: 1000})
				report(t, b, repeat(Failure, int(k)-1)...)
				report(t, b, Success) // resets the run
				report(t, b, repeat(Failure, int(k)-1)...)
				wantState(t, b, Closed)
				report(t, b, Failure)
				wantState(t, b, Open)
				if _, err := b.Allow(); !errors.Is(err, ErrOpen) {
					t.Errorf("Allow() when open = %v, want ErrOpen", err)
				}
				want := []transition{{Closed, Open}}
				if got := rec.transitions(); fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("onChange calls = %v, want %v", got, want)
				}
			})
		})
	}
}

func TestTripRatio(t *testing.T) {
	// Pattern p repeated: the ratio rule alone (ConsecutiveFailures out of
	// reach) with MinRequests 20 and FailureRatio 0.5.
	tests := []struct {
		name     string
		pattern  []Outcome
		calls    int
		wantTrip int // call index (0-based) that trips, -1 for none
	}{
		// S F S F ...: at call 19 there are 20 outcomes, 10 failures.
		{"half fail trips at min requests", []Outcome{Success, Failure}, 40, 19},
		// F S F S ...: 10 of 19 fail at call 18, but under MinRequests; call
		// 19 is a success (ratio is checked on failures), call 20 trips.
		{"ratio is checked on a failure", []Outcome{Failure, Success}, 40, 20},
		{"one in three never trips", []Outcome{Success, Success, Failure}, 300, -1},
		// I I F S ...: call 38 has 10 F + 9 S; call 42 has 11 F + 10 S.
		{"ignored do not count toward min requests", []Outcome{Ignored, Ignored, Failure, Success}, 200, 42},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b, _ := newTest(Settings{ConsecutiveFailures: 1000, MinRequests: 20, FailureRatio: 0.5})
				for i := range tt.calls {
					c, err := b.Allow()
					if err != nil {
						if i-1 != tt.wantTrip {
							t.Fatalf("call %d rejected with %v; want trip at call %d", i, err, tt.wantTrip)
						}
						return
					}
					c.Done(tt.pattern[i%len(tt.pattern)])
				}
				if tt.wantTrip >= 0 {
					t.Fatalf("never tripped in %d calls, want trip at call %d (state %v)", tt.calls, tt.wantTrip, b.State())
				}
			})
		})
	}
}

func TestWindowForgetsOldOutcomes(t *testing.T) {
	consecutive := Settings{ConsecutiveFailures: 5, MinRequests: 1000}
	ratio := Settings{ConsecutiveFailures: 1000, MinRequests: 20}
	half := DefaultInterval / 2
	type phase struct {
		wait time.Duration // before the outcomes
		outs []Outcome
	}
	tests := []struct {
		name   string
		s      Settings
		phases []phase
		want   State
	}{
		{"consecutive, no wait", consecutive, []phase{{0, repeat(Failure, 4)}, {0, repeat(Failure, 1)}}, Open},
		{"consecutive, inside window", consecutive, []phase{{0, repeat(Failure, 4)}, {half, repeat(Failure, 1)}}, Open},
		{"consecutive, window passed", consecutive, []phase{{0, repeat(Failure, 4)}, {DefaultInterval, repeat(Failure, 1)}}, Closed},
		{"ratio, no wait", ratio, []phase{{0, repeat(Failure, 10)}, {0, repeat(Success, 10)}, {0, repeat(Failure, 1)}}, Open},
		{"ratio, inside window", ratio, []phase{{0, repeat(Failure, 10)}, {half, repeat(Success, 10)}, {half - 1, repeat(Failure, 1)}}, Open},
		{"ratio, window passed", ratio, []phase{{0, repeat(Failure, 10)}, {0, repeat(Success, 10)}, {DefaultInterval, repeat(Failure, 1)}}, Closed},
		// The first 10 failures slide out; the successes half a window
		// later stay, so 5+5 successes and 1 failure are under MinRequests.
		{"ratio, old bucket slid out", ratio, []phase{{0, repeat(Failure, 10)}, {half, repeat(Success, 5)},
			{half, append(repeat(Success, 5), Failure)}}, Closed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b, _ := newTest(tt.s)
				for _, p := range tt.phases {
					time.Sleep(p.wait)
					report(t, b, p.outs...)
				}
				wantState(t, b, tt.want)
			})
		})
	}
}

func TestIgnoredNeitherTripsNorResets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, rec := newTest(Settings{ConsecutiveFailures: 3, MinRequests: 4})
		report(t, b, repeat(Ignored, 500)...)
		wantState(t, b, Closed)
		report(t, b, Failure, Failure)
		report(t, b, repeat(Ignored, 50)...)
		report(t, b, Outcome(200)) // unknown values count as ignored
		wantState(t, b, Closed)
		report(t, b, Failure) // third failure in a row despite the ignored
		wantState(t, b, Open)
		if got := rec.transitions(); len(got) != 1 {
			t.Errorf("onChange calls = %v, want one", got)
		}
		st := b.Stats()
		if st.Outcomes[Ignored] != 551 || st.Outcomes[Failure] != 3 || st.Outcomes[Success] != 0 {
			t.Errorf("Stats().Outcomes = %v, want [551 0 3]", st.Outcomes)
		}
	})
}

func TestOpenHalfOpenClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := Settings{ConsecutiveFailures: 2, OpenFor: 5 * time.Second, HalfOpenProbes: 2}
		b, rec := newTest(s)
		if got := b.RetryAfter(time.Now()); got != 0 {
			t.Errorf("RetryAfter when closed = %v, want 0", got)
		}
		report(t, b, Failure, Failure)
		wantState(t, b, Open)
		if got := b.RetryAfter(time.Now()); got != s.OpenFor {
			t.Errorf("RetryAfter at trip = %v, want %v", got, s.OpenFor)
		}
		if got := b.RetryAfter(time.Now().Add(-time.Hour)); got != s.OpenFor {
			t.Errorf("RetryAfter before trip = %v, want %v (clamped)", got, s.OpenFor)
		}
		time.Sleep(2 * time.Second)
		if got, want := b.RetryAfter(time.Now()), s.OpenFor-2*time.Second; got != want {
			t.Errorf("RetryAfter 2s after trip = %v, want %v", got, want)
		}
		time.Sleep(3 * time.Second) // exactly OpenFor: gobreaker still open
		if _, err := b.Allow(); !errors.Is(err, ErrOpen) {
			t.Fatalf("Allow at OpenFor = %v, want ErrOpen", err)
		}
		if got := b.RetryAfter(time.Now()); got != 0 {
			t.Errorf("RetryAfter at OpenFor = %v, want 0", got)
		}
		time.Sleep(time.Nanosecond)
		wantState(t, b, HalfOpen)
		if got := b.RetryAfter(time.Now()); got != 0 {
			t.Errorf("RetryAfter when half-open = %v, want 0", got)
		}
		report(t, b, Success)
		wantState(t, b, HalfOpen)
		report(t, b, Success)
		wantState(t, b, Closed)

		want := []transition{{Closed, Open}, {Open, HalfOpen}, {HalfOpen, Closed}}
		if got := rec.transitions(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("onChange calls = %v, want %v", got, want)
		}
		st := b.Stats()
		if st.Transitions != [numStates]uint64{Closed: 1, HalfOpen: 1, Open: 1} {
			t.Errorf("Stats().Transitions = %v, want one each", st.Transitions)
		}
		if st.RejectedOpen != 1 || st.RejectedProbes != 0 || st.State != Closed {
			t.Errorf("Stats() = %+v, want 1 open rejection, closed", st)
		}
	})
}

func TestHalfOpenProbes(t *testing.T) {
	for _, n := range []uint32{1, 3} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := Settings{ConsecutiveFailures: 1, OpenFor: time.Second, HalfOpenProbes: n}
				b, rec := newTest(s)
				report(t, b, Failure)
				time.Sleep(s.OpenFor + time.Nanosecond)

				probes := make([]Call, n)
				for i := range probes {
					c, err := b.Allow()
					if err != nil {
						t.Fatalf("probe %d: Allow() = %v, want admitted", i, err)
					}
					probes[i] = c
				}
				for range 3 {
					if _, err := b.Allow(); !errors.Is(err, ErrTooManyProbes) {
						t.Fatalf("probe %d: Allow() = %v, want ErrTooManyProbes", n, err)
					}
				}
				// An ignored probe frees its slot, for exactly one more.
				probes[0].Done(Ignored)
				c, err := b.Allow()
				if err != nil {
					t.Fatalf("Allow after an ignored probe = %v, want admitted", err)
				}
				probes[0] = c
				if _, err := b.Allow(); !errors.Is(err, ErrTooManyProbes) {
					t.Fatalf("Allow with all slots taken again = %v, want ErrTooManyProbes", err)
				}
				// One failure reopens; the other probes' outcomes belong to
				// the old generation and cannot close the new open state.
				probes[0].Done(Failure)
				wantState(t, b, Open)
				for _, p := range probes[1:] {
					p.Done(Success)
				}
				wantState(t, b, Open)
				if got := b.RetryAfter(time.Now()); got != s.OpenFor {
					t.Errorf("RetryAfter after reopening = %v, want %v", got, s.OpenFor)
				}
				want := []transition{{Closed, Open}, {Open, HalfOpen}, {HalfOpen, Open}}
				if got := rec.transitions(); fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("onChange calls = %v, want %v", got, want)
				}
				if st := b.Stats(); st.RejectedProbes != 4 {
					t.Errorf("Stats().RejectedProbes = %d, want 4", st.RejectedProbes)
				}
			})
		})
	}
}

func TestZeroCallDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := newTest(Settings{ConsecutiveFailures: 1})
		report(t, b, Failure)
		c, err := b.Allow()
		if err == nil {
			t.Fatal("Allow() on an open breaker admitted a call")
		}
		c.Done(Success) // must not panic or count
		if st := b.Stats(); st.Outcomes[Success] != 0 || st.State != Open {
			t.Errorf("Done on the zero Call changed the breaker: %+v", st)
		}
		if b.Name() != "origin" {
			t.Errorf("Name() = %q, want %q", b.Name(), "origin")
		}
	})
}

// TestClassify: by default an origin's 502, 503 and 504 (and answers
// that are not HTTP) are failures, an application's 500 is not — one path
// answering 500 to everything must not open the breaker for the origin;
// failure_statuses replaces the list (here [500], and [] for none).
func TestClassify(t *testing.T) {
	tests := []struct {
		status int
		err    error
		want   Outcome
		strict Outcome // with TooManyRequestsIsFailure
		only   Outcome // with FailureStatuses [500]
		none   Outcome // with FailureStatuses []
	}{
		{200, nil, Success, Success, Success, Success},
		{304, nil, Success, Success, Success, Success},
		{404, nil, Success, Success, Success, Success},
		{429, nil, Ignored, Failure, Ignored, Ignored},
		{499, nil, Success, Success, Success, Success},
		{500, nil, Success, Success, Failure, Success},
		{501, nil, Success, Success, Success, Success},
		{502, nil, Failure, Failure, Success, Success},
		{503, nil, Failure, Failure, Success, Success},
		{504, nil, Failure, Failure, Success, Success},
		{599, nil, Success, Success, Success, Success},
		{600, nil, Failure, Failure, Failure, Failure},
		{0, nil, Failure, Failure, Failure, Failure},
		{200, errTest("boom"), Failure, Failure, Failure, Failure},
		{429, errTest("boom"), Failure, Failure, Failure, Failure},
		{0, fmt.Errorf("fetch: %w", contextCanceled), Ignored, Ignored, Ignored, Ignored},
		{0, deadlineErr, Failure, Failure, Failure, Failure},
		{0, refused, Failure, Failure, Failure, Failure},
	}
	synctest.Test(t, func(t *testing.T) {
		strict := New("o", Settings{TooManyRequestsIsFailure: true}, nil)
		lax := New("o", Settings{}, nil)
		only := New("o", Settings{FailureStatuses: []int{500}}, nil)
		none := New("o", Settings{FailureStatuses: []int{}}, nil)
		for _, tt := range tests {
			if got := Classify(tt.status, tt.err); got != tt.want {
				t.Errorf("Classify(%d, %v) = %v, want %v", tt.status, tt.err, got, tt.want)
			}
			if got := lax.Classify(tt.status, tt.err); got != tt.want {
				t.Errorf("default Breaker.Classify(%d, %v) = %v, want %v", tt.status, tt.err, got, tt.want)
			}
			if got := strict.Classify(tt.status, tt.err); got != tt.strict {
				t.Errorf("strict Breaker.Classify(%d, %v) = %v, want %v", tt.status, tt.err, got, tt.strict)
			}
			if got := only.Classify(tt.status, tt.err); got != tt.only {
				t.Errorf("[500] Breaker.Classify(%d, %v) = %v, want %v", tt.status, tt.err, got, tt.only)
			}
			if got := none.Classify(tt.status, tt.err); got != tt.none {
				t.Errorf("[] Breaker.Classify(%d, %v) = %v, want %v", tt.status, tt.err, got, tt.none)
			}
		}
	})
}

// TestConcurrent hammers one breaker from many goroutines (run with -race)
// and checks that every Allow is accounted for exactly once.
func TestConcurrent(t *testing.T) {
	b := New("origin", Settings{ConsecutiveFailures: 3, MinRequests: 5, OpenFor: MinOpenFor, HalfOpenProbes: 2}, nil)
	const workers, calls = 8, 2000
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range calls {
				c, err := b.Allow()
				if err != nil {
					_ = b.RetryAfter(time.Now())
					continue
				}
				c.Done(Outcome((w + i) % int(numOutcomes)))
			}
		})
	}
	wg.Wait()
	st := b.Stats()
	var total uint64 = st.RejectedOpen + st.RejectedProbes
	for _, n := range st.Outcomes {
		total += n
	}
	if total != workers*calls {
		t.Errorf("outcomes + rejections = %d, want %d (%+v)", total, workers*calls, st)
	}
}

// TestMinorityRunsDoNotTrip: once the window holds MinRequests outcomes,
// a run of consecutive failures from one failing endpoint among healthy
// ones (20% of the traffic) does not open the breaker; the ratio decides.
func TestMinorityRunsDoNotTrip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := newTest(Settings{ConsecutiveFailures: 5, MinRequests: 20, FailureRatio: 0.5})
		report(t, b, repeat(Success, 16)...)
		report(t, b, repeat(Failure, 4)...) // 20 outcomes, 20% failures
		report(t, b, repeat(Failure, 6)...) // a run of 10 > 5, ratio 10/26
		wantState(t, b, Closed)
		report(t, b, repeat(Failure, 6)...) // 16/32 = 0.5: the ratio trips
		wantState(t, b, Open)
	})
}
