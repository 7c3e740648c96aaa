package breaker

import (
	"testing"
	"time"
)

func BenchmarkAllowDoneClosed(b *testing.B) {
	br := New("origin", Settings{}, nil)
	b.ReportAllocs()
	for b.Loop() {
		c, err := br.Allow()
		if err != nil {
			b.Fatal(err)
		}
		c.Done(Success)
	}
}

func BenchmarkAllowDoneClosedParallel(b *testing.B) {
	br := New("origin", Settings{}, nil)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c, _ := br.Allow()
			c.Done(Success)
		}
	})
}

func BenchmarkAllowOpen(b *testing.B) {
	br := New("origin", Settings{ConsecutiveFailures: 1, OpenFor: MaxOpenFor}, nil)
	c, _ := br.Allow()
	c.Done(Failure)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := br.Allow(); err == nil {
			b.Fatal("open breaker admitted a call")
		}
	}
}

func BenchmarkRetryAfter(b *testing.B) {
	br := New("origin", Settings{ConsecutiveFailures: 1, OpenFor: MaxOpenFor}, nil)
	c, _ := br.Allow()
	c.Done(Failure)
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		_ = br.RetryAfter(now)
	}
}

func BenchmarkRetryBudgetRecord(b *testing.B) {
	r := NewRetryBudget(DefaultRetryRatio, DefaultRetryMinPerSec, DefaultRetryWindow)
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Microsecond) // crosses a bucket every 1e6 ops
		r.Record(now)
	}
}

func BenchmarkRetryBudgetTryRetry(b *testing.B) {
	r := NewRetryBudget(DefaultRetryRatio, DefaultRetryMinPerSec, DefaultRetryWindow)
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Microsecond)
		r.Record(now)
		_ = r.TryRetry(now)
	}
}
