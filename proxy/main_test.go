package proxy

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if goroutines outlive them. The
// ignored functions are fasthttp's own background goroutines, which have
// no stop method:
//   - updateServerDate refreshes the Date header of every fasthttp.Server
//     once a second for the life of the process;
//   - (*HostClient).connsCleaner closes idle origin connections and exits
//     only once it wakes (MaxIdleConnDuration, 10s) to find none left;
//   - (*TCPDialer).tcpAddrsClean expires the default dialer's DNS cache
//     (used by fasthttp.DialTimeout) and exits once it is empty, minutes
//     after the last dial;
//   - (*Client).mCleaner likewise drops idle host clients of the
//     end-to-end benchmark's fasthttp.Client.
//   - (*workerPool).Start.func2 is a stopped server's worker cleaner,
//     which notices the stop only when it wakes (every 10s).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*TCPDialer).tcpAddrsClean"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*Client).mCleaner"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
	)
}
