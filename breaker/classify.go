package breaker

import (
	"context"
	"errors"
	"io"
	"syscall"
)

// statusTooManyRequests is 429 (RFC 6585); named here so the package does not
// import net/http for one constant.
const statusTooManyRequests = 429

// Classify maps an origin fetch result to an Outcome with the default
// settings ([DefaultFailureStatuses], 429 ignored; see [Breaker.Classify]
// for the per-origin form).
// With an error the status is not looked at:
//
//   - context.Canceled (the client or the server went away) → Ignored;
//   - any other error → Failure: timeouts, refused or reset connections, and
//     errors we cannot name. Map your own not-the-origin's-fault errors
//     (fasthttp.ErrNoFreeConns, a spent budget) to Ignored yourself.
//
// Without an error: 502, 503, 504, or a status outside 100–599 (not
// HTTP) → Failure, 429 → Ignored, anything else → Success (a 404 or an
// application's 500 still proves the origin is up).
func Classify(status int, err error) Outcome {
	return classify(status, err, &defaultFailStatus)
}

var defaultFailStatus = NewStatusSet(DefaultFailureStatuses)

func classify(status int, err error, fail *StatusSet) Outcome {
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return Ignored
		}
		return Failure
	}
	switch {
	case status < 100 || status > 599 || fail.Has(status):
		return Failure
	case status == statusTooManyRequests:
		return Ignored
	}
	return Success
}

// Retryable reports whether err is a connection failure after which one
// retry of an idempotent request is worth it: the connection was refused,
// reset, aborted or unreachable, or closed before a full response (EOF,
// typically a keep-alive connection the origin had just closed). Timeouts
// and cancellations are never retryable: a slow origin must not get twice
// the load. Callers also check [Idempotent] and [RetryBudget.TryRetry], and
// map client-library sentinels (fasthttp.ErrConnectionClosed) themselves.
func Retryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var te interface{ Timeout() bool }
	if errors.As(err, &te) && te.Timeout() {
		return false
	}
	for _, target := range connErrors {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// connErrors are the errors Retryable accepts.
var connErrors = [...]error{
	syscall.ECONNREFUSED,
	syscall.ECONNRESET,
	syscall.ECONNABORTED,
	syscall.EPIPE,
	syscall.EHOSTUNREACH,
	syscall.ENETUNREACH,
	io.EOF,
	io.ErrUnexpectedEOF,
}

// Idempotent reports whether an HTTP method is idempotent (RFC 9110
// §9.2.2: GET, HEAD, OPTIONS, TRACE, PUT, DELETE), so that sending it twice
// has the effect of sending it once. Methods are case-sensitive.
func Idempotent(method string) bool {
	switch method {
	case "GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE":
		return true
	}
	return false
}
