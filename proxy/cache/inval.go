package cache

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
)

// Invalidation ordering: one mechanism for every invalidation (purge by
// URL or tag, hard or soft, and the invalidation a successful unsafe
// request causes).
//
//   - The node has one invalidation clock: a strictly increasing int64,
//     max(unix ns, last+1), so its values are also instants. Every fetch
//     for the cache takes a value when it starts (fetchSeq, stored in the
//     entry) and every invalidation takes one too; "the fetch started
//     before the invalidation" is exactly fetchSeq < invalidation seq.
//   - The table has a fixed number of slots per kind (URL, tag), indexed
//     by digest; a slot holds the sequence of the latest hard and soft
//     invalidation of any URL (tag) hashing there. Memory is bounded
//     (invalSlots × 16 bytes per kind) and never overflows: two URLs that
//     share a slot share invalidations, which can only turn an entry into
//     a miss (or stale), never serve a purged one.
//   - At lookup an entry is dead when a hard slot of its URL or of one of
//     its tags is above its fetchSeq, and stale from the purge instant when
//     a soft one is (stale-while-revalidate and stale-if-error windows are
//     measured from there). Purge cost is O(1) (O(1) per tag): nothing is
//     scanned, and nothing stored before the purge can be served after
//     it, whenever it was stored — so a fetch that raced a purge cannot
//     undo it. Stores of such answers are also refused (Put: the store does
//     not need to hold them).
//   - An answer never replaces an entry whose fetch started later (the
//     stored fetchSeq is compared under a per-key stripe lock).
//   - Global is a watermark: entries fetched before it are dead. A node
//     that cannot tell which purges it missed raises it (see restart).
//
// Route and tenant purges bump the namespace version in the key instead
// (proxy's purge.go): an in-flight fetch stores under the old, unreachable key.
const invalSlots = 1 << 16

type invalSlot struct{ hard, soft atomic.Int64 }

// Invalidations is the node's invalidation table and clock (see above).
// Gated, Lease and Global are read on every lookup and set by the purge
// sync (proxy's purgesync.go) and the snapshot hold.
type Invalidations struct {
	clock atomic.Int64
	// Global is the watermark: entries fetched before it are dead.
	Global atomic.Int64
	// Gated is set while this node may be missing purges a peer applied
	// (proxy's purgesync.go): nothing is served from the cache then.
	Gated atomic.Bool
	// Lease, when not 0 (dynamic membership), is the instant (unix ns)
	// the purge sync's watchdog vouches for the cache until: a request
	// later than it finds nothing servable. The watchdog renews it every
	// stallTick; a process stopped or starved past it (SIGSTOP, a paused
	// VM) may have missed purges pushed meanwhile, and its requests may
	// run before the watchdog notices and closes the gate (proxy's
	// purgesync.go).
	Lease atomic.Int64
	url   [invalSlots]invalSlot
	tag   [invalSlots]invalSlot
}

func newInvalidations() *Invalidations {
	iv := &Invalidations{}
	iv.clock.Store(time.Now().UnixNano())
	return iv
}

// Next returns a new clock value, above every value returned before.
func (iv *Invalidations) Next() int64 {
	for {
		last := iv.clock.Load()
		n := max(time.Now().UnixNano(), last+1)
		if iv.clock.CompareAndSwap(last, n) {
			return n
		}
	}
}

func bump(a *atomic.Int64, seq int64) {
	for {
		cur := a.Load()
		if cur >= seq || a.CompareAndSwap(cur, seq) {
			return
		}
	}
}

// InvalidateURL records a hard (or soft) invalidation of a URL digest
// and returns its sequence.
func (iv *Invalidations) InvalidateURL(d uint64, soft bool) int64 {
	return iv.mark(&iv.url[d%invalSlots], soft)
}

// InvalidateTag records a hard (or soft) invalidation of a surrogate key.
func (iv *Invalidations) InvalidateTag(tag []byte, soft bool) int64 {
	return iv.mark(&iv.tag[xxhash.Sum64(tag)%invalSlots], soft)
}

func (iv *Invalidations) mark(s *invalSlot, soft bool) int64 {
	seq := iv.Next()
	if soft {
		bump(&s.soft, seq)
	} else {
		bump(&s.hard, seq)
	}
	return seq
}

// InvalidateAll makes every entry fetched before now dead.
func (iv *Invalidations) InvalidateAll() { bump(&iv.Global, iv.Next()) }

// Verdict says what the invalidations since an entry's fetch mean for it:
// dead (a hard invalidation), or the instant it became stale (softAt > 0).
// It does not allocate.
func (iv *Invalidations) Verdict(fetchSeq int64, urlDigest uint64, tags []byte) (dead bool, softAt int64) {
	if fetchSeq < iv.Global.Load() {
		return true, 0
	}
	s := &iv.url[urlDigest%invalSlots]
	if s.hard.Load() > fetchSeq {
		return true, 0
	}
	if v := s.soft.Load(); v > fetchSeq {
		softAt = v
	}
	for i := 0; i+8 <= len(tags); i += 8 {
		s := &iv.tag[binary.LittleEndian.Uint64(tags[i:])%invalSlots]
		if s.hard.Load() > fetchSeq {
			return true, 0
		}
		if v := s.soft.Load(); v > fetchSeq && (softAt == 0 || v < softAt) {
			softAt = v
		}
	}
	return false, softAt
}

// Servable is Apply for an entry about to be served from this node's
// cache at now (the request's time): while the node is out of purge
// sync, or past its sync lease, nothing is.
func (iv *Invalidations) Servable(e *Entry, now time.Time) bool {
	// The lease first: the watchdog closes the gate before it renews
	// the lease, so a renewed lease read here means a closed gate below.
	if l := iv.Lease.Load(); l != 0 && now.UnixNano() > l {
		return false
	}
	return !iv.Gated.Load() && iv.Apply(e)
}

// Apply checks e against the table: false when e is dead; a soft-purged
// e has its lifetime cut so that it is stale from the purge on.
func (iv *Invalidations) Apply(e *Entry) bool {
	dead, softAt := iv.Verdict(e.FetchSeq, e.URLDigest, e.Tags)
	if dead {
		return false
	}
	if softAt > 0 {
		e.Lifetime = min(e.Lifetime, e.InitialAge+(softAt-e.StoredAt))
	}
	return true
}

// AppendTags appends the digests of the space-separated surrogate keys
// in v (at most MaxTags in all).
func AppendTags(dst, v []byte) []byte {
	for len(v) > 0 && len(dst) < MaxTags*8 {
		i := 0
		for i < len(v) && (v[i] == ' ' || v[i] == '\t' || v[i] == ',') {
			i++
		}
		j := i
		for j < len(v) && v[j] != ' ' && v[j] != '\t' && v[j] != ',' {
			j++
		}
		if j > i {
			dst = binary.LittleEndian.AppendUint64(dst, xxhash.Sum64(v[i:j]))
		}
		v = v[j:]
	}
	return dst
}

// Persistence: the table is saved beside the cache snapshot (and after
// every purge), so a restart keeps every invalidation it knew of. Layout:
// "SHI1" | clock i64 | global i64 | count u32 | count × (kind u8 | slot u32 | hard i64 | soft i64).
const invalMagic = "SHI1"

func (iv *Invalidations) encode() []byte {
	b := append([]byte(invalMagic), make([]byte, 20)...)
	binary.LittleEndian.PutUint64(b[4:], uint64(iv.clock.Load()))
	binary.LittleEndian.PutUint64(b[12:], uint64(iv.Global.Load()))
	n := uint32(0)
	for k, tab := range []*[invalSlots]invalSlot{&iv.url, &iv.tag} {
		for i := range tab {
			h, s := tab[i].hard.Load(), tab[i].soft.Load()
			if h == 0 && s == 0 {
				continue
			}
			b = append(b, byte(k))
			b = binary.LittleEndian.AppendUint32(b, uint32(i))
			b = binary.LittleEndian.AppendUint64(b, uint64(h))
			b = binary.LittleEndian.AppendUint64(b, uint64(s))
			n++
		}
	}
	binary.LittleEndian.PutUint32(b[20:], n)
	return b
}

func (iv *Invalidations) decode(b []byte) error {
	if len(b) < 24 || string(b[:4]) != invalMagic {
		return fmt.Errorf("cache: invalidation table: bad header")
	}
	n := int(binary.LittleEndian.Uint32(b[20:]))
	rest := b[24:]
	if len(rest) != n*21 {
		return fmt.Errorf("cache: invalidation table: %d bytes for %d slots", len(rest), n)
	}
	bump(&iv.clock, int64(binary.LittleEndian.Uint64(b[4:])))
	bump(&iv.Global, int64(binary.LittleEndian.Uint64(b[12:])))
	for ; len(rest) > 0; rest = rest[21:] {
		kind, i := rest[0], binary.LittleEndian.Uint32(rest[1:])
		if kind > 1 || i >= invalSlots {
			return fmt.Errorf("cache: invalidation table: bad slot")
		}
		tab := &iv.url
		if kind == 1 {
			tab = &iv.tag
		}
		bump(&tab[i].hard, int64(binary.LittleEndian.Uint64(rest[5:])))
		bump(&tab[i].soft, int64(binary.LittleEndian.Uint64(rest[13:])))
	}
	return nil
}

func (iv *Invalidations) save(path string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, iv.encode(), 0o644); err != nil {
		return fmt.Errorf("cache: save invalidations: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("cache: save invalidations: %w", err)
	}
	return nil
}

func (iv *Invalidations) load(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return iv.decode(b)
}
