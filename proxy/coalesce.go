package proxy

import (
	"sync"
	"sync/atomic"
	"time"
)

// Coalescing (docs/architecture.md §6): one origin fetch in flight per key per node. The
// first request for a cold key becomes the leader and fetches; later ones
// wait on the flight, bounded in number (cache.max_waiters) and in time
// (cache.wait_timeout, each waiter's own timer), and then read the
// leader's result. The leader fetches under the origin's deadline, not a
// waiter's, and a waiter that gives up does not cancel it.
//
// Only a storable response is shared. If the leader's answer is private,
// carries Set-Cookie, is no-store or is otherwise unshareable, waiters
// must not see it: each fetches for itself, and the leader writes a
// hit-for-miss record so that later requests skip the queue.

// resultKind is what a finished flight has for its waiters.
type resultKind uint8

const (
	flightShared      resultKind = iota + 1 // entry holds a storable response
	flightUnshareable                       // waiters fetch on their own
	flightFailed                            // origin failed: waiters answer status
	flightFilling                           // fill streams the body: waiters read it (fill.go)
)

// flight is one fetch in progress.
type flight struct {
	done    chan struct{}
	waiters atomic.Int32
	mapKey  string // key in the shard map
	shard   *flightShard

	// Written by the leader before done is closed; read only after.
	kind       resultKind
	entry      []byte        // encoded entry (read-only, shared by all waiters)
	fill       *fill         // for flightFilling: the streamed fill
	key        []byte        // key the entry was stored under (primary or variant)
	status     int           // for flightFailed
	detail     string        // for flightFailed: Cache-Status detail
	retryAfter time.Duration // for flightFailed with 503
}

const flightShards = 64

// flights is the set of fetches in flight, sharded by key digest so that
// unrelated misses do not contend on one mutex.
type flights struct {
	shards [flightShards]flightShard
}

type flightShard struct {
	mu sync.Mutex
	m  map[string]*flight // guarded by mu
}

// join returns the flight for key, creating it when there is none; leader
// reports whether the caller created it and so must fetch and finish it.
func (fs *flights) join(key []byte, digest uint64) (f *flight, leader bool) {
	s := &fs.shards[digest%flightShards]
	s.mu.Lock()
	defer s.mu.Unlock()
	if f = s.m[string(key)]; f != nil {
		return f, false
	}
	if s.m == nil {
		s.m = make(map[string]*flight)
	}
	f = &flight{done: make(chan struct{}), mapKey: string(key), shard: s}
	s.m[f.mapKey] = f
	return f, true
}

// finish removes the flight and wakes its waiters. The leader must have
// set the result fields first; a leader that never set them (a panic)
// leaves kind zero, which waiters treat as unshareable. A streamed fill
// (flightFilling) has woken them already and stays joinable until it
// ends: the fill removes it then (fill.go).
func (fs *flights) finish(f *flight) {
	if f.kind == flightFilling {
		return
	}
	fs.remove(f)
	close(f.done)
}

// remove takes the flight out of the set: requests from now on start
// another (or, the entry being stored, hit).
func (fs *flights) remove(f *flight) {
	s := f.shard
	s.mu.Lock()
	if s.m[f.mapKey] == f {
		delete(s.m, f.mapKey)
	}
	s.mu.Unlock()
}

// inFlight counts flights (for tests and metrics).
func (fs *flights) inFlight() int {
	n := 0
	for i := range fs.shards {
		s := &fs.shards[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}
