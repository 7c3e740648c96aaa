package admission

import (
	"math"
	"testing"
	"time"
)

// refBucket is a slow, obvious token bucket: the reference the fuzz test
// holds Tenant to across admits, time and membership changes.
type refBucket struct {
	rate, burst, tokens float64
	last                time.Time
}

func (r *refBucket) advance(now time.Time) float64 {
	last := r.last
	if now.Before(last) {
		last = now
	}
	return math.Min(r.burst, r.tokens+now.Sub(last).Seconds()*r.rate)
}

func (r *refBucket) set(now time.Time, l Limits, peers int) {
	r.tokens, r.last = r.advance(now), now
	r.rate = l.Rate / float64(peers)
	r.burst = math.Max(1, math.Ceil(float64(l.Burst)/float64(peers)))
}

// admit mirrors x/time/rate, which admits when the wait for the missing
// fraction of a token truncates to 0 ns (float noise, e.g. 0.9999999999999999
// tokens).
func (r *refBucket) admit(now time.Time) bool {
	tok := r.advance(now)
	if tok < 1 && time.Duration((1-tok)/r.rate*float64(time.Second)) > 0 {
		return false
	}
	r.tokens, r.last = tok-1, now
	return true
}

// FuzzFleetBucket runs a program of admits, clock steps and SetPeers calls
// (two bytes per op) and checks, after every op, that the Tenant agrees with
// the reference bucket, that tokens never exceed the per-node burst, that a
// membership change never mints tokens, and that Retry-After is the whole
// seconds until the next token.
func FuzzFleetBucket(f *testing.F) {
	f.Add(uint8(30), uint8(30), []byte{2, 0, 2, 0, 1, 3, 2, 0, 1, 1, 0, 10, 2, 0})
	f.Add(uint8(1), uint8(1), []byte{2, 0, 2, 0, 0, 50, 2, 0})
	f.Add(uint8(7), uint8(3), []byte{1, 4, 2, 0, 2, 0, 0, 1, 1, 0, 2, 0})
	f.Fuzz(func(t *testing.T, rateB, burstB uint8, prog []byte) {
		l := Limits{Rate: float64(rateB%100+1) / 4, Burst: int(burstB % 64), MaxConcurrency: 1}
		ts, err := NewTenants(Config{Default: l}, 1)
		if err != nil {
			t.Fatal(err)
		}
		tn := ts.Default()
		l = l.withDefaults()
		ref := refBucket{rate: l.Rate, burst: float64(l.Burst), tokens: float64(l.Burst), last: t0}
		now := t0
		for i := 0; i+1 < len(prog); i += 2 {
			op, arg := prog[i]%3, prog[i+1]
			switch op {
			case 0:
				now = now.Add(time.Duration(arg) * 10 * time.Millisecond)
			case 1:
				before := tn.Tokens(now)
				peers := 1 + int(arg%5)
				ts.SetPeers(peers, now)
				ref.set(now, l, peers)
				if after := tn.Tokens(now); after > before+1e-9 {
					t.Fatalf("op %d: SetPeers(%d) raised tokens %v → %v", i, peers, before, after)
				}
			case 2:
				r, ra := tn.Admit(now)
				want := ref.admit(now)
				if (r == None) != want {
					t.Fatalf("op %d: Admit = %v, reference admits = %v (tokens %v)", i, r, want, ref.advance(now))
				}
				if r == None {
					tn.Done()
				} else {
					need := (1 - ref.advance(now)) / ref.rate
					if got := ra.Seconds(); got < 1 || got < need-1e-6 || got > math.Max(1, math.Ceil(need))+1e-9 || got != math.Trunc(got) {
						t.Fatalf("op %d: Retry-After = %v, want whole seconds ≥ max(1, %v)", i, ra, need)
					}
				}
			}
			got, want := tn.Tokens(now), ref.advance(now)
			if math.Abs(got-want) > 1e-6 {
				t.Fatalf("op %d: Tokens = %v, reference %v", i, got, want)
			}
			if _, b := tn.NodeLimits(); got > float64(b)+1e-9 {
				t.Fatalf("op %d: Tokens %v above per-node burst %d", i, got, b)
			}
		}
	})
}
