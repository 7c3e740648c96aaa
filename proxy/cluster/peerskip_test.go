package cluster

import (
	"testing"

	"github.com/shield-proxy/shield/breaker"
)

// TestPeerSkip: three consecutive failures skip the peer for 2s; then
// one probe at a time; a failed probe skips again, a good one closes;
// ignored outcomes and a success between failures do not trip it.
func TestPeerSkip(t *testing.T) {
	var s peerSkip
	now := int64(1e12)
	fail := func() {
		t.Helper()
		ok, probe := s.allow(now)
		if !ok {
			t.Fatal("closed breaker refused a request")
		}
		s.done(probe, breaker.Failure, now)
	}
	fail()
	fail()
	if ok, _ := s.allow(now); !ok {
		t.Fatal("tripped after 2 failures")
	}
	s.done(false, breaker.Success, now) // resets the run
	fail()
	fail()
	if ok, _ := s.allow(now); !ok {
		t.Fatal("a success did not reset the run of failures")
	}
	s.done(false, breaker.Ignored, now)
	fail()
	if ok, _ := s.allow(now); ok || s.state(now) != breaker.Open {
		t.Fatalf("3 consecutive failures: allowed %v, state %v; want skipped, open", ok, s.state(now))
	}
	now += peerSkipFor - 1
	if ok, _ := s.allow(now); ok {
		t.Fatal("allowed before the skip ended")
	}
	now += 1
	ok, probe := s.allow(now)
	if !ok || !probe || s.state(now) != breaker.HalfOpen {
		t.Fatalf("after the skip: allowed %v probe %v state %v; want one probe, half-open", ok, probe, s.state(now))
	}
	if ok, _ := s.allow(now); ok {
		t.Fatal("a second request went out while the probe is out")
	}
	s.done(true, breaker.Failure, now)
	if ok, _ := s.allow(now + peerSkipFor - 1); ok {
		t.Fatal("a failed probe did not skip the peer again")
	}
	now += peerSkipFor
	_, probe = s.allow(now)
	s.done(probe, breaker.Ignored, now) // no word: the next request probes
	ok, probe = s.allow(now)
	if !ok || !probe {
		t.Fatal("an ignored probe did not free the probe slot")
	}
	s.done(true, breaker.Success, now)
	if ok, probe := s.allow(now); !ok || probe || s.state(now) != breaker.Closed {
		t.Fatalf("after a good probe: allowed %v probe %v state %v; want closed", ok, probe, s.state(now))
	}
}

// TestPeerSkipAllocs: the peer breaker on the forwarded path.
func TestPeerSkipAllocs(t *testing.T) {
	var s peerSkip
	if n := testing.AllocsPerRun(1000, func() {
		ok, probe := s.allow(1)
		if ok {
			s.done(probe, breaker.Success, 1)
		}
	}); n != 0 {
		t.Errorf("allow+done: %v allocs, want 0", n)
	}
}
