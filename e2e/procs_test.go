package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// gomaxprocs reads go_gomaxprocs from e's /metrics.
func (e *env) gomaxprocs() int {
	e.t.Helper()
	r, err := doHTTP(e.client, http.MethodGet, "http://"+e.cfg.Admin+"/metrics")
	if err != nil || r.status != http.StatusOK {
		e.t.Fatalf("GET /metrics: %v %v", r, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(r.body))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_gomaxprocs "); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				e.t.Fatalf("go_gomaxprocs %q: %v", v, err)
			}
			return n
		}
	}
	e.t.Fatalf("no go_gomaxprocs in /metrics:\n%s", r.body)
	return 0
}

// TestAdaptiveProcs: with the default server.adaptive_procs, an idle
// node runs Go code on one processor within a few trial windows, and
// still serves; with GOMAXPROCS in its environment it keeps the count it
// was given and says why.
func TestAdaptiveProcs(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Fatalf("needs 2 CPUs or more to see the count go down; this machine has %d", runtime.NumCPU())
	}
	t.Run("idle", func(t *testing.T) {
		e := newEnv(t)
		// Its first move kept, logged at info (which the test
		// configuration keeps), goes from the CPU count to a quarter less.
		cpus := runtime.NumCPU()
		first := fmt.Sprintf("event=kept procs=%d from=%d", cpus-max(1, cpus/4), cpus)
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(e.shield.stderr.String(), first) {
			if time.Now().After(deadline) {
				t.Fatalf("idle for 30s, no %q in the log (go_gomaxprocs %d)", first, e.gomaxprocs())
			}
			time.Sleep(100 * time.Millisecond)
		}
		for e.gomaxprocs() != 1 {
			if time.Now().After(deadline) {
				t.Fatalf("idle for 30s, go_gomaxprocs still %d", e.gomaxprocs())
			}
			time.Sleep(100 * time.Millisecond)
		}
		wantForwarded(t, "a miss at one processor", e.get("/procs"))
		wantHit(t, "a hit at one processor", e.get("/procs"))
	})
	t.Run("GOMAXPROCS set", func(t *testing.T) {
		t.Setenv("GOMAXPROCS", "2")
		e := newEnv(t)
		if !strings.Contains(e.shield.stderr.String(), "server.adaptive_procs ignored") {
			t.Fatalf("no log line saying server.adaptive_procs is ignored:\n%s", e.shield.stderr.String())
		}
		if n := e.gomaxprocs(); n != 2 {
			t.Fatalf("go_gomaxprocs %d with GOMAXPROCS=2", n)
		}
	})
}
