package admission

import (
	"math"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func TestConfigValidate(t *testing.T) {
	ok := Limits{Rate: 10, MaxConcurrency: 4}
	tests := []struct {
		name    string
		cfg     Config
		wantErr []string // substrings, one per expected problem
	}{
		{"valid", Config{Default: ok, Classes: map[string]Limits{"acme": ok}}, nil},
		{"valid full", Config{Default: Limits{Rate: 0.5, Burst: 3, MaxConcurrency: 1, OriginShare: 1}}, nil},
		{"zero rate", Config{Default: Limits{MaxConcurrency: 1}}, []string{`"default": rate`}},
		{"negative rate", Config{Default: Limits{Rate: -1, MaxConcurrency: 1}}, []string{"rate must be"}},
		{"NaN rate", Config{Default: Limits{Rate: math.NaN(), MaxConcurrency: 1}}, []string{"rate must be"}},
		{"Inf rate", Config{Default: Limits{Rate: math.Inf(1), MaxConcurrency: 1}}, []string{"rate must be"}},
		{"negative burst", Config{Default: Limits{Rate: 1, Burst: -1, MaxConcurrency: 1}}, []string{"burst"}},
		{"zero concurrency", Config{Default: Limits{Rate: 1}}, []string{"max_concurrency"}},
		{"share above 1", Config{Default: Limits{Rate: 1, MaxConcurrency: 1, OriginShare: 1.5}}, []string{"origin_share"}},
		{"negative share", Config{Default: Limits{Rate: 1, MaxConcurrency: 1, OriginShare: -0.1}}, []string{"origin_share"}},
		{"reserved name", Config{Default: ok, Classes: map[string]Limits{DefaultClass: ok}}, []string{"reserved"}},
		{"empty name", Config{Default: ok, Classes: map[string]Limits{"": ok}}, []string{"reserved"}},
		{"every problem reported", Config{Default: Limits{}, Classes: map[string]Limits{"b": {Rate: 1}}},
			[]string{`"default": rate`, `"default": max_concurrency`, `"b": max_concurrency`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want errors %q", tt.wantErr)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, want it to contain %q", err, w)
				}
			}
			if !strings.HasPrefix(err.Error(), "admission: ") {
				t.Errorf("Validate() = %q, want prefix %q", err, "admission: ")
			}
		})
	}
}

func TestLimitsDefaultsAndPerNode(t *testing.T) {
	tests := []struct {
		name      string
		in        Limits
		peers     int
		wantBurst int // after defaults, fleet-wide
		wantShare float64
		wantRate  float64 // per node
		wantNodeB int     // per node
	}{
		{"burst defaults to ceil rate", Limits{Rate: 2.5}, 1, 3, 1, 2.5, 3},
		{"burst defaults to at least 1", Limits{Rate: 0.1}, 1, 1, 1, 0.1, 1},
		{"explicit kept", Limits{Rate: 30, Burst: 30, OriginShare: 0.5}, 3, 30, 0.5, 10, 10},
		{"burst rounded up per node", Limits{Rate: 10, Burst: 10}, 3, 10, 1, 10.0 / 3, 4},
		{"per-node burst at least 1", Limits{Rate: 1, Burst: 2}, 5, 2, 1, 0.2, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := tt.in.withDefaults()
			if l.Burst != tt.wantBurst || l.OriginShare != tt.wantShare {
				t.Errorf("withDefaults() burst, share = %d, %v; want %d, %v", l.Burst, l.OriginShare, tt.wantBurst, tt.wantShare)
			}
			r, b := l.perNode(tt.peers)
			if math.Abs(float64(r)-tt.wantRate) > 1e-12 || b != tt.wantNodeB {
				t.Errorf("perNode(%d) = %v, %d; want %v, %d", tt.peers, r, b, tt.wantRate, tt.wantNodeB)
			}
		})
	}
}

func TestShareSlots(t *testing.T) {
	tests := []struct {
		share float64
		limit int
		want  int
	}{
		{0.5, 10, 5},
		{1, 10, 10},
		{0.3, 10, 3},    // 3.0000000000000004 in float
		{0.29, 100, 29}, // 28.999999999999996 in float
		{0.7, 10, 7},
		{0.01, 10, 1}, // at least 1
		{0.5, 1, 1},
		{0.25, 3, 1},
		{0.99, 100, 99},
		{0.999, 10, 9},
	}
	for _, tt := range tests {
		if got := shareSlots(tt.share, tt.limit); got != tt.want {
			t.Errorf("shareSlots(%v, %d) = %d, want %d", tt.share, tt.limit, got, tt.want)
		}
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	tests := []struct {
		secs float64
		want time.Duration
	}{
		{0, time.Second},
		{-3, time.Second},
		{0.001, time.Second},
		{1, time.Second},
		{1.0000000000000002, time.Second}, // float noise is not a second
		{1.01, 2 * time.Second},
		{3.5, 4 * time.Second},
		{1e12, MaxRetryAfter},
		{math.Inf(1), MaxRetryAfter},
		{math.NaN(), MaxRetryAfter},
		{math.Inf(-1), time.Second},
	}
	for _, tt := range tests {
		if got := retryAfterSeconds(tt.secs); got != tt.want {
			t.Errorf("retryAfterSeconds(%v) = %v, want %v", tt.secs, got, tt.want)
		}
	}
}

func TestReasonString(t *testing.T) {
	tests := []struct {
		r    Reason
		want string
	}{
		{None, "none"}, {Rate, "rate"}, {Concurrency, "concurrency"}, {OriginShare, "origin_share"}, {Shed, "shed"}, {QueueTimeout, "queue_timeout"}, {Reason(200), "unknown"},
	}
	for _, tt := range tests {
		if got := tt.r.String(); got != tt.want {
			t.Errorf("Reason(%d).String() = %q, want %q", tt.r, got, tt.want)
		}
	}
}
