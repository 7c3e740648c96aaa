package upstream

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/admission"
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

// TestClassifyErr: a transport error is a 504 when the origin did not
// answer in time, a 502 otherwise.
func TestClassifyErr(t *testing.T) {
	tests := []struct {
		err     error
		outcome fetchOutcome
		status  int
	}{
		{fasthttp.ErrTimeout, outTimeout, 504},
		{fasthttp.ErrDialTimeout, outTimeout, 504},
		{os.ErrDeadlineExceeded, outTimeout, 504},
		{fmt.Errorf("read: %w", timeoutErr{}), outTimeout, 504},
		{&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, outError, 502},
		{fasthttp.ErrConnectionClosed, outError, 502},
		{errors.New("malformed response"), outError, 502},
	}
	for _, tt := range tests {
		if o, st := classifyErr(tt.err); o != tt.outcome || st != tt.status {
			t.Errorf("classifyErr(%v) = %s, %d; want %s, %d", tt.err, outcomeLabels[o], st, outcomeLabels[tt.outcome], tt.status)
		}
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// TestLostBeforeResponse: only a connection that broke before any
// response byte (EOF or reset on the first read, a write to a closed
// socket) may be sent again on a new connection.
func TestLostBeforeResponse(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{fasthttp.ErrConnectionClosed, true},
		{fmt.Errorf("do: %w", fasthttp.ErrConnectionClosed), true},
		{&net.OpError{Op: "write", Err: os.NewSyscallError("write", syscall.EPIPE)}, true},
		{&net.OpError{Op: "write", Err: os.NewSyscallError("write", syscall.ECONNRESET)}, true},
		{&net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, false},
		{&net.OpError{Op: "write", Err: timeoutErr{}}, false},
		{fasthttp.ErrTimeout, false},
		{errors.New("other"), false},
	}
	for _, tt := range tests {
		if got := lostBeforeResponse(tt.err); got != tt.want {
			t.Errorf("lostBeforeResponse(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

// TestBudgetDetail: each budget refusal has its Cache-Status detail (the
// stale reason and shield_shed_total's reason too).
func TestBudgetDetail(t *testing.T) {
	for r, want := range map[admission.Reason]string{
		admission.Concurrency:  "budget",
		admission.Rate:         "budget",
		admission.OriginShare:  "origin-share",
		admission.Shed:         "shed",
		admission.QueueTimeout: "queue-timeout",
	} {
		if got := budgetDetail(r); got != want {
			t.Errorf("budgetDetail(%v) = %q, want %q", r, got, want)
		}
	}
}

// TestCallOutcomes: every kind of answer and failure is counted under its
// outcome and answered with its status; the configured Host reaches the
// origin.
func TestCallOutcomes(t *testing.T) {
	o := newTestOrigin(t)
	slow := newTestOrigin(t)
	slow.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(300 * time.Millisecond)
	})
	r := newRegistry(t)
	cfg := parse(t, oneOrigin([]string{o.addr()}, "host_header: origin.example.com", "breaker: {disabled: true}")+
		"  slow:\n    servers: [\""+slow.addr()+"\"]\n    timeout: 50ms\n"+
		"  dead:\n    servers: [\""+closedAddr(t)+"\"]\n", "o", "slow", "dead")
	if err := Check(cfg.Origins); err != nil {
		t.Fatal(err)
	}
	origins, err := r.Update(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		status int
		want   fetchOutcome
	}{{200, outOK}, {404, outOK}, {304, outNotModified}, {500, out5xx}} {
		o.status.Store(int32(tc.status))
		if code, f, _ := call(t, origins["o"], "/x"); code != tc.status {
			t.Fatalf("origin answering %d: %d %+v", tc.status, code, f)
		}
		if got := origins["o"].m.fetches[tc.want].Get(); got == 0 {
			t.Errorf("a %d was not counted as %s", tc.status, outcomeLabels[tc.want])
		}
	}
	if h, _ := o.host.Load().(string); h != "origin.example.com" {
		t.Errorf("origin saw Host %q, want host_header's", h)
	}
	if _, f, _ := call(t, origins["slow"], "/x"); f.Status != 504 || f.Detail != "timeout" {
		t.Errorf("slow origin: %+v, want 504 timeout", f)
	}
	if _, f, _ := call(t, origins["dead"], "/x"); f.Status != 502 || f.Detail != "error" {
		t.Errorf("refusing origin: %+v, want 502 error", f)
	}
	if got := origins["dead"].m.retries.Get(); got != 1 {
		t.Errorf("retries on a refused connection: %d, want 1", got)
	}
	if got := origins["dead"].m.fetches[outError].Get(); got != 1 {
		t.Errorf("error fetches: %d, want 1", got)
	}
}
