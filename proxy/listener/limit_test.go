package listener

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// limitServer accepts from a listener under l, handing admitted
// connections to the test.
func limitServer(t *testing.T, l *Limit, plain bool) (addr string, admitted <-chan net.Conn) {
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
	return ln.Addr().String(), ch
}

func dialLimit(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	return c
}

func admittedConn(t *testing.T, ch <-chan net.Conn) net.Conn {
	t.Helper()
	select {
	case c := <-ch:
		t.Cleanup(func() { _ = c.Close() })
		return c
	case <-time.After(5 * time.Second):
		t.Fatal("no connection admitted")
		return nil
	}
}

// TestLimitRefusesPastMax: two connections are admitted; the third is
// answered 503 and closed without reaching the server; closing an
// admitted one (twice) frees exactly one place, which the next takes.
func TestLimitRefusesPastMax(t *testing.T) {
	l := NewLimit(2, nil)
	addr, ch := limitServer(t, l, true)
	dialLimit(t, addr)
	dialLimit(t, addr)
	a1 := admittedConn(t, ch)
	admittedConn(t, ch)
	if got := l.Open(); got != 2 {
		t.Fatalf("open = %d, want 2", got)
	}

	c3 := dialLimit(t, addr)
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
	case c := <-ch:
		t.Fatalf("refused connection reached the server: %v", c.RemoteAddr())
	default:
	}

	_ = a1.Close()
	_ = a1.Close() // a second Close frees nothing more
	if got := l.Open(); got != 1 {
		t.Fatalf("open after closing one twice = %d, want 1", got)
	}
	dialLimit(t, addr)
	admittedConn(t, ch)
	if l.Open() != 2 || l.Refused() != 1 {
		t.Fatalf("after a place freed: open %d refused %d, want 2 and 1", l.Open(), l.Refused())
	}

	// A reload raises it: a third is admitted; lowered below the open
	// count, it closes nothing and refuses the next.
	l.SetMax(3)
	dialLimit(t, addr)
	admittedConn(t, ch)
	l.SetMax(1)
	c := dialLimit(t, addr)
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
	addr, ch := limitServer(t, l, false)
	dialLimit(t, addr)
	admittedConn(t, ch)
	c := dialLimit(t, addr)
	b, err := io.ReadAll(c)
	if len(b) != 0 {
		t.Fatalf("refused TLS connection got %q (%v)", b, err)
	}
	if l.Refused() != 1 {
		t.Fatalf("refused = %d, want 1", l.Refused())
	}
}
