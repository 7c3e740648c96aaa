package proxy

import (
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/proxy/cache"
	"github.com/shield-proxy/shield/stale"
)

// Fresh hits whose body is a stream rather than the response's buffer:
//
//   - a disk tier entry (diskhit.go): the body stream is the file,
//     sent with sendfile on plain TCP connections;
//   - a large memory entry stored in pieces by this process
//     (proxy/cache's piecestream.go): the body stream reads eight pieces
//     at a time into a pooled buffer and writes them to the connection,
//     so a hit holds 256 KiB, not the whole body (fifty concurrent hits of a
//     32 MiB object held 1.6 GiB when each read it whole). Its pieces are
//     checked present before the hit is committed to; one evicted while
//     the body is sent ends the stream with an error, and the server
//     closes the connection (HTTP/2: the stream is reset), so the client
//     sees a truncated transfer, never a short body presented as complete.
//
// Both answer HEAD, 304 and identity requests with their head. A single
// Range (or an unsatisfiable one) is cut from a memory entry's pieces;
// multiple ranges, ranges of a disk entry, stale answers, revalidations,
// coded siblings, eager refreshes, forwarded and read-through requests
// read the entry whole (cache.GetVerified) and take the buffer path
// unchanged, as do memory entries loaded from a snapshot (their checksum
// is checked on the whole entry before anything is sent).

// memStreamMin is the smallest encoded entry a memory hit streams.
// Smaller entries in pieces are read whole into the request's buffer and
// leave in one writev with their head (listener.Coalesce); a stream
// leaves piece by piece through fasthttp's write buffer, several writes
// an answer. Measured with wrk -t2 -c64 against two builds side by side
// (4 interleaved rounds, /tmp-style A/B of make bench-peers' objects):
// streaming every entry in pieces cost a 100 KiB hit 25 % of its req/s
// and 20-35 % more CPU per hit (10.4-16.7k vs 11.0-21.8k req/s, 57-76 vs
// 40-69 µs/hit); at 512 KiB the two were equal within noise. From
// 1 MiB up a hit in flight holds a buffer of pieces instead of the whole
// entry, so N concurrent hits of a large object cost N buffers, not N
// copies.
const memStreamMin = 1 << 20

// getEntry is the lookup's store read: GetVerified, except that when the
// request can be answered from a stream (sc.streamOK) a disk entry or a
// large memory entry comes back as its metadata, its body left in sc.file
// or sc.pieces (sc.bodyLen bytes).
func (p *Proxy) getEntry(b, key []byte, sc *scratch) ([]byte, bool) {
	if !sc.streamOK {
		return p.getWhole(b, key, sc)
	}
	b, verified, f, r, n := p.cache.GetVerifiedOrStream(b, key, memStreamMin)
	if f != nil || r != nil {
		sc.closeStream()
		sc.file, sc.pieces, sc.bodyLen = f, r, n
	}
	return b, verified
}

// getWhole is the store read of an entry read whole: GetVerified, or for
// a request served inline (sc.memOnly) its memory-only form — no disk
// tier, no entry of memStreamMin bytes or more (a worker serves those).
func (p *Proxy) getWhole(b, key []byte, sc *scratch) ([]byte, bool) {
	if sc.memOnly {
		return p.cache.GetVerifiedMem(b, key, memStreamMin)
	}
	return p.cache.GetVerified(b, key)
}

// closeStream closes a body stream the request did not send.
func (sc *scratch) closeStream() {
	if sc.file != nil {
		_ = sc.file.Close()
		sc.file = nil
	}
	if sc.pieces != nil {
		_ = sc.pieces.Close()
		sc.pieces = nil
	}
	sc.bodyLen = 0
}

// streamLookup answers a fresh hit whose body is a stream (done), or
// returns the lookup again with the entry read whole, for serveLookup's
// other paths.
func (p *Proxy) streamLookup(ctx *fasthttp.RequestCtx, rte *route, sc *scratch, e *cache.Entry, b []byte, lk lookupResult, now time.Time) (_ []byte, _ lookupResult, done bool) {
	if lk != lkHit {
		sc.closeStream()
		return b, lk, false
	}
	if (e.Kind == cache.KindResponse || e.Kind == cache.KindNearCopy) && sc.streamRange(&ctx.Request.Header, e) {
		age := e.Age(now)
		eager := rte.eagerRefresh > 0 && float64(age) >= float64(e.Lifetime)*rte.eagerRefresh
		if !eager && e.Classify(age, &sc.cc) == stale.Fresh {
			p.serveStreamHit(ctx, sc, e, b, age, csHitTTL)
			return b, lk, true
		}
	}
	sc.closeStream()
	sc.streamOK = false
	b, lk = p.lookup(b[:0], ctx, sc, e)
	return b, lk, false
}

// streamRange reports whether the request's Range, if any, can be
// answered from the stream: none, one ignored, or (memory entries) a
// single or unsatisfiable range. A multipart answer is built from the
// whole entry.
func (sc *scratch) streamRange(h *fasthttp.RequestHeader, e *cache.Entry) bool {
	if sc.present&fieldRange == 0 || !wantsRange(h, e) {
		return true
	}
	if sc.pieces == nil {
		return false
	}
	if !ifRangeMatches(h, e) {
		return true
	}
	var ok bool
	sc.ranges, ok = parseRanges(sc.ranges[:0], h.PeekCanonical(hRange), int(sc.bodyLen))
	return !ok || len(sc.ranges) <= 1
}

// serveStreamHit is serveHit for an entry whose body is the stream in
// sc.file or sc.pieces (sc.bodyLen bytes): the response's body stream,
// closed once sent.
func (p *Proxy) serveStreamHit(ctx *fasthttp.RequestCtx, sc *scratch, e *cache.Entry, b []byte, age time.Duration, csPrefix []byte) {
	resp := &ctx.Response
	c := p.hitHead(ctx, sc, e, age, csPrefix)
	resp.SwapBody(b[:0])
	if c != condNone {
		sc.closeStream()
		if c == condNotModified {
			resp.SetStatusCode(fasthttp.StatusNotModified)
		}
		return
	}
	n := sc.bodyLen
	if sc.pieces != nil && sc.present&fieldRange != 0 && wantsRange(&ctx.Request.Header, e) {
		var rs []byteRange
		var whole bool
		rs, whole, sc.tmp = rangeHead(resp, &ctx.Request.Header, e, int(n), sc.tmp, sc.ranges)
		sc.ranges = rs
		switch {
		case whole || len(rs) > 1: // more than one: streamRange sent it elsewhere
		case len(rs) == 0:
			sc.closeStream()
			return
		default:
			n = int64(rs[0].last - rs[0].first + 1)
			sc.pieces.Limit(int64(rs[0].first), n)
		}
	}
	if sc.file != nil {
		resp.SetBodyStream(sc.file, int(n))
	} else {
		resp.SetBodyStream(sc.pieces, int(n))
	}
	sc.file, sc.pieces, sc.bodyLen = nil, nil, 0
}
