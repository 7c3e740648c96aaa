package proxy

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
	e       entry
	vary    [][]byte
	headers []header
}

// entryCases covers each kind of entry and the edges of every section.
func entryCases() []entryCase {
	big := make([]byte, 200*1024)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range big {
		big[i] = byte(rng.Uint32())
	}
	var many []header
	for i := range 300 {
		many = append(many, header{k: fmt.Appendf(nil, "X-H%d", i), v: bytes.Repeat([]byte{'v'}, i)})
	}
	return []entryCase{
		{
			name: "response",
			e: entry{
				kind: kindResponse, status: 200, storedAt: 1_700_000_000_000_000_000,
				initialAge: 5e9, lifetime: 3600e9, swr: 60e9, sie: 86400e9, keyDigest: 0xdeadbeefcafef00d,
				etag: []byte(`"v1"`), lastModified: []byte("Tue, 15 Nov 1994 12:45:26 GMT"),
				body: []byte("hello, world"),
			},
			headers: []header{
				{k: []byte("Content-Type"), v: []byte("text/plain")},
				{k: []byte("Cache-Control"), v: []byte("public, max-age=3600")},
			},
		},
		{
			name: "vary marker",
			e:    entry{kind: kindVary, storedAt: 42, keyDigest: 7},
			vary: [][]byte{[]byte("accept-encoding"), []byte("accept-language")},
		},
		{
			name: "hit-for-miss",
			e:    entry{kind: kindHitForMiss, storedAt: 99, lifetime: 10e9, keyDigest: 1},
		},
		{
			name: "empty body, no headers",
			e:    entry{kind: kindResponse, status: 204},
		},
		{
			name: "negative and extreme times",
			e: entry{kind: kindResponse, status: 65535, storedAt: math.MinInt64, initialAge: -1,
				lifetime: math.MaxInt64, swr: math.MinInt64, sie: -math.MaxInt64, keyDigest: math.MaxUint64},
		},
		{
			name:    "big body",
			e:       entry{kind: kindResponse, status: 200, body: big, etag: []byte(`W/"big"`)},
			headers: []header{{k: []byte("Content-Type"), v: []byte("application/octet-stream")}},
		},
		{
			name:    "many headers",
			e:       entry{kind: kindResponse, status: 200, body: []byte("x")},
			headers: many,
		},
		{
			name:    "empty names and values",
			e:       entry{kind: kindResponse, status: 200},
			vary:    [][]byte{{}},
			headers: []header{{k: []byte{}, v: []byte{}}, {k: []byte("A"), v: nil}},
		},
		{
			name:    "varying response",
			e:       entry{kind: kindResponse, status: 200, body: []byte("bonjour")},
			vary:    [][]byte{[]byte("accept-language")},
			headers: []header{{k: []byte("Vary"), v: []byte("Accept-Language")}},
		},
	}
}

// fieldsOf reads back an iterator's fields.
func fieldsOf(it fieldIter) [][]byte {
	var out [][]byte
	for f, ok := it.next(); ok; f, ok = it.next() {
		out = append(out, f)
	}
	return out
}

// checkDecoded compares a decoded entry with what was encoded.
func checkDecoded(t testing.TB, got *entry, want *entry, vary [][]byte, headers []header) {
	t.Helper()
	if got.kind != want.kind || got.status != want.status&0xffff || got.storedAt != want.storedAt ||
		got.initialAge != want.initialAge || got.lifetime != want.lifetime || got.swr != want.swr ||
		got.sie != want.sie || got.keyDigest != want.keyDigest {
		t.Fatalf("decoded fixed fields = %+v, want %+v", *got, *want)
	}
	if !bytes.Equal(got.etag, want.etag) || !bytes.Equal(got.lastModified, want.lastModified) {
		t.Fatalf("validators = %q, %q; want %q, %q", got.etag, got.lastModified, want.etag, want.lastModified)
	}
	if !bytes.Equal(got.body, want.body) {
		t.Fatalf("body: got %d bytes, want %d bytes (or contents differ)", len(got.body), len(want.body))
	}
	// The body must not be appendable into the meta that follows it.
	if cap(got.body) != len(got.body) {
		t.Fatalf("cap(body) = %d, want %d (full slice expression)", cap(got.body), len(got.body))
	}
	if got.varyCount != len(vary) {
		t.Fatalf("varyCount = %d, want %d", got.varyCount, len(vary))
	}
	gotVary := fieldsOf(got.varyNames())
	if !slices.EqualFunc(gotVary, vary, bytes.Equal) {
		t.Fatalf("vary = %q, want %q", gotVary, vary)
	}
	if got.headerCount != len(headers) {
		t.Fatalf("headerCount = %d, want %d", got.headerCount, len(headers))
	}
	gotH := fieldsOf(got.headers())
	var wantH [][]byte
	for _, h := range headers {
		wantH = append(wantH, h.k, h.v)
	}
	if !slices.EqualFunc(gotH, wantH, bytes.Equal) {
		t.Fatalf("headers = %q, want %q", gotH, wantH)
	}
}

func TestEntryRoundTrip(t *testing.T) {
	for _, tc := range entryCases() {
		t.Run(tc.name, func(t *testing.T) {
			enc := appendEntry(nil, &tc.e, tc.vary, tc.headers)
			var got entry
			if err := decodeEntry(enc, &got); err != nil {
				t.Fatalf("decodeEntry(appendEntry(x)) = %v", err)
			}
			checkDecoded(t, &got, &tc.e, tc.vary, tc.headers)

			// Appending after a prefix encodes the same bytes, and
			// decoding into a used entry gives the same result.
			prefixed := appendEntry([]byte("prefix"), &tc.e, tc.vary, tc.headers)
			if !bytes.Equal(prefixed[len("prefix"):], enc) {
				t.Fatal("appendEntry after a prefix encodes differently")
			}
			reused := entry{kind: kindVary, etag: []byte("stale"), varyCount: 9, headersRaw: []byte{1, 2}}
			if err := decodeEntry(prefixed[len("prefix"):], &reused); err != nil {
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
		if len(tc.e.body) > 4096 || len(tc.headers) > 10 {
			continue // quadratic in size; the small cases cover every section
		}
		t.Run(tc.name, func(t *testing.T) {
			enc := appendEntry(nil, &tc.e, tc.vary, tc.headers)
			buf := make([]byte, len(enc))
			var e entry
			for i := range enc {
				for _, mask := range []byte{0x01, 0x80, 0xff} {
					copy(buf, enc)
					buf[i] ^= mask
					if err := decodeEntry(buf, &e); !errors.Is(err, errCorrupt) {
						t.Fatalf("byte %d ^ %#x: decodeEntry = %v, want errCorrupt", i, mask, err)
					}
				}
			}
			for n := range len(enc) {
				if err := decodeEntry(enc[:n], &e); !errors.Is(err, errCorrupt) {
					t.Fatalf("truncated to %d of %d bytes: decodeEntry = %v, want errCorrupt", n, len(enc), err)
				}
				if err := decodeEntry(enc[len(enc)-n:], &e); !errors.Is(err, errCorrupt) {
					t.Fatalf("first %d bytes cut: decodeEntry = %v, want errCorrupt", len(enc)-n, err)
				}
			}
			for _, extra := range [][]byte{{0}, []byte("junk"), enc} {
				long := append(slices.Clone(enc), extra...)
				if err := decodeEntry(long, &e); !errors.Is(err, errCorrupt) {
					t.Fatalf("with %d bytes appended: decodeEntry = %v, want errCorrupt", len(extra), err)
				}
			}
		})
	}
}

// TestDecodeEntryRejects covers entries whose checksum is right but whose
// content is not: the checksum alone must not make junk valid.
func TestDecodeEntryRejects(t *testing.T) {
	valid := appendEntry(nil, &entry{kind: kindResponse, status: 200, body: []byte("body")}, nil,
		[]header{{k: []byte("A"), v: []byte("b")}})
	tests := []struct {
		name  string
		build func() []byte
	}{
		{"empty", func() []byte { return nil }},
		{"footer only", func() []byte { return make([]byte, footerLen) }},
		{"zero kind", func() []byte { return reseal(valid, 4, 0) }},
		{"unknown kind", func() []byte { return reseal(valid, 4, byte(kindNearCopy)+1) }},
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
			var e entry
			if err := decodeEntry(tt.build(), &e); !errors.Is(err, errCorrupt) {
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
	var e entry
	if err := decodeEntry(enc, &e); err != nil {
		panic(err)
	}
	out := slices.Clone(enc)
	out[len(e.body)+metaOff] = v
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
		if len(tc.e.body) > 1024 {
			continue
		}
		enc := appendEntry(nil, &tc.e, tc.vary, tc.headers)
		f.Add(enc, uint16(0))
		f.Add(enc[:len(enc)-footerLen], uint16(len(tc.e.body)))
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
	var e entry
	err := decodeEntry(b, &e)
	if err != nil {
		if !errors.Is(err, errCorrupt) {
			t.Fatalf("decodeEntry = %v, want nil or errCorrupt", err)
		}
		return
	}
	vary := fieldsOf(e.varyNames())
	var hs []header
	it := e.headers()
	for k, ok := it.next(); ok; k, ok = it.next() {
		v, ok := it.next()
		if !ok {
			t.Fatal("headers section has a name without a value")
		}
		hs = append(hs, header{k: k, v: v})
	}
	if len(vary) != e.varyCount || len(hs) != e.headerCount {
		t.Fatalf("iterators yield %d vary names and %d headers, counts say %d and %d",
			len(vary), len(hs), e.varyCount, e.headerCount)
	}
	var again entry
	if err := decodeEntry(appendEntry(nil, &e, vary, hs), &again); err != nil {
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
		e := entry{
			kind: entryKind(kind%3) + kindResponse, status: int(status), storedAt: storedAt,
			initialAge: initialAge, lifetime: lifetime, swr: swr, sie: sie, keyDigest: digest,
			etag: etag, lastModified: lastModified, body: body,
		}
		vary := splitFields(varyBlob)
		var hs []header
		fields := splitFields(headerBlob)
		for i := 0; i+1 < len(fields); i += 2 {
			hs = append(hs, header{k: fields[i], v: fields[i+1]})
		}
		enc := appendEntry(nil, &e, vary, hs)
		var got entry
		if err := decodeEntry(enc, &got); err != nil {
			t.Fatalf("decodeEntry(appendEntry(x)) = %v", err)
		}
		checkDecoded(t, &got, &e, vary, hs)
		// The same entry appended into a reused, dirty buffer encodes
		// the same bytes.
		dirty := append(bytes.Repeat([]byte{0xaa}, 7), enc...)
		if re := appendEntry(dirty[:3], &e, vary, hs); !bytes.Equal(re[3:], enc) {
			t.Fatal("appendEntry into a reused buffer differs from a fresh one")
		}
	})
}

// benchEntry is a typical small response: 1 KiB body, 8 headers.
func benchEntry() []byte {
	e := entry{
		kind: kindResponse, status: 200, storedAt: 1_700_000_000_000_000_000, lifetime: 3600e9,
		keyDigest: 12345, etag: []byte(`"abc123"`), body: bytes.Repeat([]byte("a"), 1024),
	}
	var hs []header
	for i := range 8 {
		hs = append(hs, header{k: fmt.Appendf(nil, "X-Header-%d", i), v: []byte("some header value of moderate size")})
	}
	return appendEntry(nil, &e, nil, hs)
}

func BenchmarkDecodeEntry(b *testing.B) {
	enc := benchEntry()
	var e entry
	b.SetBytes(int64(len(enc)))
	b.ReportAllocs()
	for b.Loop() {
		if err := decodeEntry(enc, &e); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendEntry(b *testing.B) {
	enc := benchEntry()
	var e entry
	if err := decodeEntry(enc, &e); err != nil {
		b.Fatal(err)
	}
	var hs []header
	it := e.headers()
	for k, ok := it.next(); ok; k, ok = it.next() {
		v, _ := it.next()
		hs = append(hs, header{k: k, v: v})
	}
	buf := make([]byte, 0, 2*len(enc))
	b.SetBytes(int64(len(enc)))
	b.ReportAllocs()
	for b.Loop() {
		buf = appendEntry(buf[:0], &e, nil, hs)
	}
}
