package upstream

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
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
// a short idle time, or after every response) cost no failed call, no
// breaker failure and no server error: the request is sent again at once
// on a new connection.
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
			o := newRegistry(t).update(t, parse(t, oneOrigin([]string{addr}, "timeout: 2s", "breaker: {consecutive_failures: 1}"), "o"))
			const n = 20
			for i := range n {
				if code, f, body := call(t, o, fmt.Sprintf("/k/%d", i)); code != 200 || !strings.HasPrefix(body, "hello /k/") && body != "ok" {
					t.Fatalf("request %d: %d %+v %q", i, code, f, body)
				}
				time.Sleep(tc.gap) // let the origin close the idle connection
			}
			if r := o.m.staleRetries.Get(); r == 0 {
				t.Errorf("no stale-connection retries counted against an origin that closes connections")
			}
			if st := o.brk.Load().Stats(); st.Outcomes[2] != 0 {
				t.Errorf("breaker saw %d failures, want 0", st.Outcomes[2])
			}
			for _, s := range o.servers.snapshot(time.Now()) {
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
	o := newRegistry(t).update(t, parse(t, oneOrigin([]string{ln.Addr().String()}), "o"))
	if code, f, _ := call(t, o, "/x"); code != 0 || f.Status != 502 || f.Detail != "error" {
		t.Fatalf("hang-up origin: %d %+v, want failure 502 error", code, f)
	}
	if r := o.m.staleRetries.Get(); r != 0 {
		t.Fatalf("stale retries = %d on a new connection, want 0", r)
	}
}
