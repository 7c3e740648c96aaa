package e2e

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shield-proxy/shield/config"
)

// TestStreamedFillFanOut: 50 clients ask at once for a cold 32 MiB object
// the origin sends at 16 MiB/s. shield makes one origin fetch and streams
// the body to all of them as it arrives: their first bytes come within
// 0.5 s of the origin's first byte (not after its last), the bodies are
// identical, and shield's memory grows by about one copy of the object
// (the fill's buffer, and the stored entry), not one per client.
func TestStreamedFillFanOut(t *testing.T) {
	const (
		clients = 50
		size    = 32 << 20
		rate    = 16 << 20
	)
	e := newEnv(t, func(c *shieldConfig) {
		c.MaxObjectSize = "32MiB"
		c.Extra = append(c.Extra, with(func(cc *config.Config) {
			cc.Cache.Size = 256 * config.MiB
			cc.Origins["demo"].Timeout = 10 * time.Second
		}))
	})
	pid := e.shield.cmd.Process.Pid
	// Warm the request path (connections, pools) on a small object first.
	e.get(target("/warm", "size", "1000"))
	rssBefore := procStatus(t, pid, "VmRSS")

	u := target("/big", "size", strconv.Itoa(size), "rate", strconv.Itoa(rate))
	type answer struct {
		first   time.Duration // from the release to the first body byte
		n       int
		sum     [32]byte
		cs      string
		started time.Time // the origin's X-Origin-First-Byte: when it began sending
		err     error
	}
	answers := make([]answer, clients)
	release := make(chan struct{})
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			<-release
			a := &answers[i]
			start := time.Now()
			resp, err := e.client.Get("http://" + e.cfg.Listen + u)
			if err != nil {
				a.err = err
				return
			}
			defer resp.Body.Close()
			a.cs = resp.Header.Get("Cache-Status")
			br := bufio.NewReaderSize(resp.Body, 64<<10)
			if _, err := br.Peek(1); err != nil {
				a.err = err
				return
			}
			a.first = time.Since(start)
			a.started, _ = time.Parse(time.RFC3339Nano, resp.Header.Get("X-Origin-First-Byte"))
			h := sha256.New()
			n, err := io.Copy(h, br)
			a.n, a.err = int(n), err
			copy(a.sum[:], h.Sum(nil))
		})
	}
	t0 := time.Now()
	close(release)
	wg.Wait()
	elapsed := time.Since(t0)

	firsts := make([]time.Duration, 0, clients)
	for i, a := range answers {
		if a.err != nil || a.n != size {
			t.Fatalf("client %d: %d bytes, err %v (Cache-Status %q)", i, a.n, a.err, a.cs)
		}
		if a.sum != answers[0].sum {
			t.Fatalf("client %d's body differs from client 0's", i)
		}
		firsts = append(firsts, a.first)
	}
	if got := e.stats().ByPath["/big"]; got != 1 {
		t.Errorf("origin fetches of /big = %d, want 1", got)
	}
	slices.Sort(firsts)
	median := firsts[len(firsts)/2]
	originFirst := answers[0].started.Sub(t0)
	if answers[0].started.IsZero() {
		t.Fatal("no X-Origin-First-Byte from the origin")
	}
	if median-originFirst > 500*time.Millisecond {
		t.Errorf("median first byte %v after the release, the origin's first byte %v: want within 0.5s", median, originFirst)
	}
	rssAfter := procStatus(t, pid, "VmRSS")
	hwm := procStatus(t, pid, "VmHWM")
	t.Logf("%d clients, %d MiB at %d MiB/s: origin first byte %v, client first byte median %v (min %v, max %v), all done %v",
		clients, size>>20, rate>>20, originFirst.Round(time.Millisecond), median.Round(time.Millisecond),
		firsts[0].Round(time.Millisecond), firsts[len(firsts)-1].Round(time.Millisecond), elapsed.Round(time.Millisecond))
	t.Logf("shield VmRSS %d MiB before, %d MiB after (+%d MiB); VmHWM %d MiB", rssBefore>>10, rssAfter>>10, (rssAfter-rssBefore)>>10, hwm>>10)

	// The fill was stored: the next requests are hits with the same
	// bytes, a few at once (hits stream the entry's pieces: their memory
	// is TestMemHitConcurrentLarge's business).
	t.Logf("after the fill: %s", strings.ReplaceAll(metricLines(e.metrics(), "shield_cache", "shield_origin_fetches"), "\n", "; "))
	const hitClients = 5
	hits := make([]error, hitClients)
	for i := range hitClients {
		wg.Go(func() {
			resp, err := e.client.Get("http://" + e.cfg.Listen + u)
			if err != nil {
				hits[i] = err
				return
			}
			defer resp.Body.Close()
			h := sha256.New()
			if _, err := io.Copy(h, resp.Body); err != nil {
				hits[i] = err
				return
			}
			if cs := resp.Header.Get("Cache-Status"); !parseCacheStatus(resp.Header).hit || !bytes.Equal(h.Sum(nil), answers[0].sum[:]) {
				hits[i] = fmt.Errorf("Cache-Status %q, body differs: %v", cs, !bytes.Equal(h.Sum(nil), answers[0].sum[:]))
			}
		})
	}
	wg.Wait()
	for i, err := range hits {
		if err != nil {
			t.Errorf("hit %d after the fill: %v", i, err)
		}
	}
	t.Logf("after %d concurrent hits: shield VmRSS %d MiB, VmHWM %d MiB", hitClients, procStatus(t, pid, "VmRSS")>>10, procStatus(t, pid, "VmHWM")>>10)
}

// procStatus reads a kB field of /proc/<pid>/status.
func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Skipf("no /proc status: %v", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("%s: %q: %v", field, line, err)
			}
			return kb
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// TestStreamedFillHTTP2: a streamed fill reaches HTTP/2 clients too (one
// connection, concurrent streams): one origin fetch, identical bodies
// with their Content-Length, then a hit.
func TestStreamedFillHTTP2(t *testing.T) {
	h := newH2Env(t, false, with(func(c *config.Config) {
		// fastcache splits its size over 512 buckets: 3 MiB of 32 KiB
		// pieces needs more than the 64 KiB each a 32 MiB cache has.
		c.Cache.Size = 256 * config.MiB
		c.Cache.MaxObjectSize = 4 * config.MiB
	}))
	c := h.client()
	defer c.CloseIdleConnections()
	const size = 3 << 20
	u := h.base() + target("/h2fill", "size", strconv.Itoa(size), "rate", strconv.Itoa(6<<20))
	sums := make([][32]byte, 5)
	errs := make([]error, len(sums))
	var wg sync.WaitGroup
	for i := range sums {
		wg.Go(func() {
			resp, err := c.Get(u)
			if err != nil {
				errs[i] = err
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err == nil && (resp.ProtoMajor != 2 || len(b) != size || resp.ContentLength != size) {
				err = fmt.Errorf("%s, %d bytes, Content-Length %d", resp.Proto, len(b), resp.ContentLength)
			}
			errs[i], sums[i] = err, sha256.Sum256(b)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil || sums[i] != sums[0] {
			t.Fatalf("client %d: %v (same body as client 0: %v)", i, err, sums[i] == sums[0])
		}
	}
	if got := h.stats().ByPath["/h2fill"]; got != 1 {
		t.Errorf("origin fetches = %d, want 1", got)
	}
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !parseCacheStatus(resp.Header).hit || sha256.Sum256(b) != sums[0] {
		t.Errorf("after the fill: Cache-Status %q, same body %v; want a hit", resp.Header.Get("Cache-Status"), sha256.Sum256(b) == sums[0])
	}
}
