package listener

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/config"
)

func TestCoarseSlack(t *testing.T) {
	for _, c := range []struct {
		in   []time.Duration
		want time.Duration
	}{
		{[]time.Duration{10 * time.Second, 30 * time.Second, 60 * time.Second}, 625 * time.Millisecond},
		{[]time.Duration{time.Minute, time.Minute, time.Minute}, time.Second},
		{[]time.Duration{time.Second, 30 * time.Second, 60 * time.Second}, time.Second / 16},
		{[]time.Duration{10 * time.Second, 0, 60 * time.Second}, 0},
	} {
		if got := coarseSlack(c.in...); got != c.want {
			t.Errorf("coarseSlack(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

// deadlineRecorder is a net.Conn that records the deadlines armed on it;
// each Read returns n bytes.
type deadlineRecorder struct {
	net.Conn
	n           int
	read, write []time.Time
}

func (r *deadlineRecorder) Read(b []byte) (int, error)        { return r.n, nil }
func (r *deadlineRecorder) Write(b []byte) (int, error)       { return len(b), nil }
func (r *deadlineRecorder) SetReadDeadline(t time.Time) error { r.read = append(r.read, t); return nil }
func (r *deadlineRecorder) SetWriteDeadline(t time.Time) error {
	r.write = append(r.write, t)
	return nil
}
func (r *deadlineRecorder) SetDeadline(t time.Time) error {
	_ = r.SetReadDeadline(t)
	return r.SetWriteDeadline(t)
}

// TestDeadlineConnArms checks which limit the wrapper keeps where, and
// when it arms a timer: read_timeout from the accept for the first
// request, write_timeout from an answer's first write, the idle time
// from the read after it, read_timeout of a later request only when it
// needs a second read; each slack late, and again only when the armed
// one would fire early or more than slack late. An explicit deadline
// ends all that.
func TestDeadlineConnArms(t *testing.T) {
	rec := &deadlineRecorder{n: 16}
	const slack = 20 * time.Millisecond
	const read, write, idle = 10 * time.Second, 30 * time.Second, time.Minute
	lim := newLimits(read, write, idle, slack)
	// armed checks the last deadline of ds: limit+slack after a moment
	// between from and now.
	armed := func(what string, ds []time.Time, n int, from time.Time, limit time.Duration) {
		t.Helper()
		if len(ds) != n {
			t.Fatalf("%s: %d deadlines armed (%v), want %d", what, len(ds), ds, n)
		}
		if d := ds[n-1]; d.Before(from.Add(limit+slack)) || d.After(time.Now().Add(limit+slack)) {
			t.Fatalf("%s: armed %v, want %v plus slack after a moment from %v on", what, d, limit, from)
		}
	}
	start := time.Now()
	c := &deadlineConn{Conn: rec, lim: lim, since: clock()} // as Accept makes it
	_, _ = c.Read(nil)
	armed("first request", rec.read, 1, start, read)
	t0 := time.Now()
	_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\n"))
	armed("answer", rec.write, 1, t0, write)
	t1 := time.Now()
	_, _ = c.Read(nil)
	armed("idle", rec.read, 2, t1, idle)
	// The next request and answer within slack: nothing to arm.
	_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\n"))
	_, _ = c.Read(nil)
	if len(rec.read) != 2 || len(rec.write) != 1 {
		t.Fatalf("re-armed within slack: read %v, write %v", rec.read, rec.write)
	}
	// A request that needs a second read: read_timeout.
	t2 := time.Now()
	_, _ = c.Read(nil)
	armed("second read of a request", rec.read, 3, t2, read)
	// 100 Continue keeps the request going under its read_timeout.
	_, _ = c.Write([]byte("HTTP/1.1 100 Continue\r\n\r\n"))
	if c.phase != phaseReading {
		t.Fatalf("after 100 Continue: phase %d, want reading", c.phase)
	}
	_, _ = c.Read(nil)
	if len(rec.read) != 3 {
		t.Fatalf("body read re-armed: %v", rec.read)
	}
	// An answer later than slack after the armed one: armed again.
	time.Sleep(2 * slack)
	t3 := time.Now()
	_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\n"))
	armed("later answer", rec.write, len(rec.write), t3, write)
	if len(rec.write) < 2 {
		t.Fatalf("later answer not re-armed: %v", rec.write)
	}
	// An explicit deadline is applied as given; nothing after it.
	_ = c.SetDeadline(time.Time{})
	nr, nw := len(rec.read), len(rec.write)
	_, _ = c.Read(nil)
	_, _ = c.Write([]byte("x"))
	_, _ = c.Read(nil)
	if len(rec.read) != nr || len(rec.write) != nw || !rec.read[nr-1].IsZero() || !rec.write[nw-1].IsZero() {
		t.Fatalf("after SetDeadline: read %v, write %v", rec.read, rec.write)
	}
}

// TestCoarseTimeoutsFire serves fasthttp through Public with short
// timeouts: a request that stops half-way gets 408 after read_timeout,
// not before, and an idle keep-alive connection is closed after
// idle_timeout, not before — each at most slack plus scheduling late.
func TestCoarseTimeoutsFire(t *testing.T) {
	s := config.Server{ReadTimeout: 400 * time.Millisecond, WriteTimeout: time.Second, IdleTimeout: 800 * time.Millisecond}
	h1 := &fasthttp.Server{
		Handler:      func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("ok") },
		ReadTimeout:  s.ReadTimeout,
		WriteTimeout: s.WriteTimeout,
		IdleTimeout:  s.IdleTimeout,
		ErrorHandler: func(ctx *fasthttp.RequestCtx, err error) {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				ctx.SetStatusCode(fasthttp.StatusRequestTimeout)
				return
			}
			ctx.SetStatusCode(fasthttp.StatusBadRequest)
		},
	}
	pub := New(h1, s, nil)
	if pub.slack != 25*time.Millisecond {
		t.Fatalf("slack %v, want 25ms", pub.slack)
	}
	ln := servePlain(t, pub)
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		return c, bufio.NewReader(c)
	}
	const late = 300 * time.Millisecond // slack and a loaded machine's scheduling

	// Several requests on one connection (re-arming within slack), then a
	// half request.
	c, br := dial()
	for range 3 {
		if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("keep-alive request: %v %v", resp, err)
		}
		_ = resp.Body.Close()
	}
	start := time.Now()
	control := oversleep(s.ReadTimeout)
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHo")); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	took := time.Since(start)
	if err != nil || resp.StatusCode != fasthttp.StatusRequestTimeout {
		t.Fatalf("half request: %v %v, want 408", resp, err)
	}
	if over := <-control; took < s.ReadTimeout || took > s.ReadTimeout+late+over {
		t.Errorf("408 after %v, want read_timeout %v (at most %v late, +%v a timer overslept meanwhile)", took, s.ReadTimeout, late, over)
	}

	c, br = dial()
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	resp, err = http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("request: %v %v", resp, err)
	}
	_ = resp.Body.Close()
	start = time.Now()
	control = oversleep(s.IdleTimeout)
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("idle connection sent a byte, want it closed")
	}
	// The server starts the idle time when it has sent the answer, a
	// little before the client has read it.
	if took, over := time.Since(start), <-control; took < s.IdleTimeout-50*time.Millisecond || took > s.IdleTimeout+late+over {
		t.Errorf("idle connection closed after %v, want idle_timeout %v (at most %v late, +%v a timer overslept meanwhile)", took, s.IdleTimeout, late, over)
	}
}

// TestCoarseWriteTimeoutFires: on a plain listener fasthttp's own
// timeouts are off, and the connection keeps write_timeout: an answer a
// client does not read is given up after write_timeout (the connection
// closed), not before, at most slack plus scheduling late.
func TestCoarseWriteTimeoutFires(t *testing.T) {
	s := config.Server{ReadTimeout: 2 * time.Second, WriteTimeout: 400 * time.Millisecond, IdleTimeout: 2 * time.Second}
	big := bytes.Repeat([]byte("x"), 64<<20) // far more than loopback's socket buffers
	closed := make(chan time.Time, 1)
	h1 := &fasthttp.Server{
		Handler:      func(ctx *fasthttp.RequestCtx) { ctx.Response.SetBodyRaw(big) },
		ReadTimeout:  s.ReadTimeout,
		WriteTimeout: s.WriteTimeout,
		IdleTimeout:  s.IdleTimeout,
		ConnState: func(_ net.Conn, st fasthttp.ConnState) {
			if st == fasthttp.StateClosed {
				closed <- time.Now()
			}
		},
	}
	pub := New(h1, s, nil)
	ln := servePlain(t, pub)
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	control := oversleep(s.WriteTimeout)
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	const late = 300 * time.Millisecond
	select {
	case at := <-closed:
		if took, over := at.Sub(start), <-control; took < s.WriteTimeout || took > s.WriteTimeout+late+over {
			t.Errorf("unread answer given up after %v, want write_timeout %v (at most %v late, +%v a timer overslept meanwhile)", took, s.WriteTimeout, late, over)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an unread answer kept its connection for 10s: no write_timeout")
	}
}

// oversleep sleeps d beside the test and sends how much later than d it
// woke: the lateness a loaded machine adds to any timer, which the test
// allows the server's timeouts on top of their own slack (once, at load
// ~20, an idle connection closed 0.86 s late where the slack is 25 ms).
func oversleep(d time.Duration) <-chan time.Duration {
	ch := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		time.Sleep(d)
		ch <- max(0, time.Since(start)-d)
	}()
	return ch
}

// writeRecorder is a net.Conn that records what is written to it.
type writeRecorder struct {
	net.Conn
	writes [][]byte
	closed bool
}

func (r *writeRecorder) Write(b []byte) (int, error) {
	r.writes = append(r.writes, append([]byte(nil), b...))
	return len(b), nil
}
func (r *writeRecorder) Read(b []byte) (int, error)       { return 0, nil }
func (r *writeRecorder) SetReadDeadline(time.Time) error  { return nil }
func (r *writeRecorder) SetWriteDeadline(time.Time) error { return nil }
func (r *writeRecorder) Close() error                     { r.closed = true; return nil }

// TestCoalesceHoldsFirstBuffer: armed, the first full buffer waits for
// the next write and leaves with it, in order; a smaller first write, or
// none armed, goes at once; a read or a close sends anything held.
func TestCoalesceHoldsFirstBuffer(t *testing.T) {
	rec := &writeRecorder{}
	c := &deadlineConn{Conn: rec, bufSize: 8}
	full, rest := []byte("01234567"), []byte("89")
	Coalesce(c)
	if n, err := c.Write(full); n != len(full) || err != nil || len(rec.writes) != 0 {
		t.Fatalf("first full buffer: %d %v, %d writes; want it held", n, err, len(rec.writes))
	}
	if n, err := c.Write(rest); n != len(rest) || err != nil {
		t.Fatalf("second write: %d %v", n, err)
	}
	if got := bytes.Join(rec.writes, nil); string(got) != "0123456789" {
		t.Fatalf("sent %q, want both in order", got)
	}
	rec.writes = nil
	_, _ = c.Write(full) // not armed
	Coalesce(c)
	_, _ = c.Write(rest) // armed, but short: sent, and the arming used up
	_, _ = c.Write(full)
	if len(rec.writes) != 3 {
		t.Fatalf("writes %q, want three sent at once", rec.writes)
	}
	rec.writes = nil
	Coalesce(c)
	_, _ = c.Write(full)
	_, _ = c.Read(nil)
	Coalesce(c)
	_, _ = c.Write(full)
	_ = c.Close()
	if len(rec.writes) != 2 || !rec.closed {
		t.Fatalf("writes %q closed %v: a read and a close send what is held", rec.writes, rec.closed)
	}
}

// TestCoalescedAnswersIntact serves in-memory bodies around the write
// buffer's size through Public, pipelined on one connection, the handler
// arming Coalesce as proxy's does: every answer arrives whole, in order.
func TestCoalescedAnswersIntact(t *testing.T) {
	sizes := []int{10, CoalesceMin - 200, CoalesceMin, CoalesceMin + 1, 3*CoalesceMin - 100, 100 << 10}
	h1 := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		n := ctx.QueryArgs().GetUintOrZero("n")
		ctx.SetBody(bytes.Repeat([]byte{byte('a' + n%26)}, n))
		if len(ctx.Response.Body()) >= CoalesceMin {
			Coalesce(ctx.Conn())
		}
	}, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second}
	pub := New(h1, config.Server{ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second}, nil)
	ln := servePlain(t, pub)
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	var reqs strings.Builder
	for _, n := range sizes {
		fmt.Fprintf(&reqs, "GET /?n=%d HTTP/1.1\r\nHost: x\r\n\r\nHEAD /?n=%d HTTP/1.1\r\nHost: x\r\n\r\n", n, n)
	}
	go func() { _, _ = io.WriteString(c, reqs.String()) }()
	br := bufio.NewReader(c)
	for _, n := range sizes {
		for _, method := range []string{"GET", "HEAD"} {
			resp, err := http.ReadResponse(br, &http.Request{Method: method})
			if err != nil {
				t.Fatalf("%s n=%d: %v", method, n, err)
			}
			body, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			want := ""
			if method == "GET" {
				want = strings.Repeat(string(rune('a'+n%26)), n)
			}
			if err != nil || string(body) != want || resp.ContentLength != int64(n) {
				t.Fatalf("%s n=%d: %d bytes (%v), Content-Length %d", method, n, len(body), err, resp.ContentLength)
			}
		}
	}
}

// servePlain serves pub on a loopback listener without TLS until the
// test ends, and returns the listener.
func servePlain(t *testing.T, pub *Public) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- pub.Serve(ln, nil) }()
	t.Cleanup(func() { _ = pub.Shutdown(); <-served })
	return ln
}
