package proxy

import (
	"errors"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/config"
)

// origin is one upstream service: a fasthttp.HostClient per server
// address, picked round-robin. HostClient rather than Client, so a
// client-controlled Host can never open connections elsewhere (STYLE §3.8).
type origin struct {
	name    string
	clients []*fasthttp.HostClient
	next    atomic.Uint32
	timeout time.Duration
	m       *originMetrics
}

func newOrigin(name string, oc *config.Origin, maxObject config.Size, set *metrics.Set) *origin {
	o := &origin{name: name, timeout: oc.Timeout, m: newOriginMetrics(set, name)}
	dialTimeout := oc.ConnectTimeout
	for _, addr := range oc.Servers {
		o.clients = append(o.clients, &fasthttp.HostClient{
			Addr: addr,
			Name: "shield",
			// Dial through DialTimeout so the request deadline still
			// applies (a custom Dial ignores it, fasthttp client.go).
			DialTimeout: func(addr string, _ time.Duration) (net.Conn, error) {
				return fasthttp.DialTimeout(addr, dialTimeout)
			},
			MaxConns: oc.MaxConcurrency,
			// Per-read/write bounds; the whole fetch is bounded by the
			// deadline passed to DoDeadline.
			ReadTimeout:  oc.Timeout,
			WriteTimeout: oc.Timeout,
			// No hidden retries: they multiply origin load and hide
			// failures (STYLE §3.11). Retries are explicit and budgeted.
			MaxIdemponentCallAttempts: 1,
			ReadBufferSize:            int(oc.MaxResponseHeaderSize),
			// Bodies are streamed so that objects above max_object_size
			// pass through without being buffered whole.
			StreamResponseBody: true,
			// Forward the path exactly as received: the cache key uses
			// the raw path, so the origin must see the same bytes.
			DisablePathNormalizing:        true,
			NoDefaultUserAgentHeader:      true,
			DisableHeaderNamesNormalizing: false,
		})
	}
	_ = maxObject
	return o
}

// do sends req and reads the response head into resp under deadline.
// The body, if any, is left in resp.BodyStream().
func (o *origin) do(req *fasthttp.Request, resp *fasthttp.Response, deadline time.Time) error {
	c := o.clients[0]
	if n := len(o.clients); n > 1 {
		c = o.clients[int(o.next.Add(1))%n]
	}
	o.m.inFlight.Add(1)
	defer o.m.inFlight.Add(-1)
	return c.DoDeadline(req, resp, deadline)
}

// classifyErr maps a transport error to the fetch outcome and the status
// shield answers with: 504 when the origin did not answer in time, 502
// when it could not be reached or answered garbage.
func classifyErr(err error) (fetchOutcome, int) {
	var ne net.Error
	switch {
	case errors.Is(err, fasthttp.ErrTimeout), errors.Is(err, os.ErrDeadlineExceeded),
		errors.Is(err, fasthttp.ErrDialTimeout),
		errors.As(err, &ne) && ne.Timeout():
		return outTimeout, fasthttp.StatusGatewayTimeout
	default:
		return outError, fasthttp.StatusBadGateway
	}
}
