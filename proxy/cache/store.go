package cache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/VictoriaMetrics/fastcache"
)

// Entries larger than one fastcache chunk (key, value and a 4-byte
// prefix must fit 64 KiB) are split by the store itself rather than with
// fastcache's SetBig/GetBig, which hash the whole value on every read
// (a quarter of a 100 KiB hit's CPU). Layout:
//
//	k                           → chunk meta: "SHC1" | nonce u64 | epoch u64 | total u32  (24 bytes)
//	k | 0xff "SHC" | nonce | i  → the i-th piece of the value
//
// fastcache compares whole keys, so a read either gets exactly the bytes
// written under a piece's key or misses; the random nonce of each write
// keeps pieces of an older value from mixing with a newer meta; a missing
// piece (evicted) makes the entry a miss. Our own entries are longer than
// 24 bytes, so a 24-byte value starting with the magic is a meta.
//
// Values that fit one chunk are stored with a 12-byte trailer naming the
// process that wrote them:
//
//	v | epoch u64 | "SHS1"
//
// Integrity: values written by this process are trusted (verified=true:
// the entry checksum is skipped); values loaded from a snapshot carry
// another process's epoch and are verified by the entry checksum on read,
// as are values without a trailer (a snapshot of an earlier release).
// Every value stored is either encoded here or was checked by its entry
// checksum when it arrived from a peer (proxy's handoff.go), so bytes are checked
// where they can have been damaged — on disk, on the wire — and not on
// every read from memory.
const (
	chunkMetaLen = 24
	pieceSize    = 32<<10 - 64
	pieceTag     = "\xffSHC"
	// maxSmallKV is the largest key+value Set accepts: fastcache drops
	// entries whose key, value and 4-byte length prefix exceed a chunk.
	maxSmallKV = 64*1024 - 4 - 1
	// halfChunkKV is the largest key+value of which two fit one chunk.
	// fastcache moves to the next chunk when an entry would END on the
	// chunk boundary (fastcache.go: idxNew/chunkSize > chunkIdx), so two
	// entries of exactly half a chunk each take a chunk of their own:
	// one byte less, and they share one.
	halfChunkKV = 32*1024 - 4 - 1
)

var chunkMagic = [4]byte{'S', 'H', 'C', '1'}

// smallMagic ends the trailer of a value stored in one piece.
const (
	smallMagic      = "SHS1"
	smallTrailerLen = 8 + len(smallMagic)
)

// setBufs holds the buffers small values are framed in before fastcache
// copies them.
var setBufs = sync.Pool{New: func() any { return new([]byte) }}

// store is the fastcache-backed entry store. fastcache has no TTL and
// evicts by overwriting its oldest chunks; freshness lives in the entry.
type store struct {
	c *fastcache.Cache
	// maxEntry bounds the length a chunk meta may claim: larger claims
	// come from a damaged snapshot and are misses, not an allocation of
	// whatever size the bytes say.
	maxEntry uint64
	// epoch identifies this process's writes (see above).
	epoch uint64
	// evictedStreams counts PieceReaders ended by ErrPieceEvicted
	// (piecestream.go): responses cut short.
	evictedStreams atomic.Uint64
}

// openStore loads the snapshot at path when there is one, else starts
// empty. A missing file is normal (first start); a bad one is logged and
// ignored: the cache is an optimisation, never a reason not to start.
func openStore(path string, maxBytes, maxObject int, logger *slog.Logger) *store {
	s := openCache(path, maxBytes, logger)
	// An entry is the body plus headers and metadata; 1 MiB more than the
	// largest body is generous for the rest (header blocks are bounded
	// by max_response_header_size, far below).
	s.maxEntry = uint64(maxObject) + 1<<20
	s.epoch = rand.Uint64() | 1
	return s
}

func openCache(path string, maxBytes int, logger *slog.Logger) *store {
	if err := provisionChunks(maxBytes); err != nil {
		logger.Warn("memory tier without huge pages", "err", err)
	} else if mode := thpMode(); mode == "always" || mode == "madvise" {
		logger.Info("memory tier on huge pages where the kernel allows", "transparent_hugepage", mode)
	} else {
		// "never", or no transparent huge pages here: the advice is moot.
		logger.Info("memory tier on normal pages: the kernel gives no transparent huge pages", "transparent_hugepage", mode)
	}
	if path != "" {
		c, err := fastcache.LoadFromFileMaxBytes(path, maxBytes)
		switch {
		case err == nil:
			var s fastcache.Stats
			c.UpdateStats(&s)
			logger.Info("cache snapshot loaded", "path", path, "entries", s.EntriesCount, "bytes", s.BytesSize)
			return &store{c: c}
		case errors.Is(err, fs.ErrNotExist):
			logger.Info("no cache snapshot yet, starting empty", "path", path)
		default:
			logger.Warn("cache snapshot unreadable, starting empty", "path", path, "err", err)
		}
	}
	return &store{c: fastcache.New(maxBytes)}
}

// get appends the entry stored under k to dst[:0] and returns it, or
// returns an empty slice (with dst's capacity) when there is none.
func (s *store) get(dst, k []byte) []byte {
	v, _ := s.getVerified(dst, k)
	return v
}

// getVerified is get, and reports whether the value is known intact
// without checking its entry checksum (pieces this process wrote).
func (s *store) getVerified(dst, k []byte) (v []byte, verified bool) {
	return s.resolve(s.c.Get(dst[:0], k), k)
}

// getMem is getVerified of an entry below max bytes: one stored in
// pieces of max bytes or more is not read (v comes back empty).
func (s *store) getMem(dst, k []byte, max int) (v []byte, verified bool) {
	v = s.c.Get(dst[:0], k)
	if m, ok := parseChunkMeta(v); ok && m.total >= uint64(max) {
		return v[:0], false
	}
	return s.resolve(v, k)
}

// resolve is getVerified of v, the value fastcache holds under k: a small
// value without its trailer, or the pieces a chunk meta names.
func (s *store) resolve(v, k []byte) ([]byte, bool) {
	m, ok := parseChunkMeta(v)
	if !ok {
		return s.small(v)
	}
	if !s.validTotal(k, m) {
		return v[:0], false
	}
	return s.assemble(v, k, m)
}

// small is a value stored whole, without its trailer (see above).
func (s *store) small(v []byte) ([]byte, bool) {
	if n := len(v) - smallTrailerLen; n >= 0 && string(v[len(v)-len(smallMagic):]) == smallMagic {
		return v[:n], binary.LittleEndian.Uint64(v[n:]) == s.epoch
	}
	return v, false
}

// chunkMeta is a parsed chunk meta (the layout above).
type chunkMeta struct {
	nonce, epoch, total uint64
}

// parseChunkMeta reads v as a chunk meta; ok is false for any other value.
func parseChunkMeta(v []byte) (m chunkMeta, ok bool) {
	if len(v) != chunkMetaLen || [4]byte(v[:4]) != chunkMagic {
		return m, false
	}
	m.nonce = binary.LittleEndian.Uint64(v[4:])
	m.epoch = binary.LittleEndian.Uint64(v[12:])
	m.total = uint64(binary.LittleEndian.Uint32(v[20:]))
	return m, true
}

// validTotal reports whether m's length is one an entry may have; a meta
// claiming more (a damaged snapshot) is deleted.
func (s *store) validTotal(k []byte, m chunkMeta) bool {
	if m.total > s.maxEntry || m.total == 0 {
		s.c.Del(k)
		return false
	}
	return true
}

// assemble reads the pieces m names into v[:0]: the whole value, or an
// empty slice when a piece is missing.
func (s *store) assemble(v, k []byte, m chunkMeta) ([]byte, bool) {
	total := m.total
	if uint64(cap(v)) < total {
		v = make([]byte, 0, total)
	}
	v = v[:0]
	var kb [512]byte
	pk := appendPieceKey(kb[:0], k, m.nonce, 0)
	idx := len(pk) - 4
	for i := uint32(0); uint64(len(v)) < total; i++ {
		binary.LittleEndian.PutUint32(pk[idx:], i)
		n := len(v)
		v = s.c.Get(v, pk)
		if len(v) == n {
			return v[:0], false // a piece was evicted: miss
		}
	}
	if uint64(len(v)) != total {
		return v[:0], false
	}
	return v, m.epoch == s.epoch
}

// pieceLen is the length of every piece but the last of a value stored
// under a key of keyLen bytes. 32 KiB pieces pack two to a fastcache
// chunk; near-64 KiB pieces (SetBig's) waste most of a chunk whenever one
// is partly filled. Two must fit one chunk with their keys and
// fastcache's 4-byte prefixes, or a second piece hashed to the same
// bucket evicts the first (in a 32 MiB cache every bucket has one chunk).
func pieceLen(keyLen int) int {
	return min(pieceSize, halfChunkKV-(keyLen+len(pieceTag)+8+4))
}

func appendPieceKey(dst, k []byte, nonce uint64, i uint32) []byte {
	dst = append(dst, k...)
	dst = append(dst, pieceTag...)
	dst = binary.LittleEndian.AppendUint64(dst, nonce)
	return binary.LittleEndian.AppendUint32(dst, i)
}

// set stores v under k; fastcache copies both.
func (s *store) set(k, v []byte) {
	if len(k)+len(v)+smallTrailerLen <= maxSmallKV {
		bp := setBufs.Get().(*[]byte)
		b := append((*bp)[:0], v...)
		b = binary.LittleEndian.AppendUint64(b, s.epoch)
		b = append(b, smallMagic...)
		s.c.Set(k, b)
		*bp = b
		setBufs.Put(bp)
		return
	}
	total := len(v)
	nonce := rand.Uint64()
	pk := appendPieceKey(nil, k, nonce, 0)
	idx := len(pk) - 4
	piece := pieceLen(len(k))
	for i := 0; len(v) > 0; i++ {
		n := min(piece, len(v))
		binary.LittleEndian.PutUint32(pk[idx:], uint32(i))
		s.c.Set(pk, v[:n])
		v = v[n:]
	}
	var meta [chunkMetaLen]byte
	copy(meta[:4], chunkMagic[:])
	binary.LittleEndian.PutUint64(meta[4:], nonce)
	binary.LittleEndian.PutUint64(meta[12:], s.epoch)
	binary.LittleEndian.PutUint32(meta[20:], uint32(total))
	s.c.Set(k, meta[:])
}

func (s *store) del(k []byte) { s.c.Del(k) }

// save writes a snapshot to path (fastcache writes a directory of bucket
// files through a temporary name and renames it into place).
func (s *store) save(path string) error {
	if err := os.MkdirAll(parentDir(path), 0o755); err != nil {
		return fmt.Errorf("cache: save cache %s: %w", path, err)
	}
	if err := s.c.SaveToFileConcurrent(path, runtime.GOMAXPROCS(0)); err != nil {
		return fmt.Errorf("cache: save cache %s: %w", path, err)
	}
	return nil
}

func parentDir(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			if i == 0 {
				return "/"
			}
			return p[:i]
		}
	}
	return "."
}
