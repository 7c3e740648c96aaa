package e2e

import (
	"bytes"
	"net/http"
	"testing"
)

// TestCoalescing: 200 concurrent cold requests for one slow key make one
// origin request, and everyone gets its answer.
func TestCoalescing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 200
	u := target("/coalesce", "delay", "200")
	results := e.concurrent(n, http.MethodGet, u)

	leaders := 0
	for i, r := range results {
		if r.status != http.StatusOK {
			t.Fatalf("request %d: %v, want 200", i, r)
		}
		if !bytes.Equal(r.body, results[0].body) {
			t.Fatalf("request %d body %q differs from request 0 body %q", i, r.body, results[0].body)
		}
		cs := parseCacheStatus(r.header)
		if !cs.hit && !cs.collapsed {
			leaders++
		}
	}
	if leaders != 1 {
		t.Errorf("%d answers were neither hits nor collapsed waiters, want exactly 1 (the fetch leader)", leaders)
	}
	s := e.stats()
	if s.ByPath["/coalesce"] != 1 || s.MaxInFlight != 1 {
		t.Errorf("origin saw %d requests, %d at once; want 1, 1", s.ByPath["/coalesce"], s.MaxInFlight)
	}
}

// TestPrivateNotShared: private and Set-Cookie answers are never served to
// another client, not even to concurrent waiters, and a key found
// uncacheable is then fetched without queueing (hit-for-miss).
func TestPrivateNotShared(t *testing.T) {
	t.Parallel()
	e := newEnv(t)

	t.Run("sequential", func(t *testing.T) {
		e := e.on(t)
		tests := []struct {
			name, path string
			query      []string
		}{
			{"private", "/private", []string{"cc", "private, max-age=60"}},
			{"set-cookie", "/cookie", []string{"setcookie", "1"}},
		}
		for _, tt := range tests {
			u := target(tt.path, tt.query...)
			a, b := e.get(u), e.get(u)
			wantForwarded(t, tt.name+" first", a)
			wantForwarded(t, tt.name+" second", b)
			if decode(t, a).N == decode(t, b).N {
				t.Errorf("%s: both clients got origin answer n=%d", tt.name, decode(t, a).N)
			}
			if c := a.header.Get("Set-Cookie"); c != "" && c == b.header.Get("Set-Cookie") {
				t.Errorf("%s: second client received the first client's cookie %q", tt.name, c)
			}
			e.wantOriginCount(tt.path, 2)
		}
	})

	t.Run("concurrent", func(t *testing.T) {
		e := e.on(t)
		const n = 50
		u := target("/private-wave", "cc", "private, max-age=60", "delay", "300")
		seen := map[int64]int{}
		for i, r := range e.concurrent(n, http.MethodGet, u) {
			wantForwarded(t, "private wave", r)
			res := decode(t, r)
			if prev, dup := seen[res.N]; dup {
				t.Errorf("requests %d and %d both got origin answer n=%d: a private answer was shared", prev, i, res.N)
			}
			seen[res.N] = i
		}
		e.wantOriginCount("/private-wave", n)

		// The key is now known uncacheable: a second wave goes straight to
		// the origin, all at once, each marked as a bypass.
		const m = 20
		e.originPost("/__origin/reset")
		for _, r := range e.concurrent(m, http.MethodGet, u) {
			if cs := wantForwarded(t, "second private wave", r); cs.fwd != "bypass" {
				t.Errorf("second private wave: Cache-Status %q, want fwd=bypass (hit-for-miss)", r.header.Get("Cache-Status"))
			}
		}
		s := e.stats()
		if s.ByPath["/private-wave"] != m || s.MaxInFlight != m {
			t.Errorf("second wave: origin saw %d requests, %d at once; want %d, %d (no queueing)",
				s.ByPath["/private-wave"], s.MaxInFlight, m, m)
		}
	})
}
