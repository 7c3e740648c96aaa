package proxy

import (
	"fmt"
	"testing"

	"github.com/shield-proxy/shield/config"
)

// Served counts every answered request, misses and hits alike, and keeps counting across a reload (the processor governor
// divides its differences by time: it must not go back).
func TestServed(t *testing.T) {
	o := newTestOrigin(t, cacheable("body"))
	p := newTestProxy(t, o.addr(), nil)
	if n := p.Served(); n != 0 {
		t.Fatalf("Served before any request = %d", n)
	}
	for range 3 {
		serve(p, get(t, "/served"))
	}
	serve(p, get(t, "/other"))
	before := p.Served()
	if before != 4 {
		t.Fatalf("Served after a miss, two hits and another miss = %d, want 4", before)
	}
	cfg, err := config.Parse("test.yaml", fmt.Appendf(nil, testConfig, o.addr(), testHost), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	serve(p, get(t, "/served"))
	if n := p.Served(); n != before+1 {
		t.Fatalf("Served after a reload and one hit = %d, want %d", n, before+1)
	}
}
