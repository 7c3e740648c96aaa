package admission

import (
	"strings"
	"testing"
	"time"
)

func mustOrigin(t testing.TB, l OriginLimits) *Origin {
	t.Helper()
	o, err := NewOrigin("api", l)
	if err != nil {
		t.Fatalf("NewOrigin: %v", err)
	}
	return o
}

func TestOriginLimitsValidate(t *testing.T) {
	tests := []struct {
		name    string
		l       OriginLimits
		wantErr string
	}{
		{"valid", OriginLimits{MaxConcurrency: 1}, ""},
		{"valid all", OriginLimits{MaxConcurrency: 10, MaxRate: 2.5, SlowStart: time.Second}, ""},
		{"zero concurrency", OriginLimits{}, "max_concurrency"},
		{"negative rate", OriginLimits{MaxConcurrency: 1, MaxRate: -1}, "max_rate"},
		{"negative slow start", OriginLimits{MaxConcurrency: 1, SlowStart: -time.Second}, "slow_start"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewOrigin("api", tt.l)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("NewOrigin = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.HasPrefix(err.Error(), `admission: origin "api": `) {
				t.Fatalf("NewOrigin = %v, want an error about %s", err, tt.wantErr)
			}
		})
	}
}

// tenantWithShare returns the "acme" class with the given origin share.
func tenantWithShare(t *testing.T, share float64) *Tenant {
	t.Helper()
	return mustTenants(t, Limits{Rate: 1000, MaxConcurrency: 1000, OriginShare: share}, defLimits, 1).Lookup([]byte("acme"))
}

func TestOriginShare(t *testing.T) {
	tests := []struct {
		name      string
		share     float64
		budget    int
		wantSlots int
	}{
		{"half of 10", 0.5, 10, 5},
		{"default share takes all", 0, 10, 10},
		{"tiny share still gets 1", 0.01, 10, 1},
		{"0.3 of 10 despite float error", 0.3, 10, 3},
		{"half of 1", 0.5, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := mustOrigin(t, OriginLimits{MaxConcurrency: tt.budget})
			tn := tenantWithShare(t, tt.share)
			for i := range tt.wantSlots {
				if r, _ := o.Acquire(t0, tn); r != None {
					t.Fatalf("Acquire %d = %v, want none", i, r)
				}
			}
			r, ra := o.Acquire(t0, tn)
			want := OriginShare
			if tt.wantSlots == tt.budget {
				want = Concurrency // the budget runs out first
			}
			if r != want || ra != time.Second {
				t.Fatalf("Acquire past %d slots = %v, %v; want %v, 1s", tt.wantSlots, r, ra, want)
			}
			if got := o.TenantInFlight(tn); got != tt.wantSlots {
				t.Errorf("TenantInFlight = %d, want %d", got, tt.wantSlots)
			}
			// Other tenants and untenanted fetches use the rest.
			for i := tt.wantSlots; i < tt.budget; i++ {
				if r, _ := o.Acquire(t0, nil); r != None {
					t.Fatalf("Acquire(nil) %d = %v, want none", i, r)
				}
			}
			if r, _ := o.Acquire(t0, nil); r != Concurrency {
				t.Fatalf("Acquire(nil) past budget = %v, want concurrency", r)
			}
			o.Release(tn)
			if r, _ := o.Acquire(t0, tn); r != None {
				t.Fatalf("Acquire after Release = %v, want none", r)
			}
			if got := tn.Stats().Rejected[want]; got != 1 {
				t.Errorf("tenant Rejected[%v] = %d, want 1", want, got)
			}
		})
	}
}

func TestOriginShareFollowsSlowStart(t *testing.T) {
	o := mustOrigin(t, OriginLimits{MaxConcurrency: 100, SlowStart: 10 * time.Second})
	o.StartRamp(t0)
	tn := tenantWithShare(t, 0.5)
	// Limit at t0 is 10, so the share is 5.
	for range 5 {
		if r, _ := o.Acquire(t0, tn); r != None {
			t.Fatalf("Acquire = %v, want none", r)
		}
	}
	if r, _ := o.Acquire(t0, tn); r != OriginShare {
		t.Fatalf("6th Acquire at limit 10 = %v, want origin_share", r)
	}
	// At t0+5s the limit is 55, the share 27.
	now := at(5 * time.Second)
	for i := 5; i < 27; i++ {
		if r, _ := o.Acquire(now, tn); r != None {
			t.Fatalf("Acquire %d at limit 55 = %v, want none", i, r)
		}
	}
	if r, _ := o.Acquire(now, tn); r != OriginShare {
		t.Fatalf("28th Acquire at limit 55 = %v, want origin_share", r)
	}
}

func TestSlowStartRamp(t *testing.T) {
	tests := []struct {
		name string
		l    OriginLimits
		ramp bool
		at   time.Duration
		want int
	}{
		{"no ramp started", OriginLimits{MaxConcurrency: 100, SlowStart: 30 * time.Second}, false, 0, 100},
		{"no slow start configured", OriginLimits{MaxConcurrency: 100}, true, 0, 100},
		{"start at 10%", OriginLimits{MaxConcurrency: 100, SlowStart: 30 * time.Second}, true, 0, 10},
		{"before start clamps", OriginLimits{MaxConcurrency: 100, SlowStart: 30 * time.Second}, true, -time.Second, 10},
		{"one third", OriginLimits{MaxConcurrency: 100, SlowStart: 30 * time.Second}, true, 10 * time.Second, 40},
		{"half", OriginLimits{MaxConcurrency: 100, SlowStart: 30 * time.Second}, true, 15 * time.Second, 55},
		{"almost done", OriginLimits{MaxConcurrency: 100, SlowStart: 30 * time.Second}, true, 30*time.Second - time.Nanosecond, 99},
		{"done", OriginLimits{MaxConcurrency: 100, SlowStart: 30 * time.Second}, true, 30 * time.Second, 100},
		{"long after", OriginLimits{MaxConcurrency: 100, SlowStart: 30 * time.Second}, true, time.Hour, 100},
		{"small budget starts at 1", OriginLimits{MaxConcurrency: 5, SlowStart: 10 * time.Second}, true, 0, 1},
		{"small budget half", OriginLimits{MaxConcurrency: 5, SlowStart: 10 * time.Second}, true, 5 * time.Second, 3},
		{"budget 1", OriginLimits{MaxConcurrency: 1, SlowStart: 10 * time.Second}, true, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := mustOrigin(t, tt.l)
			if tt.ramp {
				o.StartRamp(t0)
			}
			if got := o.Limit(at(tt.at)); got != tt.want {
				t.Fatalf("Limit(t0+%v) = %d, want %d", tt.at, got, tt.want)
			}
			if s := o.Stats(at(tt.at)); s.Limit != tt.want || s.Ramping != (tt.want < tt.l.MaxConcurrency) {
				t.Fatalf("Stats(t0+%v) limit, ramping = %d, %v; want %d, %v", tt.at, s.Limit, s.Ramping, tt.want, tt.want < tt.l.MaxConcurrency)
			}
		})
	}
}

func TestSlowStartAdmitsOnlyTheLimit(t *testing.T) {
	o := mustOrigin(t, OriginLimits{MaxConcurrency: 20, SlowStart: 10 * time.Second})
	for range 20 {
		if r, _ := o.Acquire(t0, nil); r != None {
			t.Fatal("Acquire refused before any ramp")
		}
	}
	for range 20 {
		o.Release(nil)
	}
	o.StartRamp(at(time.Minute))
	for _, step := range []struct {
		at   time.Duration
		want int // total in flight the limit allows
	}{{time.Minute, 2}, {time.Minute + 5*time.Second, 11}, {time.Minute + 10*time.Second, 20}} {
		now := at(step.at)
		for o.InFlight() < step.want {
			if r, _ := o.Acquire(now, nil); r != None {
				t.Fatalf("Acquire at t0+%v with %d in flight = %v, want none", step.at, o.InFlight(), r)
			}
		}
		if r, ra := o.Acquire(now, nil); r != Concurrency || ra != time.Second {
			t.Fatalf("Acquire at t0+%v past %d = %v, %v; want concurrency, 1s", step.at, step.want, r, ra)
		}
	}
}

func TestOriginMaxRate(t *testing.T) {
	o := mustOrigin(t, OriginLimits{MaxConcurrency: 100, MaxRate: 2})
	tn := tenantWithShare(t, 1)
	steps := []struct {
		at        time.Duration
		want      Reason
		wantRetry time.Duration
	}{
		{0, None, 0},
		{0, None, 0}, // burst ceil(2) = 2
		{0, Rate, time.Second},
		{400 * time.Millisecond, Rate, time.Second},
		{500 * time.Millisecond, None, 0},
		{500 * time.Millisecond, Rate, time.Second},
	}
	for i, s := range steps {
		r, ra := o.Acquire(at(s.at), tn)
		if r != s.want || ra != s.wantRetry {
			t.Fatalf("step %d: Acquire(t0+%v) = %v, %v; want %v, %v", i, s.at, r, ra, s.want, s.wantRetry)
		}
		if r == None {
			o.Release(tn)
		}
	}
	slow := mustOrigin(t, OriginLimits{MaxConcurrency: 100, MaxRate: 0.2})
	slow.Acquire(t0, nil)
	if r, ra := slow.Acquire(t0, nil); r != Rate || ra != 5*time.Second {
		t.Fatalf("Acquire at 0.2/s with empty bucket = %v, %v; want rate, 5s", r, ra)
	}
	st := o.Stats(t0)
	if st.Acquired != 3 || st.Rejected[Rate] != 3 || st.InFlight != 0 {
		t.Errorf("Stats() = %+v, want 3 acquired, 3 refused for rate, none in flight", st)
	}
	if got := tn.Stats().Rejected[Rate]; got != 3 {
		t.Errorf("tenant Rejected[rate] = %d, want 3", got)
	}
}

func TestOriginRateNotSpentOnRefusal(t *testing.T) {
	o := mustOrigin(t, OriginLimits{MaxConcurrency: 1, MaxRate: 1})
	if r, _ := o.Acquire(t0, nil); r != None {
		t.Fatal("first Acquire refused")
	}
	// Bucket is empty now; a second later it holds one token. A
	// concurrency refusal must not spend it.
	if r, _ := o.Acquire(at(time.Second), nil); r != Concurrency {
		t.Fatalf("Acquire with the slot taken = %v, want concurrency", r)
	}
	o.Release(nil)
	if r, _ := o.Acquire(at(time.Second), nil); r != None {
		t.Fatalf("Acquire after Release = %v, want none (token still there)", r)
	}
}

func TestOriginSetLimits(t *testing.T) {
	o := mustOrigin(t, OriginLimits{MaxConcurrency: 4, MaxRate: 4})
	for range 3 {
		if r, _ := o.Acquire(t0, nil); r != None {
			t.Fatal("Acquire refused")
		}
	}
	if err := o.SetLimits(OriginLimits{MaxConcurrency: 2, MaxRate: 8}, t0); err != nil {
		t.Fatal(err)
	}
	if got := o.InFlight(); got != 3 {
		t.Fatalf("InFlight after SetLimits = %d, want 3 (kept)", got)
	}
	o.Release(nil)
	o.Release(nil)
	// One in flight, limit 2, one token left from the old bucket (not refilled to 8).
	if r, _ := o.Acquire(t0, nil); r != None {
		t.Fatal("Acquire with a token left refused")
	}
	o.Release(nil)
	if r, _ := o.Acquire(t0, nil); r != Rate {
		t.Fatalf("Acquire with an empty kept bucket = %v, want rate", r)
	}
	if err := o.SetLimits(OriginLimits{MaxConcurrency: 2}, t0); err != nil {
		t.Fatal(err)
	}
	if r, _ := o.Acquire(t0, nil); r != None {
		t.Fatalf("Acquire without max_rate = %v, want none", r)
	}
	if err := o.SetLimits(OriginLimits{}, t0); err == nil {
		t.Fatal("SetLimits(invalid) = nil, want error")
	}
	if got := o.Stats(t0).Limits.MaxConcurrency; got != 2 {
		t.Errorf("invalid SetLimits changed MaxConcurrency to %d", got)
	}
}

func TestOriginReleaseUnmatched(t *testing.T) {
	o := mustOrigin(t, OriginLimits{MaxConcurrency: 2})
	tn := tenantWithShare(t, 1)
	o.Release(nil)
	o.Release(tn)
	if got := o.InFlight(); got != 0 {
		t.Fatalf("InFlight after unmatched Release = %d, want 0", got)
	}
	o.Acquire(t0, tn)
	o.Acquire(t0, tn)
	o.Release(tn)
	o.Release(tn)
	o.Release(tn)
	if got, gotT := o.InFlight(), o.TenantInFlight(tn); got != 0 || gotT != 0 {
		t.Fatalf("InFlight, TenantInFlight = %d, %d; want 0, 0", got, gotT)
	}
	if o.Name() != "api" {
		t.Errorf("Name() = %q, want api", o.Name())
	}
}
