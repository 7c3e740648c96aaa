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
	"github.com/shield-proxy/shield/proxy/cache"
)

// TestEntryHead: the prepared head of an answer parses back to its status
// and exactly its stored fields; kinds without an answer, and fields that
// cannot be sent as lines as they are, get no head (those hits set the
// fields one by one).
func TestEntryHead(t *testing.T) {
	resp := cache.Entry{Kind: cache.KindResponse, Status: 404}
	fields := []cache.Header{
		{Name: []byte("Content-Type"), Value: []byte("text/plain")},
		{Name: []byte("Date"), Value: []byte("Tue, 15 Nov 1994 08:12:31 GMT")},
		{Name: []byte("X-A"), Value: []byte("1")},
		{Name: []byte("X-A"), Value: []byte("two words\tand a tab")},
		{Name: []byte("X-Empty"), Value: nil},
	}
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	var e cache.Entry
	if err := cache.DecodeEntry(cache.AppendEntry(nil, &resp, nil, fields), &e); err != nil {
		t.Fatal(err)
	}
	var r fasthttp.Response
	if !sc.readHead(&r, e.Head) {
		t.Fatalf("head %q does not parse", e.Head)
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
		e    cache.Entry
		h    []cache.Header
	}{
		{"vary marker", cache.Entry{Kind: cache.KindVary}, nil},
		{"hit-for-miss", cache.Entry{Kind: cache.KindHitForMiss}, nil},
		{"status 0", cache.Entry{Kind: cache.KindResponse}, nil},
		{"name with a space", resp, []cache.Header{{Name: []byte("X A"), Value: []byte("1")}}},
		{"empty name", resp, []cache.Header{{Name: nil, Value: []byte("1")}}},
		{"CR in a value", resp, []cache.Header{{Name: []byte("X-A"), Value: []byte("1\r\nX-B: 2")}}},
		{"NUL in a value", resp, []cache.Header{{Name: []byte("X-A"), Value: []byte("1\x00")}}},
		{"leading space", resp, []cache.Header{{Name: []byte("X-A"), Value: []byte(" 1")}}},
		{"trailing tab", resp, []cache.Header{{Name: []byte("X-A"), Value: []byte("1\t")}}},
	} {
		if err := cache.DecodeEntry(cache.AppendEntry(nil, &tc.e, nil, tc.h), &e); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if len(e.Head) != 0 {
			t.Errorf("%s: head %q, want none", tc.name, e.Head)
		}
	}
}

// appendEntryV2 is appendEntry of the previous release (format 2: no
// length before the headers, no head), for snapshots it wrote.
func appendEntryV2(e *cache.Entry, headers []cache.Header) []byte {
	dst := append([]byte(nil), e.Body...)
	metaStart := len(dst)
	dst = append(dst, 'S', 'H', 'E', 2, byte(e.Kind))
	dst = binary.LittleEndian.AppendUint16(dst, uint16(e.Status))
	for _, v := range [...]int64{e.StoredAt, e.InitialAge, e.Lifetime, e.SWR, e.SIE} {
		dst = binary.LittleEndian.AppendUint64(dst, uint64(v))
	}
	dst = binary.LittleEndian.AppendUint64(dst, e.KeyDigest)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(e.FetchSeq))
	dst = binary.LittleEndian.AppendUint64(dst, e.URLDigest)
	dst = appendBytes(dst, e.ETag)
	dst = appendBytes(dst, e.LastModified)
	dst = binary.AppendUvarint(dst, 0) // vary
	dst = binary.AppendUvarint(dst, uint64(len(headers)))
	for _, h := range headers {
		dst = appendBytes(appendBytes(dst, h.Name), h.Value)
	}
	dst = binary.AppendUvarint(dst, 0) // tags
	sum := xxhash.Sum64(dst)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(dst)-metaStart))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(e.Body)))
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
	e := cache.Entry{Kind: cache.KindResponse, Status: 200, StoredAt: time.Now().UnixNano(), Lifetime: int64(time.Hour),
		KeyDigest: cachekey.Digest(key), ETag: []byte(`"old"`), Body: []byte("from a snapshot")}
	v2 := appendEntryV2(&e, []cache.Header{{Name: []byte("Date"), Value: []byte(date)}, {Name: []byte("Etag"), Value: []byte(`"old"`)}, {Name: []byte("X-Old"), Value: []byte("1")}})
	var got cache.Entry
	if err := cache.DecodeEntry(v2, &got); err != nil || len(got.Head) != 0 || got.HeaderCount != 3 {
		t.Fatalf("decodeEntry(format 2) = %v, head %q, %d headers", err, got.Head, got.HeaderCount)
	}
	p.cache.Fastcache().Set(key, v2)
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

// appendBytes appends one length-prefixed field (the codec's layout).
func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}
