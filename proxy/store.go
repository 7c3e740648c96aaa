package proxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"runtime"

	"github.com/VictoriaMetrics/fastcache"
)

// bigMetaLen is the length of the value fastcache's SetBig stores under
// the caller's key (value hash and length). Our own entries are always
// longer (footer plus fixed meta), so a 16-byte value means "read with
// GetBig".
const bigMetaLen = 16

// maxSmallKV is the largest key+value Set accepts: fastcache silently
// drops entries whose key, value and 4-byte length prefix do not fit one
// 64 KiB chunk; those go through SetBig instead.
const maxSmallKV = 64*1024 - 4 - 1

// store is the fastcache-backed entry store. fastcache has no TTL and
// evicts by overwriting its oldest chunks; freshness lives in the entry.
type store struct {
	c *fastcache.Cache
	// maxEntry bounds the length a SetBig metavalue may claim: larger
	// claims come from a damaged snapshot and are misses, not an
	// allocation of whatever size the bytes say.
	maxEntry uint64
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
	return s
}

func openCache(path string, maxBytes int, logger *slog.Logger) *store {
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

// getVerified is get, and reports whether fastcache verified the value's
// hash (entries above 64 KiB, read with GetBig).
func (s *store) getVerified(dst, k []byte) (v []byte, verified bool) {
	v = s.c.Get(dst[:0], k)
	if len(v) == bigMetaLen {
		if binary.BigEndian.Uint64(v[8:]) > s.maxEntry {
			s.c.Del(k)
			return v[:0], false
		}
		v = s.c.GetBig(v[:0], k)
		return v, len(v) > 0
	}
	return v, false
}

// set stores v under k; fastcache copies both.
func (s *store) set(k, v []byte) {
	if len(k)+len(v) <= maxSmallKV {
		s.c.Set(k, v)
		return
	}
	s.c.SetBig(k, v)
}

func (s *store) del(k []byte) { s.c.Del(k) }

// save writes a snapshot to path (fastcache writes a directory of bucket
// files through a temporary name and renames it into place).
func (s *store) save(path string) error {
	if err := os.MkdirAll(parentDir(path), 0o755); err != nil {
		return fmt.Errorf("proxy: save cache %s: %w", path, err)
	}
	if err := s.c.SaveToFileConcurrent(path, runtime.GOMAXPROCS(0)); err != nil {
		return fmt.Errorf("proxy: save cache %s: %w", path, err)
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
