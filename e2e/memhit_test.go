package e2e

import (
	"bufio"
	"crypto/sha256"
	"fmt"
	"io"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/shield-proxy/shield/config"
)

// TestMemHitConcurrentLarge: 20 clients hit a cached 32 MiB object (in
// memory, stored in pieces) at once and hold their answers open midway.
// Each hit sends the body piece by piece from a buffer of one piece, so
// while all twenty are in flight shield's memory has grown by far less
// than one copy of the object — reading the entry whole for each hit
// grew it by twenty copies (640 MiB) — and every body is the object's,
// byte for byte.
func TestMemHitConcurrentLarge(t *testing.T) {
	const (
		clients = 20
		size    = 32 << 20
		limit   = 64 << 20 // RSS growth allowed: two copies of the object
	)
	e := newEnv(t, func(c *shieldConfig) {
		c.MaxObjectSize = "32MiB"
		c.Extra = append(c.Extra, with(func(cc *config.Config) {
			cc.Cache.Size = 256 * config.MiB
			cc.Origins["demo"].Timeout = 20 * time.Second
		}))
	})
	pid := e.shield.cmd.Process.Pid
	u := "http://" + e.cfg.Listen + target("/big", "size", strconv.Itoa(size))
	sum := func(r io.Reader) (int64, [32]byte, error) {
		h := sha256.New()
		n, err := io.Copy(h, r)
		var s [32]byte
		copy(s[:], h.Sum(nil))
		return n, s, err
	}
	resp, err := e.client.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	n, want, err := sum(resp.Body)
	resp.Body.Close()
	if err != nil || n != size {
		t.Fatalf("the miss: %d bytes, %v", n, err)
	}
	// One hit first: pools and connections warm.
	if r := e.get(target("/big", "size", strconv.Itoa(size))); !parseCacheStatus(r.header).hit || sha256.Sum256(r.body) != want {
		t.Fatalf("first hit: %v", r)
	}
	rssBefore := procStatus(t, pid, "VmRSS")

	type answer struct {
		n   int64
		sum [32]byte
		cs  string
		err error
	}
	answers := make([]answer, clients)
	var started, hold sync.WaitGroup
	started.Add(clients)
	hold.Add(1)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			a := &answers[i]
			defer func() {
				if a.err != nil {
					started.Done()
				}
			}()
			resp, err := e.client.Get(u)
			if err != nil {
				a.err = err
				return
			}
			defer resp.Body.Close()
			a.cs = resp.Header.Get("Cache-Status")
			br := bufio.NewReaderSize(resp.Body, 1<<20)
			if _, err := br.Peek(1 << 20); err != nil {
				a.err = fmt.Errorf("first MiB: %w", err)
				return
			}
			started.Done()
			hold.Wait() // every answer in flight at once
			a.n, a.sum, a.err = sum(br)
		})
	}
	started.Wait()
	rssHeld := procStatus(t, pid, "VmRSS")
	hold.Done()
	wg.Wait()
	hwm := procStatus(t, pid, "VmHWM")
	for i, a := range answers {
		if a.err != nil || a.n != size || a.sum != want {
			t.Fatalf("client %d: %d bytes, err %v, body equal %v (Cache-Status %q)", i, a.n, a.err, a.sum == want, a.cs)
		}
	}
	if got := e.stats().ByPath["/big"]; got != 1 {
		t.Errorf("origin fetches of /big = %d, want 1", got)
	}
	growth := (rssHeld - rssBefore) << 10
	t.Logf("%d concurrent hits of %d MiB held midway: shield VmRSS %d MiB before, %d MiB with all in flight (+%d MiB); VmHWM %d MiB",
		clients, size>>20, rssBefore>>10, rssHeld>>10, growth>>20, hwm>>10)
	if growth > limit {
		t.Errorf("VmRSS grew by %d MiB with %d hits of %d MiB in flight, want ≤ %d MiB (one copy per hit would be %d MiB)",
			growth>>20, clients, size>>20, limit>>20, clients*size>>20)
	}
}
