package cache

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// entryCase is one entry to encode: the fields appendEntry writes, plus
// the vary names and headers it takes separately.
type entryCase struct {
	name    string
	e       Entry
	vary    [][]byte
	headers []Header
}

// entryCases covers each kind of entry and the edges of every section.
func entryCases() []entryCase {
	big := make([]byte, 200*1024)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range big {
		big[i] = byte(rng.Uint32())
	}
	var many []Header
	for i := range 300 {
		many = append(many, Header{Name: fmt.Appendf(nil, "X-H%d", i), Value: bytes.Repeat([]byte{'v'}, i)})
	}
	return []entryCase{
		{
			name: "response",
			e: Entry{
				Kind: KindResponse, Status: 200, StoredAt: 1_700_000_000_000_000_000,
				InitialAge: 5e9, Lifetime: 3600e9, SWR: 60e9, SIE: 86400e9, KeyDigest: 0xdeadbeefcafef00d,
				ETag: []byte(`"v1"`), LastModified: []byte("Tue, 15 Nov 1994 12:45:26 GMT"),
				Body: []byte("hello, world"),
			},
			headers: []Header{
				{Name: []byte("Content-Type"), Value: []byte("text/plain")},
				{Name: []byte("Cache-Control"), Value: []byte("public, max-age=3600")},
			},
		},
		{
			name: "vary marker",
			e:    Entry{Kind: KindVary, StoredAt: 42, KeyDigest: 7},
			vary: [][]byte{[]byte("accept-encoding"), []byte("accept-language")},
		},
		{
			name: "hit-for-miss",
			e:    Entry{Kind: KindHitForMiss, StoredAt: 99, Lifetime: 10e9, KeyDigest: 1},
		},
		{
			name: "empty body, no headers",
			e:    Entry{Kind: KindResponse, Status: 204},
		},
		{
			name: "negative and extreme times",
			e: Entry{Kind: KindResponse, Status: 65535, StoredAt: math.MinInt64, InitialAge: -1,
				Lifetime: math.MaxInt64, SWR: math.MinInt64, SIE: -math.MaxInt64, KeyDigest: math.MaxUint64},
		},
		{
			name:    "big body",
			e:       Entry{Kind: KindResponse, Status: 200, Body: big, ETag: []byte(`W/"big"`)},
			headers: []Header{{Name: []byte("Content-Type"), Value: []byte("application/octet-stream")}},
		},
		{
			name:    "many headers",
			e:       Entry{Kind: KindResponse, Status: 200, Body: []byte("x")},
			headers: many,
		},
		{
			name:    "empty names and values",
			e:       Entry{Kind: KindResponse, Status: 200},
			vary:    [][]byte{{}},
			headers: []Header{{Name: []byte{}, Value: []byte{}}, {Name: []byte("A"), Value: nil}},
		},
		{
			name:    "varying response",
			e:       Entry{Kind: KindResponse, Status: 200, Body: []byte("bonjour")},
			vary:    [][]byte{[]byte("accept-language")},
			headers: []Header{{Name: []byte("Vary"), Value: []byte("Accept-Language")}},
		},
	}
}

// fieldsOf reads back an iterator's fields.
func fieldsOf(it FieldIter) [][]byte {
	var out [][]byte
	for f, ok := it.Next(); ok; f, ok = it.Next() {
		out = append(out, f)
	}
	return out
}

// checkDecoded compares a decoded entry with what was encoded.
func checkDecoded(t testing.TB, got *Entry, want *Entry, vary [][]byte, headers []Header) {
	t.Helper()
	if got.Kind != want.Kind || got.Status != want.Status&0xffff || got.StoredAt != want.StoredAt ||
		got.InitialAge != want.InitialAge || got.Lifetime != want.Lifetime || got.SWR != want.SWR ||
		got.SIE != want.SIE || got.KeyDigest != want.KeyDigest {
		t.Fatalf("decoded fixed fields = %+v, want %+v", *got, *want)
	}
	if !bytes.Equal(got.ETag, want.ETag) || !bytes.Equal(got.LastModified, want.LastModified) {
		t.Fatalf("validators = %q, %q; want %q, %q", got.ETag, got.LastModified, want.ETag, want.LastModified)
	}
	if !bytes.Equal(got.Body, want.Body) {
		t.Fatalf("body: got %d bytes, want %d bytes (or contents differ)", len(got.Body), len(want.Body))
	}
	// The body must not be appendable into the meta that follows it.
	if cap(got.Body) != len(got.Body) {
		t.Fatalf("cap(body) = %d, want %d (full slice expression)", cap(got.Body), len(got.Body))
	}
	if got.VaryCount != len(vary) {
		t.Fatalf("varyCount = %d, want %d", got.VaryCount, len(vary))
	}
	gotVary := fieldsOf(got.VaryNames())
	if !slices.EqualFunc(gotVary, vary, bytes.Equal) {
		t.Fatalf("vary = %q, want %q", gotVary, vary)
	}
	if got.HeaderCount != len(headers) {
		t.Fatalf("headerCount = %d, want %d", got.HeaderCount, len(headers))
	}
	gotH := fieldsOf(got.Headers())
	var wantH [][]byte
	for _, h := range headers {
		wantH = append(wantH, h.Name, h.Value)
	}
	if !slices.EqualFunc(gotH, wantH, bytes.Equal) {
		t.Fatalf("headers = %q, want %q", gotH, wantH)
	}
}

func TestEntryRoundTrip(t *testing.T) {
	for _, tc := range entryCases() {
		t.Run(tc.name, func(t *testing.T) {
			enc := AppendEntry(nil, &tc.e, tc.vary, tc.headers)
			var got Entry
			if err := DecodeEntry(enc, &got); err != nil {
				t.Fatalf("decodeEntry(appendEntry(x)) = %v", err)
			}
			checkDecoded(t, &got, &tc.e, tc.vary, tc.headers)

			// Appending after a prefix encodes the same bytes, and
			// decoding into a used entry gives the same result.
			prefixed := AppendEntry([]byte("prefix"), &tc.e, tc.vary, tc.headers)
			if !bytes.Equal(prefixed[len("prefix"):], enc) {
				t.Fatal("appendEntry after a prefix encodes differently")
			}
			reused := Entry{Kind: KindVary, ETag: []byte("stale"), VaryCount: 9, headersRaw: []byte{1, 2}}
			if err := DecodeEntry(prefixed[len("prefix"):], &reused); err != nil {
				t.Fatalf("decodeEntry into a used entry = %v", err)
			}
			checkDecoded(t, &reused, &tc.e, tc.vary, tc.headers)
		})
	}
}

// TestDecodeEntryCorruption flips every byte of valid entries, cuts them at
// every length and extends them: each must be errCorrupt, never a panic
// and never a "valid" entry.
func TestDecodeEntryCorruption(t *testing.T) {
	for _, tc := range entryCases() {
		if len(tc.e.Body) > 4096 || len(tc.headers) > 10 {
			continue // quadratic in size; the small cases cover every section
		}
		t.Run(tc.name, func(t *testing.T) {
			enc := AppendEntry(nil, &tc.e, tc.vary, tc.headers)
			buf := make([]byte, len(enc))
			var e Entry
			for i := range enc {
				for _, mask := range []byte{0x01, 0x80, 0xff} {
					copy(buf, enc)
					buf[i] ^= mask
					if err := DecodeEntry(buf, &e); !errors.Is(err, ErrCorrupt) {
						t.Fatalf("byte %d ^ %#x: decodeEntry = %v, want errCorrupt", i, mask, err)
					}
				}
			}
			for n := range len(enc) {
				if err := DecodeEntry(enc[:n], &e); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("truncated to %d of %d bytes: decodeEntry = %v, want errCorrupt", n, len(enc), err)
				}
				if err := DecodeEntry(enc[len(enc)-n:], &e); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("first %d bytes cut: decodeEntry = %v, want errCorrupt", len(enc)-n, err)
				}
			}
			for _, extra := range [][]byte{{0}, []byte("junk"), enc} {
				long := append(slices.Clone(enc), extra...)
				if err := DecodeEntry(long, &e); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("with %d bytes appended: decodeEntry = %v, want errCorrupt", len(extra), err)
				}
			}
		})
	}
}

// TestDecodeEntryRejects covers entries whose checksum is right but whose
// content is not: the checksum alone must not make junk valid.
func TestDecodeEntryRejects(t *testing.T) {
	valid := AppendEntry(nil, &Entry{Kind: KindResponse, Status: 200, Body: []byte("body")}, nil,
		[]Header{{Name: []byte("A"), Value: []byte("b")}})
	tests := []struct {
		name  string
		build func() []byte
	}{
		{"empty", func() []byte { return nil }},
		{"footer only", func() []byte { return make([]byte, footerLen) }},
		{"zero kind", func() []byte { return reseal(valid, 4, 0) }},
		{"unknown kind", func() []byte { return reseal(valid, 4, byte(KindNearCopy)+1) }},
		{"unknown version", func() []byte { return reseal(valid, 3, entryVersion+1) }},
		{"bad magic", func() []byte { return reseal(valid, 0, 'X') }},
		{"header count too large", func() []byte {
			// The count precedes the two fields (A, b: 4 bytes), the
			// head ("HTTP/1.1 200\r\nA: b\r\n" and its length: 21
			// bytes) and the tag count (1 byte) that end the meta.
			return reseal(valid, metaLenOf(valid)-1-21-4-1, 3)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var e Entry
			if err := DecodeEntry(tt.build(), &e); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decodeEntry = %v, want errCorrupt", err)
			}
		})
	}
}

// metaLenOf reads the meta length from an encoded entry's footer.
func metaLenOf(enc []byte) int {
	f := enc[len(enc)-footerLen:]
	return int(uint32(f[0]) | uint32(f[1])<<8 | uint32(f[2])<<16 | uint32(f[3])<<24)
}

// reseal returns a copy of enc with the meta byte at metaOff set to v and
// the checksum recomputed, so that only the content check can reject it.
func reseal(enc []byte, metaOff int, v byte) []byte {
	var e Entry
	if err := DecodeEntry(enc, &e); err != nil {
		panic(err)
	}
	out := slices.Clone(enc)
	out[len(e.Body)+metaOff] = v
	payload := out[:len(out)-footerLen]
	sum := xxhash.Sum64(payload)
	for i := range 8 {
		out[len(out)-8+i] = byte(sum >> (8 * i))
	}
	return out
}

// splitFields turns fuzz bytes into a list of fields separated by 0xff.
func splitFields(b []byte) [][]byte {
	if len(b) == 0 {
		return nil
	}
	return bytes.Split(b, []byte{0xff})
}

// seal appends the footer appendEntry would write for payload (body then
// meta), so that fuzzed bytes reach the meta parser instead of stopping at
// the checksum.
func seal(payload []byte, bodyLen int) []byte {
	out := slices.Clone(payload)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(payload)-bodyLen))
	out = binary.LittleEndian.AppendUint32(out, uint32(bodyLen))
	return binary.LittleEndian.AppendUint64(out, xxhash.Sum64(payload))
}

// FuzzDecodeEntry: decoding arbitrary bytes never panics and fails only
// with errCorrupt; whatever decodes re-encodes to an entry that decodes
// to the same fields. Each input is tried as is and sealed with a valid
// footer (checksum included), so the fuzzer explores the meta parser.
func FuzzDecodeEntry(f *testing.F) {
	for _, tc := range entryCases() {
		if len(tc.e.Body) > 1024 {
			continue
		}
		enc := AppendEntry(nil, &tc.e, tc.vary, tc.headers)
		f.Add(enc, uint16(0))
		f.Add(enc[:len(enc)-footerLen], uint16(len(tc.e.Body)))
	}
	f.Add([]byte{}, uint16(0))
	f.Add(make([]byte, footerLen+fixedMetaLen), uint16(0))
	f.Fuzz(func(t *testing.T, b []byte, bodyLen uint16) {
		checkDecodeProperty(t, b)
		if int(bodyLen) <= len(b) {
			checkDecodeProperty(t, seal(b, int(bodyLen)))
		}
	})
}

func checkDecodeProperty(t *testing.T, b []byte) {
	t.Helper()
	var e Entry
	err := DecodeEntry(b, &e)
	if err != nil {
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("decodeEntry = %v, want nil or errCorrupt", err)
		}
		return
	}
	vary := fieldsOf(e.VaryNames())
	var hs []Header
	it := e.Headers()
	for k, ok := it.Next(); ok; k, ok = it.Next() {
		v, ok := it.Next()
		if !ok {
			t.Fatal("headers section has a name without a value")
		}
		hs = append(hs, Header{Name: k, Value: v})
	}
	if len(vary) != e.VaryCount || len(hs) != e.HeaderCount {
		t.Fatalf("iterators yield %d vary names and %d headers, counts say %d and %d",
			len(vary), len(hs), e.VaryCount, e.HeaderCount)
	}
	var again Entry
	if err := DecodeEntry(AppendEntry(nil, &e, vary, hs), &again); err != nil {
		t.Fatalf("re-encoded entry does not decode: %v", err)
	}
	checkDecoded(t, &again, &e, vary, hs)
}

func FuzzEntryRoundTrip(f *testing.F) {
	f.Add(uint8(1), uint16(200), int64(1), int64(2), int64(3), int64(4), int64(5), uint64(6),
		[]byte(`"e"`), []byte("Mon, 01 Jan 2024 00:00:00 GMT"), []byte("body"), []byte(""),
		[]byte("Content-Type\xfftext/plain"))
	f.Add(uint8(2), uint16(0), int64(-1), int64(0), int64(0), int64(0), int64(0), uint64(0),
		[]byte{}, []byte{}, []byte{}, []byte("accept\xffaccept-language"), []byte{})
	f.Add(uint8(3), uint16(65535), int64(math.MaxInt64), int64(math.MinInt64), int64(0), int64(0), int64(0),
		uint64(math.MaxUint64), []byte{0x80, 0x80}, []byte{0xff}, bytes.Repeat([]byte{0}, 300), []byte{0xff}, []byte{0xff, 0xff})
	f.Fuzz(func(t *testing.T, kind uint8, status uint16, storedAt, initialAge, lifetime, swr, sie int64, digest uint64,
		etag, lastModified, body, varyBlob, headerBlob []byte) {
		e := Entry{
			Kind: Kind(kind%3) + KindResponse, Status: int(status), StoredAt: storedAt,
			InitialAge: initialAge, Lifetime: lifetime, SWR: swr, SIE: sie, KeyDigest: digest,
			ETag: etag, LastModified: lastModified, Body: body,
		}
		vary := splitFields(varyBlob)
		var hs []Header
		fields := splitFields(headerBlob)
		for i := 0; i+1 < len(fields); i += 2 {
			hs = append(hs, Header{Name: fields[i], Value: fields[i+1]})
		}
		enc := AppendEntry(nil, &e, vary, hs)
		if meta, max := len(enc)-len(body), EntryMetaMax(&e, vary, hs); meta > max {
			t.Fatalf("meta %d bytes, above EntryMetaMax %d", meta, max)
		}
		var got Entry
		if err := DecodeEntry(enc, &got); err != nil {
			t.Fatalf("decodeEntry(appendEntry(x)) = %v", err)
		}
		checkDecoded(t, &got, &e, vary, hs)
		// The same entry appended into a reused, dirty buffer encodes
		// the same bytes.
		dirty := append(bytes.Repeat([]byte{0xaa}, 7), enc...)
		if re := AppendEntry(dirty[:3], &e, vary, hs); !bytes.Equal(re[3:], enc) {
			t.Fatal("appendEntry into a reused buffer differs from a fresh one")
		}
	})
}

// benchEntry is a typical small response: 1 KiB body, 8 headers.
func benchEntry() []byte {
	e := Entry{
		Kind: KindResponse, Status: 200, StoredAt: 1_700_000_000_000_000_000, Lifetime: 3600e9,
		KeyDigest: 12345, ETag: []byte(`"abc123"`), Body: bytes.Repeat([]byte("a"), 1024),
	}
	var hs []Header
	for i := range 8 {
		hs = append(hs, Header{Name: fmt.Appendf(nil, "X-Header-%d", i), Value: []byte("some header value of moderate size")})
	}
	return AppendEntry(nil, &e, nil, hs)
}

func BenchmarkDecodeEntry(b *testing.B) {
	enc := benchEntry()
	var e Entry
	b.SetBytes(int64(len(enc)))
	b.ReportAllocs()
	for b.Loop() {
		if err := DecodeEntry(enc, &e); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendEntry(b *testing.B) {
	enc := benchEntry()
	var e Entry
	if err := DecodeEntry(enc, &e); err != nil {
		b.Fatal(err)
	}
	var hs []Header
	it := e.Headers()
	for k, ok := it.Next(); ok; k, ok = it.Next() {
		v, _ := it.Next()
		hs = append(hs, Header{Name: k, Value: v})
	}
	buf := make([]byte, 0, 2*len(enc))
	b.SetBytes(int64(len(enc)))
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendEntry(buf[:0], &e, nil, hs)
	}
}

// TestSetNearCopy: an entry made a near copy in place decodes, checksum
// checked, with its new timing and everything else unchanged.
func TestSetNearCopy(t *testing.T) {
	e := Entry{Kind: KindResponse, Status: 200, StoredAt: 1, InitialAge: 2, Lifetime: 3, SWR: 4, SIE: 5,
		KeyDigest: 6, FetchSeq: 7, URLDigest: 8, ETag: []byte(`"e"`), Body: []byte("body")}
	b := AppendEntry(nil, &e, [][]byte{[]byte("accept")}, []Header{{Name: []byte("X-A"), Value: []byte("1")}})
	if err := SetNearCopy(b, 10, 20, 30, 40); err != nil {
		t.Fatal(err)
	}
	var got Entry
	if err := DecodeEntry(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.Kind != KindNearCopy || got.StoredAt != 10 || got.InitialAge != 20 || got.Lifetime != 30 || got.SWR != 0 || got.SIE != 0 || got.FetchSeq != 40 {
		t.Fatalf("timing: %+v", got)
	}
	if got.Status != 200 || got.KeyDigest != 6 || got.URLDigest != 8 || string(got.ETag) != `"e"` || string(got.Body) != "body" || got.VaryCount != 1 || got.HeaderCount != 1 {
		t.Fatalf("the rest changed: %+v", got)
	}
	if SetNearCopy(b[:len(b)-1], 0, 0, 0, 0) == nil || SetNearCopy([]byte("short"), 0, 0, 0, 0) == nil {
		t.Fatal("a damaged entry was rewritten")
	}
}
