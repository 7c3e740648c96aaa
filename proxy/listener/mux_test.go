package listener

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/config"
)

// flakyListener fails its first Accepts with a transient error (as
// accept does when the process is out of file descriptors), then hands
// out one end of a pipe, then blocks until it is closed.
type flakyListener struct {
	fails   int
	conn    net.Conn
	accepts atomic.Int32
	closed  chan struct{}
	once    sync.Once
}

var errNoFiles = errors.New("accept: too many open files")

func (l *flakyListener) Accept() (net.Conn, error) {
	n := int(l.accepts.Add(1))
	switch {
	case n <= l.fails:
		return nil, errNoFiles
	case n == l.fails+1:
		return l.conn, nil
	default:
		<-l.closed
		return nil, net.ErrClosed
	}
}
func (l *flakyListener) Close() error   { l.once.Do(func() { close(l.closed) }); return nil }
func (l *flakyListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }

// TestMuxRetriesFailedAccept: a transient Accept error does not end the
// listener — the connection accepted after it still reaches the HTTP/1
// side with the bytes read to sort it — and closing either side ends run.
func TestMuxRetriesFailedAccept(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	ln := &flakyListener{fails: 2, conn: server, closed: make(chan struct{})}
	m := newConnMux(ln, nil, time.Second, newH2Limits(0, 0), nil)
	ended := make(chan struct{})
	go func() { m.run(); close(ended) }()
	go func() { _, _ = client.Write([]byte("GET / HTTP/1.1\r\n\r\n")) }()
	c, err := m.h1.Accept()
	if err != nil {
		t.Fatalf("h1 Accept: %v", err)
	}
	buf := make([]byte, 3)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "GET" {
		t.Fatalf("first bytes %q (%v), want GET replayed", buf, err)
	}
	if err := m.h1.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("run did not end when the listener reported closed")
	}
	if n := ln.accepts.Load(); n != 4 {
		t.Fatalf("Accept called %d times, want 4 (two failures retried, one connection, closed)", n)
	}
	if m.h1.Addr().String() != "127.0.0.1:1" {
		t.Fatalf("Addr %v, want the shared listener's", m.h1.Addr())
	}
	if _, err := m.h2.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("h2 Accept after close: %v, want net.ErrClosed", err)
	}
}

// TestH2ConnIsInert: fasthttp may call any net.Conn method on the
// connection a RequestCtx of an HTTP/2 request carries; none of them
// may touch the stream (reads end, deadlines and Close do nothing), and
// the TLS variant reports the connection's state.
func TestH2ConnIsInert(t *testing.T) {
	local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 443}
	remote := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2), Port: 5000}
	c := &h2Conn{w: httptest.NewRecorder(), local: local, remote: remote}
	if n, err := c.Read(make([]byte, 4)); n != 0 || err != io.EOF {
		t.Fatalf("Read = %d, %v; want 0, EOF", n, err)
	}
	if c.Close() != nil || c.SetDeadline(time.Now()) != nil || c.SetReadDeadline(time.Now()) != nil || c.SetWriteDeadline(time.Now()) != nil {
		t.Fatal("Close or a deadline reported an error")
	}
	if c.LocalAddr() != local || c.RemoteAddr() != remote {
		t.Fatalf("addresses %v %v", c.LocalAddr(), c.RemoteAddr())
	}
	st := &tls.ConnectionState{NegotiatedProtocol: "h2", ServerName: "a.test"}
	tc := &h2TLSConn{h2Conn: c, state: st}
	if tc.Handshake() != nil || tc.ConnectionState().ServerName != "a.test" {
		t.Fatalf("TLS state %+v", tc.ConnectionState())
	}
}

// TestRequestAddrs: without the connection in the request's context the
// client's address is net/http's RemoteAddr parsed; an unparsable one is
// an empty address, never a panic.
func TestRequestAddrs(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "192.0.2.7:4321"
	if a := remoteAddr(r, nil).String(); a != "192.0.2.7:4321" {
		t.Fatalf("remoteAddr = %s", a)
	}
	r.RemoteAddr = "not an address"
	if a, ok := remoteAddr(r, nil).(*net.TCPAddr); !ok || a.IP != nil {
		t.Fatalf("remoteAddr of garbage = %v", remoteAddr(r, nil))
	}
	if a, ok := localAddr(r).(*net.TCPAddr); !ok || a.IP != nil {
		t.Fatalf("localAddr without a connection = %v", localAddr(r))
	}
}

// TestH2CSortsFirstLine: on a listener with h2c, a bad HTTP/1.1 request
// is still HTTP/1.1 (fasthttp's 400), and a first line that is neither
// a request line nor the preface — h2spec 3.5's invalid preface — is
// closed without an answer.
func TestH2CSortsFirstLine(t *testing.T) {
	s := config.Server{ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second,
		MaxHeaderSize: 16 << 10, MaxBodySize: 1 << 10, H2C: true}
	pub := New(&fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {}, Logger: quiet{}}, s, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = pub.Serve(ln, nil) }()
	defer func() { _ = pub.Shutdown() }()
	for _, tc := range []struct{ send, want string }{
		{"GET / HTTP/1.1\r\nHost: a\r\nno colon\r\n\r\n", "HTTP/1.1 400 "},
		{"INVALID CONNECTION PREFACE\r\n\r\n", ""},
	} {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = c.Write([]byte(tc.send))
		got, err := io.ReadAll(c)
		_ = c.Close()
		if err != nil || !strings.HasPrefix(string(got), tc.want) || tc.want == "" && len(got) > 0 {
			t.Errorf("%q: answered %.40q (%v), want %q", tc.send, got, err, tc.want)
		}
	}
}

// quiet is a fasthttp.Logger that drops what fasthttp logs.
type quiet struct{}

func (quiet) Printf(string, ...any) {}
