package breaker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// step is one RetryBudget operation at t0+at.
type step struct {
	at      time.Duration
	fetches int // Record calls
	retries int // TryRetry calls
	granted int // how many of them must succeed
}

func TestRetryBudget(t *testing.T) {
	const window = 10 * time.Second
	bucket := window / retryBuckets
	tests := []struct {
		name             string
		ratio, minPerSec float64
		steps            []step
	}{
		{"quiet origin gets the floor", 0.2, 3, []step{{0, 0, 40, 30}}},
		{"floor is per window", 0.2, 3, []step{{0, 0, 40, 30}, {window, 0, 40, 30}}},
		{"busy origin gets the ratio", 0.2, 3, []step{{0, 1000, 300, 200}}},
		{"floor when ratio is lower", 0.2, 3, []step{{0, 100, 40, 30}}},
		{"no floor, no fetches", 0.5, 0, []step{{0, 0, 5, 0}}},
		{"ratio zero means floor only", 0, 1, []step{{0, 1000, 20, 10}}},
		{"fractional allowance rounds down", 0.25, 0, []step{{0, 7, 3, 1}}}, // 1.75 retries
		{"retries spent earlier count", 0.5, 0, []step{{0, 10, 3, 3}, {bucket, 0, 3, 2}}},
		{"fetches slide out bucket by bucket", 0.5, 0, []step{
			{0, 10, 0, 0},
			{5 * bucket, 10, 0, 0},
			{window - 1, 0, 1, 1},        // 20 fetches, 1 retry so far
			{window, 0, 10, 4},           // first 10 fetches gone: 5 allowed, 1 spent
			{window + 5*bucket, 0, 5, 0}, // all fetches gone: none allowed
		}},
		{"retries slide out too", 0, 1, []step{{0, 0, 12, 10}, {window - 1, 0, 1, 0}, {window, 0, 12, 10}}},
		{"late caller counts in the newest bucket", 0.5, 0, []step{
			{0, 1, 0, 0},
			{window, 4, 0, 0}, // the fetch at 0 slid out
			{0, 4, 0, 0},      // clock went back: counted at `window`, not in the old bucket
			{window, 0, 5, 4}, // 8 fetches → 4 retries
		}},
		{"before the first call", 0.5, 0, []step{{time.Hour, 4, 0, 0}, {-time.Hour, 0, 3, 2}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewRetryBudget(tt.ratio, tt.minPerSec, window)
			var granted, denied uint64
			for i, s := range tt.steps {
				now := t0.Add(s.at)
				for range s.fetches {
					r.Record(now)
				}
				got := 0
				for range s.retries {
					if r.TryRetry(now) {
						got++
					}
				}
				if got != s.granted {
					t.Errorf("step %d (%+v): %d retries granted, want %d", i, s, got, s.granted)
				}
				granted += uint64(got)
				denied += uint64(s.retries - got)
			}
			if g, d := r.Counts(); g != granted || d != denied {
				t.Errorf("Counts() = %d, %d; want %d, %d", g, d, granted, denied)
			}
		})
	}
}

func TestNewRetryBudgetPanics(t *testing.T) {
	tests := []struct {
		ratio, minPerSec float64
		window           time.Duration
	}{
		{-0.1, 1, time.Second},
		{1.1, 1, time.Second},
		{nan(), 1, time.Second},
		{0.2, -1, time.Second},
		{0.2, nan(), time.Second},
		{0.2, inf(), time.Second},
		{0.2, 1, 0},
		{0.2, 1, retryBuckets - 1},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%v,%v,%v", tt.ratio, tt.minPerSec, tt.window), func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("NewRetryBudget(%v, %v, %v) did not panic", tt.ratio, tt.minPerSec, tt.window)
				}
			}()
			NewRetryBudget(tt.ratio, tt.minPerSec, tt.window)
		})
	}
	NewRetryBudget(DefaultRetryRatio, DefaultRetryMinPerSec, DefaultRetryWindow) // must not panic
}

func TestRetryable(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("origin fetch: %w", err) }
	tests := []struct {
		err  error
		want bool
	}{
		{nil, false},
		{refused, true},
		{wrap(refused), true},
		{&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, true},
		{&net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}, true},
		{&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.EHOSTUNREACH)}, true},
		{io.EOF, true},
		{wrap(io.ErrUnexpectedEOF), true},
		{deadlineErr, false},
		{&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ETIMEDOUT)}, false},
		{context.DeadlineExceeded, false},
		{wrap(context.Canceled), false},
		{errors.Join(context.Canceled, io.EOF), false},
		{errTest("status 503"), false},
		{&net.DNSError{Err: "no such host", Name: "origin", IsNotFound: true}, false},
	}
	for _, tt := range tests {
		if got := Retryable(tt.err); got != tt.want {
			t.Errorf("Retryable(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

func TestIdempotent(t *testing.T) {
	tests := []struct {
		method string
		want   bool
	}{
		{"GET", true}, {"HEAD", true}, {"OPTIONS", true}, {"TRACE", true}, {"PUT", true}, {"DELETE", true},
		{"POST", false}, {"PATCH", false}, {"CONNECT", false}, {"get", false}, {"", false},
	}
	for _, tt := range tests {
		if got := Idempotent(tt.method); got != tt.want {
			t.Errorf("Idempotent(%q) = %v, want %v", tt.method, got, tt.want)
		}
	}
}
