package originpool

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

func names(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("10.0.0.%d:80", i+1)
	}
	return out
}

func shardNames(ss []*Server) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.Name()
	}
	slices.Sort(out)
	return out
}

// TestShardStableAndSpread: a key's shard has k distinct servers and is
// the same every time and in a pool built again; over many keys every
// server is in about k/n of the shards; removing one server changes only
// the shards that held it (by exactly that server).
func TestShardStableAndSpread(t *testing.T) {
	const n, k, keys = 8, 2, 4000
	p := New(names(n), Config{})
	again := New(names(n), Config{})
	count := map[string]int{}
	for key := range uint64(keys) {
		s := shardNames(p.Shard(key*0x9e3779b97f4a7c15, k))
		if len(s) != k || s[0] == s[1] {
			t.Fatalf("key %d: shard %v, want %d distinct servers", key, s, k)
		}
		if a := shardNames(again.Shard(key*0x9e3779b97f4a7c15, k)); !slices.Equal(a, s) {
			t.Fatalf("key %d: shard %v, then %v in an identical pool", key, s, a)
		}
		for _, name := range s {
			count[name]++
		}
	}
	want := keys * k / n
	for name, c := range count {
		if c < want*8/10 || c > want*12/10 {
			t.Errorf("server %s in %d shards, want %d ± 20%%", name, c, want)
		}
	}
	fewer := New(names(n)[1:], Config{}) // 10.0.0.1 removed
	for key := range uint64(keys) {
		before := shardNames(p.Shard(key*0x9e3779b97f4a7c15, k))
		after := shardNames(fewer.Shard(key*0x9e3779b97f4a7c15, k))
		held := slices.Contains(before, "10.0.0.1:80")
		common := 0
		for _, s := range after {
			if slices.Contains(before, s) {
				common++
			}
		}
		if (!held && common != k) || (held && common != k-1) {
			t.Fatalf("key %d: shard %v became %v after removing 10.0.0.1", key, before, after)
		}
	}
}

// TestPickShardHealth: picks stay inside the key's shard; an ejected
// shard server is skipped for the shard's other one; with the whole shard
// down the shard's servers are still tried (never another tenant's); a
// retry avoids the failed server when the shard has another; k of 0 or
// ≥ n is Pick over all servers.
func TestPickShardHealth(t *testing.T) {
	const key = 42
	now := time.Unix(1_700_000_000, 0)
	p := New(names(6), Config{})
	shard := p.Shard(key, 2)
	in := func(s *Server) bool { return slices.Contains(shard, s) }
	seen := map[*Server]bool{}
	for range 200 {
		s := p.PickShard(now, nil, key, 2)
		if !in(s) {
			t.Fatalf("picked %s outside the shard %v", s.Name(), shardNames(shard))
		}
		seen[s] = true
	}
	if len(seen) != 2 {
		t.Fatalf("200 picks used %d of the shard's 2 servers", len(seen))
	}
	fail(p, shard[0], 5, now)
	if shard[0].Up(now) {
		t.Fatal("5 failures did not eject the server")
	}
	for range 50 {
		if s := p.PickShard(now, nil, key, 2); s != shard[1] {
			t.Fatalf("with %s ejected picked %s, want the shard's other server %s", shard[0].Name(), s.Name(), shard[1].Name())
		}
	}
	if s := p.PickShard(now, shard[1], key, 2); s != shard[0] {
		t.Fatalf("retry avoiding %s picked %s, want %s (the shard's only other)", shard[1].Name(), s.Name(), shard[0].Name())
	}
	fail(p, shard[1], 5, now)
	for range 50 {
		if s := p.PickShard(now, nil, key, 2); !in(s) {
			t.Fatalf("whole shard down: picked %s outside it", s.Name())
		}
	}
	one := p.Shard(key, 1)[0]
	if s := p.PickShard(now, one, key, 1); s != one {
		t.Fatalf("shard of one, avoiding its server: %s, want it anyway", s.Name())
	}
	all := map[*Server]bool{}
	for range 500 {
		all[p.PickShard(now.Add(time.Hour), nil, key, 0)] = true
	}
	if len(all) != 6 {
		t.Fatalf("k=0 used %d of 6 servers", len(all))
	}
}

// TestPickShardAllocs: picking in a shard allocates nothing.
func TestPickShardAllocs(t *testing.T) {
	p := New(names(8), Config{})
	now := time.Now()
	if n := testing.AllocsPerRun(1000, func() { p.PickShard(now, nil, 7, 3) }); n != 0 {
		t.Fatalf("PickShard: %v allocs", n)
	}
}
