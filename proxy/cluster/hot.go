package cluster

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// hotKeys approximately tracks the most requested keys, for near copies
// at the edge and for the hand-off of a leaving node's hottest entries.
//
// It is a fixed table of slots, one per key hash (a key that collides
// with a busier one decrements it, the space-saving idea), fed by a
// 1-in-hotSample sample of requests and decayed by halving every second.
// It allocates nothing after construction: keys are copied into each
// slot's preallocated buffer (keys longer than hotKeyCap are not
// tracked). A sampled request takes one slot's mutex; unsampled ones touch
// nothing shared.
type hotKeys struct {
	slots []hotSlot
}

const (
	hotSlots  = 4096
	hotSample = 16
	hotKeyCap = 512
)

type hotSlot struct {
	mu     sync.Mutex // guards the fields below
	digest uint64
	count  uint32
	second int64 // unix second of the last decay
	key    []byte
}

func newHotKeys() *hotKeys {
	h := &hotKeys{slots: make([]hotSlot, hotSlots)}
	for i := range h.slots {
		h.slots[i].key = make([]byte, 0, hotKeyCap)
	}
	return h
}

// touch samples one request for key and returns the key's estimated rate
// in requests per second (0 when this request was not sampled).
func (h *hotKeys) touch(key []byte, digest uint64, now time.Time) float64 {
	if rand.Uint32()%hotSample != 0 || len(key) > hotKeyCap {
		return 0
	}
	s := &h.slots[digest%hotSlots]
	sec := now.Unix()
	s.mu.Lock()
	if d := sec - s.second; d > 0 {
		s.count >>= min(d, 31)
		s.second = sec
	}
	switch {
	case s.digest == digest && s.count > 0:
		s.count++
	case s.count <= 1:
		s.digest, s.count = digest, 1
		s.key = append(s.key[:0], key...)
	default:
		s.count--
	}
	c := 0.0
	if s.digest == digest {
		// count ≈ sampled hits over the last ~2 seconds (halving decay).
		c = float64(s.count) * hotSample / 2
	}
	s.mu.Unlock()
	return c
}

// top returns copies of up to n tracked keys, busiest first.
func (h *hotKeys) top(n int) [][]byte {
	type kc struct {
		key   []byte
		count uint32
	}
	var all []kc
	for i := range h.slots {
		s := &h.slots[i]
		s.mu.Lock()
		if s.count > 0 && len(s.key) > 0 {
			all = append(all, kc{key: append([]byte(nil), s.key...), count: s.count})
		}
		s.mu.Unlock()
	}
	slices.SortFunc(all, func(a, b kc) int { return cmp.Compare(b.count, a.count) })
	out := make([][]byte, 0, min(n, len(all)))
	for i := 0; i < len(all) && i < n; i++ {
		out = append(out, all[i].key)
	}
	return out
}
