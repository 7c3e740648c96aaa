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
//	               Put (the write ordering), PutDerived, snapshots of all three
//	entry.go       the versioned cache entry codec
//	entryage.go    an entry's age and freshness at a time
//	store.go       fastcache, pieces for large entries, the writer's epoch, snapshots
//	inval.go       invalidation ordering: one clock, URL and tag invalidations
//	namespaces.go  route and tenant namespace versions (purge by namespace)
//
// Invariants:
//
//   - Reads allocate nothing when the caller's buffer is large enough,
//     and an entry this process wrote is decoded without its checksum
//     (GetVerified, DecodeEntryCheck): a hit does no more work than the
//     bytes need.
//   - Anything that does not decode exactly, or was stored under another
//     key, is a miss, never a wrong answer.
//   - Every write goes through Put (or PutDerived, which ends in it): no
//     caller reads and then writes a key on its own.
package cache
