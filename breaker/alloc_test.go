//go:build !race

package breaker

import (
	"testing"
	"time"
)

// TestAllocs pins the allocation budget: rejecting and the retry budget are
// free; admitting costs gobreaker's one callback closure.
func TestAllocs(t *testing.T) {
	open := New("open", Settings{ConsecutiveFailures: 1, OpenFor: MaxOpenFor}, nil)
	c, _ := open.Allow()
	c.Done(Failure)
	closed := New("closed", Settings{}, nil)
	budget := NewRetryBudget(DefaultRetryRatio, DefaultRetryMinPerSec, DefaultRetryWindow)
	now := time.Now()
	tests := []struct {
		name string
		max  float64
		f    func()
	}{
		{"Allow open", 0, func() { _, _ = open.Allow() }},
		{"RetryAfter", 0, func() { _ = open.RetryAfter(now) }},
		{"State", 0, func() { _ = open.State() }},
		{"Stats", 0, func() { _ = open.Stats() }},
		{"Allow+Done closed", 1, func() {
			c, _ := closed.Allow()
			c.Done(Success)
		}},
		{"Classify", 0, func() { _ = closed.Classify(503, nil) }},
		{"Record", 0, func() { budget.Record(now) }},
		{"TryRetry", 0, func() { _ = budget.TryRetry(now) }},
	}
	for _, tt := range tests {
		if got := testing.AllocsPerRun(100, tt.f); got > tt.max {
			t.Errorf("%s: %v allocs/op, want at most %v", tt.name, got, tt.max)
		}
	}
	if st := open.State(); st != Open {
		t.Fatalf("open breaker is %v; the Allow open case measured the wrong path", st)
	}
}
