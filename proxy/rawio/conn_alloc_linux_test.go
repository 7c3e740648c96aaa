//go:build !race

package rawio

import (
	"io"
	"testing"
	"time"
)

// TestConnAllocs: a read and a write allocate nothing (the callbacks are
// bound once).
func TestConnAllocs(t *testing.T) {
	c, client := pair(t)
	msg := []byte("ping")
	buf := make([]byte, 16)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(client, buf[:len(msg)]); err != nil {
			t.Fatal(err)
		}
		if _, err := client.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf[:len(msg)]); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per write and read, want 0", allocs)
	}
}

// TestWatchAllocs: a wait for the next request, its wake-up and the
// read after it allocate nothing.
func TestWatchAllocs(t *testing.T) {
	w, c, client := watchPair(t)
	msg := []byte("ping")
	buf := make([]byte, 16)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := client.Write(msg); err != nil {
			t.Fatal(err)
		}
		w.Wait(time.Time{})
		if _, err := io.ReadFull(c, buf[:len(msg)]); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per wait and read, want 0", allocs)
	}
}
