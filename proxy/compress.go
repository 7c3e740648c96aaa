package proxy

import (
	"bytes"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/klauspost/compress/gzip"
	brrr "github.com/molecule-man/go-brrr"
	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/cachekey"
	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/proxy/cache"
	"github.com/shield-proxy/shield/proxy/cluster"
	"github.com/shield-proxy/shield/proxy/httpx"
	"github.com/shield-proxy/shield/proxy/upstream"
	"github.com/shield-proxy/shield/stale"
)

// Compression at the shield (routes[].compress). On such a route the
// origin is asked for identity, and an uncompressed answer of a
// compressible type is compressed once per coding when it is stored. The
// codings are sibling entries of the identity entry: the same key plus
// "\xffCE" and the coding's name (cachekey never writes 0xff where a
// section starts, as for the store's piece keys), with the identity's
// fetch sequence, URL digest, tags and timing, so a purge by URL, tag or
// namespace reaches every coding exactly as it reaches the identity.
//
// A request's coding is negotiated once, before keying (RFC 9110
// §12.5.3, q-values honoured), and its Accept-Encoding becomes identity,
// so keys, coalescing and the origin request are the same for every
// client: one origin fetch serves every coding. A fresh hit looks up the
// sibling directly (one store read, as for identity); anything else —
// no sibling yet, a stale entry, a vary variant — goes through the
// identity entry, and the answer is switched to its coding at the end,
// compressing it then if the sibling is missing (evicted, or stored
// before the route compressed).
//
// Each coding has its own strong validator: the identity's ETag "abc"
// becomes "abc-gzip" / "abc-br" (W/"abc-br" for a weak one), so a
// conditional request or If-Range matches only the coding it was taken
// from, and ranges address the coded bytes.

// compression is a route's compiled compress settings.
type compression struct {
	codings [][]byte // produced codings, preference order for equal q
	types   []mediaPattern
	minSize int
	maxSize int // cache.max_object_size: larger bodies are not compressed
}

// mediaPattern matches a media type: exact ("application/json"), a
// type ("text/" from "text/*") or a structured syntax suffix ("+json").
type mediaPattern struct {
	exact, prefix, suffix []byte
}

const (
	codingIdentityIdx = 0
	brotliLevel       = 5 // once per store: moderate CPU, most of the gain
)

var (
	hContentEncoding = []byte("Content-Encoding")
	hContentType     = []byte("Content-Type")
	siblingTag       = []byte("\xffCE")
	varyAE           = []byte("Accept-Encoding")
	noTransform      = []byte("no-transform")
)

// newCompression compiles rc, or returns nil when the route does not
// compress.
func newCompression(rc *config.RouteCompress, maxObject int) *compression {
	if len(rc.Codings) == 0 {
		return nil
	}
	c := &compression{minSize: int(rc.MinSize), maxSize: maxObject}
	for _, name := range rc.Codings {
		c.codings = append(c.codings, []byte(name))
	}
	for _, t := range rc.Types {
		t := bytes.ToLower([]byte(t))
		switch {
		case t[0] == '+':
			c.types = append(c.types, mediaPattern{suffix: t})
		case bytes.HasSuffix(t, []byte("/*")):
			c.types = append(c.types, mediaPattern{prefix: t[:len(t)-1]})
		default:
			c.types = append(c.types, mediaPattern{exact: t})
		}
	}
	return c
}

// negotiate picks the coding for an Accept-Encoding value (RFC 9110
// §12.5.3): the highest q among the route's codings and identity, a
// coding winning a tie with identity and earlier codings winning ties
// with later ones; an unlisted identity loses to any listed coding. A coding is acceptable when listed, or matched by
// "*", with q above 0; identity unless "identity;q=0" or "*;q=0" (with
// no identity entry) excludes it. No field, or no acceptable coding:
// identity — when identity is excluded too, shield disregards the field
// and answers identity rather than 406 (RFC 9110 §12.1 allows either; a cached
// 200 is worth more to that client than an error). Returns 0 for
// identity, i+1 for codings[i]. It allocates nothing.
func (c *compression) negotiate(ae []byte) uint8 {
	if len(ae) == 0 {
		return codingIdentityIdx
	}
	// Identity unlisted (and no "*") is acceptable, but any coding the
	// client lists beats it: weight 1, the lowest positive one.
	idQ, starQ := qValue(ae, codingIdentity), qValue(ae, []byte("*"))
	if idQ < 0 {
		idQ = 1
		if starQ >= 0 {
			idQ = starQ
		}
	}
	best, bestQ := uint8(codingIdentityIdx), 0
	for i, name := range c.codings {
		q := qValue(ae, name)
		if q < 0 {
			q = max(starQ, 0)
		}
		if q > bestQ {
			best, bestQ = uint8(i+1), q
		}
	}
	if best != codingIdentityIdx && bestQ >= idQ {
		return best
	}
	return codingIdentityIdx
}

// qValue returns the weight (0–1000) the Accept-Encoding value ae gives
// coding, or -1 when ae does not list it. A malformed q counts as 0.
func qValue(ae, coding []byte) int {
	q := -1
	for len(ae) > 0 {
		var name, params []byte
		name, params, ae = nextElement(ae)
		if bytes.EqualFold(name, coding) {
			q = parseQ(params)
		}
	}
	return q
}

// parseQ reads the q parameter of one element's parameters (absent: 1).
func parseQ(params []byte) int {
	v, ok := qParam(params)
	if !ok {
		return 1000
	}
	// qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )
	if len(v) == 0 || len(v) > 5 || (v[0] != '0' && v[0] != '1') || (len(v) > 1 && v[1] != '.') {
		return 0
	}
	n, scale := int(v[0]-'0')*1000, 100
	for _, d := range v[min(2, len(v)):] {
		if d < '0' || d > '9' {
			return 0
		}
		n += int(d-'0') * scale
		scale /= 10
	}
	return min(n, 1000)
}

// name returns the coding's token (idx > 0).
func (c *compression) name(idx uint8) []byte { return c.codings[idx-1] }

// matchType reports whether the Content-Type value ct is compressible.
func (c *compression) matchType(ct []byte) bool {
	mt, _, _ := bytes.Cut(ct, []byte(";"))
	mt = bytes.TrimSpace(mt)
	if len(mt) == 0 {
		return false
	}
	for i := range c.types {
		t := &c.types[i]
		switch {
		case t.exact != nil && bytes.EqualFold(mt, t.exact),
			t.prefix != nil && len(mt) > len(t.prefix) && bytes.EqualFold(mt[:len(t.prefix)], t.prefix),
			t.suffix != nil && len(mt) > len(t.suffix) && bytes.EqualFold(mt[len(mt)-len(t.suffix):], t.suffix):
			return true
		}
	}
	return false
}

// eligible reports whether an answer with these fields may be
// compressed: a 200 of a compressible type, in the size range, not
// already coded, not marked no-transform (RFC 9111 §5.2.2.6).
func (c *compression) eligible(status, size int, ct, ce, cc []byte) bool {
	return status == fasthttp.StatusOK && size >= c.minSize && size <= c.maxSize && size > 0 &&
		(len(ce) == 0 || bytes.EqualFold(bytes.TrimSpace(ce), codingIdentity)) &&
		!stale.ListHas(cc, noTransform) && c.matchType(ct)
}

// entryEligible is eligible for a stored entry. It allocates nothing.
func (c *compression) entryEligible(e *cache.Entry) bool {
	if e.Kind != cache.KindResponse || e.Status != fasthttp.StatusOK || len(e.Body) < c.minSize {
		return false
	}
	var ct, ce, cc []byte
	it := e.Headers()
	for k, ok := it.Next(); ok; k, ok = it.Next() {
		v, _ := it.Next()
		switch {
		case bytes.EqualFold(k, hContentType):
			ct = v
		case bytes.EqualFold(k, hContentEncoding):
			ce = v
		case bytes.EqualFold(k, httpx.HCacheControl):
			cc = v
		}
	}
	return c.eligible(e.Status, len(e.Body), ct, ce, cc)
}

// headersEligible is eligible for a header list about to be stored with
// a body of size bytes.
func (c *compression) headersEligible(status, size int, hs []cache.Header) bool {
	var ct, ce, cc []byte
	for _, h := range hs {
		switch {
		case bytes.EqualFold(h.Name, hContentType):
			ct = h.Value
		case bytes.EqualFold(h.Name, hContentEncoding):
			ce = h.Value
		case bytes.EqualFold(h.Name, httpx.HCacheControl):
			cc = h.Value
		}
	}
	return c.eligible(status, size, ct, ce, cc)
}

// withVaryAE returns hs with Accept-Encoding added to its Vary (merged
// into the last Vary field, or a new one), unless it is listed or the
// answer varies on "*".
func withVaryAE(hs []cache.Header) []cache.Header {
	last := -1
	for i, h := range hs {
		if bytes.EqualFold(h.Name, httpx.HVary) {
			if httpx.ListContains(h.Value, varyAE) || httpx.ListContains(h.Value, []byte("*")) {
				return hs
			}
			last = i
		}
	}
	out := make([]cache.Header, len(hs), len(hs)+1)
	copy(out, hs)
	if last < 0 {
		return append(out, cache.Header{Name: httpx.HVary, Value: varyAE})
	}
	v := append(append(bytes.Clone(out[last].Value), ", "...), varyAE...)
	out[last] = cache.Header{Name: out[last].Name, Value: v}
	return out
}

// codedETag returns the sibling's validator: the identity's entity tag
// with "-coding" inside the quotes, weakness kept; nil when there is
// none or it is malformed (then the sibling has no ETag).
func codedETag(etag, coding []byte) []byte {
	etag = bytes.TrimSpace(etag)
	if len(etag) < 2 || etag[len(etag)-1] != '"' {
		return nil
	}
	out := make([]byte, 0, len(etag)+len(coding)+1)
	out = append(out, etag[:len(etag)-1]...)
	out = append(append(append(out, '-'), coding...), '"')
	return out
}

// appendSiblingKey appends key's sibling key for coding.
func appendSiblingKey(dst, key, coding []byte) []byte {
	return append(append(append(dst, key...), siblingTag...), coding...)
}

var gzipPool = sync.Pool{New: func() any {
	w, _ := gzip.NewWriterLevel(nil, gzip.DefaultCompression)
	return w
}}

// compressBody codes body; br is brotli at quality 5, gzip at the
// default level: an entry is compressed once per store, so the ratio is
// worth some CPU, but not brotli 11's.
func compressBody(coding, body []byte) ([]byte, error) {
	if bytes.Equal(coding, []byte("br")) {
		out, err := brrr.Compress(body, brotliLevel)
		if err != nil {
			return nil, fmt.Errorf("proxy: brotli: %w", err)
		}
		return out, nil
	}
	var buf bytes.Buffer
	buf.Grow(len(body)/3 + 64)
	w := gzipPool.Get().(*gzip.Writer)
	defer gzipPool.Put(w)
	w.Reset(&buf)
	if _, err := w.Write(body); err != nil {
		return nil, fmt.Errorf("proxy: gzip: %w", err)
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("proxy: gzip: %w", err)
	}
	return buf.Bytes(), nil
}

// encodeSibling encodes the coding's sibling of the identity entry e,
// stored under key. The sibling carries e's timing, fetch sequence, URL
// digest and tags (so invalidation treats both alike), Content-Encoding,
// a Vary listing Accept-Encoding and its own validator.
func encodeSibling(e *cache.Entry, key, coding []byte) ([]byte, error) {
	body, err := compressBody(coding, e.Body)
	if err != nil {
		return nil, err
	}
	s := *e
	s.Kind = cache.KindResponse
	s.Body = body
	s.KeyDigest = cachekey.Digest(appendSiblingKey(nil, key, coding))
	s.ETag = codedETag(e.ETag, coding)
	var hs []cache.Header
	it := e.Headers()
	for k, ok := it.Next(); ok; k, ok = it.Next() {
		v, _ := it.Next()
		switch {
		case bytes.EqualFold(k, httpx.HETag):
			if s.ETag != nil {
				hs = append(hs, cache.Header{Name: k, Value: s.ETag})
			}
			continue
		case bytes.EqualFold(k, hContentEncoding):
			continue
		}
		hs = append(hs, cache.Header{Name: k, Value: v})
	}
	hs = withVaryAE(hs)
	hs = append(hs, cache.Header{Name: hContentEncoding, Value: coding})
	return cache.AppendEntry(nil, &s, e.VaryList(), hs), nil
}

// storeSiblings compresses a just-stored identity entry (enc, under key)
// into every coding of the route, so later hits of any coding read one
// entry. Called after the identity entry is in place; a sibling that a
// newer store has since replaced is told apart on read by its fetch
// sequence and stored-at time.
func (p *Proxy) storeSiblings(rte *route, key, enc []byte) {
	var e cache.Entry
	if cache.DecodeEntry(enc, &e) != nil || !rte.comp.entryEligible(&e) {
		return
	}
	for i := range rte.comp.codings {
		p.codedSibling(rte, key, &e, uint8(i+1))
	}
}

// codedSibling returns the encoded sibling of identity entry e (stored
// under key) for coding idx: the stored one when it belongs to e (same
// fetch and store time), else a new one, compressed now and stored.
// Compressions of one key are serialised on its stripe
// (cache.PutDerived), so concurrent requests after an eviction compress
// it once. nil when compression
// failed (the caller serves identity).
func (p *Proxy) codedSibling(rte *route, key []byte, e *cache.Entry, idx uint8) []byte {
	coding := rte.comp.name(idx)
	skey := appendSiblingKey(nil, key, coding)
	enc, built, err := p.cache.PutDerived(skey, e.FetchSeq, e.StoredAt, func() ([]byte, error) {
		return encodeSibling(e, key, coding)
	})
	if err != nil {
		p.logger.Warn("compression failed, serving identity", "coding", string(coding), "err", err)
		return nil
	}
	if built {
		p.g.compressed.Inc()
	}
	return enc
}

// lookupCoded is lookup for a request whose negotiated coding is
// sc.coding. Identity requests are plain lookups. A coded request reads
// the primary key's sibling first: when it is there and fresh it is the
// answer, with the same single store read as an identity hit (no
// allocation). Otherwise the identity entry is looked up as usual, and a
// fresh, compressible one is switched to its sibling — read (a vary
// variant's, into the same buffer: no allocation either), or compressed
// now. Stale and missing entries go on as identity: the miss
// path switches the answer's coding once it has one (serveSharedCoded).
func (p *Proxy) lookupCoded(b []byte, ctx *fasthttp.RequestCtx, sc *scratch, rte *route, e *cache.Entry) ([]byte, lookupResult) {
	if sc.coding == codingIdentityIdx || rte.comp == nil {
		return p.lookup(b, ctx, sc, e)
	}
	sc.ckey = appendSiblingKey(sc.ckey[:0], sc.key, rte.comp.name(sc.coding))
	b, verified := p.getWhole(b, sc.ckey, sc)
	if len(b) > 0 && p.decode(b, sc.ckey, e, verified) && e.Kind == cache.KindResponse &&
		p.cache.Invalidations().Servable(e, ctx.Time()) && e.Classify(e.Age(ctx.Time()), &sc.cc) == stale.Fresh {
		return b, lkHit
	}
	b, lk := p.lookup(b, ctx, sc, e)
	if lk != lkHit || e.Classify(e.Age(ctx.Time()), &sc.cc) != stale.Fresh || !rte.comp.entryEligible(e) {
		return b, lk
	}
	if len(sc.vkey) > 0 {
		// A vary variant: its sibling is under the variant key. Read it
		// into the same buffer (no allocation) and serve it when it
		// belongs to this identity entry; else read the identity again.
		fetchSeq, storedAt := e.FetchSeq, e.StoredAt
		sc.ckey = appendSiblingKey(sc.ckey[:0], sc.vkey, rte.comp.name(sc.coding))
		b, verified = p.getWhole(b, sc.ckey, sc)
		if len(b) > 0 && p.decode(b, sc.ckey, e, verified) && e.Kind == cache.KindResponse && e.FetchSeq == fetchSeq && e.StoredAt == storedAt {
			return b, lkHit
		}
		if b, lk = p.lookup(b, ctx, sc, e); lk != lkHit {
			return b, lk
		}
	}
	if sc.memOnly {
		return b, lkMiss // inline: compressing it now is a worker's job
	}
	enc := p.codedSibling(rte, sc.flightKey(), e, sc.coding)
	if enc == nil {
		return b, lk
	}
	var s cache.Entry
	if cache.DecodeEntry(enc, &s) != nil {
		return b, lk
	}
	ctx.Response.SwapBody(b[:0]) // the pooled buffer goes back; enc is ours
	*e = s
	return enc, lkHit
}

// serveSharedCoded is serveShared for an entry a fetch stored (under
// key): a coded request gets the entry's sibling.
func (p *Proxy) serveSharedCoded(ctx *fasthttp.RequestCtx, sc *scratch, rte *route, e *cache.Entry, key []byte, age time.Duration, cs cacheStatus) {
	if sc.coding != codingIdentityIdx && rte.comp != nil && rte.comp.entryEligible(e) {
		if enc := p.codedSibling(rte, key, e, sc.coding); enc != nil {
			var s cache.Entry
			if cache.DecodeEntry(enc, &s) == nil {
				p.serveShared(ctx, &s, age, cs)
				return
			}
		}
	}
	p.serveShared(ctx, e, age, cs)
}

// compressPassed codes an answer that is passed through, not stored
// (unstorable, or a bypassed request), when the route compresses and the
// client's coding is not identity. Its body is in memory, bounded by
// max_object_size. The ETag gets the same coding suffix as a stored
// sibling's.
func (p *Proxy) compressPassed(resp *fasthttp.Response, rte *route, idx uint8) {
	if rte.comp == nil || resp.IsBodyStream() {
		return
	}
	eligible := rte.comp.eligible(resp.StatusCode(), len(resp.Body()), resp.Header.ContentType(),
		resp.Header.PeekBytes(hContentEncoding), resp.Header.PeekBytes(httpx.HCacheControl))
	if !eligible {
		return
	}
	addVary(&resp.Header)
	if idx == codingIdentityIdx {
		return
	}
	coding := rte.comp.name(idx)
	body, err := compressBody(coding, resp.Body())
	if err != nil {
		p.logger.Warn("compression failed, passing identity", "coding", string(coding), "err", err)
		return
	}
	if et := resp.Header.PeekBytes(httpx.HETag); len(et) > 0 {
		if c := codedETag(et, coding); c != nil {
			resp.Header.SetBytesKV(httpx.HETag, c)
		} else {
			resp.Header.DelBytes(httpx.HETag)
		}
	}
	resp.Header.SetBytesKV(hContentEncoding, coding)
	resp.SetBody(body)
	p.g.compressed.Inc()
}

// addVary merges Accept-Encoding into a response head's Vary.
func addVary(h *fasthttp.ResponseHeader) {
	var hs []cache.Header
	for k, v := range h.All() {
		if bytes.EqualFold(k, httpx.HVary) {
			hs = append(hs, cache.Header{Name: bytes.Clone(k), Value: bytes.Clone(v)})
		}
	}
	merged := withVaryAE(hs)
	if len(merged) == len(hs) && (len(hs) == 0 || bytes.Equal(merged[len(hs)-1].Value, hs[len(hs)-1].Value)) {
		return
	}
	h.DelBytes(httpx.HVary)
	for _, m := range merged {
		h.AddBytesKV(httpx.HVary, m.Value)
	}
}

// forwardCoding names the request's negotiated coding in the
// Accept-Encoding of a request forwarded to the key's owner, whose
// handler negotiates again (the client's own field was set to identity
// for keying).
func (rte *route) forwardCoding(h cluster.ReqHead, idx uint8) {
	if rte.forwardsCoding(idx) {
		h.SetCanonical(hAcceptEncoding, rte.comp.name(idx))
	}
}

// forwardsCoding reports whether forwardCoding sets Accept-Encoding
// (the client's is then not forwarded).
func (rte *route) forwardsCoding(idx uint8) bool {
	return rte.comp != nil && idx != codingIdentityIdx
}

// compressForwarded answers a passed-through GET on a compress route
// with a coded body when the origin's answer is eligible by its head: it
// reads the body (up to max_object_size; a longer one streams on
// uncoded, as too large to compress) and codes it for the coding the
// client's Accept-Encoding negotiates. It reports whether it answered
// (resp and the lease are then finished with).
func (p *Proxy) compressForwarded(ctx *fasthttp.RequestCtx, rte *route, resp *fasthttp.Response, l upstream.Lease) bool {
	h := &resp.Header
	if !ctx.IsGet() || resp.StatusCode() != fasthttp.StatusOK || h.ContentLength() > rte.comp.maxSize ||
		!rte.comp.eligible(fasthttp.StatusOK, max(rte.comp.minSize, 1), h.ContentType(), h.PeekBytes(hContentEncoding), h.PeekBytes(httpx.HCacheControl)) {
		return false
	}
	body, complete, err := readBody(resp, rte.comp.maxSize, 0)
	if err != nil || !complete {
		if err == nil {
			ctx.Response.SetBodyStream(&streamBody{r: io.MultiReader(bytes.NewReader(body), resp.BodyStream()), resp: resp, lease: l}, -1)
			return true
		}
		fasthttp.ReleaseResponse(resp)
		l.End()
		p.generatedStatus(ctx, fasthttp.StatusBadGateway, "origin unavailable: error", cacheStatus{fwd: "bypass", detail: "error"})
		return true
	}
	ctx.Response.SetBody(body)
	fasthttp.ReleaseResponse(resp)
	l.End()
	p.compressPassed(&ctx.Response, rte, rte.comp.negotiate(ctx.Request.Header.PeekBytes(hAcceptEncoding)))
	return true
}

// delSiblings deletes key's coded siblings (a hard URL purge frees them
// with the identity entry; the invalidation table already makes them
// misses).
func (p *Proxy) delSiblings(rte *route, key []byte) {
	if rte.comp == nil {
		return
	}
	for _, c := range rte.comp.codings {
		p.cache.Del(appendSiblingKey(nil, key, c))
	}
}
