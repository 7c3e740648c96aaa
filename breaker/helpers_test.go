package breaker

import (
	"context"
	"math"
	"net"
	"os"
	"syscall"
)

type errTest string

func (e errTest) Error() string { return string(e) }

var (
	contextCanceled = context.Canceled
	deadlineErr     = &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	refused         = &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
)

func nan() float64 { return math.NaN() }
func inf() float64 { return math.Inf(1) }
