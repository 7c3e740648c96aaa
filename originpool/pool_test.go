package originpool

import (
	"testing"
	"time"
)

func fail(p *Pool, s *Server, n int, now time.Time) {
	for range n {
		s.Start()
		p.Done(s, Failure, now)
	}
}

func TestEjectGrowsAndNeverMoreThanHalf(t *testing.T) {
	p := New([]string{"a", "b", "c"}, Config{EjectAfter: 3, EjectFor: time.Second, MaxEjectFor: 4 * time.Second})
	a, b := p.servers[0], p.servers[1]
	now := time.Unix(1000, 0)
	fail(p, a, 2, now)
	if !a.Up(now) {
		t.Fatal("ejected before EjectAfter failures")
	}
	fail(p, a, 1, now)
	if a.Up(now) {
		t.Fatal("not ejected after EjectAfter failures")
	}
	for range 100 {
		if p.Pick(now, nil) == a {
			t.Fatal("picked an ejected server")
		}
	}
	fail(p, b, 3, now)
	if !b.Up(now) {
		t.Fatal("ejected a second server of three (more than half)")
	}
	// Second ejection in a row lasts twice as long.
	now = now.Add(time.Second)
	if !a.Up(now) {
		t.Fatal("still ejected after EjectFor")
	}
	fail(p, a, 3, now)
	if a.Up(now.Add(1500 * time.Millisecond)) {
		t.Fatal("second ejection did not grow")
	}
	if !a.Up(now.Add(2 * time.Second)) {
		t.Fatal("second ejection longer than 2×EjectFor")
	}
	// A success after the period resets the growth.
	a.Start()
	p.Done(a, Success, now.Add(2*time.Second))
	fail(p, a, 3, now.Add(2*time.Second))
	if !a.Up(now.Add(3*time.Second + time.Millisecond)) {
		t.Fatal("ejection did not reset after a success")
	}
}

func TestSingleServerNeverEjected(t *testing.T) {
	p := New([]string{"a"}, Config{EjectAfter: 1})
	now := time.Now()
	fail(p, p.servers[0], 10, now)
	if !p.servers[0].Up(now) || p.Pick(now, nil) != p.servers[0] {
		t.Fatal("the only server was ejected")
	}
}

func TestPickPowerOfTwoPrefersIdle(t *testing.T) {
	p := New([]string{"a", "b"}, Config{})
	now := time.Now()
	for range 10 {
		p.servers[0].Start()
	}
	for range 50 {
		if s := p.Pick(now, nil); s != p.servers[1] {
			t.Fatalf("picked %s with 10 in flight over an idle server", s.Name())
		}
	}
	if s := p.Pick(now, p.servers[1]); s != p.servers[0] {
		t.Fatal("avoid not honoured")
	}
}

func TestPickSpreads(t *testing.T) {
	p := New([]string{"a", "b", "c"}, Config{})
	now := time.Now()
	seen := map[string]int{}
	for range 3000 {
		seen[p.Pick(now, nil).Name()]++
	}
	for _, n := range []string{"a", "b", "c"} {
		if seen[n] < 700 {
			t.Fatalf("uneven spread %v", seen)
		}
	}
}

func TestActiveChecks(t *testing.T) {
	p := New([]string{"a", "b"}, Config{Healthy: 2, Unhealthy: 2})
	a := p.servers[0]
	now := time.Now()
	p.Probe(a, false)
	if !a.Up(now) {
		t.Fatal("down after one failed probe")
	}
	p.Probe(a, false)
	if a.Up(now) {
		t.Fatal("up after Unhealthy failed probes")
	}
	p.Probe(a, true)
	if a.Up(now) {
		t.Fatal("up after one good probe")
	}
	p.Probe(a, true)
	if !a.Up(now) {
		t.Fatal("down after Healthy good probes")
	}
	// Every server down: all are candidates again.
	for _, s := range p.servers {
		p.Probe(s, false)
		p.Probe(s, false)
	}
	if p.Pick(now, nil) == nil {
		t.Fatal("nil pick with every server down")
	}
	st := p.Snapshot(now)
	if len(st) != 2 || st[0].Up || !st[0].Down {
		t.Fatalf("snapshot %+v", st)
	}
}
