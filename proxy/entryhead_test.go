package proxy

import (
	"encoding/binary"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/cachekey"
)

// TestEntryHead: the prepared head of an answer parses back to its status
// and exactly its stored fields; kinds without an answer, and fields that
// cannot be sent as lines as they are, get no head (those hits set the
// fields one by one).
func TestEntryHead(t *testing.T) {
	resp := entry{kind: kindResponse, status: 404}
	fields := []header{
		{k: []byte("Content-Type"), v: []byte("text/plain")},
		{k: []byte("Date"), v: []byte("Tue, 15 Nov 1994 08:12:31 GMT")},
		{k: []byte("X-A"), v: []byte("1")},
		{k: []byte("X-A"), v: []byte("two words\tand a tab")},
		{k: []byte("X-Empty"), v: nil},
	}
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	var e entry
	if err := decodeEntry(appendEntry(nil, &resp, nil, fields), &e); err != nil {
		t.Fatal(err)
	}
	var r fasthttp.Response
	if !sc.readHead(&r, e.head) {
		t.Fatalf("head %q does not parse", e.head)
	}
	if r.StatusCode() != 404 || len(r.Header.StatusMessage()) != 0 {
		t.Errorf("status %d %q, want 404 without a stored reason phrase", r.StatusCode(), r.Header.StatusMessage())
	}
	var got []string
	for k, v := range r.Header.All() {
		if string(k) != "Content-Length" {
			got = append(got, string(k)+": "+string(v))
		}
	}
	want := []string{"Content-Type: text/plain", "Date: Tue, 15 Nov 1994 08:12:31 GMT", "X-A: 1", "X-A: two words\tand a tab", "X-Empty: "}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("parsed head:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	for _, tc := range []struct {
		name string
		e    entry
		h    []header
	}{
		{"vary marker", entry{kind: kindVary}, nil},
		{"hit-for-miss", entry{kind: kindHitForMiss}, nil},
		{"status 0", entry{kind: kindResponse}, nil},
		{"name with a space", resp, []header{{k: []byte("X A"), v: []byte("1")}}},
		{"empty name", resp, []header{{k: nil, v: []byte("1")}}},
		{"CR in a value", resp, []header{{k: []byte("X-A"), v: []byte("1\r\nX-B: 2")}}},
		{"NUL in a value", resp, []header{{k: []byte("X-A"), v: []byte("1\x00")}}},
		{"leading space", resp, []header{{k: []byte("X-A"), v: []byte(" 1")}}},
		{"trailing tab", resp, []header{{k: []byte("X-A"), v: []byte("1\t")}}},
	} {
		if err := decodeEntry(appendEntry(nil, &tc.e, nil, tc.h), &e); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if len(e.head) != 0 {
			t.Errorf("%s: head %q, want none", tc.name, e.head)
		}
	}
}

// appendEntryV2 is appendEntry of the previous release (format 2: no
// length before the headers, no head), for snapshots it wrote.
func appendEntryV2(e *entry, headers []header) []byte {
	dst := append([]byte(nil), e.body...)
	metaStart := len(dst)
	dst = append(dst, 'S', 'H', 'E', entryVersionV2, byte(e.kind))
	dst = binary.LittleEndian.AppendUint16(dst, uint16(e.status))
	for _, v := range [...]int64{e.storedAt, e.initialAge, e.lifetime, e.swr, e.sie} {
		dst = binary.LittleEndian.AppendUint64(dst, uint64(v))
	}
	dst = binary.LittleEndian.AppendUint64(dst, e.keyDigest)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(e.fetchSeq))
	dst = binary.LittleEndian.AppendUint64(dst, e.urlDigest)
	dst = appendBytes(dst, e.etag)
	dst = appendBytes(dst, e.lastModified)
	dst = binary.AppendUvarint(dst, 0) // vary
	dst = binary.AppendUvarint(dst, uint64(len(headers)))
	for _, h := range headers {
		dst = appendBytes(appendBytes(dst, h.k), h.v)
	}
	dst = binary.AppendUvarint(dst, 0) // tags
	sum := xxhash.Sum64(dst)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(dst)-metaStart))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(e.body)))
	return binary.LittleEndian.AppendUint64(dst, sum)
}

// TestEntryV2Hit: an entry of format 2, as a snapshot of the previous
// release holds it (no store trailer), decodes and is served as a hit
// with its stored fields and Date, set one by one.
func TestEntryV2Hit(t *testing.T) {
	o := newTestOrigin(t, cacheable("from origin"))
	p := newTestProxy(t, o.addr(), nil)
	key := primaryKey(p, get(t, "/old"))
	date := time.Now().Add(-time.Minute).UTC().Format(http.TimeFormat)
	e := entry{kind: kindResponse, status: 200, storedAt: time.Now().UnixNano(), lifetime: int64(time.Hour),
		keyDigest: cachekey.Digest(key), etag: []byte(`"old"`), body: []byte("from a snapshot")}
	v2 := appendEntryV2(&e, []header{{k: []byte("Date"), v: []byte(date)}, {k: []byte("Etag"), v: []byte(`"old"`)}, {k: []byte("X-Old"), v: []byte("1")}})
	var got entry
	if err := decodeEntry(v2, &got); err != nil || len(got.head) != 0 || got.headerCount != 3 {
		t.Fatalf("decodeEntry(format 2) = %v, head %q, %d headers", err, got.head, got.headerCount)
	}
	p.store.c.Set(key, v2)
	ctx := serve(p, get(t, "/old"))
	h := &ctx.Response.Header
	if s := summary(ctx); s.body != "from a snapshot" || !strings.HasPrefix(s.cacheStatus, "shield; hit") {
		t.Fatalf("response %+v, want a hit on the snapshot's entry", s)
	}
	if string(h.Peek("Date")) != date || string(h.Peek("X-Old")) != "1" || len(h.Peek("Age")) == 0 {
		t.Errorf("Date %q, X-Old %q, Age %q; want %q, 1, an age", h.Peek("Date"), h.Peek("X-Old"), h.Peek("Age"), date)
	}
	if o.hits.Load() != 0 {
		t.Errorf("origin asked %d times", o.hits.Load())
	}
}
