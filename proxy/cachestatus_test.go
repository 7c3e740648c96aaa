package proxy

import "testing"

// TestCacheStatusMembers pins the member's spelling and parameter order
// (clients and the e2e suite parse it).
func TestCacheStatusMembers(t *testing.T) {
	for _, tt := range []struct {
		cs   cacheStatus
		want string
	}{
		{cacheStatus{hit: true, ttlNext: true}, "shield; hit; ttl="},
		{cacheStatus{hit: true, fwd: "stale", detail: "stale-while-revalidate", ttlNext: true}, "shield; hit; fwd=stale; detail=stale-while-revalidate; ttl="},
		{cacheStatus{fwd: "miss", fwdStatus: 200, stored: true}, "shield; fwd=miss; fwd-status=200; stored"},
		{cacheStatus{fwd: "vary-miss", collapsed: true, detail: "wait-timeout"}, "shield; fwd=vary-miss; collapsed; detail=wait-timeout"},
		{cacheStatus{fwd: "bypass", detail: "rejected"}, "shield; fwd=bypass; detail=rejected"},
		{cacheStatus{hit: true, detail: "just-stored"}, "shield; hit; detail=just-stored"},
	} {
		if got := string(tt.cs.append(nil)); got != tt.want {
			t.Errorf("%+v = %q, want %q", tt.cs, got, tt.want)
		}
	}
}
