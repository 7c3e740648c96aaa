package proxy

import (
	"bytes"
	"sync"

	"github.com/valyala/fasthttp"
)

// A hit's head. fasthttp offers no way to send prepared header bytes: a
// handler's answer is a ResponseHeader, filled field by field (each
// copied, normalised, checked for special names) or parsed from a block
// (slower still: every byte is validated). Copying a ResponseHeader that
// already holds the fields (CopyTo) costs a quarter of parsing them and
// half of setting them. So the entry carries its head prepared as bytes
// (entry.go: status line and stored fields, the origin's Date among
// them), and heads keeps recently served ones parsed, one slot per key
// digest modulo headSlots: a hit copies the parsed head and sets its own
// fields (Age, Cache-Status) on top.
//
// A slot holds one parsed head and is reused in place, so that a hit
// allocates nothing, whatever the working set: a slot held by another
// hit (TryLock) or holding another head is bypassed by parsing the
// entry's head straight into the answer, and the latter is then parsed
// into the slot too, which keeps it.

// headSlots is the number of parsed heads kept (a few KiB each at most).
const headSlots = 2048

type headSlot struct {
	mu  sync.Mutex
	raw []byte // the entry head this slot holds parsed; nil: none
	hdr fasthttp.ResponseHeader
}

type heads struct{ slots [headSlots]headSlot }

// headEnd completes a prepared head into a block fasthttp reads. Without
// Content-Length fasthttp would read the answer as delimited by closing
// the connection and send Connection: close; writing the answer sets the
// body's length.
var headEnd = []byte("Content-Length: 0\r\n\r\n")

// write gives resp the head of e, a full answer (not a 304), without its
// per-hit fields. It reports false when e has no prepared head or it does
// not parse; resp's header is then reset.
func (hs *heads) write(resp *fasthttp.Response, sc *scratch, e *entry) bool {
	if len(e.head) == 0 || len(e.head)+len(headEnd) > headReadSize {
		return false
	}
	// The slot is the key's: hashing the head would let keys with equal
	// heads share one, but costs more than it saves; the comparison
	// below is what makes a slot's head the entry's.
	s := &hs.slots[e.keyDigest%headSlots]
	if !s.mu.TryLock() {
		return sc.readHead(resp, e.head)
	}
	defer s.mu.Unlock()
	if bytes.Equal(s.raw, e.head) && s.raw != nil {
		s.hdr.CopyTo(&resp.Header)
		return true
	}
	if !sc.readHead(resp, e.head) {
		return false
	}
	resp.Header.CopyTo(&s.hdr)
	s.raw = append(s.raw[:0], e.head...)
	return true
}

// readHead parses head, completed by headEnd, into resp's header.
func (sc *scratch) readHead(resp *fasthttp.Response, head []byte) bool {
	sc.head = append(append(sc.head[:0], head...), headEnd...)
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
