package breaker

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestSettingsWithDefaults(t *testing.T) {
	got := Settings{}.WithDefaults()
	want := Settings{
		ConsecutiveFailures: DefaultConsecutiveFailures,
		FailureRatio:        DefaultFailureRatio,
		MinRequests:         DefaultMinRequests,
		Interval:            DefaultInterval,
		OpenFor:             DefaultOpenFor,
		HalfOpenProbes:      DefaultHalfOpenProbes,
		FailureStatuses:     DefaultFailureStatuses,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Settings{}.WithDefaults() = %+v, want %+v", got, want)
	}
	set := Settings{ConsecutiveFailures: 2, FailureRatio: 0.9, MinRequests: 7, Interval: time.Second,
		OpenFor: time.Minute, HalfOpenProbes: 1, TooManyRequestsIsFailure: true, FailureStatuses: []int{}}
	if got := set.WithDefaults(); !reflect.DeepEqual(got, set) {
		t.Errorf("WithDefaults changed set fields: %+v, want %+v", got, set)
	}
}

func TestSettingsValidate(t *testing.T) {
	tests := []struct {
		name    string
		s       Settings
		wantErr []string // substrings, one per expected problem
	}{
		{"zero is defaults", Settings{}, nil},
		{"bounds inclusive", Settings{FailureRatio: 1, Interval: MinInterval, OpenFor: MaxOpenFor, HalfOpenProbes: MaxHalfOpenProbes}, nil},
		{"ratio above 1", Settings{FailureRatio: 1.5}, []string{"failure_ratio"}},
		{"ratio negative", Settings{FailureRatio: -0.1}, []string{"failure_ratio"}},
		{"ratio NaN", Settings{FailureRatio: math.NaN()}, []string{"failure_ratio"}},
		{"interval negative", Settings{Interval: -time.Second}, []string{"interval"}},
		{"interval tiny", Settings{Interval: MinInterval - 1}, []string{"interval"}},
		{"interval huge", Settings{Interval: MaxInterval + 1}, []string{"interval"}},
		{"open_for tiny", Settings{OpenFor: time.Millisecond}, []string{"open_for"}},
		{"open_for huge", Settings{OpenFor: MaxOpenFor + 1}, []string{"open_for"}},
		{"probes", Settings{HalfOpenProbes: MaxHalfOpenProbes + 1}, []string{"half_open_probes"}},
		{"statuses in range", Settings{FailureStatuses: []int{100, 500, 599}}, nil},
		{"status 600", Settings{FailureStatuses: []int{502, 600}}, []string{"failure status 600"}},
		{"status 99", Settings{FailureStatuses: []int{99}}, []string{"failure status 99"}},
		{"all reported", Settings{FailureRatio: 2, Interval: -1, OpenFor: -1, HalfOpenProbes: 1000},
			[]string{"failure_ratio", "interval", "open_for", "half_open_probes"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.s.Validate()
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("Validate(%+v) = %v, want nil", tt.s, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate(%+v) = nil, want errors about %q", tt.s, tt.wantErr)
			}
			msg := err.Error()
			for _, w := range tt.wantErr {
				if !strings.Contains(msg, "breaker: "+w) {
					t.Errorf("Validate(%+v) = %q, want a %q problem", tt.s, msg, w)
				}
			}
			if n := strings.Count(msg, "breaker: "); n != len(tt.wantErr) {
				t.Errorf("Validate(%+v) reported %d problems, want %d: %q", tt.s, n, len(tt.wantErr), msg)
			}
		})
	}
}

func TestNewPanicsOnInvalidSettings(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("New with FailureRatio 2 did not panic")
		}
	}()
	New("o", Settings{FailureRatio: 2}, nil)
}

func TestStrings(t *testing.T) {
	seen := map[string]bool{}
	for s := range numStates + 1 {
		seen[s.String()] = true
	}
	for o := range numOutcomes + 1 {
		seen[o.String()] = true
	}
	for _, w := range []string{"closed", "half-open", "open", "ignored", "success", "failure", "unknown"} {
		if !seen[w] {
			t.Errorf("no State or Outcome prints %q", w)
		}
	}
	if Closed != 0 || HalfOpen != 1 || Open != 2 {
		t.Errorf("gauge values Closed,HalfOpen,Open = %d,%d,%d, want 0,1,2", Closed, HalfOpen, Open)
	}
}
