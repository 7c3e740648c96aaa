package proxy

import (
	"bytes"
	"strconv"
	"sync"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/proxy/cache"
	"github.com/shield-proxy/shield/proxy/httpx"
)

// A hit's head. fasthttp offers no way to send prepared header bytes: a
// handler's answer is a ResponseHeader, filled field by field (each
// copied, normalised, checked for special names) or parsed from a block
// (slower still: every byte is validated). Copying a ResponseHeader that
// already holds the fields (CopyTo) costs a quarter of parsing them and
// half of setting them. So the entry carries its head prepared as bytes
// (proxy/cache/entry.go: status line and stored fields, the origin's Date among
// them), and heads keeps recently served ones parsed, one slot per key
// digest modulo headSlots: a hit copies the parsed head, with its own
// fields (Age, Cache-Status) set in the slot once per second.
//
// A slot holds one parsed head and is reused in place, so that a hit
// allocates nothing, whatever the working set. A hit that finds the slot
// holding its head, stamped for this second, copies it under the read
// lock: hits of one hot key on several cores copy it at once. Any other
// hit takes the write lock to fill or stamp the slot: a slot held by
// another hit (TryRLock or TryLock fails: hits never wait) is bypassed
// by parsing the entry's head straight into the answer; a slot holding
// another head takes this one (parsed into the answer, then copied into
// the slot). A slot answers only for
// the exact head bytes it was filled from, so a refreshed or purged
// entry can never get an older head.
//
// CopyTo also carries fasthttp's NoDefaultDate setting of the header the
// slot was filled from: every server shield runs sets it (servers.go),
// which is what keeps the stored Date on the wire.

// headSlots is the number of parsed heads kept: about 1 KiB each for a
// usual head, at most a few times headReadSize.
const headSlots = 2048

type headSlot struct {
	mu  sync.RWMutex
	raw []byte // the entry head this slot holds parsed; nil: none
	hdr fasthttp.ResponseHeader
	// hdr also holds the per-hit fields of the last hit it served: a hot
	// key's hits within one second share them, and copy them with the
	// rest instead of setting two fields each (stamp).
	age, ttl int64
	cs       *byte // csPrefix of those fields (csHitTTL or csStaleSWR)
	stamped  bool
	dated    bool // hdr has a Date field (a stored head always does)
}

type heads struct{ slots [headSlots]headSlot }

// hitHeadEnd completes a prepared head into a block fasthttp reads. Without
// Content-Length fasthttp would read the answer as delimited by closing
// the connection and send Connection: close; writing the answer sets the
// body's length.
var hitHeadEnd = []byte("Content-Length: 0\r\n\r\n")

// write gives resp the head of e, a full answer (not a 304), with its
// Age and Cache-Status (csPrefix followed by ttl). It reports false when
// e has no prepared head or it does not parse; resp's header is then
// reset. A head copied from a slot that holds a Date sets sc.dated, so
// the public handler skips looking for one (serve, httpx.EnsureDate).
func (hs *heads) write(resp *fasthttp.Response, sc *scratch, e *cache.Entry, age, ttl int64, csPrefix []byte) bool {
	if len(e.Head) == 0 || len(e.Head)+len(hitHeadEnd) > headReadSize {
		return false
	}
	// The slot is the key's: hashing the head would let keys with equal
	// heads share one, but costs more than it saves; the comparison
	// below is what makes a slot's head the entry's.
	s := &hs.slots[e.KeyDigest%headSlots]
	// Most hits find the slot holding this head stamped for this second:
	// they only read it, many at once (CopyTo reads its source only).
	if s.mu.TryRLock() {
		if s.current(e.Head, age, ttl, csPrefix) {
			s.hdr.CopyTo(&resp.Header)
			sc.dated = s.dated
			s.mu.RUnlock()
			return true
		}
		s.mu.RUnlock()
	}
	if !s.mu.TryLock() {
		if !sc.readHead(resp, e.Head) {
			return false
		}
		stamp(&resp.Header, sc, age, ttl, csPrefix)
		return true
	}
	defer s.mu.Unlock()
	if len(s.raw) == 0 || !bytes.Equal(s.raw, e.Head) {
		// Parsed in the answer, then copied into the slot.
		if !sc.readHead(resp, e.Head) {
			return false
		}
		resp.Header.CopyTo(&s.hdr)
		plainStatusLine(&s.hdr)
		s.raw, s.stamped = append(s.raw[:0], e.Head...), false
		s.dated = len(s.hdr.PeekCanonical(httpx.HDate)) > 0
	}
	if !s.current(e.Head, age, ttl, csPrefix) {
		stamp(&s.hdr, sc, age, ttl, csPrefix)
		s.age, s.ttl, s.cs, s.stamped = age, ttl, &csPrefix[0], true
	}
	s.hdr.CopyTo(&resp.Header)
	sc.dated = s.dated
	return true
}

// current reports whether s holds head, stamped with age, ttl and
// csPrefix (s.mu held, read or write).
func (s *headSlot) current(head []byte, age, ttl int64, csPrefix []byte) bool {
	return s.stamped && s.age == age && s.ttl == ttl && s.cs == &csPrefix[0] &&
		len(s.raw) > 0 && bytes.Equal(s.raw, head)
}

// plainStatusLine drops a parsed status line's protocol and reason when
// they are the defaults ("HTTP/1.1"; the code's standard reason, or none
// as the stored line has): h then sends fasthttp's prepared line for the
// code, the same bytes, instead of formatting it on every hit.
func plainStatusLine(h *fasthttp.ResponseHeader) {
	if msg := h.StatusMessage(); string(h.Protocol()) == "HTTP/1.1" && (len(msg) == 0 || string(msg) == fasthttp.StatusMessage(h.StatusCode())) {
		h.SetProtocol(nil)
		h.SetStatusMessage(nil)
	}
}

// stamp sets a hit's own fields on h. The names are canonical:
// SetCanonical skips normalising them.
func stamp(h *fasthttp.ResponseHeader, sc *scratch, age, ttl int64, csPrefix []byte) {
	sc.tmp = strconv.AppendInt(sc.tmp[:0], age, 10)
	h.SetCanonical(httpx.HAge, sc.tmp)
	sc.tmp = strconv.AppendInt(append(sc.tmp[:0], csPrefix...), ttl, 10)
	h.SetCanonical(httpx.HCacheStatus, sc.tmp)
}

// readHead parses head, completed by hitHeadEnd, into resp's header.
func (sc *scratch) readHead(resp *fasthttp.Response, head []byte) bool {
	sc.head = append(append(sc.head[:0], head...), hitHeadEnd...)
	sc.rd.Reset(sc.head)
	sc.br.Reset(&sc.rd)
	// Stored names are canonical already (normalised when the origin's
	// answer was parsed); normal behaviour is restored for whoever reads
	// the header next.
	resp.Header.DisableNormalizing()
	err := resp.Header.Read(sc.br)
	resp.Header.EnableNormalizing()
	return err == nil && !resp.Header.ConnectionClose()
}
