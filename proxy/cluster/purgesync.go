package cluster

import (
	"errors"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// Purge sync: with dynamic membership (Consul) two nodes do not learn of
// each other at the same instant. A node that does not know a peer does
// not deliver its purges there, so a peer that already holds copies (a
// node that just started and took traffic, a node another node dropped
// for a moment, a node coming back from a partition) would keep serving
// what was purged. Pushing alone cannot close that gap: the pusher does
// not know whom it is missing. So every node also pulls:
//
//   - every syncInterval (syncGatedInterval while out of sync) it asks
//     each peer in its view for the peer's purge log after the position
//     it last got (log positions are the peer's own, per process epoch)
//     and applies what it missed (at most once, by id; an overflow
//     "purge everything" is never logged, so never synced). The answer
//     also says whether the peer has this node
//     in its view — from then on the peer pushes every purge here as it
//     applies it (deliver reads the view after logging; the log answer
//     reads the view before the log, so no purge falls between the two);
//   - until every peer in its view has answered "member" once since it
//     entered the view, the node is out of sync and serves nothing from
//     its cache (lookups miss; fetches still store, and a replayed purge
//     invalidates what they stored before it arrived). A peer answering
//     "not a member" (it dropped this node) puts the node out of sync
//     again. So is starting before the membership source first answered;
//   - a peer that cannot be reached does not put a synced node out of
//     sync (a dead node sends no purges; an unreachable one gets them
//     into its log and the next answer carries them): availability over
//     a partition, stated in SECURITY.md. A peer never synced that stays
//     unreachable for catchUpWindow is given up on: everything fetched
//     before then is dropped (its purges are unknown) and it no longer
//     holds the node out of sync;
//   - an answer that is not complete (the ring dropped records after the
//     position asked for) drops everything fetched before now;
//   - a purge issued here waits (bounded) for the membership source's
//     first answer before it is delivered, and a purge received from a
//     peer whose view differs from ours is delivered on to our peers
//     before it is acknowledged (purgelog.go): together they reach the
//     nodes the issuer does not know yet;
//   - a peer from before purge sync (it answers 400) is trusted to push,
//     as before: a rolling upgrade does not close every cache;
//   - a node whose process was stopped or starved (SIGSTOP, a paused VM,
//     a swap storm) missed the purges pushed meanwhile — its peers gave up
//     waiting after purgeAnswerWait and deliver them in the background —
//     and on resuming, its requests run alongside the late deliveries. A
//     watchdog renews a lease every stallTick (invalidations.lease): a
//     request later than the lease finds nothing servable, and the
//     watchdog, seeing the gap, holds the node out of sync until every
//     reachable peer in its view has answered a sync asked after it.
//     stallLease is below purgeAnswerWait, so a peer answered as
//     "pending" by an issuer has stopped serving from its cache by then;
//   - a node leaving gracefully (Node.Leave, before it deregisters) closes
//     its cache for good: its peers drop it from their views, and so stop
//     pushing purges to it, at instants of their own, while it still
//     answers its clients' open connections and old-generation forwards
//     through the overlap. Answering those from its cache would serve
//     what a purge it never got removed; a peer's "not a member" closes
//     the cache too, but only at the next sync round (up to syncInterval
//     later). So it forwards to the owners of its view (which lacks it),
//     or fetches; read-throughs are still answered (the new owner checks
//     them), and its hand-off entries are checked by their receivers.
//
// Static membership needs none of this: every node knows every peer from
// the start, and a queued purge is retried until the peer takes it.
const (
	// ClockSkew widens a replay window for clocks that disagree.
	ClockSkew         = 5 * time.Second
	syncInterval      = 200 * time.Millisecond
	syncGatedInterval = 20 * time.Millisecond // while out of sync
	stallTick         = 100 * time.Millisecond
	stallLease        = 400 * time.Millisecond // < purgeAnswerWait
)

// purgeSync is one node's sync state, guarded by mu.
type purgeSync struct {
	mu          sync.Mutex
	peers       map[string]*peerSync
	established bool      // the membership source has answered once
	started     time.Time // when syncing began
	wake        chan struct{}
	gate        *atomic.Bool  // the invalidation table's: set while out of sync
	reachable   func() bool   // the membership source's Reachable
	est         chan struct{} // closed once established
	stalledAt   time.Time     // the watchdog's latest stall; zero: none
	leaving     bool          // Leave was called: the cache stays closed
}

// peerSync is what this node knows of one peer's purge log.
type peerSync struct {
	inView   bool      // in the current view (the Subscribe callback keeps it)
	synced   bool      // answered "member" since it entered the view
	epoch    uint64    // the peer log's epoch; 0: never answered
	next     uint64    // position to ask from inside epoch
	lastOK   time.Time // its last answer with a log (this node's clock)
	tryingAt time.Time // when this node began trying to sync with it
	asked    time.Time // start of the latest round it answered (or failed) in
}

func newPurgeSync(now time.Time, gate *atomic.Bool, reachable func() bool) *purgeSync {
	gate.Store(true)
	return &purgeSync{peers: map[string]*peerSync{}, started: now, wake: make(chan struct{}, 1), gate: gate, reachable: reachable, est: make(chan struct{})}
}

// establishLocked notes that the membership source has answered (or
// that it is given up on).
func (s *purgeSync) establishLocked() {
	if !s.established {
		s.established = true
		close(s.est)
	}
}

// awaitMembership holds a purge this node issues until the membership
// source has answered once (bounded by d): a node that has only just
// started knows no peers yet, and a purge delivered to nobody would be
// answered as done while every other node still serves the old copy.
func (s *purgeSync) awaitMembership(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.est:
		return true
	case <-t.C:
		return false
	}
}

// viewChanged runs inside the membership callback: a peer new to the
// view puts the node out of sync at once, before any request routes by
// the new view, and wakes the sync loop to fix it.
func (s *purgeSync) viewChanged(ids []string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reachable() {
		// Update runs the callback after the source answered.
		s.establishLocked()
	}
	inView := make(map[string]bool, len(ids))
	for _, id := range ids {
		inView[id] = true
	}
	for id, ps := range s.peers {
		ps.inView = ps.inView && inView[id]
	}
	for _, id := range ids {
		ps := s.peers[id]
		if ps == nil {
			ps = &peerSync{}
			s.peers[id] = ps
		}
		if !ps.inView { // new to the view: synced only once it answers
			ps.synced = false
			if ps.tryingAt.IsZero() {
				ps.tryingAt = now
			}
		}
		ps.inView = true
	}
	s.updateLocked()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// updateLocked sets the gate: not every peer in the view is synced, or
// the membership source has not answered yet. Always under mu, so an
// older verdict never overwrites a newer one.
func (s *purgeSync) updateLocked() { s.gate.Store(s.pendingLocked() > 0) }

// pending counts what holds the node out of sync (for the metric).
func (s *purgeSync) pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pendingLocked()
}

// pendingLocked: the peers in the view not synced, plus one while the
// membership source has not answered, plus one for good once the node
// is leaving; mu held.
func (s *purgeSync) pendingLocked() int {
	n := 0
	if !s.established {
		n++
	}
	if s.leaving {
		n++
	}
	for _, ps := range s.peers {
		if ps.inView && (!ps.synced || ps.asked.Before(s.stalledAt)) {
			n++
		}
	}
	return n
}

// leave closes the cache for good (Node.Leave).
func (s *purgeSync) leave() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leaving = true
	s.updateLocked()
}

// stalled holds the node out of sync until every peer in the view has
// been asked again (purges pushed during the stall may be in flight).
func (s *purgeSync) stalled(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stalledAt = now
	s.updateLocked()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// stallWatch renews the invalidation table's lease every stallTick and
// reports a gap longer than stallLease (the process did not run) to the
// purge sync, before renewing: a request after the old lease finds the
// gate closed instead.
func (c *Node) stallWatch() {
	defer c.env.WG.Done()
	t := time.NewTicker(stallTick)
	defer t.Stop()
	last := time.Now()
	c.env.Lease.Store(last.Add(stallLease).UnixNano())
	for {
		select {
		case <-c.env.Ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		if gap := now.Sub(last); gap > stallLease {
			c.sync.stalled(now)
			c.stalls.Inc()
			c.logger.Warn("process did not run: not serving from the cache until every peer's purge log is synced again",
				"gap", gap.Round(time.Millisecond).String())
		}
		last = now
		c.env.Lease.Store(now.Add(stallLease).UnixNano())
	}
}

// synced reports, for the status page, which peers in the view are in
// sync and whether the cache is open.
func (s *purgeSync) synced() (peers map[string]bool, open bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	peers = map[string]bool{}
	for id, ps := range s.peers {
		if ps.inView {
			peers[id] = ps.synced
		}
	}
	return peers, !s.gate.Load()
}

// syncLoop pulls every peer's purge log each syncInterval, and at once
// when the view changes, until the proxy closes.
func (c *Node) syncLoop() {
	defer c.env.WG.Done()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		c.syncRound()
		// Out of sync the cache is closed: ask again soon.
		next := syncInterval
		if c.sync.gate.Load() {
			next = syncGatedInterval
		}
		t.Reset(next)
		select {
		case <-c.env.Ctx.Done():
			return
		case <-t.C:
		case <-c.sync.wake:
		}
	}
}

// syncAnswer is a peer's purge log answer.
type syncAnswer struct {
	Complete bool          `json:"complete"`
	Member   bool          `json:"member"`
	Epoch    uint64        `json:"epoch"`
	Next     uint64        `json:"next"`
	Records  []PurgeRecord `json:"records"`
}

// syncRound asks every peer in the view once, in parallel.
func (c *Node) syncRound() {
	s := c.sync
	v := c.m.View()
	self := c.m.Self()
	now := time.Now()
	s.mu.Lock()
	if !s.established {
		switch {
		case s.reachable():
			s.establishLocked()
		case now.Sub(s.started) > catchUpWindow:
			s.establishLocked()
			c.logger.Warn("membership source never answered: serving from the cache with the peers known so far", "waited", catchUpWindow.String())
		}
		s.updateLocked()
	}
	type ask struct {
		id, addr string
		query    string
	}
	var asks []ask
	for _, peer := range v.Current.Peers() {
		if peer.ID == self.ID {
			continue
		}
		ps := s.peers[peer.ID]
		if ps == nil || !ps.inView {
			continue // the callback has not run for this view yet
		}
		q := "node=" + url.QueryEscape(self.ID)
		if ps.epoch != 0 {
			q += "&epoch=" + strconv.FormatUint(ps.epoch, 10) + "&from=" + strconv.FormatUint(ps.next, 10)
		}
		// Should the epoch have changed (the peer restarted), it answers
		// by its clock: everything since this node last heard from it,
		// or since this node began, widened by the clock skew allowed.
		since := s.started
		if !ps.lastOK.IsZero() {
			since = ps.lastOK
		}
		q += "&added_since=" + strconv.FormatInt(since.Add(-ClockSkew).UnixNano(), 10)
		asks = append(asks, ask{id: peer.ID, addr: peer.Addr, query: q})
	}
	s.mu.Unlock()
	table := c.peers.Load()
	gen := v.Current.Generation()
	var wg sync.WaitGroup
	for _, a := range asks {
		pc := table.byID[a.id]
		if pc == nil {
			continue
		}
		wg.Go(func() {
			ans, err := c.fetchSync(pc, a.addr, gen, a.query)
			c.syncApply(a.id, ans, err, now)
		})
	}
	wg.Wait()
}

// syncApply takes one peer's answer (or failure) into the sync state.
func (c *Node) syncApply(id string, ans syncAnswer, err error, now time.Time) {
	s := c.sync
	answered := err == nil && ans.Epoch != 0 // a 403 is an answer without a log
	if answered {
		for _, r := range ans.Records {
			r.Seq, r.Added = 0, 0
			if _, _, err := c.local.ApplyPurge(r); err != nil {
				c.logger.Warn("synced purge refused", "peer", id, "args", r.Args, "err", err)
			}
		}
		if !ans.Complete {
			// Records after our position left the peer's ring: which
			// URLs they named is unknown.
			c.local.InvalidateAll()
			c.logger.Warn("purge log from a peer was incomplete: everything fetched before now is dropped", "peer", id)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ps := s.peers[id]
	if ps == nil {
		return
	}
	// Asked after a stall: whatever the outcome (an unreachable peer is
	// not held against a node, stalled or not), it no longer holds the
	// node out of sync for the stall.
	ps.asked = now
	if answered {
		ps.epoch, ps.next, ps.lastOK = ans.Epoch, ans.Next, now
	}
	switch {
	case errors.Is(err, errLegacyPeer):
		// Not held against it: a rolling upgrade must not close every
		// cache (nor drop it after catchUpWindow).
		if !ps.synced && ps.inView {
			c.logger.Info("peer predates purge sync: relying on its pushes", "peer", id)
			ps.synced = true
			ps.tryingAt = time.Time{}
		}
	case err == nil && ans.Member:
		ps.tryingAt = time.Time{}
		if ps.inView {
			ps.synced = true
		}
	case err == nil:
		// It does not have us in its view: its purges skip us.
		if ps.synced {
			c.logger.Info("a peer does not have this node in its view: not serving from the cache until it has", "peer", id)
		}
		ps.synced = false
		if ps.tryingAt.IsZero() {
			ps.tryingAt = now
		}
	case !ps.synced && ps.inView && !ps.tryingAt.IsZero() && now.Sub(ps.tryingAt) > catchUpWindow:
		c.local.InvalidateAll()
		ps.synced = true
		ps.tryingAt = time.Time{}
		c.logger.Warn("peer unreachable since it joined the view: its purges are unknown, everything fetched before now is dropped", "peer", id, "err", err)
	}
	s.updateLocked()
}

// errLegacyPeer: the peer does not know purge sync (a rolling upgrade).
var errLegacyPeer = errors.New("purge log: peer predates purge sync")

// fetchSync asks one peer for its purge log after this node's position.
func (c *Node) fetchSync(pc *Peer, addr string, gen uint64, query string) (syncAnswer, error) {
	var ans syncAnswer
	status, err := c.getPurgeLog(pc, addr, gen, query, &ans)
	switch {
	case err != nil, status == fasthttp.StatusOK:
		return ans, err
	case status == fasthttp.StatusForbidden:
		// Our address is not in its allow-list: it does not know us.
		return ans, nil
	case status == fasthttp.StatusBadRequest:
		// A node from before purge sync (it wants ?since=): it pushes
		// its purges to the peers of its view, as it always did.
		return ans, errLegacyPeer
	}
	return ans, errors.New("purge log: status " + strconv.Itoa(status))
}

// serveSync answers a peer's sync: the records after its position (or,
// in another epoch, those added since its instant) and whether it is in
// this node's view. The view is read before the log (see above).
func (c *Node) serveSync(ctx *fasthttp.RequestCtx) {
	args := ctx.QueryArgs()
	node := string(args.Peek("node"))
	member := false
	for _, peer := range c.m.View().Current.Peers() {
		if peer.ID == node {
			member = true
		}
	}
	ans := syncAnswer{Member: member, Epoch: c.plog.epoch}
	epoch, errE := strconv.ParseUint(string(args.Peek("epoch")), 10, 64)
	from, errF := strconv.ParseUint(string(args.Peek("from")), 10, 64)
	if errE == nil && errF == nil && epoch == c.plog.epoch {
		ans.Records, ans.Complete, ans.Next = c.plog.fromSeq(from)
	} else {
		since, err := strconv.ParseInt(string(args.Peek("added_since")), 10, 64)
		if err != nil {
			ctx.Error("added_since must be unix nanoseconds\n", fasthttp.StatusBadRequest)
			return
		}
		ans.Records, ans.Complete, ans.Next = c.plog.addedSince(since)
	}
	writeJSON(ctx, fasthttp.StatusOK, ans)
}

// Stalled tells the purge sync that the process did not run until now
// (the watchdog's finding): the node serves nothing from its cache until
// every peer in its view has been asked again. A no-op with static
// membership.
func (c *Node) Stalled(now time.Time) {
	if c.sync != nil {
		c.sync.stalled(now)
	}
}
