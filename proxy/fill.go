package proxy

import (
	"bytes"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/cachekey"
	"github.com/shield-proxy/shield/proxy/cache"
	"github.com/shield-proxy/shield/proxy/upstream"
)

// Streamed fills (docs/architecture.md §6). A cacheable miss whose body
// is large is not read whole before anyone sees it: once the origin's
// head is in and says the answer may be stored, the body is read by a
// goroutine of its own into one buffer the fill owns, sized from the
// origin's Content-Length, and the requester and every collapsed waiter
// get a body stream reading that buffer from byte 0 up to what has
// arrived, blocking on a condition variable for more. A late joiner
// starts from byte 0 too. The buffer becomes the stored entry (its meta
// is appended in place, cache.AppendEntryAfterBody), so a fill costs one
// copy of the object however many clients read it. A fill bound for the
// disk tier writes the body into the tier's file instead, and its readers
// read it there (filldisk.go): no copy in memory at all.
//
// When the body is complete the entry is stored through the cache's one
// Put, with the decisions (storability, Vary, tags, invalidation order)
// taken from the head exactly as a buffered fill takes them. A body that
// ends early, or fails, is not stored, and its readers get an error: the
// response was sent with the origin's Content-Length, so the client's
// connection closes short of it, never a short body presented as whole.
// The head having gone out, a stale copy can no longer stand in for it
// (stale-if-error covers failures before the head, and error answers).
// Readers get the last byte only once the fill is complete and stored,
// so a client holding the whole body finds it cached.
//
// Only answers with a Content-Length from streamFillMin up to
// cache.max_object_size are streamed: a body of unknown length could
// turn out larger than max_object_size halfway, and the clients reading
// it would be cut off; it is read whole first as before. Requests the
// stream cannot answer as the body arrives — a Range, a coding other
// than identity for an answer the route compresses — wait for the fill
// to complete and are answered from the stored entry (a waiter still
// under its cache.wait_timeout). HEAD and conditional requests are
// answered from the head at once. Error answers (5xx, and 429 on a stale_on_429 route)
// are never streamed: the stale rules decide on them.

// streamFillMin is the smallest Content-Length a cacheable miss streams.
// Smaller bodies are read whole before they are answered (the buffered
// fill: no goroutine and no body stream, faster for small objects).
const streamFillMin = 1 << 20

// errFillFailed is what a fill's readers get when its body failed.
var errFillFailed = errors.New("proxy: the origin's body failed during a streamed fill")

// fillState is where a fill is.
type fillState uint8

const (
	fillRunning  fillState = iota // the body is arriving
	fillStored                    // complete and shareable: stored (or dropped by a failing disk)
	fillUnshared                  // complete, not stored (overtaken): the requester's only
	fillFailed                    // the body failed: not stored
)

// fill is one streamed fill: the head its readers answer with, the
// buffer the body arrives in, and how it ended.
type fill struct {
	size   int    // the body's length (the origin's Content-Length)
	status int    // the origin's status
	head   []byte // the entry's encoding with an empty body: what readers answer with
	key    []byte // the key the entry is stored under (primary or variant)
	// coded: the route compresses this answer (coded siblings are made
	// once it is stored), so a client wanting a coding waits for them.
	coded bool
	// complete is closed once state is no longer fillRunning and entry
	// (stored or unshared) or fail (failed) are set.
	complete chan struct{}
	entry    []byte  // the encoded entry: buf with its meta appended
	fail     failure // fillFailed: what to answer instead

	// disk, when not nil, is the disk tier's file the body is written to
	// as it arrives (filldisk.go): readers read it there while buf is
	// nil. Set once by startFill.
	disk *cache.DiskFill

	mu    sync.Mutex
	cond  sync.Cond // on mu: broadcast when n or state change
	buf   []byte    // len size; buf[:n] has arrived (written only past n); nil while the body is on disk only
	n     int       // guarded by mu
	state fillState // guarded by mu
	refs  int       // guarded by mu: holders of disk (the job, the requester, readers); the last closes it
}

// next waits for body bytes past off and returns them, or the error that
// ends the body (io.EOF when it is complete). While the fill runs the
// last byte is held back: it goes out once the body is complete and
// stored. The returned slice is read-only and stays valid. For a body
// on disk it returns no bytes but end, the body's bytes up to which the
// file holds (read them with fl.disk.ReadAt).
func (fl *fill) next(off int) (b []byte, end int, err error) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	for {
		end := fl.n
		if fl.state == fillRunning {
			end = min(end, fl.size-1)
		}
		if off < end {
			if fl.buf == nil {
				return nil, end, nil
			}
			return fl.buf[off:end], end, nil
		}
		switch fl.state {
		case fillRunning:
			fl.cond.Wait()
		case fillFailed:
			return nil, 0, errFillFailed
		default:
			return nil, 0, io.EOF
		}
	}
}

// arrived makes k more bytes, read into buf past n, visible to readers.
func (fl *fill) arrived(k int) int {
	fl.mu.Lock()
	fl.n += k
	n := fl.n
	fl.mu.Unlock()
	fl.cond.Broadcast()
	return n
}

// end sets how the fill ended and wakes its readers.
func (fl *fill) end(st fillState) {
	fl.mu.Lock()
	fl.state = st
	fl.mu.Unlock()
	fl.cond.Broadcast()
}

// fillReader is one client's body stream of a fill. It reads the fill's
// buffer or file only, never a RequestCtx or the origin's response, so
// fasthttp may run it after the handler has returned
// (docs/architecture.md §12). A reader of a disk fill holds a reference
// to its file, released by Close (fasthttp closes a body stream once it
// is done with it).
type fillReader struct {
	fl     *fill
	g      *globalMetrics // counts the reader cut short (nil: not counted)
	off    int
	closed bool
	cut    bool // cut short, counted
}

// cutShort counts the reader's response as truncated (once): by the fill
// failing, or (disk) its file failing to be read.
func (r *fillReader) cutShort(disk bool) {
	if r.cut || r.g == nil {
		return
	}
	r.cut = true
	if disk {
		r.g.truncFillDisk.Add(1)
	} else {
		r.g.truncFill.Add(1)
	}
}

func (r *fillReader) Read(p []byte) (int, error) {
	b, err := r.next(p)
	if len(b) == 0 {
		return 0, err
	}
	n := copy(p, b)
	r.off += n
	return n, nil
}

// WriteTo writes what has arrived straight from the fill's buffer (no
// copy through a pooled buffer), or from the fill's file through a pooled
// buffer held only while a piece is written, then waits for more.
func (r *fillReader) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for {
		b, end, err := r.fl.next(r.off)
		if err != nil {
			if err == io.EOF {
				return total, nil
			}
			r.cutShort(false)
			return total, err
		}
		var n int
		var werr error
		if b != nil {
			n, werr = w.Write(b)
		} else {
			n, werr = r.writeDisk(w, end)
		}
		r.off += n
		total += int64(n)
		if werr != nil {
			return total, werr
		}
	}
}

// fillJob is the goroutine that reads a fill's body from the origin and
// stores it. It owns the origin's response and budget slot.
type fillJob struct {
	p        *Proxy
	fl       *fill
	flight   *flight // removed from the flights once the fill ends (nil: none)
	rte      *route
	resp     *fasthttp.Response
	lease    upstream.Lease
	e        cache.Entry // everything but the body
	vary     [][]byte
	headers  []cache.Header
	primary  []byte
	respTime time.Time
}

// startFill starts a streamed fill of the origin's answer resp (budget
// slot l) when it is one (see the top of this file) and returns it, the
// body still arriving; nil leaves resp and l to the buffered path. It
// takes from f and resp, before the handler returns, everything the
// store needs.
func (p *Proxy) startFill(f *originFetch, resp *fasthttp.Response, l upstream.Lease, seq int64, reqTime time.Time, fromPrev bool, prevTags []byte) *fill {
	rte, status, size := f.rte, resp.StatusCode(), resp.Header.ContentLength()
	if size < streamFillMin || size > f.rt.maxObject || resp.BodyStream() == nil ||
		status >= 500 || (status == fasthttp.StatusTooManyRequests && rte.staleOn429) {
		return nil
	}
	respTime := time.Now()
	d := decide(f.hasAuth, resp, rte, reqTime, respTime)
	if !d.storable {
		return nil
	}
	e := responseEntry(resp, rte, &d, status, seq, f.urlDigest, fromPrev, prevTags, respTime)
	headers, vary, coded := entryFields(resp, rte, &d, status, size, respTime)
	key := storeKey(f.primary, &f.req.Header, vary)
	e.KeyDigest = cachekey.Digest(key)
	head := cache.AppendEntry(nil, &e, vary, headers)
	// The meta appended after the body is the head's (it does not
	// depend on the body): room for it now, so the entry is the buffer.
	fl := &fill{size: size, status: status, head: head, key: key, coded: coded, complete: make(chan struct{})}
	fl.cond.L = &fl.mu
	if !coded {
		fl.disk = p.cache.StartDiskFill(key, head, size)
	}
	if fl.disk != nil {
		fl.refs = 2 // the job's, and the requester's (answer.release drops it)
	} else {
		fl.buf = make([]byte, size, size+len(head))
	}
	j := &fillJob{p: p, fl: fl, flight: f.flight, rte: rte, resp: resp, lease: l, e: e, vary: vary, headers: headers,
		primary: bytes.Clone(f.primary), respTime: respTime}
	p.g.streamedFills.Inc()
	p.bg.wg.Add(1)
	go j.run()
	return fl
}

// run reads the body, stores the entry and ends the fill.
func (j *fillJob) run() {
	p, fl, rte := j.p, j.fl, j.rte
	defer p.bg.wg.Done()
	err := j.read()
	_ = j.resp.CloseBodyStream()
	j.lease.End()
	if err != nil {
		fl.fail = fromUpstream(rte.origin.BodyFailed())
		p.g.fillFailures.Inc()
		p.logger.Debug("streamed fill failed", "route", rte.name, "err", err)
		if fl.disk != nil {
			fl.disk.Abort()
		}
		fl.end(fillFailed)
	} else {
		var res cache.PutResult
		if fl.buf == nil {
			res = p.storeDiskFill(j)
		} else {
			j.e.Body = fl.buf[:fl.size]
			fl.entry = cache.AppendEntryAfterBody(fl.buf[:fl.size], &j.e, j.vary, j.headers)
			res = p.putResponse(j.primary, fl.key, fl.entry, &j.e, j.vary, j.respTime)
		}
		switch res {
		case cache.Stored:
			rte.m.stored.Inc()
			fl.end(fillStored)
			if rte.comp != nil && fl.entry != nil {
				p.storeSiblings(rte, fl.key, fl.entry)
			}
		case cache.Dropped:
			// Not kept (a failing disk, too large for memory): the
			// entry is still the origin's answer, for every reader.
			fl.end(fillStored)
		default:
			// Overtaken while in flight (storeResponse): the readers
			// attached to it asked before the invalidation and get it
			// whole; nobody else does.
			fl.end(fillUnshared)
		}
	}
	fasthttp.ReleaseResponse(j.resp)
	close(fl.complete)
	if j.flight != nil {
		p.fl.remove(j.flight)
	}
	fl.release()
}

// read reads the body into the fill's buffer, or through a chunk
// buffer into its file, making each read visible as it lands. A body
// shorter than its Content-Length, or longer, fails.
func (j *fillJob) read() error {
	fl := j.fl
	r := j.resp.BodyStream()
	var chunk []byte // a disk fill's: what is read goes to the file from there
	if fl.disk != nil {
		chunk = make([]byte, fillChunk)
	}
	for n := 0; n < fl.size; {
		var dst []byte
		if fl.buf != nil { // only this goroutine sets buf
			dst = fl.buf[n:fl.size]
		} else {
			dst = chunk[:min(len(chunk), fl.size-n)]
		}
		k, err := r.Read(dst)
		if k > 0 {
			if fl.buf == nil {
				if werr := j.toDisk(dst[:k], n); werr != nil {
					return werr
				}
			}
			n = fl.arrived(k)
		}
		if err == io.EOF {
			if n < fl.size {
				return io.ErrUnexpectedEOF
			}
			return nil
		}
		if err != nil {
			return err
		}
	}
	// The client frames the body by its Content-Length; anything else
	// than its end here is a body longer than announced.
	var extra [1]byte
	for range 8 {
		k, err := r.Read(extra[:])
		if k > 0 {
			return errors.New("proxy: body longer than its Content-Length")
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
	return errors.New("proxy: body does not end at its Content-Length")
}

// fillStreamable reports whether the request can be answered from fl as
// its body arrives: not a Range, and identity unless the answer is not
// one the route compresses (those wait for the stored entry).
func fillStreamable(ctx *fasthttp.RequestCtx, sc *scratch, fl *fill) bool {
	return len(ctx.Request.Header.PeekCanonical(hRange)) == 0 && (sc.coding == codingIdentityIdx || !fl.coded)
}

// answerFill answers ctx from the fill fl: as its body arrives when the
// request can take that, else once it is complete, from the entry
// (timeout: a waiter's timer, nil for the requester that started the
// fill, which waits for it). Conditional and HEAD requests are answered
// from the head at once. res is what a served answer counts as.
func (p *Proxy) answerFill(ctx *fasthttp.RequestCtx, rt *runtimeConfig, rte *route, sc *scratch, fl *fill, timeout <-chan time.Time, staleCopy []byte, cs cacheStatus, res result) result {
	waiter := timeout != nil
	if fillStreamable(ctx, sc, fl) && fl.acquire() {
		var e cache.Entry
		_ = cache.DecodeEntry(fl.head, &e) // encoded by startFill
		p.serveShared(ctx, &e, e.Age(time.Now()), cs)
		sc.peerTags(&ctx.Response, &e)
		if ctx.Response.StatusCode() != fasthttp.StatusNotModified {
			// The head goes out at once, the body as it arrives.
			ctx.Response.ImmediateHeaderFlush = true
			ctx.Response.SetBodyStream(&fillReader{fl: fl, g: p.g}, fl.size)
		} else {
			fl.release()
		}
		return res
	}
	select {
	case <-fl.complete:
	case <-timeout:
		p.g.waitTimeouts.Inc()
		fl := failure{status: fasthttp.StatusGatewayTimeout, detail: "wait-timeout"}
		return p.failed(ctx, rte, p.decodeStale(staleCopy, ctx.Time()), fl, cacheStatus{fwd: cs.fwd, collapsed: true, detail: "wait-timeout"})
	}
	// complete is closed: state, entry and fail are set for good.
	fl.mu.Lock()
	st := fl.state
	fl.mu.Unlock()
	switch {
	case st == fillFailed:
		cs.detail = fl.fail.detail
		return p.failed(ctx, rte, p.decodeStale(staleCopy, ctx.Time()), fl.fail, cs)
	case st == fillUnshared && waiter:
		return p.fetch(ctx, rt, rte, sc, nil, staleCopy, "bypass")
	}
	enc := fl.entry
	if enc == nil {
		// A disk fill's entry: read whole for this request only.
		if enc = p.diskFillEntry(fl, st); enc == nil {
			return p.fetch(ctx, rt, rte, sc, nil, staleCopy, "bypass")
		}
	}
	var e cache.Entry
	_ = cache.DecodeEntry(enc, &e)
	p.serveSharedCoded(ctx, sc, rte, &e, fl.key, e.Age(time.Now()), cs)
	sc.peerTags(&ctx.Response, &e)
	return res
}

// storeKey is the key a response is stored under: primary, plus for a
// varying response the upstream request's values of its Vary fields
// (the client's, minus hop-by-hop fields).
func storeKey(primary []byte, h *fasthttp.RequestHeader, vary [][]byte) []byte {
	key := bytes.Clone(primary)
	for _, name := range vary {
		key = cachekey.AppendVary(key, name, h.PeekBytes(name))
	}
	return key
}

// putResponse stores enc, the encoding of e, under key, with the vary
// marker under primary when it varies: cache.Refused when the cache
// refused it (overtaken: storeResponse), cache.Dropped when a failing
// disk tier could not keep it and it is too large for memory (counted
// by the cache: shield_cache_disk_dropped_total).
func (p *Proxy) putResponse(primary, key, enc []byte, e *cache.Entry, vary [][]byte, respTime time.Time) cache.PutResult {
	res := p.cache.Store(key, enc, e, putOptions(primary, vary, respTime))
	if res == cache.Refused {
		p.g.overtaken.Inc()
	}
	return res
}

// putOptions are a response's store options: the vary marker under
// primary when it varies.
func putOptions(primary []byte, vary [][]byte, respTime time.Time) cache.PutOptions {
	var o cache.PutOptions
	if len(vary) > 0 {
		o.Vary = &cache.Vary{Primary: primary, Names: vary, At: respTime.UnixNano()}
	}
	return o
}
