package e2e

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// cacheStatus is shield's member of an RFC 9211 Cache-Status header.
type cacheStatus struct {
	present   bool
	hit       bool
	fwd       string // "" when absent
	stored    bool
	collapsed bool
}

// parseCacheStatus finds the "shield" member of the Cache-Status list and
// reads the parameters the tests care about; others (ttl, detail, ...) are
// ignored.
func parseCacheStatus(h http.Header) cacheStatus {
	var cs cacheStatus
	for member := range strings.SplitSeq(strings.Join(h.Values("Cache-Status"), ","), ",") {
		params := strings.Split(member, ";")
		if strings.TrimSpace(params[0]) != "shield" {
			continue
		}
		cs.present = true
		for _, p := range params[1:] {
			name, value, _ := strings.Cut(strings.TrimSpace(p), "=")
			switch name {
			case "hit":
				cs.hit = true
			case "fwd":
				cs.fwd = value
			case "stored":
				cs.stored = true
			case "collapsed":
				cs.collapsed = true
			}
		}
	}
	return cs
}

func TestParseCacheStatus(t *testing.T) {
	tests := []struct {
		in   string
		want cacheStatus
	}{
		{"shield; hit", cacheStatus{present: true, hit: true}},
		{"shield; hit; ttl=59", cacheStatus{present: true, hit: true}},
		{"shield; fwd=miss; stored", cacheStatus{present: true, fwd: "miss", stored: true}},
		{"shield;fwd=miss;collapsed;stored", cacheStatus{present: true, fwd: "miss", collapsed: true, stored: true}},
		{`shield; fwd=uri-miss; detail="no-store"`, cacheStatus{present: true, fwd: "uri-miss"}},
		{"OriginCache; hit, shield; fwd=bypass", cacheStatus{present: true, fwd: "bypass"}},
		{"other; hit", cacheStatus{}},
		{"", cacheStatus{}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			h := http.Header{}
			if tt.in != "" {
				h.Set("Cache-Status", tt.in)
			}
			if got := parseCacheStatus(h); got != tt.want {
				t.Errorf("parseCacheStatus(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}

// wantHit fails unless r is a 200 served from the cache: Cache-Status
// says hit, Age is an integer ≥ 0, Via names shield.
func wantHit(t *testing.T, what string, r result) {
	t.Helper()
	if r.status != http.StatusOK {
		t.Errorf("%s: status %d, want 200 (%v)", what, r.status, r)
	}
	cs := parseCacheStatus(r.header)
	if !cs.hit || cs.fwd != "" {
		t.Errorf("%s: Cache-Status %q, want a shield hit", what, r.header.Get("Cache-Status"))
	}
	if age, err := strconv.Atoi(r.header.Get("Age")); err != nil || age < 0 {
		t.Errorf("%s: Age %q, want an integer ≥ 0", what, r.header.Get("Age"))
	}
	wantVia(t, what, r)
}

// wantForwarded fails unless r is a 200 that shield fetched from the
// origin: Cache-Status has fwd= and no hit.
func wantForwarded(t *testing.T, what string, r result) cacheStatus {
	t.Helper()
	if r.status != http.StatusOK {
		t.Errorf("%s: status %d, want 200 (%v)", what, r.status, r)
	}
	cs := parseCacheStatus(r.header)
	if cs.hit || cs.fwd == "" {
		t.Errorf("%s: Cache-Status %q, want a shield fwd= (not a hit)", what, r.header.Get("Cache-Status"))
	}
	wantVia(t, what, r)
	return cs
}

func wantVia(t *testing.T, what string, r result) {
	t.Helper()
	for _, v := range r.header.Values("Via") {
		if strings.Contains(v, "1.1 shield") {
			return
		}
	}
	t.Errorf("%s: Via %q, want it to contain %q", what, r.header.Values("Via"), "1.1 shield")
}
