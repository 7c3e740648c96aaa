package breaker_test

import (
	"fmt"
	"io"
	"time"

	"github.com/shield-proxy/shield/breaker"
)

// fetchOnce stands in for one origin round trip.
type fetchOnce func() (status int, err error)

// fetch shows the miss path: breaker first, at most one retry for an
// idempotent request that lost its connection, inside the retry budget.
func fetch(b *breaker.Breaker, budget *breaker.RetryBudget, method string, now time.Time, origin fetchOnce) (int, error) {
	budget.Record(now)
	for attempt := 0; ; attempt++ {
		call, err := b.Allow()
		if err != nil {
			// Serve stale, or 503 with Retry-After: b.RetryAfter(now),
			// rounded up to whole seconds, at least 1.
			return 0, err
		}
		status, err := origin()
		call.Done(b.Classify(status, err))
		if attempt > 0 || !breaker.Retryable(err) || !breaker.Idempotent(method) || !budget.TryRetry(now) {
			return status, err
		}
	}
}

func Example() {
	b := breaker.New("api.example", breaker.Settings{ConsecutiveFailures: 2}, func(name string, from, to breaker.State) {
		// Runs under the breaker's lock: record, don't log here.
	})
	budget := breaker.NewRetryBudget(breaker.DefaultRetryRatio, breaker.DefaultRetryMinPerSec, breaker.DefaultRetryWindow)
	now := time.Now()

	calls := 0
	flaky := func() (int, error) {
		calls++
		if calls == 1 {
			return 0, io.EOF // a closed keep-alive connection
		}
		return 200, nil
	}
	status, err := fetch(b, budget, "GET", now, flaky)
	fmt.Println(status, err, calls, b.State())

	down := func() (int, error) { return 503, nil }
	for range 3 {
		_, err = fetch(b, budget, "GET", now, down)
	}
	fmt.Println(err, b.State(), b.RetryAfter(now) > 0)
	// Output:
	// 200 <nil> 2 closed
	// breaker: open open true
}
