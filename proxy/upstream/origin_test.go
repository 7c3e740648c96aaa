package upstream

import (
	"errors"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/breaker"
	"github.com/shield-proxy/shield/originpool"
)

// TestServerOutcome: a server's passive health counts what the breaker
// counts — by default an application's 500 is an answer, not a failure,
// so one endpoint failing on every request ejects no server; an origin
// that lists 500 in failure_statuses gets it counted.
func TestServerOutcome(t *testing.T) {
	def := breaker.NewStatusSet(breaker.DefaultFailureStatuses)
	with500 := breaker.NewStatusSet([]int{500, 502, 503, 504})
	tests := []struct {
		status     int
		err        error
		want, w500 originpool.Outcome
	}{
		{200, nil, originpool.Success, originpool.Success},
		{404, nil, originpool.Success, originpool.Success},
		{500, nil, originpool.Success, originpool.Failure},
		{502, nil, originpool.Failure, originpool.Failure},
		{503, nil, originpool.Failure, originpool.Failure},
		{504, nil, originpool.Failure, originpool.Failure},
		{0, errors.New("connection refused"), originpool.Failure, originpool.Failure},
		{0, fasthttp.ErrNoFreeConns, originpool.Neutral, originpool.Neutral},
	}
	for _, tt := range tests {
		if got := serverOutcome(tt.status, tt.err, &def); got != tt.want {
			t.Errorf("default: serverOutcome(%d, %v) = %v, want %v", tt.status, tt.err, got, tt.want)
		}
		if got := serverOutcome(tt.status, tt.err, &with500); got != tt.w500 {
			t.Errorf("[500 502 503 504]: serverOutcome(%d, %v) = %v, want %v", tt.status, tt.err, got, tt.w500)
		}
	}
}
