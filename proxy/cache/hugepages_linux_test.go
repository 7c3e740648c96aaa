package cache

import (
	"bytes"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// TestHugeChunksUsed checks the contract provisionChunks relies on:
// fastcache's chunk layout is the one this build knows, the chunks
// provisioned start on a huge page boundary, and a cache made after
// writes its entries into them (the last one on the list is taken first).
func TestHugeChunksUsed(t *testing.T) {
	if !chunkLayoutMatches() {
		t.Fatal("fastcache's chunk layout changed: chunkBytes or bucketCount no longer match (hugepages_linux.go)")
	}
	const size = 32 << 20
	fcFreeChunksLock.Lock()
	before := len(fcFreeChunks)
	fcFreeChunksLock.Unlock()
	// Ask for more than the list holds, so chunks are added.
	if err := provisionChunks(size + before*chunkBytes*bucketCount); err != nil {
		t.Logf("provisionChunks: %v (chunks added without the advice)", err)
	}
	fcFreeChunksLock.Lock()
	after := len(fcFreeChunks)
	if after-before < chunksFor(size) {
		fcFreeChunksLock.Unlock()
		t.Fatalf("free list grew by %d chunks, want at least %d", after-before, chunksFor(size))
	}
	last := fcFreeChunks[after-1]
	lowest := fcFreeChunks[before]
	fcFreeChunksLock.Unlock()
	if addr := uintptr(unsafe.Pointer(last)); addr%hugePage != 0 {
		t.Errorf("first chunk handed out at %#x, not on a 2 MiB boundary", addr)
	}
	if uintptr(unsafe.Pointer(lowest)) < uintptr(unsafe.Pointer(last)) {
		t.Errorf("chunks not listed in descending address order")
	}

	if flags := vmFlags(t, uintptr(unsafe.Pointer(last))); !strings.Contains(" "+flags+" ", " hg ") {
		t.Errorf("mapping of the chunks has VmFlags %q, without hg (MADV_HUGEPAGE)", flags)
	}

	s := openStore("", size, 1<<20, slog.New(slog.DiscardHandler))
	value := bytes.Repeat([]byte("huge-page-probe."), 8)
	s.c.Set([]byte("k"), value)
	if !bytes.Contains(last[:256], value) {
		t.Fatalf("the entry was not written into the provisioned chunk fastcache should have taken first")
	}
	if got := s.c.Get(nil, []byte("k")); !bytes.Equal(got, value) {
		t.Fatalf("Get = %q, want the value set", got)
	}
}

// TestChunksFor pins the count against fastcache's own sizing: one chunk
// per bucket up to 32 MiB, then whole chunks per bucket.
func TestChunksFor(t *testing.T) {
	for _, c := range []struct{ size, want int }{
		{1, 512}, {32 << 20, 512}, {32<<20 + 1, 1024}, {128 << 20, 2048}, {512 << 20, 8192},
	} {
		if got := chunksFor(c.size); got != c.want {
			t.Errorf("chunksFor(%d) = %d, want %d", c.size, got, c.want)
		}
	}
}

// vmFlags returns the VmFlags line of the mapping holding addr, from
// /proc/self/smaps.
func vmFlags(t *testing.T, addr uintptr) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatalf("read smaps: %v", err)
	}
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if !strings.HasSuffix(fields[0], ":") { // a mapping's first line: lo-hi perms ...
			lo, hi, _ := strings.Cut(fields[0], "-")
			l, e1 := strconv.ParseUint(lo, 16, 64)
			h, e2 := strconv.ParseUint(hi, 16, 64)
			in = e1 == nil && e2 == nil && uint64(addr) >= l && uint64(addr) < h
			continue
		}
		if in && fields[0] == "VmFlags:" {
			return strings.Join(fields[1:], " ")
		}
	}
	t.Fatalf("no mapping holds %#x in /proc/self/smaps", addr)
	return ""
}

// TestTHPMode reads the mode in force from the kernel's list.
func TestTHPMode(t *testing.T) {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil {
		if got := thpMode(); got != "unknown" {
			t.Fatalf("thpMode() = %q without the sysfs file, want unknown", got)
		}
		return
	}
	got := thpMode()
	if !strings.Contains(string(b), "["+got+"]") {
		t.Fatalf("thpMode() = %q, not the bracketed mode of %q", got, b)
	}
}
