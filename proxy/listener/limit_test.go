package listener

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// limitServer is a listener under a Limit, accepting on its own: the
// connections it admits reach the test on admitted.
type limitServer struct {
	addr     string
	admitted <-chan net.Conn
}

func newLimitServer(t *testing.T, l *Limit, plain bool) limitServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	lln := l.listen(ln, plain)
	ch := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := lln.Accept()
			if err != nil {
				close(ch)
				return
			}
			ch <- c
		}
	}()
	return limitServer{addr: ln.Addr().String(), admitted: ch}
}

// dial opens a client connection to the server.
func (s limitServer) dial(t *testing.T) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	return c
}

// admit dials and returns both ends of a connection the limit admits.
func (s limitServer) admit(t *testing.T) (client, server net.Conn) {
	t.Helper()
	client = s.dial(t)
	select {
	case c := <-s.admitted:
		t.Cleanup(func() { _ = c.Close() })
		return client, c
	case <-time.After(5 * time.Second):
		t.Fatal("no connection admitted")
		return nil, nil
	}
}

// TestLimitRefusesPastMax: two connections are admitted; the third is
// answered 503 and closed without reaching the server; closing an
// admitted one (twice) frees exactly one place, which the next takes.
func TestLimitRefusesPastMax(t *testing.T) {
	l := NewLimit(2, nil)
	srv := newLimitServer(t, l, true)
	_, a1 := srv.admit(t)
	srv.admit(t)
	if got := l.Open(); got != 2 {
		t.Fatalf("open = %d, want 2", got)
	}

	c3 := srv.dial(t)
	if _, err := c3.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c3)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("refused connection: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" || !resp.Close || string(body) != "connection limit reached\r\n" {
		t.Fatalf("refused connection got %d %v %q", resp.StatusCode, resp.Header, body)
	}
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("refused connection still open after its answer")
	}
	if l.Refused() != 1 || l.Open() != 2 {
		t.Fatalf("refused %d, open %d; want 1 and 2", l.Refused(), l.Open())
	}
	select {
	case c := <-srv.admitted:
		t.Fatalf("refused connection reached the server: %v", c.RemoteAddr())
	default:
	}

	_ = a1.Close()
	_ = a1.Close() // a second Close frees nothing more
	if got := l.Open(); got != 1 {
		t.Fatalf("open after closing one twice = %d, want 1", got)
	}
	srv.admit(t)
	if l.Open() != 2 || l.Refused() != 1 {
		t.Fatalf("after a place freed: open %d refused %d, want 2 and 1", l.Open(), l.Refused())
	}

	// A reload raises it: a third is admitted; lowered below the open
	// count, it closes nothing and refuses the next.
	l.SetMax(3)
	srv.admit(t)
	l.SetMax(1)
	c := srv.dial(t)
	if n, _ := c.Read(make([]byte, 1)); n != 1 {
		t.Fatal("a connection past the lowered limit got no answer")
	}
	if l.Open() != 3 || l.Refused() != 2 || l.Max() != 1 {
		t.Fatalf("after lowering: open %d refused %d max %d, want 3, 2 and 1", l.Open(), l.Refused(), l.Max())
	}
}

// TestLimitTLSClosesSilently: on a TLS listener (plain false) a refused
// connection gets no bytes, only the close.
func TestLimitTLSClosesSilently(t *testing.T) {
	l := NewLimit(1, nil)
	srv := newLimitServer(t, l, false)
	srv.admit(t)
	c := srv.dial(t)
	b, err := io.ReadAll(c)
	if len(b) != 0 {
		t.Fatalf("refused TLS connection got %q (%v)", b, err)
	}
	if l.Refused() != 1 {
		t.Fatalf("refused = %d, want 1", l.Refused())
	}
}
