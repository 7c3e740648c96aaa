package routing

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"go.uber.org/goleak"
)

var consulSelf = Peer{ID: "shield-b", Addr: "10.0.0.2:7070", Weight: 2}

// newTestConsul builds a Consul source against f with fast timings, and
// checks for leaked goroutines when the test ends (after f is closed).
func newTestConsul(t *testing.T, cfg ConsulConfig) (*fakeConsul, *Consul, *Membership) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	f := newFakeConsul(t)
	cfg.Address = f.addr()
	m := NewMembership(consulSelf, time.Second, nil)
	c, err := NewConsul(cfg, consulSelf, m, nil)
	if err != nil {
		t.Fatalf("NewConsul: %v", err)
	}
	c.minGap = time.Millisecond
	c.backoffBase = 5 * time.Millisecond
	c.backoffMax = 20 * time.Millisecond
	c.refreshGap = 0
	return f, c, m
}

// startRun runs c.Run until the test ends and checks that it returns
// promptly on cancel.
func startRun(t *testing.T, c *Consul) {
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-errc:
			if err != nil {
				t.Errorf("Run = %v, want nil", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Run did not return within 5s of cancel")
		}
	})
}

func TestNewConsulValidation(t *testing.T) {
	tests := []struct {
		name string
		cfg  ConsulConfig
		self Peer
		want string // substring of the error
	}{
		{"other self", ConsulConfig{}, Peer{ID: "x", Addr: "10.0.0.2:7070"}, "not membership self"},
		{"no port", ConsulConfig{}, Peer{ID: consulSelf.ID, Addr: "10.0.0.2"}, "peer address"},
		{"bad port", ConsulConfig{}, Peer{ID: consulSelf.ID, Addr: "10.0.0.2:99999"}, "bad port"},
		{"bad weight", ConsulConfig{}, Peer{ID: consulSelf.ID, Addr: "10.0.0.2:7070", Weight: -1}, "invalid peer weight"},
		{"wait too long", ConsulConfig{WaitTime: time.Hour}, consulSelf, "wait_time"},
		{"negative interval", ConsulConfig{CheckInterval: -time.Second}, consulSelf, "check_interval"},
		{"bad scheme", ConsulConfig{Address: "ftp://x:1"}, consulSelf, "consul client"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := NewMembership(consulSelf, 0, nil)
			_, err := NewConsul(tt.cfg, tt.self, m, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "routing: ") {
				t.Fatalf("NewConsul error = %v, want one mentioning %q", err, tt.want)
			}
		})
	}
}

func TestConsulRegisterAndDeregister(t *testing.T) {
	f, c, _ := newTestConsul(t, ConsulConfig{
		Service:         "edge",
		Token:           "s3cret",
		CheckInterval:   3 * time.Second,
		DeregisterAfter: 2 * time.Minute,
		HealthURL:       "http://127.0.0.1:9091/healthz",
		Meta:            map[string]string{"zone": "eu-1", "weight": "99"},
	})
	ctx := context.Background()
	if err := c.Register(ctx); err != nil {
		t.Fatalf("Register: %v", err)
	}
	if err := c.Deregister(ctx); err != nil {
		t.Fatalf("Deregister: %v", err)
	}
	regs, deregs, _ := f.snapshot()
	if len(regs) != 1 {
		t.Fatalf("%d registrations, want 1", len(regs))
	}
	r := regs[0]
	checks := []struct {
		field     string
		got, want any
	}{
		{"ID", r.Body.ID, consulSelf.ID},
		{"Name", r.Body.Name, "edge"},
		{"Address", r.Body.Address, "10.0.0.2"},
		{"Port", r.Body.Port, 7070},
		{"Meta.weight (self wins over cfg.Meta)", r.Body.Meta["weight"], "2"},
		{"Meta.zone", r.Body.Meta["zone"], "eu-1"},
		{"Meta.version set", r.Body.Meta["version"] != "", true},
		{"Check present", r.Body.Check != nil, true},
		{"replace-existing-checks", r.Replace, "true"},
		{"token", r.Token, "s3cret"},
		{"deregistered", strings.Join(deregs, ","), consulSelf.ID},
	}
	if r.Body.Check != nil {
		checks = append(checks, []struct {
			field     string
			got, want any
		}{
			{"Check.HTTP", r.Body.Check.HTTP, "http://127.0.0.1:9091/healthz"},
			{"Check.Method", r.Body.Check.Method, "GET"},
			{"Check.Interval", r.Body.Check.Interval, "3s"},
			{"Check.Timeout", r.Body.Check.Timeout, "3s"},
			{"Check.DeregisterCriticalServiceAfter", r.Body.Check.DeregisterCriticalServiceAfter, "2m0s"},
		}...)
	}
	for _, ck := range checks {
		if ck.got != ck.want {
			t.Errorf("%s = %v, want %v", ck.field, ck.got, ck.want)
		}
	}
	// Field names on the wire are Consul's, not ours.
	for _, k := range []string{"ID", "Name", "Address", "Port", "Meta", "Check"} {
		if _, ok := r.Raw[k]; !ok {
			t.Errorf("registration JSON has no %q field: %v", k, r.Raw)
		}
	}
}

func TestConsulRegisterError(t *testing.T) {
	f, c, _ := newTestConsul(t, ConsulConfig{})
	f.setFailing(true)
	err := c.Register(context.Background())
	if err == nil || !strings.HasPrefix(err.Error(), "routing: consul register") {
		t.Fatalf("Register error = %v, want a routing: consul register error", err)
	}
	if c.LastError() == nil {
		t.Error("LastError() = nil after a failed Register")
	}
}

func TestConsulWatchFollowsChanges(t *testing.T) {
	f, c, m := newTestConsul(t, ConsulConfig{WaitTime: time.Minute})
	a := Peer{ID: "shield-a", Addr: "10.0.0.1:7070", Weight: 1}
	d := Peer{ID: "shield-d", Addr: "10.0.0.4:7070", Weight: 3}
	f.set(20, a, consulSelf)
	startRun(t, c)

	steps := []struct {
		name    string
		apply   func()
		wantIDs []string
	}{
		{"initial", func() {}, []string{"shield-a", "shield-b"}},
		{"node joins", func() { f.set(21, a, consulSelf, d) }, []string{"shield-a", "shield-b", "shield-d"}},
		{"node leaves", func() { f.set(25, consulSelf, d) }, []string{"shield-b", "shield-d"}},
		{"self not passing", func() { f.set(26, d) }, []string{"shield-d"}},
		{"empty becomes solo", func() { f.set(30) }, []string{"shield-b"}},
	}
	for _, st := range steps {
		st.apply()
		waitFor(t, st.name, func() bool { return slices.Equal(ids(m.View().Current), st.wantIDs) })
	}
	if !c.Reachable() || c.LastError() != nil {
		t.Errorf("Reachable() = %v, LastError() = %v after successful queries", c.Reachable(), c.LastError())
	}
	_, _, qs := f.snapshot()
	if qs[0].Index != 0 {
		t.Errorf("first query index = %d, want 0", qs[0].Index)
	}
	sawBlocking := false
	for _, q := range qs {
		if q.Service != "shield" || q.Passing != "1" || !q.Stale || q.Wait != "60000ms" {
			t.Fatalf("query %+v: want service shield, passing=1, stale, wait=60000ms", q)
		}
		sawBlocking = sawBlocking || q.Index == 20
	}
	if !sawBlocking {
		t.Errorf("no query blocked on the returned index 20: %+v", qs)
	}
}

func TestConsulEntriesToPeers(t *testing.T) {
	f, c, m := newTestConsul(t, ConsulConfig{})
	f.setRaw(20, []*api.ServiceEntry{
		{Node: &api.Node{Address: "192.0.2.7"}, Service: &api.AgentService{ID: "no-addr", Port: 7070}},
		{Node: &api.Node{Address: "192.0.2.8"}, Service: &api.AgentService{ID: "bad-weight", Address: "10.0.0.8", Port: 7070, Meta: map[string]string{"weight": "heavy"}}},
		{Node: &api.Node{Address: "192.0.2.9"}, Service: &api.AgentService{ID: "neg-weight", Address: "10.0.0.9", Port: 7070, Meta: map[string]string{"weight": "-2"}}},
		{Node: &api.Node{Address: "192.0.2.10"}, Service: &api.AgentService{ID: "half", Address: "10.0.0.10", Port: 7070, Meta: map[string]string{"weight": "0.5"}}},
		{Node: &api.Node{Address: "192.0.2.11"}, Service: nil},
	})
	startRun(t, c)
	waitFor(t, "entries applied", func() bool { return m.View().Current.Len() == 4 })
	want := map[string]Peer{
		"no-addr":    {ID: "no-addr", Addr: "192.0.2.7:7070", Weight: 1},
		"bad-weight": {ID: "bad-weight", Addr: "10.0.0.8:7070", Weight: 1},
		"neg-weight": {ID: "neg-weight", Addr: "10.0.0.9:7070", Weight: 1},
		"half":       {ID: "half", Addr: "10.0.0.10:7070", Weight: 0.5},
	}
	for _, p := range m.View().Current.Peers() {
		if p != want[p.ID] {
			t.Errorf("peer %+v, want %+v", p, want[p.ID])
		}
	}
}

func TestConsulIndexReset(t *testing.T) {
	f, c, m := newTestConsul(t, ConsulConfig{})
	a := Peer{ID: "shield-a", Addr: "10.0.0.1:7070"}
	f.set(100, a, consulSelf)
	startRun(t, c)
	waitFor(t, "initial set", func() bool { return m.View().Current.Len() == 2 })
	waitFor(t, "a query blocked at index 100", func() bool {
		_, _, qs := f.snapshot()
		return slices.ContainsFunc(qs, func(q fakeQuery) bool { return q.Index == 100 })
	})
	// The index goes backwards (e.g. a snapshot restore) with a new set.
	// A client that kept 100 would block until its wait time and miss it.
	f.set(5, consulSelf)
	waitFor(t, "set after reset", func() bool { return m.View().Current.Len() == 1 })
	waitFor(t, "a fresh query (index 0) then one blocking at 5", func() bool {
		_, _, qs := f.snapshot()
		i := slices.IndexFunc(qs, func(q fakeQuery) bool { return q.Index == 100 })
		rest := qs[i+1:]
		z := slices.IndexFunc(rest, func(q fakeQuery) bool { return q.Index == 0 })
		return z >= 0 && slices.ContainsFunc(rest[z:], func(q fakeQuery) bool { return q.Index == 5 })
	})
}

func TestNextIndex(t *testing.T) {
	tests := []struct {
		name            string
		prev, got, want uint64
	}{
		{"first", 0, 7, 7},
		{"forward", 7, 9, 9},
		{"same", 9, 9, 9},
		{"backwards resets", 9, 3, 0},
		{"zero is clamped", 0, 0, 1},
		{"zero after index resets", 5, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := nextIndex(tt.prev, tt.got); got != tt.want {
				t.Errorf("nextIndex(%d, %d) = %d, want %d", tt.prev, tt.got, got, tt.want)
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	base, ceiling := 500*time.Millisecond, 30*time.Second
	for n := 1; n <= 70; n++ {
		want := ceiling
		if f := float64(base) * math.Pow(2, float64(n-1)); f < float64(ceiling) {
			want = time.Duration(f)
		}
		for range 50 {
			d := backoff(n, base, ceiling)
			if d < want/2 || d > want {
				t.Fatalf("backoff(%d) = %v, want in [%v, %v]", n, d, want/2, want)
			}
		}
	}
}

func TestConsulDownKeepsLastGood(t *testing.T) {
	f, c, m := newTestConsul(t, ConsulConfig{})
	a := Peer{ID: "shield-a", Addr: "10.0.0.1:7070"}
	f.set(20, a, consulSelf)
	startRun(t, c)
	waitFor(t, "initial set", func() bool { return m.View().Current.Len() == 2 && c.Reachable() })
	good := m.View()

	f.setFailing(true)
	waitFor(t, "unreachable", func() bool { return !c.Reachable() && c.LastError() != nil })
	_, _, before := f.snapshot()
	waitFor(t, "retries while down", func() bool { _, _, qs := f.snapshot(); return len(qs) > len(before)+2 })
	if m.View() != good {
		t.Fatalf("view changed while Consul was down: %v", ids(m.View().Current))
	}

	f.set(40, consulSelf) // changes while down, seen after recovery
	f.setFailing(false)
	waitFor(t, "recovered", func() bool { return c.Reachable() && m.View().Current.Len() == 1 })
	if c.LastError() != nil {
		t.Errorf("LastError() = %v after recovery", c.LastError())
	}
}

func TestConsulUnreachableAgent(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	m := NewMembership(consulSelf, time.Second, nil)
	// A listener that was closed: connection refused.
	f := newFakeConsul(t)
	addr := f.addr()
	f.close()
	c, err := NewConsul(ConsulConfig{Address: addr}, consulSelf, m, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.backoffBase, c.backoffMax = time.Millisecond, 5*time.Millisecond
	solo := m.View()
	startRun(t, c)
	waitFor(t, "error recorded", func() bool { return c.LastError() != nil })
	if c.Reachable() || m.View() != solo {
		t.Errorf("Reachable() = %v, view changed = %v; want false, false", c.Reachable(), m.View() != solo)
	}
}

func TestConsulRefresh(t *testing.T) {
	f, c, _ := newTestConsul(t, ConsulConfig{WaitTime: 10 * time.Minute})
	f.set(20, consulSelf)
	startRun(t, c)
	waitFor(t, "blocking at 20", func() bool {
		_, _, qs := f.snapshot()
		return len(qs) >= 2 && qs[len(qs)-1].Index == 20
	})
	_, _, before := f.snapshot()
	c.Refresh()
	waitFor(t, "refresh re-reads with index 0", func() bool {
		_, _, qs := f.snapshot()
		return slices.ContainsFunc(qs[len(before):], func(q fakeQuery) bool { return q.Index == 0 })
	})
	if !c.Reachable() || c.LastError() != nil {
		t.Errorf("a refresh counted as a failure: Reachable %v, LastError %v", c.Reachable(), c.LastError())
	}

	// Rate limit: a second call inside refreshGap is dropped.
	c.refreshGap = time.Hour
	c.lastRefresh.Store(time.Now().UnixNano())
	c.refreshWant.Store(false)
	c.Refresh()
	if c.refreshWant.Load() {
		t.Error("Refresh inside the rate-limit gap was honoured")
	}
}

func TestConsulRunStopsOnCancel(t *testing.T) {
	tests := []struct {
		name  string
		setup func(f *fakeConsul)
		ready func(f *fakeConsul, c *Consul) bool
	}{
		{
			"blocked in a query",
			func(f *fakeConsul) { f.set(20, consulSelf) },
			func(f *fakeConsul, c *Consul) bool { _, _, qs := f.snapshot(); return len(qs) >= 2 },
		},
		{
			"backing off",
			func(f *fakeConsul) { f.setFailing(true) },
			func(f *fakeConsul, c *Consul) bool { return c.LastError() != nil },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, c, _ := newTestConsul(t, ConsulConfig{WaitTime: 10 * time.Minute})
			c.backoffBase, c.backoffMax = time.Minute, time.Minute
			tt.setup(f)
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() { errc <- c.Run(ctx) }()
			waitFor(t, "the loop to wait", func() bool { return tt.ready(f, c) })
			cancel()
			select {
			case err := <-errc:
				if err != nil {
					t.Errorf("Run = %v, want nil", err)
				}
			case <-time.After(2 * time.Second):
				t.Fatal("Run did not return within 2s of cancel")
			}
		})
	}
}
