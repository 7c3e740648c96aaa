package cluster

import (
	"errors"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/breaker"
	"github.com/shield-proxy/shield/proxy/httpx"
	"github.com/shield-proxy/shield/routing"
)

// Forward is one request on its way to the key's owner: Begin checks
// the owner's breaker, the caller builds the request (its fields, then
// SetForwardHead), and Do sends it. Nothing in it allocates: it is on
// the path of every forwarded hit.
type Forward struct {
	pc    *Peer
	probe bool     // the breaker's half-open probe
	mc    *muxConn // the connection UseMux found
}

// Owner is the id of the peer the request goes to.
func (f Forward) Owner() string { return f.pc.id }

// Begin starts a forward to the current peer owner; ok is false when
// there is no such peer or its breaker is open (counted as skipped): the
// caller then serves the request locally.
func (c *Node) Begin(owner string, now int64) (f Forward, ok bool) {
	pc := c.peers.Load().byID[owner]
	if pc == nil {
		return Forward{}, false
	}
	ok, probe := pc.skip.allow(now)
	if !ok {
		pc.outcomes[PeerSkipped].Inc()
		return Forward{}, false
	}
	return Forward{pc: pc, probe: probe}, true
}

// SetForwardHead sets the peer protocol's fields on a forwarded request:
// the generation routed by, the tenant the edge admitted it for, the
// shared secret, and the client's address. The names are canonical:
// SetCanonical skips normalising them.
func (c *Node) SetForwardHead(h ReqHead, gen uint64, tid, clientIP []byte) {
	c.setPeerAuth(h, gen)
	h.SetCanonical(HTenant, tid)
	h.SetCanonical(HClientIP, clientIP) // for owners from before Shield-Forwarded
}

// Do sends req to the owner and returns its answer (the caller releases
// it). ok is false when the owner could not answer — an error, a 421, a
// 403 from the peer protocol — and the caller then serves the request
// locally. The owner's 103 Early Hints reach client (at most maxHints).
func (c *Node) Do(client *fasthttp.RequestCtx, f Forward, req *fasthttp.Request, maxHints int) (resp *fasthttp.Response, ok bool) {
	return c.DoEntry(client, f, req, maxHints, nil)
}

// DoEntry is Do, asking the owner for an entry answer (muxentry.go) when
// ent.Want and the request goes over the multiplexed transport. When
// ent.Got after ok, the answer is ent's, not resp's (empty; the caller
// releases it), and the caller checks the entry and reports the verdict
// with EntryChecked: one that does not check is a failed forward (served
// locally) and counts against the owner's breaker, as a transport error
// does — an owner whose answers keep arriving damaged is skipped.
func (c *Node) DoEntry(client *fasthttp.RequestCtx, f Forward, req *fasthttp.Request, maxHints int, ent *EntryAnswer) (resp *fasthttp.Response, ok bool) {
	pc := f.pc
	resp = fasthttp.AcquireResponse()
	var err error
	sent := false
	if ent != nil {
		ent.Got = false
	}
	if mc := pc.muxConn(req.Header.IsGet() || req.Header.IsHead()); mc != nil {
		mr := AcquireMuxRequest()
		mr.b = appendRequest(mr.b, req, 0)
		mr.head = req.Header.IsHead()
		sent, err = mc.do(client, mr, resp, maxHints, c.timeout, ent)
		ReleaseMuxRequest(mr)
	}
	if sent {
		pc.viaMux.Inc()
	} else {
		pc.viaHTTP.Inc()
		tok := httpx.WatchHints(req, client, maxHints)
		err = pc.hc.DoDeadline(req, resp, time.Now().Add(c.timeout))
		httpx.EndHints(req, tok)
	}
	return c.conclude(f, resp, err, ent)
}

// UseMux reports whether a request with this method to f's owner goes
// over a multiplexed connection (the transport is on, the method is GET
// or HEAD and the peer has one open): the caller then encodes it as a
// MuxRequest and sends it with DoMux, else it builds a fasthttp.Request
// for DoEntry.
func (f *Forward) UseMux(method []byte) bool {
	f.mc = f.pc.muxConn(string(method) == fasthttp.MethodGet || string(method) == fasthttp.MethodHead)
	return f.mc != nil
}

// DoMux is DoEntry for a request encoded as mr, sent over the
// connection UseMux found. sent is false when the request was not sent
// (the connection filled up, closed or is closing; nothing counted): the
// caller then sends it with DoEntry.
func (c *Node) DoMux(client *fasthttp.RequestCtx, f Forward, mr *MuxRequest, maxHints int, ent *EntryAnswer) (resp *fasthttp.Response, ok, sent bool) {
	resp = fasthttp.AcquireResponse()
	if ent != nil {
		ent.Got = false
	}
	sent, err := f.mc.do(client, mr, resp, maxHints, c.timeout, ent)
	if !sent {
		fasthttp.ReleaseResponse(resp)
		return nil, false, false
	}
	f.pc.viaMux.Inc()
	resp, ok = c.conclude(f, resp, err, ent)
	return resp, ok, true
}

// conclude gives f's owner's breaker and counters the outcome of a
// forward (err, resp) and returns the answer DoEntry returns.
func (c *Node) conclude(f Forward, resp *fasthttp.Response, err error, ent *EntryAnswer) (*fasthttp.Response, bool) {
	pc := f.pc
	outcome := breaker.Success
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		outcome = breaker.Ignored // a large object, served locally; the peer is fine
	} else if err != nil {
		outcome = breaker.Failure
	} else if s := resp.StatusCode(); s == fasthttp.StatusMisdirectedRequest || s == fasthttp.StatusForbidden {
		outcome = breaker.Ignored
	}
	if !(err == nil && ent != nil && ent.Got) {
		pc.skip.done(f.probe, outcome, time.Now().UnixNano())
	}
	switch {
	case err != nil:
		pc.outcomes[PeerError].Inc()
		fasthttp.ReleaseResponse(resp)
		c.src.Refresh()
		c.logger.Debug("peer forward failed, serving locally", "peer", pc.id, "err", err)
		return nil, false
	case resp.StatusCode() == fasthttp.StatusMisdirectedRequest:
		pc.outcomes[PeerMisdirected].Inc()
		_ = resp.CloseBodyStream()
		fasthttp.ReleaseResponse(resp)
		c.src.Refresh()
		return nil, false
	case resp.StatusCode() == fasthttp.StatusForbidden && len(resp.Header.PeekBytes(hShieldGeneration)) > 0:
		pc.outcomes[PeerForbidden].Inc()
		_ = resp.CloseBodyStream()
		fasthttp.ReleaseResponse(resp)
		return nil, false
	}
	if ent != nil && ent.Got {
		c.entryAnswers.Add(1)
		return resp, true // outcome: EntryChecked
	}
	pc.outcomes[PeerOK].Inc()
	return resp, true
}

// EntryChecked gives f's owner's breaker the verdict on an entry answer
// (DoEntry with ent.Got): ok when the entry checked (checksum, kind,
// key), counted as a forward that succeeded; otherwise a failure, as a
// transport error is, so that an owner sending damaged entries trips
// the breaker and its keys are served locally while it is skipped.
func (c *Node) EntryChecked(f Forward, ok bool) {
	pc := f.pc
	if ok {
		pc.skip.done(f.probe, breaker.Success, time.Now().UnixNano())
		pc.outcomes[PeerOK].Inc()
		return
	}
	pc.skip.done(f.probe, breaker.Failure, time.Now().UnixNano())
	pc.outcomes[PeerError].Inc()
	c.logger.Debug("peer entry answer failed its check, serving locally", "peer", pc.id)
}

// muxConn returns the multiplexed connection a request goes over, nil
// when it goes over HTTP: the transport is off, the method is not GET or
// HEAD (getOrHead false), or the peer has no connection open (yet, or it
// does not speak it).
func (pc *Peer) muxConn(getOrHead bool) *muxConn {
	if pc.mux == nil || !getOrHead {
		return nil
	}
	return pc.mux.conn()
}

// RelayPeerHead copies an owner's answer head and appends this node's
// Cache-Status member (RFC 9211 lists caches from the origin outwards):
// "shield-edge; detail=peer-<owner>". The owner is a shield node: its
// answer has no hop-by-hop fields but its connection's own, so the head
// is copied whole (cheaper than field by field) and that one is reset.
// buf is scratch space for the member (returned for reuse), so relaying
// allocates nothing.
func RelayPeerHead(out, resp *fasthttp.Response, owner string, buf []byte) []byte {
	resp.Header.CopyTo(&out.Header)
	out.Header.ResetConnectionClose()
	out.Header.DelBytes(HTags)
	buf = append(append(buf[:0], csEdgePeer...), owner...)
	out.Header.AddBytesKV(httpx.HCacheStatus, buf)
	return buf
}

// AppendPeerCacheStatus appends the Cache-Status member RelayPeerHead
// adds, for an answer the edge served from the owner's entry.
func AppendPeerCacheStatus(dst []byte, owner string) []byte {
	return append(append(dst, csEdgePeer...), owner...)
}

// csEdgePeer starts the Cache-Status member of an answer relayed from the
// key's owner.
var csEdgePeer = []byte("shield-edge; detail=peer-")

// NearCopyStored counts a near copy kept at this edge.
func (c *Node) NearCopyStored() { c.nearStored.Inc() }

// NearCopyHit counts a request answered from a near copy.
func (c *Node) NearCopyHit() { c.nearHits.Inc() }

// ReadThroughPeer returns the client of the key's previous owner when a
// membership change inside the overlap window moved the key here.
func (c *Node) ReadThroughPeer(v *routing.View, digest uint64, now time.Time) *Peer {
	prev, isSelf, ok := v.PreviousOwner(digest, now)
	if !ok || isSelf {
		return nil
	}
	return c.peers.Load().byID[prev.ID]
}

// ReadThrough asks the previous owner for its cached copy of req's key.
// ok means resp holds that copy (a fresh hit there); anything else — a
// miss, an error, the peer gone — means "go to the origin".
func (c *Node) ReadThrough(pc *Peer, req *fasthttp.Request, tid []byte, resp *fasthttp.Response) bool {
	pr := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(pr)
	req.CopyTo(pr)
	c.setPeerAuth(HTTPHead(&pr.Header), c.m.View().Current.Generation())
	pr.Header.SetBytesKV(HTenant, tid)
	pr.Header.SetBytesKV(HReadThrough, []byte("1"))
	// A short bound: the previous owner answers from memory or not at all.
	timeout := min(c.timeout, 500*time.Millisecond)
	if err := pc.hc.DoDeadline(pr, resp, time.Now().Add(timeout)); err != nil || resp.StatusCode() != fasthttp.StatusOK {
		c.readThroughMiss.Inc()
		_ = resp.CloseBodyStream()
		resp.Reset()
		return false
	}
	c.readThroughHit.Inc()
	return true
}

// ReadThroughRefused counts a previous owner's copy the caller did not
// keep (an invalidation here outranks it): it falls back to the origin.
func (c *Node) ReadThroughRefused() { c.readThroughMiss.Inc() }

// Hottest returns copies of up to n of the most requested keys, busiest
// first (the keys Handoff pushes).
func (c *Node) Hottest(n int) [][]byte { return c.hot.top(n) }
