package cache

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"
)

// streamEntry encodes a response entry with an n-byte random body and
// headers of about metaBytes bytes.
func streamEntry(n, metaBytes int) (enc, body []byte) {
	rng := rand.New(rand.NewPCG(uint64(n), uint64(metaBytes)))
	body = make([]byte, n)
	for i := range body {
		body[i] = byte(rng.Uint32())
	}
	var hs []Header
	for i := 0; metaBytes > 0; i++ {
		v := bytes.Repeat([]byte{'h'}, min(metaBytes, 1000))
		hs = append(hs, Header{Name: fmt.Appendf(nil, "X-H%d", i), Value: v})
		metaBytes -= len(v)
	}
	e := Entry{Kind: KindResponse, Status: 200, Lifetime: 3600e9, KeyDigest: 7, Body: body}
	return AppendEntry(nil, &e, nil, hs), body
}

// valueNonce reads the nonce of the chunk meta stored under k.
func valueNonce(t testing.TB, s *store, k []byte) uint64 {
	t.Helper()
	m, ok := parseChunkMeta(s.c.Get(nil, k))
	if !ok {
		t.Fatal("no chunk meta under the key")
	}
	return m.nonce
}

// TestStreamRoundTrip: an entry stored in pieces comes back as its meta
// — a body-less entry that decodes, with the stored fields — and a
// reader of exactly its body, for bodies and metas of every alignment
// with the pieces, including metas longer than a piece (read in a
// second round) and bodies ending inside the meta's first piece.
func TestStreamRoundTrip(t *testing.T) {
	s := newTestStore(t)
	for _, n := range []int{70 << 10, 100<<10 + 3, pieceSize*3 - 40, pieceSize * 4, 1<<20 + 17} {
		for _, meta := range []int{0, 5000, 40 << 10, 70 << 10} {
			t.Run(fmt.Sprintf("body %d meta %d", n, meta), func(t *testing.T) {
				enc, body := streamEntry(n, meta)
				key := fmt.Appendf(nil, "key-%d-%d", n, meta)
				s.set(key, enc)
				v, verified, r, bodyLen := s.getStream(make([]byte, 0, 64), key, 1)
				if r == nil {
					t.Fatalf("not streamed (%d bytes back)", len(v))
				}
				defer r.Close()
				if !verified || bodyLen != int64(n) || r.Len() != int64(n) {
					t.Fatalf("verified %v, bodyLen %d, Len %d; want true, %d, %d", verified, bodyLen, r.Len(), n, n)
				}
				if want := enc[n:]; !bytes.Equal(v[:len(v)-footerLen], want[:len(want)-footerLen]) {
					t.Fatalf("meta is not the entry's (%d bytes, want %d)", len(v), len(want))
				}
				var e Entry
				if err := DecodeEntryCheck(v, &e, false); err != nil || len(e.Body) != 0 || e.Status != 200 || e.KeyDigest != 7 {
					t.Fatalf("meta decodes to %v, status %d, body %d bytes", err, e.Status, len(e.Body))
				}
				var got bytes.Buffer
				if k, err := r.WriteTo(&got); err != nil || k != int64(n) || !bytes.Equal(got.Bytes(), body) {
					t.Fatalf("WriteTo = %d, %v; body equal: %v", k, err, bytes.Equal(got.Bytes(), body))
				}
			})
		}
	}
}

// TestStreamRangesAcrossPieces: a reader limited to a range reads exactly
// those bytes, for ranges starting, ending and crossing at every piece
// boundary, through Read (small reads) and WriteTo.
func TestStreamRangesAcrossPieces(t *testing.T) {
	s := newTestStore(t)
	key := []byte("ranged")
	n := 5*pieceLen(len(key)) + 1234
	enc, body := streamEntry(n, 300)
	s.set(key, enc)
	piece := pieceLen(len(key))
	var spans [][2]int
	for b := piece; b < n; b += piece {
		spans = append(spans, [2]int{b - 1, 2}, [2]int{b, 1}, [2]int{b - 1, 1}, [2]int{b - 100, piece + 200}, [2]int{b, n - b})
	}
	spans = append(spans, [2]int{0, n}, [2]int{0, 1}, [2]int{n - 1, 1}, [2]int{17, n - 17})
	for _, sp := range spans {
		sp[1] = min(sp[1], n-sp[0])
		for _, viaRead := range []bool{false, true} {
			_, _, r, _ := s.getStream(nil, key, 1)
			if r == nil {
				t.Fatal("not streamed")
			}
			r.Limit(int64(sp[0]), int64(sp[1]))
			var got []byte
			var err error
			if viaRead {
				got, err = io.ReadAll(io.LimitReader(onlyReader{r}, int64(n)))
			} else {
				var b bytes.Buffer
				_, err = r.WriteTo(&b)
				got = b.Bytes()
			}
			r.Close()
			if err != nil || !bytes.Equal(got, body[sp[0]:sp[0]+sp[1]]) {
				t.Fatalf("range %d+%d (Read %v): %v, %d bytes, equal %v", sp[0], sp[1], viaRead, err, len(got), bytes.Equal(got, body[sp[0]:sp[0]+sp[1]]))
			}
		}
	}
}

// onlyReader hides WriteTo, so io.ReadAll goes through Read.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

// TestStreamMissingPieceIsMiss: a body piece evicted before the hit makes
// the entry a miss, as when it is read whole.
func TestStreamMissingPieceIsMiss(t *testing.T) {
	s := newTestStore(t)
	key := []byte("big")
	enc, _ := streamEntry(300<<10, 100)
	s.set(key, enc)
	s.c.Del(appendPieceKey(nil, key, valueNonce(t, s, key), 2))
	if v, _, r, _ := s.getStream(nil, key, 1); r != nil || len(v) != 0 {
		t.Fatalf("got %d bytes, reader %v with a piece missing; want a miss", len(v), r != nil)
	}
}

// TestStreamEvictedWhileSent: a piece evicted while the body is read ends
// the reader with ErrPieceEvicted after the bytes before it, never with
// a short body and a clean end. WriteTo reads pieceBatch pieces at a
// time: the piece evicted is one of the second batch.
func TestStreamEvictedWhileSent(t *testing.T) {
	s := newTestStore(t)
	key := []byte("big")
	n := (pieceBatch + 2) * 32 << 10
	enc, body := streamEntry(n, 100)
	s.set(key, enc)
	_, _, r, _ := s.getStream(nil, key, 1)
	if r == nil {
		t.Fatal("not streamed")
	}
	defer r.Close()
	w := &evictingWriter{after: 40 << 10, evict: func() { s.c.Del(appendPieceKey(nil, key, valueNonce(t, s, key), pieceBatch+1)) }}
	sent, err := r.WriteTo(w)
	if !errors.Is(err, ErrPieceEvicted) {
		t.Fatalf("WriteTo = %d, %v; want ErrPieceEvicted", sent, err)
	}
	if sent >= int64(n) || sent != int64(w.b.Len()) || !bytes.Equal(w.b.Bytes(), body[:sent]) {
		t.Fatalf("sent %d of %d bytes (%d written), want a prefix of the body", sent, n, w.b.Len())
	}
	// Counted once (Cache.TruncatedStreams), however often it is read
	// again.
	if _, err := r.WriteTo(io.Discard); !errors.Is(err, ErrPieceEvicted) || s.evictedStreams.Load() != 1 {
		t.Fatalf("WriteTo after the eviction: %v; %d truncated streams counted, want 1", err, s.evictedStreams.Load())
	}
}

// evictingWriter keeps what it is given and calls evict once it has
// more than after bytes.
type evictingWriter struct {
	b     bytes.Buffer
	after int
	evict func()
}

func (w *evictingWriter) Write(p []byte) (int, error) {
	w.b.Write(p)
	if w.evict != nil && w.b.Len() > w.after {
		w.evict()
		w.evict = nil
	}
	return len(p), nil
}

// TestStreamOnlyOwnLargeValues: small values, values under the threshold
// and values of another process (a snapshot: their checksum must be
// checked before anything is sent) come back whole, as getVerified
// returns them.
func TestStreamOnlyOwnLargeValues(t *testing.T) {
	s := newTestStore(t)
	small, _ := streamEntry(1000, 10)
	large, _ := streamEntry(200<<10, 10)
	s.set([]byte("small"), small)
	s.set([]byte("large"), large)
	for _, tt := range []struct {
		name, key string
		min       int
		want      []byte
		verified  bool
	}{
		{"small", "small", 1, small, true},
		{"below the threshold", "large", len(large) + 1, large, true},
		{"no streaming", "large", 0, large, true},
		{"absent", "none", 1, nil, false},
	} {
		v, verified, r, _ := s.getStream(nil, []byte(tt.key), tt.min)
		if r != nil || !bytes.Equal(v, tt.want) || verified != tt.verified {
			t.Errorf("%s: reader %v, %d bytes, verified %v; want none, %d bytes, %v", tt.name, r != nil, len(v), verified, len(tt.want), tt.verified)
		}
	}
	s.epoch++ // as if the value had been loaded from another process's snapshot
	v, verified, r, _ := s.getStream(nil, []byte("large"), 1)
	if r != nil || !bytes.Equal(v, large) || verified {
		t.Fatalf("another process's value: reader %v, %d bytes, verified %v; want the whole value, unverified", r != nil, len(v), verified)
	}
}

// TestStreamLyingFooterIsMiss: a value whose footer does not add up to
// its length is a miss, not a reader of whatever length it claims.
func TestStreamLyingFooterIsMiss(t *testing.T) {
	s := newTestStore(t)
	enc, _ := streamEntry(200<<10, 10)
	binary.LittleEndian.PutUint32(enc[len(enc)-footerLen+4:], 1<<30)
	s.set([]byte("k"), enc)
	if v, _, r, _ := s.getStream(nil, []byte("k"), 1); r != nil || len(v) != 0 {
		t.Fatalf("reader %v, %d bytes; want a miss", r != nil, len(v))
	}
}

// BenchmarkStoreStreamPieces is BenchmarkStoreGetPieces streamed: the
// meta, then the body piece by piece into one piece's buffer.
func BenchmarkStoreStreamPieces(b *testing.B) {
	s := newTestStore(b)
	enc, _ := streamEntry(100<<10, 100)
	s.set([]byte("big"), enc)
	dst := make([]byte, 0, 64<<10)
	b.SetBytes(int64(len(enc)))
	b.ReportAllocs()
	for b.Loop() {
		var r *PieceReader
		dst, _, r, _ = s.getStream(dst, []byte("big"), 1)
		if r == nil {
			b.Fatal("not streamed")
		}
		_, _ = r.WriteTo(io.Discard)
		r.Close()
	}
}

// sizeWriter records the size of every write it is given.
type sizeWriter struct {
	bytes.Buffer
	sizes []int
}

func (w *sizeWriter) Write(p []byte) (int, error) {
	w.sizes = append(w.sizes, len(p))
	return w.Buffer.Write(p)
}

// TestStreamWriteBatches: WriteTo writes up to pieceBatch pieces at a
// time and WritePieces one, both the whole body; neither leaves the
// reader holding more than its own piece buffer afterwards (a reader
// blocked mid-answer over HTTP/2 holds a piece, not a batch), and a
// Read's leftover bytes are written first.
func TestStreamWriteBatches(t *testing.T) {
	s := newTestStore(t)
	n := (2*pieceBatch + 3) * pieceSize
	enc, body := streamEntry(n, 100)
	key := []byte("batches")
	s.set(key, enc)
	for _, tc := range []struct {
		name     string
		write    func(r *PieceReader, w io.Writer) (int64, error)
		maxWrite int
	}{
		{"WriteTo", (*PieceReader).WriteTo, pieceBatch * pieceSize},
		{"WritePieces", (*PieceReader).WritePieces, pieceSize},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, r, _ := s.getStream(nil, key, 1)
			if r == nil {
				t.Fatal("not streamed")
			}
			defer r.Close()
			head := make([]byte, 1000)
			if k, err := io.ReadFull(r, head); err != nil || k != len(head) {
				t.Fatalf("Read = %d, %v", k, err)
			}
			w := &sizeWriter{}
			sent, err := tc.write(r, w)
			if err != nil || sent != int64(n-len(head)) {
				t.Fatalf("%s = %d, %v; want %d", tc.name, sent, err, n-len(head))
			}
			if got := append(head, w.Bytes()...); !bytes.Equal(got, body) {
				t.Fatal("body differs")
			}
			most := 0
			for _, k := range w.sizes {
				most = max(most, k)
			}
			if most > tc.maxWrite || len(w.sizes) < n/tc.maxWrite {
				t.Fatalf("%d writes, the largest %d bytes; want writes of at most %d", len(w.sizes), most, tc.maxWrite)
			}
			if cap(r.buf) > pieceSize {
				t.Fatalf("the reader holds a %d-byte buffer after %s, want at most a piece (%d)", cap(r.buf), tc.name, pieceSize)
			}
		})
	}
}
