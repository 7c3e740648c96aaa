// Package cache is shield's cache room (docs/architecture.md §2): the
// versioned entry codec, the fastcache-backed store with its snapshots,
// the invalidation table and clock, the namespace versions, and the one
// rule that orders writes of a key (Cache.Put: an entry whose fetch
// started before an invalidation, or before that of the entry the key
// holds, is not stored; the check and the write are one step under the
// key's stripe lock). It holds entries as bytes and decoded Entry values
// and knows nothing of HTTP messages: it imports no fasthttp and no other
// proxy package, and of the project only cachekey and stale
// (internal/importrules enforces it). proxy turns responses into entries
// and entries into answers.
//
// Files (internal/doccheck checks that the list names every non-test file
// of the directory and nothing else):
//
//	cache.go       Cache, Open: store, invalidations and namespaces together;
//	               Put (the write ordering, across both tiers), PutDerived,
//	               snapshots of all three
//	disk.go        the disk tier: one self-checking file per large entry,
//	               the index rebuilt by a scan at start, LRU eviction
//	diskopen.go    disk files kept open with their metadata; DiskBody, a hit's body
//	               (pread, or sendfile at its offset)
//	diskopen_unix.go   diskOpenLimit: files kept open, within the descriptor limit
//	diskopen_other.go  diskOpenLimit where there is no limit to read
//	diskfill.go    disk fills: an entry's file written as its body arrives,
//	               committed through Store's checks
//	entry.go       the versioned cache entry codec
//	entryage.go    an entry's age and freshness at a time
//	store.go       fastcache, pieces for large entries, the writer's epoch, snapshots
//	hugepages_linux.go  fastcache's chunks from a mapping advised MADV_HUGEPAGE:
//	               one page fault per 2 MiB as the memory tier fills
//	hugepages_other.go  elsewhere: fastcache's own chunks
//	piecestream.go a large entry's body read piece by piece (PieceReader), for hits
//	inval.go       invalidation ordering: one clock, URL and tag invalidations
//	namespaces.go  route and tenant namespace versions (purge by namespace)
//
// Tiers: without a disk tier (Cache.OpenDisk) everything is in memory.
// With one, an entry whose encoding is at least DiskMinEntry (64 KiB)
// bytes and at most a quarter of the tier is written to disk, one file
// per key, and everything else stays in fastcache. A key is held by one
// tier at a time: Put removes it from the other under the key's stripe
// lock, and newer-fetch-wins and IfAbsent compare with whichever tier
// holds it (the index keeps each file's fetch sequence). A disk entry is
// the same encoding as in memory, so lookups judge it with the same
// fields (fetch sequence, URL digest, tags, namespace in the key) and
// the same invalidation verdict. GetVerified reads a disk entry whole;
// GetVerifiedOrFile returns its metadata and a DiskBody over the file
// (kept open for later hits, diskopen.go), for a fresh hit to send the
// body from the file; GetVerifiedOrStream also returns a
// large memory entry this process wrote as its metadata and a
// PieceReader over its body's pieces (piecestream.go). StartDiskFill
// writes a disk-bound entry's body into its file as it arrives (proxy's
// streamed fills), and DiskFill.Store commits it with Store's decisions.
// A failing disk (ENOSPC, EIO,
// permissions) makes writes skip it for 30 s (entries go to memory when
// they fit), logged and counted; reads of a failing file are misses.
// After a restart the directory is scanned; its entries are kept only
// when the invalidation table was loaded from beside the snapshot
// (proxy requires cache.path with a disk tier), else they are removed;
// a key both a file and the loaded snapshot hold (a snapshot saved before
// a crash) keeps the newer fetch only.
//
// Invariants:
//
//   - Reads allocate nothing when the caller's buffer is large enough,
//     and an entry this process wrote is decoded without its checksum
//     (GetVerified, DecodeEntryCheck): a hit does no more work than the
//     bytes need.
//   - Anything that does not decode exactly, or was stored under another
//     key, is a miss, never a wrong answer.
//   - Every write goes through Put (or PutDerived, or DiskFill.Store,
//     which end in it): no caller reads and then writes a key on its own.
package cache
