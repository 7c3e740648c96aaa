package cache

import (
	"encoding/binary"
	"errors"
	"slices"
	"strconv"

	"github.com/cespare/xxhash/v2"

	"github.com/shield-proxy/shield/cachekey"
)

// Entry layout (format version 3). The body comes first so that a HIT can
// hand the fetched buffer, truncated to the body, straight to the response
// (fasthttp SwapBody) without copying it:
//
//	body    [bodyLen]byte
//	meta    [metaLen]byte
//	footer  metaLen uint32 | bodyLen uint32 | checksum uint64   (little-endian, 16 bytes)
//
// checksum is xxhash64 of body‖meta. meta is:
//
//	magic "SHE" | version uint8 | kind uint8 | status uint16
//	storedAt int64 (unix ns, the response time) | initialAge int64 (ns)
//	lifetime int64 (ns) | swr int64 (ns) | sie int64 (ns) | keyDigest uint64
//	fetchSeq int64 | urlDigest uint64
//	etag        uvarint len | bytes
//	lastModified uvarint len | bytes
//	vary        uvarint count | count × (uvarint len | lower-case name)
//	headers     uvarint len | uvarint count | count × (uvarint len | name | uvarint len | value)
//	head        uvarint len | bytes
//	tags        uvarint count | count × uint64 (xxhash of each surrogate key)
//
// head is the answer's head as a HIT sends it, prepared once when the
// entry is encoded: a status line without reason phrase ("HTTP/1.1 200")
// and every stored header as a "Name: value" line, each ending in CRLF,
// with the origin's Date among them. A hit copies the head parsed from
// these bytes (proxy's hithead.go) and sets its own fields (Age, Cache-Status) on
// top, instead of setting the stored fields one by one after parsing a
// Date block: half the cost of a hit was there. head is
// empty for kinds without an answer and for headers that cannot be
// written as lines (names that are not tokens, values with control
// bytes); such hits set the fields one by one (proxy's writeEntryHeaders), as do
// 304s, which carry only some fields.
//
// The headers section is prefixed by its length so that decoding an entry
// this process wrote (trusted, see decodeEntryCheck) skips walking it.
// Version 2 (no length prefix, no head) is still decoded: snapshots
// written by the previous release stay readable, and their hits take the
// field-by-field path.
//
// fetchSeq is the invalidation clock's value when the fetch that produced
// the entry started, urlDigest the digest of the URL part of its key and
// tags the digests of its surrogate keys: lookups compare them with the
// invalidation table (inval.go), so a purge is O(1) whatever the cache
// holds and never undone by an entry fetched before it.
//
// A vary marker (KindVary) has no body and no headers; its storedAt is the
// instant from which variants are valid: a variant stored before its
// marker was written is ignored, so deleting or rewriting the marker
// invalidates every variant at once. A hit-for-miss record (KindHitForMiss)
// says the key's last response could not be shared; its lifetime is how
// long requests skip the coalescing queue. A near copy (KindNearCopy) is
// a response kept by a node that does not own the key (hot keys).
//
// Anything that does not parse exactly — short buffer, wrong magic,
// unknown version, bad checksum, lengths that disagree — is ErrCorrupt,
// which callers treat as a miss.
const (
	entryVersion = 3
	// entryVersionV2 is the previous layout, still decoded (no head).
	entryVersionV2 = 2
	footerLen      = 16
	// magic, version, kind, status, five int64 fields, digest, fetch
	// sequence, URL digest, and the five length/count prefixes of version
	// 2 (at least one byte each; version 3 has two more).
	fixedMetaLen = 3 + 1 + 1 + 2 + 8*5 + 8 + 16 + 5
	// MaxTags bounds the surrogate keys kept per entry.
	MaxTags = 64
)

// Kind says what an entry holds.
type Kind uint8

// Entry kinds (see the layout above).
const (
	// KindResponse is a stored response.
	KindResponse Kind = iota + 1
	// KindVary is a vary marker: the names variants are keyed by.
	KindVary
	// KindHitForMiss says the key's last response could not be shared.
	KindHitForMiss
	// KindNearCopy is a response a non-owner keeps for a hot key; only
	// near copies answer at an edge instead of forwarding to the owner.
	KindNearCopy
)

// ErrCorrupt is any entry that does not decode exactly; callers treat
// it as a miss.
var ErrCorrupt = errors.New("cache: corrupt cache entry")

// Entry is a decoded cache entry. Its slices point into the buffer it was
// decoded from and are valid as long as that buffer is.
type Entry struct {
	Kind       Kind
	Status     int
	StoredAt   int64 // unix ns
	InitialAge int64 // ns
	Lifetime   int64 // ns
	SWR        int64 // ns
	SIE        int64 // ns
	KeyDigest  uint64
	FetchSeq   int64  // invalidation clock at fetch start
	URLDigest  uint64 // digest of the key's URL part (cachekey.AppendURL)
	Tags       []byte // ≤ MaxTags little-endian uint64 surrogate key digests

	ETag         []byte
	LastModified []byte
	Body         []byte

	varyRaw     []byte // encoded vary section: count, then names
	headersRaw  []byte // encoded headers section: count, then pairs
	Head        []byte // prepared head: status line and header lines (may be empty)
	VaryCount   int
	HeaderCount int
}

// Header is a name/value pair to encode.
type Header struct{ Name, Value []byte }

// AppendEntry encodes e (its body, validators and timing fields) with the
// given vary names and headers, appending to dst. dst grows once, to the
// body and EntryMetaMax: appending the meta after a body that filled a
// buffer of its own size moved the whole body again, a second allocation
// and copy per stored miss.
func AppendEntry(dst []byte, e *Entry, vary [][]byte, headers []Header) []byte {
	dst = slices.Grow(dst, len(e.Body)+EntryMetaMax(e, vary, headers))
	return AppendEntryAfterBody(append(dst, e.Body...), e, vary, headers)
}

// EntryMetaMax bounds the bytes AppendEntryAfterBody appends after e's
// body: the fixed fields, each variable one with the longest varint
// (binary.MaxVarintLen64) before it, the head section at its longest,
// the tags and the footer.
func EntryMetaMax(e *Entry, vary [][]byte, headers []Header) int {
	const v = binary.MaxVarintLen64
	n := 5 + 2 + 5*8 + 3*8 // magic, version, kind, status; timing; digests and seq
	n += 2*v + len(e.ETag) + len(e.LastModified)
	n += v
	for _, x := range vary {
		n += v + len(x)
	}
	n += 2 * v // headers section length and count
	head := v + len("HTTP/1.1 ") + 20 + 2
	for _, h := range headers {
		n += 2*v + len(h.Name) + len(h.Value)
		head += len(h.Name) + 2 + len(h.Value) + 2
	}
	n += head
	n += v + len(e.Tags)
	return n + 4 + 4 + 8 // footer: meta length, body length, checksum
}

// AppendEntryAfterBody is AppendEntry for a body already in place: e.Body
// must be the last len(e.Body) bytes of dst, and only the meta and footer
// are appended. A body read straight into its entry's buffer (a streamed
// fill, proxy's fill.go) is so not copied again; bytes before it are not
// written, so readers of the body may go on reading it meanwhile.
func AppendEntryAfterBody(dst []byte, e *Entry, vary [][]byte, headers []Header) []byte {
	start := len(dst) - len(e.Body)
	metaStart := len(dst)
	dst = append(dst, 'S', 'H', 'E', entryVersion, byte(e.Kind))
	dst = binary.LittleEndian.AppendUint16(dst, uint16(e.Status))
	for _, v := range [...]int64{e.StoredAt, e.InitialAge, e.Lifetime, e.SWR, e.SIE} {
		dst = binary.LittleEndian.AppendUint64(dst, uint64(v))
	}
	dst = binary.LittleEndian.AppendUint64(dst, e.KeyDigest)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(e.FetchSeq))
	dst = binary.LittleEndian.AppendUint64(dst, e.URLDigest)
	dst = appendBytes(dst, e.ETag)
	dst = appendBytes(dst, e.LastModified)
	dst = binary.AppendUvarint(dst, uint64(len(vary)))
	for _, v := range vary {
		dst = appendBytes(dst, v)
	}
	sectionLen := uvarintLen(uint64(len(headers)))
	for _, h := range headers {
		sectionLen += uvarintLen(uint64(len(h.Name))) + len(h.Name) + uvarintLen(uint64(len(h.Value))) + len(h.Value)
	}
	dst = binary.AppendUvarint(dst, uint64(sectionLen))
	dst = binary.AppendUvarint(dst, uint64(len(headers)))
	for _, h := range headers {
		dst = appendBytes(dst, h.Name)
		dst = appendBytes(dst, h.Value)
	}
	dst = appendHead(dst, e, headers)
	dst = binary.AppendUvarint(dst, uint64(len(e.Tags)/8))
	dst = append(dst, e.Tags[:len(e.Tags)/8*8]...)
	metaLen := len(dst) - metaStart
	sum := xxhash.Sum64(dst[start:])
	dst = binary.LittleEndian.AppendUint32(dst, uint32(metaLen))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(e.Body)))
	dst = binary.LittleEndian.AppendUint64(dst, sum)
	return dst
}

func uvarintLen(x uint64) int {
	n := 1
	for ; x >= 0x80; x >>= 7 {
		n++
	}
	return n
}

// appendHead appends the head section (see the layout above): empty
// unless every field can be sent as a line exactly as stored.
func appendHead(dst []byte, e *Entry, headers []Header) []byte {
	if (e.Kind != KindResponse && e.Kind != KindNearCopy) || e.Status < 100 || e.Status > 999 {
		return append(dst, 0)
	}
	n := len("HTTP/1.1 200\r\n")
	for _, h := range headers {
		if !cachekey.IsToken(h.Name) || !headValue(h.Value) {
			return append(dst, 0)
		}
		n += len(h.Name) + 2 + len(h.Value) + 2
	}
	dst = binary.AppendUvarint(dst, uint64(n))
	dst = strconv.AppendInt(append(dst, "HTTP/1.1 "...), int64(e.Status), 10)
	dst = append(dst, '\r', '\n')
	for _, h := range headers {
		dst = append(append(append(append(dst, h.Name...), ':', ' '), h.Value...), '\r', '\n')
	}
	return dst
}

// headValue reports whether v can be sent as a field value as it is:
// visible characters, spaces and tabs inside, none at either end (a
// parser would trim them), and no control bytes.
func headValue(v []byte) bool {
	if len(v) > 0 && (v[0] == ' ' || v[0] == '\t' || v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		return false
	}
	for _, c := range v {
		if (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// DecodeEntry parses b into e without allocating. e's slices alias b.
func DecodeEntry(b []byte, e *Entry) error { return DecodeEntryCheck(b, e, true) }

// DecodeEntryCheck is DecodeEntry; checksum false skips hashing the
// payload and walking the headers section, for entries this process
// wrote itself (the store marks them verified, store.go): hashing the
// entry on every hit was 6 % of a 1 KiB hit's CPU and a quarter of a
// 100 KiB one's, and fastcache compares whole keys, so a read returns
// exactly the bytes written. Bytes from elsewhere (a snapshot, a peer)
// are checked in full.
func DecodeEntryCheck(b []byte, e *Entry, checksum bool) error {
	if len(b) < footerLen+fixedMetaLen {
		return ErrCorrupt
	}
	f := b[len(b)-footerLen:]
	metaLen := int(binary.LittleEndian.Uint32(f[0:4]))
	bodyLen := int(binary.LittleEndian.Uint32(f[4:8]))
	sum := binary.LittleEndian.Uint64(f[8:16])
	payload := b[:len(b)-footerLen]
	if metaLen < fixedMetaLen || bodyLen < 0 || metaLen+bodyLen != len(payload) {
		return ErrCorrupt
	}
	if checksum && xxhash.Sum64(payload) != sum {
		return ErrCorrupt
	}
	m := payload[bodyLen:]
	if m[0] != 'S' || m[1] != 'H' || m[2] != 'E' || (m[3] != entryVersion && m[3] != entryVersionV2) {
		return ErrCorrupt
	}
	version := m[3]
	*e = Entry{}
	e.Kind = Kind(m[4])
	if e.Kind < KindResponse || e.Kind > KindNearCopy {
		return ErrCorrupt
	}
	e.Status = int(binary.LittleEndian.Uint16(m[5:7]))
	p := m[7:]
	e.StoredAt = int64(binary.LittleEndian.Uint64(p[0:]))
	e.InitialAge = int64(binary.LittleEndian.Uint64(p[8:]))
	e.Lifetime = int64(binary.LittleEndian.Uint64(p[16:]))
	e.SWR = int64(binary.LittleEndian.Uint64(p[24:]))
	e.SIE = int64(binary.LittleEndian.Uint64(p[32:]))
	e.KeyDigest = binary.LittleEndian.Uint64(p[40:])
	e.FetchSeq = int64(binary.LittleEndian.Uint64(p[48:]))
	e.URLDigest = binary.LittleEndian.Uint64(p[56:])
	p = p[64:]
	var ok bool
	if e.ETag, p, ok = readBytes(p); !ok {
		return ErrCorrupt
	}
	if e.LastModified, p, ok = readBytes(p); !ok {
		return ErrCorrupt
	}
	if e.VaryCount, e.varyRaw, p, ok = readList(p, 1); !ok {
		return ErrCorrupt
	}
	if version == entryVersionV2 {
		if e.HeaderCount, e.headersRaw, p, ok = readList(p, 2); !ok {
			return ErrCorrupt
		}
	} else {
		var section []byte
		if section, p, ok = readBytes(p); !ok {
			return ErrCorrupt
		}
		if checksum {
			var rest []byte
			if e.HeaderCount, e.headersRaw, rest, ok = readList(section, 2); !ok || len(rest) != 0 {
				return ErrCorrupt
			}
		} else {
			n, w := binary.Uvarint(section)
			if w <= 0 || n > uint64(len(section)) {
				return ErrCorrupt
			}
			e.HeaderCount, e.headersRaw = int(n), section[w:]
		}
		if e.Head, p, ok = readBytes(p); !ok {
			return ErrCorrupt
		}
	}
	nt, w := binary.Uvarint(p)
	if w <= 0 || nt > MaxTags || uint64(len(p)-w) != nt*8 {
		return ErrCorrupt
	}
	e.Tags, p = p[w:len(p):len(p)], nil
	if len(p) != 0 {
		return ErrCorrupt
	}
	e.Body = payload[:bodyLen:bodyLen]
	return nil
}

// readBytes reads one length-prefixed field.
func readBytes(p []byte) (field, rest []byte, ok bool) {
	n, w := binary.Uvarint(p)
	if w <= 0 || n > uint64(len(p)-w) {
		return nil, nil, false
	}
	end := w + int(n)
	return p[w:end:end], p[end:], true
}

// readList validates a count-prefixed list of items, each made of per
// length-prefixed fields, and returns the count and the raw items.
func readList(p []byte, per int) (count int, raw, rest []byte, ok bool) {
	n, w := binary.Uvarint(p)
	if w <= 0 || n > uint64(len(p)) { // each item takes at least one byte
		return 0, nil, nil, false
	}
	rest = p[w:]
	start := rest
	for i := uint64(0); i < n*uint64(per); i++ {
		if _, rest, ok = readBytes(rest); !ok {
			return 0, nil, nil, false
		}
	}
	return int(n), start[:len(start)-len(rest)], rest, true
}

// FieldIter walks a validated list section produced by readList.
type FieldIter struct{ p []byte }

// Next returns the next field; ok is false at the end.
func (it *FieldIter) Next() (field []byte, ok bool) {
	if len(it.p) == 0 {
		return nil, false
	}
	field, it.p, ok = readBytes(it.p)
	return field, ok
}

// Headers iterates the entry's stored headers as name, value pairs.
func (e *Entry) Headers() FieldIter { return FieldIter{p: e.headersRaw} }

// VaryNames iterates the entry's lower-case Vary header names.
func (e *Entry) VaryNames() FieldIter { return FieldIter{p: e.varyRaw} }

// VaryList collects the Vary names (aliasing the entry's buffer) for
// re-encoding; it allocates, so the hit path iterates instead.
func (e *Entry) VaryList() [][]byte {
	var out [][]byte
	it := e.VaryNames()
	for n, ok := it.Next(); ok; n, ok = it.Next() {
		out = append(out, n)
	}
	return out
}

// HeaderList collects the stored headers (aliasing the entry's buffer)
// for re-encoding; it allocates, so the hit path iterates instead.
func (e *Entry) HeaderList() []Header {
	var out []Header
	it := e.Headers()
	for {
		k, ok := it.Next()
		if !ok {
			return out
		}
		v, _ := it.Next()
		out = append(out, Header{Name: k, Value: v})
	}
}

// SetNearCopy makes the encoded entry b (format 3, as DecodeEntry reads
// it) a near copy in place: kind KindNearCopy, the given stored-at,
// initial age, lifetime and fetch sequence, no stale windows, and the
// checksum recomputed. A node keeps a peer's entry this way without
// encoding it again (proxy's peerentry.go).
func SetNearCopy(b []byte, storedAt, initialAge, lifetime, fetchSeq int64) error {
	if len(b) < footerLen+fixedMetaLen {
		return ErrCorrupt
	}
	f := b[len(b)-footerLen:]
	metaLen := int(binary.LittleEndian.Uint32(f[0:4]))
	bodyLen := int(binary.LittleEndian.Uint32(f[4:8]))
	payload := b[:len(b)-footerLen]
	if metaLen < fixedMetaLen || bodyLen < 0 || metaLen+bodyLen != len(payload) {
		return ErrCorrupt
	}
	m := payload[bodyLen:]
	if m[0] != 'S' || m[1] != 'H' || m[2] != 'E' || m[3] != entryVersion {
		return ErrCorrupt
	}
	m[4] = byte(KindNearCopy)
	p := m[7:]
	binary.LittleEndian.PutUint64(p[0:], uint64(storedAt))
	binary.LittleEndian.PutUint64(p[8:], uint64(initialAge))
	binary.LittleEndian.PutUint64(p[16:], uint64(lifetime))
	binary.LittleEndian.PutUint64(p[24:], 0)
	binary.LittleEndian.PutUint64(p[32:], 0)
	binary.LittleEndian.PutUint64(p[48:], uint64(fetchSeq))
	binary.LittleEndian.PutUint64(f[8:16], xxhash.Sum64(payload))
	return nil
}
