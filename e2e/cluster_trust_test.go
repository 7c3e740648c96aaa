package e2e

import (
	"net/http"
	"net/url"
	"path/filepath"
	"testing"
)

// TestClusterPurgeWhileDownNotServedAfterRestart: a node that was down
// when a URL was purged must not serve its snapshot's copy of that URL
// when it comes back (it catches up on the purges it missed before it
// serves its snapshot), while a copy nobody purged is served from the
// snapshot again.
func TestClusterPurgeWhileDownNotServedAfterRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ce := newClusterEnv(t, 3, func(c *clusterNodeConfig) { c.CachePath = filepath.Join(dir, c.NodeID, "cache") })
	n1, n2 := ce.nodes[0], ce.nodes[1]
	cands := keyPaths("down", 16)
	owner := ce.owners(n1, cands)
	var keys []string
	for _, p := range cands {
		if owner[p] == n2.id() {
			keys = append(keys, p)
		}
	}
	if len(keys) < 2 {
		t.Fatalf("%s owns %d of %d keys, want ≥ 2: %v", n2.id(), len(keys), len(cands), owner)
	}
	target, control := keys[0], keys[1]
	for _, p := range []string{target, control} {
		r, err := ce.get(n2, p)
		if err != nil || !parseCacheStatus(r.header).hit {
			t.Fatalf("warm %s on its owner: %v %v, want a hit", p, r, err)
		}
	}
	firstN := ce.e.stats().ByPath[target]

	ce.e.client.CloseIdleConnections()
	n2.proc.terminate(t)
	if code := n2.proc.wait(t); code != 0 {
		t.Fatalf("%s exited %d after SIGTERM, want 0", n2.id(), code)
	}
	purge := "http://" + clusterHost + target
	pr, err := doHTTP(ce.e.client, http.MethodPost, "http://"+n1.cfg.Admin+"/purge?url="+url.QueryEscape(purge))
	if err != nil || pr.status != http.StatusOK {
		t.Fatalf("POST /purge on %s while %s is down: %v %v", n1.id(), n2.id(), pr, err)
	}

	n2.proc = startProcess(t, "shield "+n2.id()+" (restarted)", binPath(t, "shield"), "-config", writeFile(t, n2.id()+"-again.yaml", n2.cfg.config(t)))
	n2.proc.waitReady(t, "http://"+n2.cfg.Admin+"/readyz")
	ce.waitConverged("after the restart", ce.nodes...)

	r, err := ce.get(n2, target)
	if err != nil || r.status != http.StatusOK {
		t.Fatalf("GET %s on the restarted owner: %v %v", target, r, err)
	}
	if parseCacheStatus(r.header).hit && ce.e.stats().ByPath[target] == firstN {
		t.Fatalf("GET %s on the restarted owner = %v: the copy purged while it was down was served", target, r)
	}
	eventually(t, "the unpurged "+control+" served from the snapshot after catch-up", func() bool {
		r, err := ce.get(n2, control)
		return err == nil && parseCacheStatus(r.header).hit
	})
}
