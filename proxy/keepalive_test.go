package proxy

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shield-proxy/shield/config"
)

// closeAfterEveryResponse is an origin that answers one request per
// connection and closes it without sending Connection: close, the worst
// case for a keep-alive pool.
func closeAfterEveryResponse(t *testing.T) (addr string, conns func() int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	accepted := make(chan struct{}, 1000)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- struct{}{}
			go func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				body := "hello " + req.URL.Path
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nCache-Control: no-store\r\n\r\n%s", len(body), body)
			}()
		}
	}()
	return ln.Addr().String(), func() int { return len(accepted) }
}

// TestKeepAliveOriginCloses: origins that close idle connections (after
// a short idle time, or after every response) cost no client-visible
// error, no breaker failure and no server error: the request is sent
// again at once on a new connection.
func TestKeepAliveOriginCloses(t *testing.T) {
	cases := []struct {
		name  string
		start func(t *testing.T) string
		gap   time.Duration
	}{
		{"idle close after 100ms", func(t *testing.T) string {
			srv := &http.Server{IdleTimeout: 100 * time.Millisecond, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Cache-Control", "no-store")
				_, _ = w.Write([]byte("ok"))
			})}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go func() { _ = srv.Serve(ln) }()
			t.Cleanup(func() { _ = srv.Close() })
			return ln.Addr().String()
		}, 150 * time.Millisecond},
		{"close after every response", func(t *testing.T) string {
			a, _ := closeAfterEveryResponse(t)
			return a
		}, 5 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			addr := tc.start(t)
			p := newTestProxy(t, addr, func(c *config.Config) {
				c.Origins["o"].Breaker.ConsecutiveFailures = 1
			})
			const n = 20
			for i := range n {
				ctx := serve(p, get(t, fmt.Sprintf("/k/%d", i)))
				if got := summary(ctx); got.code != 200 || !strings.Contains(got.cacheStatus, "fwd-status=200") {
					t.Fatalf("request %d: %+v", i, got)
				}
				time.Sleep(tc.gap) // let the origin close the idle connection
			}
			o := p.rt.Load().routes[0].origin
			if r := o.m.staleRetries.Get(); r == 0 {
				t.Errorf("no stale-connection retries counted against an origin that closes connections")
			}
			if st := o.brk.Load().Stats(); st.Outcomes[2] != 0 {
				t.Errorf("breaker saw %d failures, want 0", st.Outcomes[2])
			}
			for _, s := range o.servers.Snapshot(time.Now()) {
				if s.Errors != 0 || !s.Up {
					t.Errorf("server %s: %d errors, up=%v; want 0, true", s.Name, s.Errors, s.Up)
				}
			}
		})
	}
}

// TestFreshConnectionHangUpIsAFailure: a new connection closed before
// any response byte is a real failure, not retried as stale.
func TestFreshConnectionHangUpIsAFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	p := newTestProxy(t, ln.Addr().String(), nil)
	ctx := serve(p, get(t, "/x"))
	if got := summary(ctx); got.code != 502 {
		t.Fatalf("hang-up origin: %+v, want 502", got)
	}
	if r := p.rt.Load().routes[0].origin.m.staleRetries.Get(); r != 0 {
		t.Fatalf("stale retries = %d on a new connection, want 0", r)
	}
}
