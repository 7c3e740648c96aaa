package listener

import (
	"io"
	"syscall"
	"testing"

	"github.com/shield-proxy/shield/proxy/rawio"
)

// TestLimitKeepsRawCalls: an admitted TCP connection still offers its
// descriptor (sendfile, raw reads) and rawio.Wrap still gives raw calls,
// whose Close frees the place.
func TestLimitKeepsRawCalls(t *testing.T) {
	l := NewLimit(4, nil)
	client, c := newLimitServer(t, l, true).admit(t)
	if _, ok := c.(syscall.Conn); !ok {
		t.Fatalf("admitted %T has no descriptor", c)
	}
	w := rawio.Wrap(c)
	if _, ok := w.(*rawio.Conn); !ok {
		t.Fatalf("rawio.Wrap(%T) = %T: the counted connection lost its raw calls", c, w)
	}
	if _, err := client.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(w, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("raw read %q, %v", buf, err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got := l.Open(); got != 0 {
		t.Fatalf("open after the raw connection closed = %d, want 0", got)
	}
}
