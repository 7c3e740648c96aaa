package e2e

import (
	"net/http"
	"testing"
)

// TestClusterUnsafeInvalidatesOwner: a successful POST for a URL, sent to
// a node that does not own the URL's key, invalidates the owner's copy
// too (RFC 9111 §4.4 on the owner): the next GET through any node is a
// miss fetched again. A control key owned by the same node, not POSTed,
// stays a hit, so the test can tell invalidation from expiry.
func TestClusterUnsafeInvalidatesOwner(t *testing.T) {
	t.Parallel()
	ce := newClusterEnv(t, 3)
	n1, n2 := ce.nodes[0], ce.nodes[1]
	target, control := ce.twoKeysOwnedBy(n1, n2, "inv")
	r, err := doHTTP(ce.e.client, http.MethodPost, "http://"+n1.cfg.Listen+target, "Host", clusterHost)
	if err != nil || r.status != http.StatusOK {
		t.Fatalf("POST %s through %s: %v %v", target, n1.id(), r, err)
	}
	before := ce.e.stats().ByPath[target]
	eventually(t, "the owner's copy of "+target+" invalidated", func() bool {
		r, err := ce.get(n2, target)
		return err == nil && !parseCacheStatus(r.header).hit
	})
	if after := ce.e.stats().ByPath[target]; after <= before {
		t.Errorf("origin fetches of %s: %d before, %d after; want a new fetch after the invalidation", target, before, after)
	}
	r, err = ce.get(n2, control)
	if err != nil || !parseCacheStatus(r.header).hit {
		t.Errorf("control %s: %v %v, want still a hit", control, r, err)
	}
}
