// Package topk keeps an approximate list of the most frequent keys of a
// stream in constant memory, for operators' "what is hot right now" views
// (the admin status page, the top-keys metric).
//
// A Sketch is two space-saving summaries (Metwally et al., 2005) of a
// fixed number of slots: the current epoch and the previous one. Every
// window the current epoch becomes the previous one and a fresh epoch
// starts, so Top reports roughly the last one to two windows and a key
// that went cold drops out within two windows.
//
// Observe is meant for a request path that must not allocate: it counts
// one request in every Sample (a per-thread random draw) and returns at
// once for the others; a sampled request takes the mutex, scans the
// slots (a few hundred 8-byte digests: cheap at 1 request in 16, and
// never allocates) and, when its key is new, copies the key into the evicted
// slot's preallocated buffer. Keys are identified by a 64-bit digest the
// caller supplies (shield already has one per cache key); key bytes are
// kept only for display.
//
// Accuracy: space-saving with m slots overestimates a count by at most
// N/m, N being the sampled observations in the epoch, and every key whose
// true count exceeds N/m is tracked. Sampling adds a relative error of
// about 1/sqrt(count/Sample). The package test measures both on a Zipf
// stream.
package topk

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// Defaults for New's zero arguments.
const (
	DefaultSlots  = 256
	DefaultSample = 16
	DefaultWindow = 30 * time.Second
	// MaxKeyLen is how many bytes of a key are kept for display.
	MaxKeyLen = 256
)

// Sketch tracks the heaviest keys of a stream. The zero value is not
// usable; call New.
type Sketch struct {
	sample uint64
	below  uint64 // Sample: a draw at most this is 1 in sample (no division)
	window time.Duration

	mu    sync.Mutex // guards the fields below
	cur   epoch
	prev  epoch
	start time.Time // of cur
}

type epoch struct {
	slots []slot
	used  int
	total uint64 // sampled observations
}

type slot struct {
	digest uint64
	count  uint64
	err    uint64 // overestimate bound inherited at eviction
	hits   uint64 // sampled hits since the key took the slot
	flag   bool
	key    []byte // cap MaxKeyLen, reused
}

// New returns a sketch of slots slots per epoch that samples one
// observation in sample and rotates epochs every window. Zero or negative
// arguments take the defaults.
func New(slots, sample int, window time.Duration) *Sketch {
	if slots <= 0 {
		slots = DefaultSlots
	}
	if sample <= 0 {
		sample = DefaultSample
	}
	if window <= 0 {
		window = DefaultWindow
	}
	s := &Sketch{sample: uint64(sample), below: math.MaxUint64 / uint64(sample), window: window}
	s.cur = newEpoch(slots)
	s.prev = newEpoch(slots)
	return s
}

func newEpoch(n int) epoch {
	e := epoch{slots: make([]slot, n)}
	for i := range e.slots {
		e.slots[i].key = make([]byte, 0, MaxKeyLen)
	}
	return e
}

// Observe counts one occurrence of the key with this digest (see Add)
// when Sample picks it. It is safe for concurrent use and does not
// allocate.
func (s *Sketch) Observe(digest uint64, hit, flag bool, now time.Time, key ...[]byte) {
	if s.Sample() {
		s.Add(digest, hit, flag, now, key...)
	}
}

// Sample reports whether this observation is one of the 1 in Sample
// that are counted. It draws from the runtime's per-thread random source:
// no shared counter for cores to fight over, and no aliasing with
// periodic traffic (a counter sampling every 16th request would see only
// one key of a stream that cycles through 4 or 16). Callers whose digest
// costs something call it first and compute the digest only when it says
// yes.
func (s *Sketch) Sample() bool { return rand.Uint64() <= s.below }

// Add counts one sampled occurrence of the key with this digest. hit
// counts it as a cache hit too; flag is an attribute kept with the key
// (shield: "answered from a near copy"), the latest value wins. The key
// is the concatenation of the key slices, truncated to MaxKeyLen, and is
// copied only when the key takes a slot. Add does not allocate.
func (s *Sketch) Add(digest uint64, hit, flag bool, now time.Time, key ...[]byte) {
	s.mu.Lock()
	s.rotate(now)
	s.cur.add(digest, hit, flag, key)
	s.mu.Unlock()
}

// rotate starts a new epoch when the window has passed; after two
// windows of silence both epochs are empty.
func (s *Sketch) rotate(now time.Time) {
	switch d := now.Sub(s.start); {
	case s.start.IsZero():
		s.start = now
	case d >= 2*s.window:
		s.prev.reset()
		s.cur.reset()
		s.start = now
	case d >= s.window:
		s.prev, s.cur = s.cur, s.prev
		s.cur.reset()
		s.start = s.start.Add(s.window)
	}
}

func (e *epoch) reset() {
	for i := range e.slots[:e.used] {
		sl := &e.slots[i]
		sl.digest, sl.count, sl.err, sl.hits, sl.flag, sl.key = 0, 0, 0, 0, false, sl.key[:0]
	}
	e.used, e.total = 0, 0
}

func (e *epoch) add(digest uint64, hit, flag bool, key [][]byte) {
	e.total++
	h := uint64(0)
	if hit {
		h = 1
	}
	minI := -1
	for i := range e.slots[:e.used] {
		sl := &e.slots[i]
		if sl.digest == digest {
			sl.count++
			sl.hits += h
			sl.flag = flag
			return
		}
		if minI < 0 || sl.count < e.slots[minI].count {
			minI = i
		}
	}
	var sl *slot
	if e.used < len(e.slots) {
		sl = &e.slots[e.used]
		e.used++
		sl.count, sl.err = 1, 0
	} else {
		// Space-saving: the newcomer takes the smallest slot and inherits
		// its count as an overestimate bound.
		sl = &e.slots[minI]
		sl.err = sl.count
		sl.count++
	}
	sl.digest, sl.flag, sl.hits = digest, flag, h
	sl.key = sl.key[:0]
	for _, k := range key {
		sl.key = append(sl.key, k[:min(len(k), MaxKeyLen-len(sl.key))]...)
	}
}

// Entry is one tracked key.
type Entry struct {
	Key string `json:"key"`
	// Count estimates the key's observations over the last one to two
	// windows (sampled counts scaled by the sample rate).
	Count uint64 `json:"count"`
	// Error bounds how much Count may overestimate (scaled likewise).
	Error uint64 `json:"error"`
	// Hits estimates how many of Count were cache hits (a lower bound
	// when the key took its slot by eviction).
	Hits uint64 `json:"hits"`
	// Flag is the attribute last observed with the key.
	Flag bool `json:"flag"`
}

// Top returns up to n keys, heaviest first, counting both epochs.
func (s *Sketch) Top(n int, now time.Time) []Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.start.IsZero() {
		s.rotate(now)
	}
	byDigest := make(map[uint64]int, s.cur.used+s.prev.used)
	var out []Entry
	for _, e := range []*epoch{&s.prev, &s.cur} {
		for i := range e.slots[:e.used] {
			sl := &e.slots[i]
			if j, ok := byDigest[sl.digest]; ok {
				out[j].Count += sl.count * s.sample
				out[j].Error += sl.err * s.sample
				out[j].Hits += sl.hits * s.sample
				out[j].Flag = sl.flag
				continue
			}
			byDigest[sl.digest] = len(out)
			out = append(out, Entry{Key: string(sl.key), Count: sl.count * s.sample, Error: sl.err * s.sample, Hits: sl.hits * s.sample, Flag: sl.flag})
		}
	}
	slices.SortStableFunc(out, func(a, b Entry) int { return cmp.Compare(b.Count, a.Count) })
	return out[:min(n, len(out))]
}

// Total estimates the observations over the same span as Top.
func (s *Sketch) Total() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return (s.cur.total + s.prev.total) * s.sample
}
