// Package cluster is shield's cluster room (docs/architecture.md §2,
// docs/architecture.md §8, docs/architecture.md §9): the peer set's clients, forwarding a request to its key's owner,
// the peer listener's protocol (secret, address and generation checks),
// purge delivery to every node with its log, queues, catch-up and sync,
// the stall watchdog, the usage exchange for fleet-wide tenant limits,
// hot keys and the hand-off of a leaving node's hottest entries.
//
// It knows nothing of the cache: it reaches the node it serves through
// Local, which package proxy implements. Cache entries cross Local as
// their stored bytes (HandoffEntry, TakeHandoff), forwarded requests are
// served by Local.ServePeer, and purges are applied by Local.Purge and
// Local.ApplyPurge; the purge log itself (PurgeLog) is the cluster's. It
// may import proxy/httpx, proxy/rawio, the project's non-proxy packages
// and fasthttp, never proxy, proxy/cache or proxy/upstream
// (internal/importrules enforces it). Peer connections on plain TCP read
// and write with raw system calls (rawio.Conn: the runtime's sysmon stays
// asleep, docs/architecture.md §9); TLS ones keep their own calls.
//
// The Local contract: every method may be called from any goroutine, at
// any time after New (the first view's callback runs inside New);
// ServePeer writes the whole answer into its RequestCtx and keeps nothing
// of it; HandoffEntry returns bytes the cluster may send (it does not
// modify them); TakeHandoff validates the entry (it must decode and
// belong to exactly that key) and stores it only when the key has no
// entry yet; ApplyPurge records the purge in the purge log given in Env
// before applying it, so a purge is applied at most once per node.
//
// Files (internal/doccheck checks that the list names every non-test file
// of the directory and nothing else):
//
//	cluster.go    Node, New, Options, Env, Local; peer clients, the peer
//	              listener's handler, peer TLS reloads (PreparePeerTLS)
//	forward.go    forwarding to the key's owner (Begin, SetForwardHead, Do,
//	              DoMux for a request encoded as a MuxRequest),
//	              relaying its head, previous-owner read-through
//	mux.go        the multiplexed peer transport (cluster.transport: mux):
//	              its framing, request and answer payloads, limits; the
//	              edge's requests encoded as built (MuxRequest, ReqHead)
//	muxwriter.go  a connection's batched writer (many frames per write)
//	muxserver.go  the owner's side: the peer listener sorting HTTP from
//	              mux connections (Listener), hello, requests served on
//	              pooled RequestCtxs: fresh hits by the reader itself
//	              (Local.ServePeerHit), their answers written together,
//	              the others by workers (Local.ServePeer)
//	muxclient.go  the edge's side: one connection per peer, dialled in
//	              the background, requests matched to answers by id
//	muxheads.go   the edge's decoded answer heads, reused while an
//	              owner's answers repeat them
//	muxentry.go   entry answers: a fresh hit's stored entry sent as it
//	              is (AnswerEntry, EntryAnswer)
//	peerskip.go   per-peer breakers on the forwarded path (atomics, no allocation)
//	purgelog.go   purge delivery: the purge log, retried queues to every
//	              peer, catch-up of a node started from a snapshot
//	purgesync.go  purge sync between nodes that learn of each other late
//	              (Consul), the stall watchdog
//	usage.go      usage exchange between nodes for fleet-wide tenant limits
//	failmode.go   the fleet limiter's fail mode while a member is not heard from
//	hot.go        sampled hot-key table (near copies, hand-off)
//	handoff.go    pushing hot entries to new owners on a graceful leave
//	status.go     the status page's cluster part
//
// Invariants:
//
//   - A forwarded hit allocates nothing here: Begin, SetForwardHead, Do,
//     DoMux and RelayPeerHead use pooled requests and caller-owned buffers; so
//     does the mux transport, on both sides (pooled calls, tasks and
//     RequestCtxs, queues that keep their capacity).
//   - Every failure of the cluster machinery — owner down, slow, refusing,
//     a generation mismatch — makes the caller serve the request locally,
//     never a wrong or foreign answer.
//   - A purge reaches every node that may hold a copy: delivered at once
//     or through a retried per-peer queue, and pulled by the purge sync
//     (dynamic membership) or the catch-up (snapshot) otherwise; a node
//     that cannot tell which purges it missed serves nothing it fetched
//     before (Local.InvalidateAll, the gate).
package cluster
