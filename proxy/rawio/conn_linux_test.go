package rawio

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// pair returns a wrapped server side and the plain client side of a
// loopback TCP connection.
func pair(t *testing.T) (*Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	c, ok := Wrap(sc).(*Conn)
	if !ok {
		t.Fatalf("Wrap(%T) is not a raw connection", sc)
	}
	t.Cleanup(func() { c.Close() })
	return c, client
}

// TestConn: a wrapped connection keeps net.Conn's behaviour: a write
// larger than the socket buffers waits for the reader and sends
// everything, a read returns what came, the peer's close is io.EOF, a
// deadline is a timeout (on reads and writes, also set while waiting),
// a closed connection is net.ErrClosed, and the errors name the
// operation and both addresses.
func TestConn(t *testing.T) {
	c, client := pair(t)

	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<20) // 16 MiB: more than the socket buffers
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(client, int64(len(big))))
		got <- b
	}()
	if n, err := c.Write(big); err != nil || n != len(big) {
		t.Fatalf("Write: %d, %v", n, err)
	}
	if b := <-got; !bytes.Equal(b, big) {
		t.Fatalf("the client read %d bytes, not what was written", len(b))
	}

	if _, err := client.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if n, err := io.ReadAtLeast(c, buf, 5); err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("Read: %q, %v", buf[:n], err)
	}

	// A deadline set while the read waits ends it (the owner's drain).
	go func() {
		time.Sleep(20 * time.Millisecond)
		_ = c.SetReadDeadline(time.Now())
	}()
	_, err := c.Read(buf)
	checkTimeout(t, "Read", err)
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

// TestConnWriteDeadline: a write nobody reads waits for room until its
// deadline, having written what fitted.
func TestConnWriteDeadline(t *testing.T) {
	c, _ := pair(t)
	big := make([]byte, 16<<20)
	if err := c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	n, err := c.Write(big)
	checkTimeout(t, "Write", err)
	if n <= 0 || n >= len(big) {
		t.Fatalf("Write past the deadline wrote %d of %d bytes", n, len(big))
	}
}

func checkTimeout(t *testing.T, op string, err error) {
	t.Helper()
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("%s past the deadline: %v, want a timeout", op, err)
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != map[string]string{"Read": "read", "Write": "write"}[op] || oe.Source == nil || oe.Addr == nil {
		t.Fatalf("%s past the deadline: %#v, want net.Conn's OpError", op, err)
	}
}

// TestWrapOthers: only plain TCP connections are wrapped; TLS and
// in-memory connections keep their own calls.
func TestWrapOthers(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if Wrap(a) != a {
		t.Fatal("an in-memory connection was wrapped")
	}
	c, _ := pair(t)
	tc := tls.Client(c.Conn, &tls.Config{InsecureSkipVerify: true})
	if Wrap(tc) != net.Conn(tc) {
		t.Fatal("a TLS connection was wrapped")
	}
	if Wrap(c) != net.Conn(c) {
		t.Fatal("a wrapped connection was wrapped again")
	}
}
