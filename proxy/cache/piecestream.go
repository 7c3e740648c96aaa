package cache

import (
	"encoding/binary"
	"errors"
	"io"
	"sync"
)

// A large entry in memory is stored in pieces (store.go). Reading it
// whole for a hit copies the whole body into one buffer — per concurrent
// hit: fifty hits of a 32 MiB object held 1.6 GiB — before a byte is
// sent. So a hit on one this process wrote (trusted: nothing needs
// checking before it is sent) reads only its meta, from the last pieces,
// and sends the body a few pieces at a time from a pooled buffer
// (PieceReader), which is the response's body stream.
//
// Every piece of the body is checked present (fastcache Has, no copy)
// before the hit is committed to, so an entry that lost a piece is a miss
// as before. A piece evicted while the body is being sent ends the stream
// with ErrPieceEvicted: the answer's length is already on the wire, so
// the server closes the connection and the client sees a truncated
// transfer, never a short body presented as complete (counted once per
// reader: Cache.TruncatedStreams). A value loaded
// from a snapshot is read whole and checked by its entry checksum, as
// before: streaming cannot check a body before sending it.

// ErrPieceEvicted ends a PieceReader whose next piece is gone.
var ErrPieceEvicted = errors.New("cache: a piece of the entry was evicted while it was sent")

// PieceReader reads an entry's body from its pieces: one piece at a
// time into a buffer of its own for Read and WritePieces, pieceBatch at
// a time for WriteTo into a batch buffer it borrows while it writes
// (batchBufs). So a reader blocked mid-answer by a client that does not
// read holds one piece unless it is in WriteTo: the HTTP/2 listener
// writes with WritePieces, as up to a hundred streams of one connection
// may be blocked at once (when every reader carried a batch buffer,
// 2,000 such streams held 83 MB of them). Close returns it to its
// pool, after which it must not be used.
type PieceReader struct {
	s     *store
	pk    []byte // piece key; its last 4 bytes are the index
	piece uint64 // length of every piece but the last
	total uint64 // the stored value's length (body, meta, footer)
	pos   uint64 // the body offset of cur's first byte
	end   uint64 // the body offset the reader stops at
	buf   []byte // the piece read last
	cur   []byte // its bytes not yet read, up to end
	cut   bool   // ended by ErrPieceEvicted (counted once)
}

// pieceBatch is how many pieces WriteTo reads into its buffer before one
// write: a 10 MiB body leaves in 40 writes of 256 KiB instead of 320 of
// 32 KiB. Measured memory-only, wrk -t2 -c8 on a 10 MiB hit, two builds
// alternated (perf stat task-clock): 2.33-2.44 ms of CPU per hit and
// 175-195 req/s against 3.15-3.57 ms and 88-166 req/s.
const pieceBatch = 8

var pieceReaders = sync.Pool{New: func() any {
	return &PieceReader{buf: make([]byte, 0, pieceSize)}
}}

// batchBufs are WriteTo's buffers of pieceBatch pieces.
var batchBufs = sync.Pool{New: func() any {
	b := make([]byte, 0, pieceBatch*pieceSize)
	return &b
}}

// Len is the number of bytes left to read.
func (r *PieceReader) Len() int64 { return int64(r.end - r.pos) }

// Limit makes the reader read the n bytes at the body's offset first (a
// range): it must be called before the first read, within the body.
func (r *PieceReader) Limit(first, n int64) {
	r.pos, r.end, r.cur = uint64(first), uint64(first+n), nil
}

// fill reads the piece holding r.pos into r.buf, and the pieces after
// it up to batch pieces in all while they hold bytes before r.end.
func (r *PieceReader) fill(batch int) error {
	first := r.pos / r.piece
	start := first * r.piece
	r.buf = r.buf[:0]
	for i := first; i < first+uint64(batch) && i*r.piece < r.end; i++ {
		binary.LittleEndian.PutUint32(r.pk[len(r.pk)-4:], uint32(i))
		before := uint64(len(r.buf))
		r.buf = r.s.c.Get(r.buf, r.pk)
		at := i * r.piece
		if at >= r.total || uint64(len(r.buf))-before != min(r.piece, r.total-at) {
			r.cur = nil
			if !r.cut {
				r.cut = true
				r.s.evictedStreams.Add(1)
			}
			return ErrPieceEvicted
		}
	}
	r.cur = r.buf[r.pos-start : min(r.end-start, uint64(len(r.buf)))]
	return nil
}

// Read implements io.Reader.
func (r *PieceReader) Read(p []byte) (int, error) {
	if r.pos >= r.end {
		return 0, io.EOF
	}
	if len(r.cur) == 0 {
		if err := r.fill(1); err != nil {
			return 0, err
		}
	}
	n := copy(p, r.cur)
	r.cur, r.pos = r.cur[n:], r.pos+uint64(n)
	return n, nil
}

// WriteTo implements io.WriterTo: pieceBatch pieces at a time go to w
// from a batch buffer, given back (with r's own restored) on return.
func (r *PieceReader) WriteTo(w io.Writer) (int64, error) {
	own, bp := r.buf, batchBufs.Get().(*[]byte)
	r.buf = (*bp)[:0] // r.cur, if a Read left some, is still in own
	defer func() {
		*bp = r.buf[:0]
		batchBufs.Put(bp)
		r.buf, r.cur = own[:0], nil // a Read after an error refills from r.pos
	}()
	return r.write(w, pieceBatch)
}

// WritePieces writes what is left of the body to w one piece at a time
// from r's own buffer: for a writer that splits what it is given anyway
// (an HTTP/2 stream's frames), where a batch would only be held longer.
func (r *PieceReader) WritePieces(w io.Writer) (int64, error) { return r.write(w, 1) }

// write writes what is left to w, batch pieces at a time.
func (r *PieceReader) write(w io.Writer, batch int) (int64, error) {
	var sent int64
	for r.pos < r.end {
		if len(r.cur) == 0 {
			if err := r.fill(batch); err != nil {
				return sent, err
			}
		}
		n, err := w.Write(r.cur)
		r.cur, r.pos, sent = r.cur[n:], r.pos+uint64(n), sent+int64(n)
		if err != nil {
			return sent, err
		}
	}
	return sent, nil
}

// SupportsBodyWriteTo tells fasthttp to send the body with WriteTo.
func (r *PieceReader) SupportsBodyWriteTo() bool { return true }

// Close returns r to its pool.
func (r *PieceReader) Close() error {
	r.s, r.cur = nil, nil
	pieceReaders.Put(r)
	return nil
}

// getStream is getVerified, except that an entry stored in pieces by this
// process whose value is at least minTotal bytes (minTotal > 0) comes
// back as its meta alone — a body-less entry encoding, decoded like any
// other (its Body is empty) — with r reading its bodyLen-byte body from
// the pieces; r is nil for everything else. Every piece of the body was
// present when it returned.
func (s *store) getStream(dst, k []byte, minTotal int) (v []byte, verified bool, r *PieceReader, bodyLen int64) {
	v = s.c.Get(dst[:0], k)
	m, ok := parseChunkMeta(v)
	if !ok {
		v, verified = s.small(v)
		return v, verified, nil, 0
	}
	if !s.validTotal(k, m) {
		return v[:0], false, nil, 0
	}
	if minTotal <= 0 || m.total < uint64(minTotal) || m.epoch != s.epoch || pieceLen(len(k)) <= 0 {
		v, verified = s.assemble(v, k, m)
		return v, verified, nil, 0
	}
	r = pieceReaders.Get().(*PieceReader)
	*r = PieceReader{s: s, pk: appendPieceKey(r.pk[:0], k, m.nonce, 0), piece: uint64(pieceLen(len(k))), total: m.total, buf: r.buf}
	v, bodyLen, ok = r.readMeta(v[:0])
	if !ok {
		r.Close()
		return v[:0], false, nil, 0
	}
	r.end = uint64(bodyLen)
	return v, true, r, bodyLen
}

// readMeta reads the value's meta and footer into v, the footer's body
// length set to 0 (a body-less entry), and checks that every piece of
// the body is present. The footer is in the last piece or two; the meta
// may begin before them: at most two rounds of reads.
func (r *PieceReader) readMeta(v []byte) (_ []byte, bodyLen int64, ok bool) {
	need := uint64(footerLen)
	var from uint64 // the value offset v starts at
	for {
		if need > r.total {
			return v, 0, false
		}
		from = (r.total - need) / r.piece * r.piece
		if v, ok = r.readFrom(v[:0], from); !ok {
			return v, 0, false
		}
		ft := v[len(v)-footerLen:]
		metaLen := uint64(binary.LittleEndian.Uint32(ft[0:4]))
		bodyLen = int64(binary.LittleEndian.Uint32(ft[4:8]))
		if metaLen+uint64(bodyLen)+footerLen != r.total {
			return v, 0, false
		}
		wasEnough := r.total-from >= metaLen+footerLen
		need = metaLen + footerLen
		if wasEnough {
			break
		}
	}
	n := copy(v, v[r.total-need-from:])
	v = v[:n]
	binary.LittleEndian.PutUint32(v[n-footerLen+4:], 0)
	// The pieces from 'from' on were just read; the body's others must
	// still be there.
	for i := uint64(0); i*r.piece < min(from, uint64(bodyLen)); i++ {
		binary.LittleEndian.PutUint32(r.pk[len(r.pk)-4:], uint32(i))
		if !r.s.c.Has(r.pk) {
			return v, 0, false
		}
	}
	return v, bodyLen, true
}

// readFrom appends the value's bytes from offset from (a piece's start)
// to its end to v.
func (r *PieceReader) readFrom(v []byte, from uint64) ([]byte, bool) {
	for start := from; start < r.total; start += r.piece {
		binary.LittleEndian.PutUint32(r.pk[len(r.pk)-4:], uint32(start/r.piece))
		n := len(v)
		v = r.s.c.Get(v, r.pk)
		if uint64(len(v)-n) != min(r.piece, r.total-start) {
			return v, false
		}
	}
	return v, true
}
