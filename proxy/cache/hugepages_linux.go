package cache

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"unsafe"

	"github.com/VictoriaMetrics/fastcache"
	"golang.org/x/sys/unix"
)

// The memory tier on transparent huge pages.
//
// fastcache holds entries in 64 KiB chunks of memory it maps itself
// (64 MiB at a time) and takes from a free list as its buckets fill;
// each chunk's pages are faulted in when first written, one fault per
// 4 KiB. On the virtual machines shields run on a fault costs about
// 10 µs (bench/economics.sh, whose nodes fill their caches from empty:
// page faults were 8 % of the cluster's CPU, ~24 µs per miss), so a
// node refilling a 16 GiB tier after a restart spends ~40 s of CPU in
// faults alone, and every hit walks 4 KiB page tables over a memory it
// reads at random. provisionChunks puts chunks of its own on that free
// list before the cache is made: the same 64 KiB chunks, from one
// mapping aligned to 2 MiB and advised MADV_HUGEPAGE, so the kernel backs
// 32 chunks with one huge page and one fault (when transparent huge pages
// are "always" or "madvise", the default of most distributions; with
// "never" the advice is ignored and nothing changes). Memory is still
// taken only as fastcache takes chunks (untouched chunks are address
// space), but a chunk begun is resident whole, not page by page: resident
// memory runs ahead of the bytes written by up to one chunk per bucket
// (32 MiB), and a huge page. fastcache never frees chunks (Reset returns
// them to the list), so huge pages are never split by frees.
//
// The free list is fastcache's unexported state, reached by linkname:
// fastcache offers no allocator hook. Its version is pinned in go.mod;
// a rename fails the link, and chunkLayoutMatches checks at run time,
// before anything is added, that fastcache's chunks are still
// chunkBytes long and its buckets bucketCount (TestHugeChunksUsed checks
// that a Set writes into a provisioned chunk).

//go:linkname fcFreeChunks github.com/VictoriaMetrics/fastcache.freeChunks
var fcFreeChunks []*[chunkBytes]byte

//go:linkname fcFreeChunksLock github.com/VictoriaMetrics/fastcache.freeChunksLock
var fcFreeChunksLock sync.Mutex

const (
	// chunkBytes and bucketCount are fastcache's chunkSize and
	// bucketsCount.
	chunkBytes  = 64 << 10
	bucketCount = 512
	hugePage    = 2 << 20
)

var (
	layoutOnce sync.Once
	layoutOK   bool
)

// chunkLayoutMatches reports whether fastcache sizes its buckets from
// chunks of chunkBytes over bucketCount buckets, as the free list's
// element type assumes: a cache of bucketCount*chunkBytes bytes has one
// chunk per bucket, and one a byte per bucket larger has two, only when
// both constants are what this file says.
func chunkLayoutMatches() bool {
	layoutOnce.Do(func() {
		capacity := func(n int) uint64 {
			var s fastcache.Stats
			fastcache.New(n).UpdateStats(&s)
			return s.MaxBytesSize
		}
		layoutOK = capacity(bucketCount*chunkBytes) == bucketCount*chunkBytes &&
			capacity(bucketCount*(chunkBytes+1)) == 2*bucketCount*chunkBytes
	})
	return layoutOK
}

// chunksFor is how many chunks a fastcache of maxBytes uses when full.
func chunksFor(maxBytes int) int {
	perBucket := (maxBytes + bucketCount - 1) / bucketCount
	return bucketCount * ((perBucket + chunkBytes - 1) / chunkBytes)
}

var errChunkLayout = errors.New("fastcache's chunk layout is not the one this build knows; chunks left to fastcache")

// provisionChunks makes fastcache's free list hold at least the chunks
// a cache of maxBytes will take, adding the shortfall from one mapping
// advised MADV_HUGEPAGE. The error says why nothing was added (the
// cache then works as before, on fastcache's own mappings) or that the
// advice was refused (the chunks were added all the same).
func provisionChunks(maxBytes int) error {
	if !chunkLayoutMatches() {
		return errChunkLayout
	}
	need := chunksFor(maxBytes)
	fcFreeChunksLock.Lock()
	defer fcFreeChunksLock.Unlock()
	short := need - len(fcFreeChunks)
	if short <= 0 {
		return nil
	}
	size := short * chunkBytes
	// Map a huge page more and trim, so the chunks start on a huge page
	// boundary and every whole 2 MiB of them can be one huge page.
	base, err := unix.MmapPtr(-1, 0, nil, uintptr(size+hugePage), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return fmt.Errorf("cache: map %d bytes for the memory tier: %w", size, err)
	}
	head := (hugePage - uintptr(base)%hugePage) % hugePage
	if head > 0 {
		_ = unix.MunmapPtr(base, head)
	}
	if tail := hugePage - head; tail > 0 {
		_ = unix.MunmapPtr(unsafe.Add(base, head+uintptr(size)), tail)
	}
	data := unsafe.Slice((*byte)(unsafe.Add(base, head)), size)
	advice := unix.Madvise(data, unix.MADV_HUGEPAGE)
	// fastcache takes from the end of the list: append in descending
	// address order so the cache fills the mapping from its start.
	for i := short - 1; i >= 0; i-- {
		fcFreeChunks = append(fcFreeChunks, (*[chunkBytes]byte)(unsafe.Pointer(&data[i*chunkBytes])))
	}
	if advice != nil {
		return fmt.Errorf("cache: madvise(MADV_HUGEPAGE) on the memory tier: %w", advice)
	}
	return nil
}

// thpMode is the kernel's transparent huge page mode for anonymous
// memory ("always", "madvise" or "never"; "unknown" when it cannot be
// read), logged at start: with "never" the tier's advice does nothing.
func thpMode() string {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil {
		return "unknown"
	}
	// The file lists the modes with the one in force in brackets.
	if _, rest, ok := strings.Cut(string(b), "["); ok {
		if mode, _, ok := strings.Cut(rest, "]"); ok {
			return mode
		}
	}
	return "unknown"
}
