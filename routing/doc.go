// Package routing decides where a request goes: to which route (the route
// table) and to which node of the cluster (the peer set and owner picking).
//
// # Route table
//
// Table maps a request's host and path prefix to a configured Route, first
// match in configuration order (routes.go). It is immutable; a reload builds
// a new one.
//
// # Peer set and owner picking
//
// A PeerSet is an immutable snapshot of the cluster: peers sorted by ID, a
// 64-bit generation that names the snapshot (a hash of the sorted IDs,
// addresses and weights, identical on every node that sees the same set, never
// 0), and the index of the local node. PeerSet.Owner picks the node that owns
// a key digest (cachekey's 64-bit digest) by weighted rendezvous hashing, the
// logarithmic method, defined exactly in rendezvous.go and pinned by
// testdata/rendezvous.json. Owner is hot: no locks, no allocations.
//
// Membership holds the live View (current set, and during the overlap window
// the previous one) behind an atomic.Pointer: readers never lock, the one
// writer swaps whole values. The proxy reads Membership.View once per
// request and uses that View throughout, so a request never sees half of a
// change. View.Accepts answers the peer listener's generation check (current,
// or previous inside the overlap window; else 421), and View.PreviousOwner
// names the node a miss may ask once during the window. Subscribe delivers
// every new View in order (for admission's per-node rate share and metrics).
//
// Membership comes from a Source: Static (a configured list, or just self; no
// Consul) or Consul (register with an HTTP check on the admin /healthz, then
// watch the passing instances with blocking queries). Both call
// Membership.Update, which ignores an unchanged set.
//
// # Decisions docs/architecture.md leaves to this package
//
//   - Self in the set. The set is exactly what discovery reports as healthy;
//     self is not added. While this node's own check is not yet passing (start)
//     or after it deregistered (leave), it routes every key to the others, and
//     its generation then equals theirs, so its forwards are accepted and hit
//     their caches. Adding self would give it a private generation that every
//     peer answers with 421. PeerSet.Self is nil in that state.
//   - Empty set. An empty healthy set (first node starting, or every check
//     failing) becomes the set of just self: a node can always serve, as a
//     single node does. Consul being unreachable is different: the last good
//     set stays (static stability) and Reachable reports false.
//   - Dirty discovery data. Update drops empty IDs, turns invalid weights into
//     1 and resolves duplicate IDs by keeping the smallest (Addr, Weight), so
//     all nodes resolve a conflict the same way. NewPeerSet itself is strict.
//   - Weight 0 means 1 (the zero value of Peer is usable); weights must lie in
//     [MinWeight, MaxWeight] = [1e-6, 1e6] so that no score overflows to +Inf
//     or underflows to 0, which would turn into ties that ignore weights.
//   - One previous generation only: a second change inside the overlap window
//     drops the oldest set.
//   - Subscribers run synchronously on the updating goroutine, serialised, in
//     registration order, and are first called with the current View.
//   - Consul reads use AllowStale: any server can answer, so membership keeps
//     updating while the cluster has no leader; the rare backwards index that
//     this can return is handled by resetting it to 0.
//   - Refresh (after a 421 or a peer timeout) cancels the blocking query in
//     flight and re-reads at once with index 0; at most one per second.
//
// The package imports no fasthttp type; consul/api is used only in consul*.go.
package routing
