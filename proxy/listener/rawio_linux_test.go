package listener

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/shield-proxy/shield/config"
	"github.com/valyala/fasthttp"
)

// TestRawSocketCalls: a plain connection's reads and writes are raw
// system calls (sendfile_linux.go) that keep net.Conn's behaviour: a
// write larger than the socket buffers waits for the reader and sends
// everything (also in one writev with held bytes), a read returns what came, the peer's close is io.EOF, a
// deadline is a timeout, a closed connection is net.ErrClosed.
func TestRawSocketCalls(t *testing.T) {
	client, c := coarsePair(t, nil)

	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<20) // 16 MiB: more than the socket buffers
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(client, int64(len(big))))
		got <- b
	}()
	for off := 0; off < len(big); off += 64 << 10 { // raw writes (rawio.Max), the socket often full
		if n, err := c.Write(big[off : off+64<<10]); err != nil || n != 64<<10 {
			t.Fatalf("Write at %d: %d, %v", off, n, err)
		}
	}
	if b := <-got; !bytes.Equal(b, big) {
		t.Fatalf("the client read %d bytes, not what was written", len(b))
	}
	if c.sf == nil || c.noRaw {
		t.Fatal("the write was not a raw one")
	}

	// A coalesced answer: its first full buffer is held and leaves with
	// the rest in raw writev calls, partly written while the reader lags.
	go func() {
		b, _ := io.ReadAll(io.LimitReader(client, int64(len(big))))
		got <- b
	}()
	Coalesce(c)
	if n, err := c.Write(big[:CoalesceMin]); err != nil || n != CoalesceMin || len(c.held) != CoalesceMin {
		t.Fatalf("first buffer: %d, %v, %d held", n, err, len(c.held))
	}
	if n, err := c.Write(big[CoalesceMin:]); err != nil || n != len(big)-CoalesceMin || len(c.held) != 0 {
		t.Fatalf("rest: %d, %v, %d held", n, err, len(c.held))
	}
	if b := <-got; !bytes.Equal(b, big) {
		t.Fatalf("the client read %d bytes of the coalesced answer, not what was written", len(b))
	}

	if _, err := client.Write([]byte("GET / HTTP/1.1\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if n, err := io.ReadAtLeast(c, buf, 18); err != nil || string(buf[:n]) != "GET / HTTP/1.1\r\n\r\n" {
		t.Fatalf("Read: %q, %v", buf[:n], err)
	}

	if err := c.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	_, err := c.Read(buf)
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Read past the deadline: %v, want a timeout", err)
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}

	client.Close()
	if n, err := c.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("Read after the peer's close: %d, %v, want io.EOF", n, err)
	}
	c.Close()
	if _, err := c.Read(buf); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read after Close: %v, want net.ErrClosed", err)
	}
	if _, err := c.Write(buf); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write after Close: %v, want net.ErrClosed", err)
	}
}

// replayListener hands out its connections as the sorting mux does
// with server.h2c: behind a replayConn holding the bytes it read.
type replayListener struct {
	net.Listener
	seen []byte
}

func (l replayListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &replayConn{Conn: c, pending: l.seen}, nil
}

// TestReplayedConnIsRaw: an HTTP/1 connection the sorting mux read
// first (server.h2c) gives fasthttp the mux's bytes, then the client's,
// and its own reads and writes are raw calls like any plain connection's.
func TestReplayedConnIsRaw(t *testing.T) {
	client, c := coarsePair(t, []byte("GET / HTTP/1.1\r\n"))
	if _, err := client.Write([]byte("Host: a\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	want := "GET / HTTP/1.1\r\nHost: a\r\n\r\n"
	got := make([]byte, 0, len(want))
	buf := make([]byte, 5) // smaller than the replayed bytes: they come in pieces
	for len(got) < len(want) {
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("Read after %q: %v", got, err)
		}
		got = append(got, buf[:n]...)
	}
	if string(got) != want {
		t.Fatalf("read %q, want %q", got, want)
	}
	if c.sf == nil || c.noRaw {
		t.Fatal("the connection's own reads were not raw")
	}
	if _, err := c.Write([]byte("HTTP/1.1 204 No Content\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	answer := make([]byte, len("HTTP/1.1 204 No Content\r\n\r\n"))
	if _, err := io.ReadFull(client, answer); err != nil || string(answer) != "HTTP/1.1 204 No Content\r\n\r\n" {
		t.Fatalf("client read %q, %v", answer, err)
	}
}

// coarsePair is a client connection and the server side as the coarse
// listener hands it out (behind a replayConn of seen first, as the
// sorting mux does, when seen is not nil); both close with the test.
func coarsePair(t *testing.T, seen []byte) (client net.Conn, c *deadlineConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var inner net.Listener = ln
	if seen != nil {
		inner = replayListener{Listener: ln, seen: seen}
	}
	cln := coarse(inner, newLimits(5*time.Second, 5*time.Second, 5*time.Second, 300*time.Millisecond))
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	sc, err := cln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.Close() })
	return client, sc.(*deadlineConn)
}

// TestIdleReadWaitsForReadable: between keep-alive requests a plain
// connection's reader waits in the readiness watcher (rawio.Watch), not
// in a read that finds nothing; the next request wakes it and is
// answered; the server's Shutdown releases a reader waiting there.
func TestIdleReadWaitsForReadable(t *testing.T) {
	s := config.Server{ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, IdleTimeout: 10 * time.Second}
	h1 := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("ok") },
		ReadTimeout: s.ReadTimeout, WriteTimeout: s.WriteTimeout, IdleTimeout: s.IdleTimeout}
	pub := New(h1, s, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- pub.Serve(ln, nil) }()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	for i := range 3 {
		if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("request %d: %v %v", i, resp, err)
		}
		_ = resp.Body.Close()
		// The answer is out: the server's reader parks in the watcher.
		waitParked(t, fmt.Sprintf("after answer %d no goroutine waits in rawio.(*Watch).Wait", i))
	}
	done := make(chan error, 1)
	go func() { done <- pub.Shutdown() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("Shutdown did not return with a connection idle in the watcher:\n%s", stacks())
	}
	<-served
	if parkedInWatch() {
		t.Fatalf("a reader still waits in the watcher after Shutdown:\n%s", stacks())
	}
}

func stacks() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}

func parkedInWatch() bool { return strings.Contains(stacks(), "rawio.(*Watch).Wait(") }

// waitParked polls until a goroutine waits in rawio.(*Watch).Wait;
// failing names what was expected.
func waitParked(t *testing.T, failing string) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); !parkedInWatch(); {
		if time.Now().After(end) {
			t.Fatalf("%s:\n%s", failing, stacks())
		}
		time.Sleep(time.Millisecond)
	}
}

// TestIdleWaitAfterFullRead: three requests sent in one write, more
// than the server's read buffer (fasthttp's 4 KiB), so its first read
// leaves bytes in the socket that no later edge announces: after the
// first answer the connection must read them, not wait for the socket to
// turn readable again (it would wait until its idle timeout).
func TestIdleWaitAfterFullRead(t *testing.T) {
	c := dialOK(t)
	pad := strings.Repeat("p", 3000)
	reqs := "GET /1 HTTP/1.1\r\nHost: x\r\n\r\n"
	for i := 2; i <= 3; i++ {
		reqs += fmt.Sprintf("GET /%d HTTP/1.1\r\nHost: x\r\nX-Pad: %s\r\n\r\n", i, pad)
	}
	if _, err := c.Write([]byte(reqs)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	for i := range 3 {
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("answer %d to pipelined requests: %v %v", i+1, resp, err)
		}
		_ = resp.Body.Close()
	}
}

// TestWatchMadeAtFirstIdleRead: a connection registers its socket with
// the watcher only at its first read between requests (one that serves a
// single request costs no registration), reads what came after the wait,
// and Close releases a read waiting there.
func TestWatchMadeAtFirstIdleRead(t *testing.T) {
	client, c := coarsePair(t, nil)
	buf := make([]byte, 64)
	if _, err := client.Write([]byte("request 1")); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "request 1" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	if _, err := c.Write([]byte("answer 1")); err != nil {
		t.Fatal(err)
	}
	if c.watch.Load() != nil {
		t.Fatal("a watch made before the first read between requests")
	}
	got := make(chan string, 1)
	go func() {
		n, err := c.Read(buf) // between requests: registers, then waits
		got <- fmt.Sprint(string(buf[:n]), err)
	}()
	waitParked(t, "the read between requests does not wait in the watcher")
	if c.watch.Load() == nil {
		t.Fatal("no watch after the first read between requests")
	}
	if _, err := client.Write([]byte("request 2")); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s != "request 2<nil>" {
		t.Fatalf("read after the wait: %s, want request 2", s)
	}
	if _, err := c.Write([]byte("answer 2")); err != nil {
		t.Fatal(err)
	}
	go func() {
		_, err := c.Read(buf)
		got <- fmt.Sprint(err)
	}()
	waitParked(t, "the second read between requests does not wait in the watcher")
	_ = c.Close()
	select {
	case s := <-got:
		if !strings.Contains(s, "closed") {
			t.Fatalf("read after Close: %s, want a closed connection's error", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not release a read waiting in the watcher")
	}
}

// TestIdleWaitAfterPeerEnded: two pipelined requests and the client's
// FIN arrive together; the server's read takes both requests but not
// the end: after the answers the connection must see EOF and close, not
// wait for an edge that never comes.
func TestIdleWaitAfterPeerEnded(t *testing.T) {
	c := dialOK(t)
	if _, err := c.Write([]byte("GET /1 HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(c) // both answers, then the server's close
	if err != nil {
		t.Fatalf("after the FIN the server neither answered all nor closed: %v (read %q)", err, rest)
	}
	if n := strings.Count(string(rest), "HTTP/1.1 200"); n != 2 {
		t.Fatalf("%d answers, want 2: %q", n, rest)
	}
}

// TestIdleWaitAfterEndTaken: the client's FIN comes with the rest of a
// request, read without a wait (which clears the edges so far): after
// the answer the read between requests must see EOF at once — the end
// stays, no later edge would announce it.
func TestIdleWaitAfterEndTaken(t *testing.T) {
	client, c := coarsePair(t, nil)
	buf := make([]byte, 64)
	read := func(want string) {
		t.Helper()
		if n, err := c.Read(buf); err != nil || string(buf[:n]) != want {
			t.Fatalf("read %q, %v; want %q", buf[:n], err, want)
		}
	}
	if _, err := client.Write([]byte("req1")); err != nil {
		t.Fatal(err)
	}
	read("req1")
	if _, err := c.Write([]byte("ans1")); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	go func() { n, err := c.Read(buf); got <- fmt.Sprint(string(buf[:n]), err) }()
	waitParked(t, "no wait in the watcher")
	if _, err := client.Write([]byte("req2a")); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s != "req2a<nil>" {
		t.Fatalf("read %s, want req2a", s)
	}
	if _, err := client.Write([]byte("req2b")); err != nil {
		t.Fatal(err)
	}
	if err := client.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	// Both the bytes and the FIN are at the server before it reads.
	for end := time.Now().Add(5 * time.Second); !peerEnded(t, c); {
		if time.Now().After(end) {
			t.Fatal("the client's FIN never reached the server")
		}
		time.Sleep(time.Millisecond)
	}
	read("req2b")
	if _, err := c.Write([]byte("ans2")); err != nil {
		t.Fatal(err)
	}
	go func() { n, err := c.Read(buf); got <- fmt.Sprint(n, err) }()
	select {
	case s := <-got:
		if s != "0 EOF" {
			t.Fatalf("read after the end: %s, want 0 EOF", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the read between requests waits for an edge after the peer's end was taken")
	}
}

// peerEnded reports whether c's socket has seen its peer's FIN (poll
// with POLLRDHUP, not waiting).
func peerEnded(t *testing.T, c *deadlineConn) bool {
	t.Helper()
	const pollRDHUP = 0x2000
	var revents int16
	err := c.raw().rc.Control(func(fd uintptr) {
		pfd := struct {
			fd              int32
			events, revents int16
		}{int32(fd), pollRDHUP, 0}
		_, _, e := syscall.Syscall(syscall.SYS_POLL, uintptr(unsafe.Pointer(&pfd)), 1, 0)
		if e != 0 {
			t.Errorf("poll: %v", e)
		}
		revents = pfd.revents
	})
	if err != nil {
		t.Fatal(err)
	}
	return revents&pollRDHUP != 0
}

// dialOK serves a handler answering "ok" through Public (plain, coarse
// deadlines) and returns a client connection to it, its deadline 3 s
// away.
func dialOK(t *testing.T) net.Conn {
	t.Helper()
	s := config.Server{ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, IdleTimeout: 10 * time.Second}
	h1 := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("ok") },
		ReadTimeout: s.ReadTimeout, WriteTimeout: s.WriteTimeout, IdleTimeout: s.IdleTimeout}
	ln := servePlain(t, New(h1, s, nil))
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	return c
}
