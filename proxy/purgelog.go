package proxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// Cluster purge delivery. A purge (admin purge by URL, tag, route or
// tenant, hard or soft, and the URL invalidation of a successful unsafe
// request) must reach every node that may hold a copy — the owner, a
// previous owner inside the overlap window, edges with near copies — so
// it goes to every peer:
//
//   - each purge gets an id (random) and an instant where it is first
//     applied; every node applies it at most once (by id) and records it
//     in its purge log, a bounded ring;
//   - delivery to each peer goes through that peer's queue: retried with
//     backoff until the peer acknowledges, or the peer leaves the
//     membership (it then catches up when it comes back, below). A queue
//     that overflows is replaced by one "purge everything" message;
//   - a node that starts from a snapshot in a cluster serves none of the
//     snapshot's entries until it has caught up: it asks its peers for
//     their purge logs since the snapshot was saved and applies them. If
//     no peer can give a complete log (none reachable, or their logs do
//     not reach back far enough) within catchUpWindow, the snapshot's
//     entries stay unserved (the node starts cold) — a missed purge is
//     never served.
const (
	purgeLogSize   = 8192
	peerQueueMax   = 4096
	catchUpWindow  = 30 * time.Second
	purgeLogPath   = "/__shield/purgelog"
	purgeRetryMin  = 100 * time.Millisecond
	purgeRetryMax  = 2 * time.Second
	purgeSendLimit = 3 * time.Second
)

// purgeRecord is one purge as logged and delivered.
type purgeRecord struct {
	ID   uint64 `json:"id"`
	At   int64  `json:"at"` // unix ns where it was first applied
	Args string `json:"args"`
	// Seq and Added are this log's own: its position (consecutive, from
	// 1) and this node's clock when the record entered it. Peers syncing
	// from this log ask by them (purgesync.go).
	Seq   uint64 `json:"seq,omitempty"`
	Added int64  `json:"added,omitempty"`
}

// purgeLog is the ring of recent purges this node applied.
type purgeLog struct {
	mu           sync.Mutex
	recs         []purgeRecord       // oldest first, at most purgeLogSize
	ids          map[uint64]struct{} // ids in recs
	dropped      int64               // the latest At of a record pushed out of the ring
	droppedAdded int64               // the latest Added of a record pushed out of the ring
	since        int64               // the log holds every purge applied since this instant
	epoch        uint64              // this process's log: Seq values mean nothing across epochs
	nextSeq      uint64              // the Seq the next record gets
}

func newPurgeLog(now time.Time) *purgeLog {
	return &purgeLog{ids: map[uint64]struct{}{}, since: now.UnixNano(), epoch: rand.Uint64() | 1, nextSeq: 1}
}

// add records r; false when its id was already recorded.
func (l *purgeLog) add(r purgeRecord) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, dup := l.ids[r.ID]; dup {
		return false
	}
	if len(l.recs) == purgeLogSize {
		old := l.recs[0]
		l.dropped = max(l.dropped, old.At)
		l.droppedAdded = max(l.droppedAdded, old.Added)
		delete(l.ids, old.ID)
		l.recs = l.recs[1:]
	}
	r.Seq, r.Added = l.nextSeq, time.Now().UnixNano()
	l.nextSeq++
	l.recs = append(l.recs, r)
	l.ids[r.ID] = struct{}{}
	return true
}

// fromSeq returns the records at or after seq (this log's positions) and
// whether none of them was pushed out of the ring; next is the position
// to ask from next time.
func (l *purgeLog) fromSeq(seq uint64) (recs []purgeRecord, complete bool, next uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	recs = l.filterLocked(func(r *purgeRecord) bool { return r.Seq >= seq })
	oldest := l.nextSeq
	if len(l.recs) > 0 {
		oldest = l.recs[0].Seq
	}
	return recs, seq >= oldest, l.nextSeq
}

// addedSince returns the records that entered this log at or after
// since (this node's clock) and whether none of those was pushed out.
func (l *purgeLog) addedSince(since int64) (recs []purgeRecord, complete bool, next uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	recs = l.filterLocked(func(r *purgeRecord) bool { return r.Added >= since })
	return recs, l.droppedAdded < since, l.nextSeq
}

// filterLocked returns a copy of the records keep selects; l.mu held.
func (l *purgeLog) filterLocked(keep func(*purgeRecord) bool) []purgeRecord {
	var recs []purgeRecord
	for i := range l.recs {
		if keep(&l.recs[i]) {
			recs = append(recs, l.recs[i])
		}
	}
	return recs
}

// after returns the records at or after since and whether the log is
// complete for that span.
func (l *purgeLog) after(since int64) (recs []purgeRecord, complete bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	recs = l.filterLocked(func(r *purgeRecord) bool { return r.At >= since })
	return recs, l.since <= since && l.dropped < since
}

type purgeLogFile struct {
	SavedAt int64         `json:"saved_at"` // when the snapshot beside it was saved
	Since   int64         `json:"since"`
	Records []purgeRecord `json:"records"`
}

func (l *purgeLog) save(path string, savedAt time.Time) error {
	l.mu.Lock()
	b, err := json.Marshal(purgeLogFile{SavedAt: savedAt.UnixNano(), Since: l.since, Records: l.recs})
	l.mu.Unlock()
	if err != nil {
		return fmt.Errorf("proxy: purge log: %w", err)
	}
	if err := os.WriteFile(path+".tmp", b, 0o644); err != nil {
		return fmt.Errorf("proxy: save purge log: %w", err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		return fmt.Errorf("proxy: save purge log: %w", err)
	}
	return nil
}

// loadPurgeLog reads a saved log; savedAt is when the snapshot was saved.
func loadPurgeLog(path string) (f purgeLogFile, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return f, err
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return f, fmt.Errorf("proxy: purge log %s: %w", path, err)
	}
	return f, nil
}

// applyPurge applies a purge record once (by id) and logs it; false when
// it had been applied already.
func (p *Proxy) applyPurge(r purgeRecord) (PurgeResult, bool, error) {
	args, err := url.ParseQuery(r.Args)
	if err != nil {
		return PurgeResult{}, false, fmt.Errorf("%w: %v", errPurge, err)
	}
	if !p.plog.add(r) {
		return PurgeResult{}, false, nil
	}
	res, err := p.Purge(args)
	return res, true, err
}

// newPurge makes a record for args, applied here first.
func newPurge(args url.Values) purgeRecord {
	return purgeRecord{ID: rand.Uint64() | 1, At: time.Now().UnixNano(), Args: args.Encode()}
}

// peerQueue holds purges not yet acknowledged by one peer.
type peerQueue struct {
	mu      sync.Mutex
	pending []purgeRecord
	late    int // direct attempts still unanswered after purgeAnswerWait
	wake    chan struct{}
}

// size is how many purges wait for the peer.
func (q *peerQueue) size() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.pending)
}

// behind: purges wait in the queue, or a direct attempt has gone
// unanswered past purgeAnswerWait — the peer is not answering promptly.
func (q *peerQueue) behind() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.pending) > 0 || q.late > 0
}

// attempt is one direct delivery: late once deliver stopped waiting for
// it (counted in the queue's late until it ends), done once it ended.
type attempt struct {
	late, done bool // guarded by the queue's mu
}

// markLate counts an attempt deliver gave up waiting for, unless it ended.
func (q *peerQueue) markLate(a *attempt) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !a.done {
		a.late = true
		q.late++
	}
}

// ended closes an attempt.
func (q *peerQueue) ended(a *attempt) {
	q.mu.Lock()
	defer q.mu.Unlock()
	a.done = true
	if a.late {
		q.late--
	}
}

// purgeAnswerWait bounds how long a purge's answer (the admin client's
// POST /purge, the unsafe request whose invalidation it is, a relaying
// peer's acknowledgement) waits for peers to acknowledge it. A peer that
// is up answers a purge in about a millisecond (it is O(1) on its side),
// one that is down fails within the 250ms dial bound, so 500ms leaves a
// loaded peer (GC, a busy core) ample room while a hung one (stopped
// process, full accept queue: until now the 5s request timeout) no
// longer holds the client: the purge is durable in this node's purge log
// already and reaches that peer in the background — through its queue,
// and its purge sync pulls it from the log when it answers again.
const purgeAnswerWait = 500 * time.Millisecond

// Delivery is what a purge's answer says of its peers: Peers maps each
// peer that answered within purgeAnswerWait to its status (200: it has
// the purge); Pending lists those that have not acknowledged it yet (no
// answer in time, a failed attempt, or already behind on purges): they
// get it in the background.
type Delivery struct {
	Peers   map[string]int `json:"peers"`
	Pending []string       `json:"pending"`
}

// deliver sends r to every other current peer. With wait it tries each
// peer once, in parallel, and returns what answered within
// purgeAnswerWait; a peer that did not acknowledge gets r through its
// queue, retried. A peer that is behind (purges queued, or an attempt
// unanswered past purgeAnswerWait) gets r through its queue at once, in
// order, instead of another direct attempt: a hung peer costs one
// connection at a time, not one per purge, and no answer waits for it.
func (p *Proxy) deliver(r purgeRecord, wait bool) Delivery {
	out := Delivery{Peers: map[string]int{}, Pending: []string{}}
	c := p.cluster.Load()
	if c == nil {
		return out
	}
	if wait && c.sync != nil && !c.sync.awaitMembership(purgeSendLimit) {
		p.logger.Warn("purge delivered before the membership source answered: peers learn of it when they sync", "args", r.Args)
	}
	v := c.m.View()
	self := c.m.Self().ID
	type answer struct {
		id     string
		status int
	}
	answers := make(chan answer, v.Current.Len())
	type try struct {
		q *peerQueue
		a *attempt
	}
	tries := map[string]try{}
	for _, peer := range v.Current.Peers() {
		if peer.ID == self {
			continue
		}
		q := p.queueFor(c, peer.ID)
		pc := c.peers.Load().byID[peer.ID]
		if !wait || pc == nil || q.behind() {
			q.push(r)
			out.Pending = append(out.Pending, peer.ID)
			continue
		}
		a := &attempt{}
		tries[peer.ID] = try{q, a}
		go func() {
			st := sendPurgeRecord(c, pc, peer.Addr, v.Current.Generation(), r)
			q.ended(a)
			if st != fasthttp.StatusOK {
				p.purgeFailed(peer.ID)
				q.push(r)
			}
			answers <- answer{peer.ID, st} // buffered: never blocks
		}()
	}
	if len(tries) > 0 {
		timer := time.NewTimer(purgeAnswerWait)
		defer timer.Stop()
	collect:
		for len(tries) > 0 {
			select {
			case a := <-answers:
				out.Peers[a.id] = a.status
				delete(tries, a.id)
				if a.status != fasthttp.StatusOK {
					out.Pending = append(out.Pending, a.id)
				}
			case <-timer.C:
				break collect
			}
		}
		for id, t := range tries {
			t.q.markLate(t.a)
			out.Pending = append(out.Pending, id)
		}
	}
	if len(out.Pending) > 0 {
		slices.Sort(out.Pending)
		p.g.purgesPending.Inc()
	}
	return out
}

func (q *peerQueue) push(r purgeRecord) {
	q.mu.Lock()
	if len(q.pending) >= peerQueueMax {
		// Too far behind to replay one by one: one message that drops
		// everything the peer fetched before now stands for all of them.
		// It is for that peer only: never logged or relayed there
		// (peerPurge), or it would empty every cache it reached.
		q.pending = append(q.pending[:0], newPurge(url.Values{"all": {"1"}, "overflow": {"1"}}))
	}
	q.pending = append(q.pending, r)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// queueFor returns the peer's queue, starting its sender on first use.
func (p *Proxy) queueFor(c *cluster, id string) *peerQueue {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	if q := c.queues[id]; q != nil {
		return q
	}
	q := &peerQueue{wake: make(chan struct{}, 1)}
	c.queues[id] = q
	p.bgWG.Add(1)
	go p.sendLoop(c, id, q)
	return q
}

// purgeGiveUp bounds the retries of a peer's queue with dynamic
// membership: once the peer has taken nothing for this long, its queue
// is dropped — every purge in it is in this node's purge log, which the
// peer's purge sync pulls when it answers again (and a peer that fell
// out of the view is put out of sync until it has). With static
// membership there is no sync, so the queue is retried as long as the
// peer is in the configuration (bounded in size by peerQueueMax).
const purgeGiveUp = 30 * time.Second

// purgeFailed counts one failed delivery attempt to a peer.
func (p *Proxy) purgeFailed(peer string) {
	p.g.set.GetOrCreateCounter(`shield_purge_delivery_failures_total{peer="` + peer + `"}`).Inc()
}

// sendLoop delivers a peer's queue in order, retrying with backoff, until
// the proxy closes or the peer leaves the membership (or, with dynamic
// membership, takes nothing for purgeGiveUp).
func (p *Proxy) sendLoop(c *cluster, id string, q *peerQueue) {
	defer p.bgWG.Done()
	backoff := purgeRetryMin
	var failingSince time.Time // first failure of the current streak
	failures := 0
	for {
		q.mu.Lock()
		var head *purgeRecord
		if len(q.pending) > 0 {
			head = &q.pending[0]
		}
		q.mu.Unlock()
		if head == nil {
			select {
			case <-p.bgCtx.Done():
				return
			case <-q.wake:
				continue
			}
		}
		v := c.m.View()
		var addr string
		for _, peer := range v.Current.Peers() {
			if peer.ID == id {
				addr = peer.Addr
			}
		}
		if addr == "" {
			// Left the membership: it catches up when it rejoins.
			c.qmu.Lock()
			q.mu.Lock()
			n := len(q.pending)
			q.pending = nil
			q.mu.Unlock()
			delete(c.queues, id)
			c.qmu.Unlock()
			if failures > 0 {
				p.logger.Warn("peer left the membership with purges undelivered: it syncs them when it rejoins", "peer", id, "purges", n)
			}
			return
		}
		pc := c.peers.Load().byID[id]
		if pc != nil && sendPurgeRecord(c, pc, addr, v.Current.Generation(), *head) == fasthttp.StatusOK {
			q.mu.Lock()
			q.pending = q.pending[1:]
			n := len(q.pending)
			q.mu.Unlock()
			if failures > 0 {
				p.logger.Info("purge delivery to peer resumed", "peer", id, "failed_attempts", failures, "for", time.Since(failingSince).Round(time.Millisecond).String(), "still_queued", n)
			}
			backoff, failures = purgeRetryMin, 0
			continue
		}
		p.g.peerPurgeRetries.Inc()
		p.purgeFailed(id)
		if failures == 0 {
			failingSince = time.Now()
			p.logger.Warn("purge delivery to peer failed: retrying in the background", "peer", id, "queued", q.size())
		}
		failures++
		if c.sync != nil && time.Since(failingSince) > purgeGiveUp {
			q.mu.Lock()
			n := len(q.pending)
			q.pending = q.pending[:0]
			q.mu.Unlock()
			p.g.purgesDropped.Add(n)
			p.logger.Warn("peer took no purge for too long: its queue is dropped, its purge sync pulls them from this node's log",
				"peer", id, "purges", n, "failed_attempts", failures, "for", purgeGiveUp.String())
			backoff, failures = purgeRetryMin, 0
			continue
		}
		select {
		case <-p.bgCtx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, purgeRetryMax)
	}
}

// sendPurgeRecord delivers one purge to a peer; it returns the peer's
// status, or 0 when the peer could not be reached.
func sendPurgeRecord(c *cluster, pc *peerClient, addr string, gen uint64, r purgeRecord) int {
	args, _ := url.ParseQuery(r.Args)
	args.Set("_id", strconv.FormatUint(r.ID, 10))
	args.Set("_at", strconv.FormatInt(r.At, 10))
	return sendPurge(c, pc, addr, gen, args)
}

// peerPurge serves a delivered purge on the peer listener.
func (p *Proxy) peerPurge(ctx *fasthttp.RequestCtx) {
	args, _ := url.ParseQuery(string(ctx.QueryArgs().QueryString()))
	id, err1 := strconv.ParseUint(args.Get("_id"), 10, 64)
	at, err2 := strconv.ParseInt(args.Get("_at"), 10, 64)
	args.Del("_id")
	args.Del("_at")
	var res PurgeResult
	var err error
	applied := false
	rec := purgeRecord{ID: id, At: at, Args: args.Encode()}
	switch {
	case err1 != nil || err2 != nil || id == 0:
		res, err = p.Purge(args) // an older node: no id, apply as is
	case args.Get("overflow") == "1":
		res, err = p.Purge(args) // the sender's queue for us overflowed: ours alone
	default:
		res, applied, err = p.applyPurge(rec)
	}
	if err != nil {
		writeJSON(ctx, fasthttp.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	if c := p.cluster.Load(); applied && c != nil {
		// The sender delivered to the peers of its view. When ours is
		// another (membership in flux), pass the purge on before
		// acknowledging it, so that every node either of us knows has it
		// once the sender answers its client. A node that has it already
		// acknowledges at once, so relays end.
		gen, _ := strconv.ParseUint(string(ctx.Request.Header.PeekBytes(hShieldGeneration)), 10, 64)
		if gen != c.m.View().Current.Generation() {
			p.deliver(rec, true)
		}
	}
	p.events.add("purge", res.Kind+" "+res.Target+" (from a peer)")
	writeJSON(ctx, fasthttp.StatusOK, res)
}

// servePurgeLog answers a catching-up peer: the purges since ?since=.
func (p *Proxy) servePurgeLog(ctx *fasthttp.RequestCtx) {
	since, err := strconv.ParseInt(string(ctx.QueryArgs().Peek("since")), 10, 64)
	if err != nil {
		ctx.Error("since must be unix nanoseconds\n", fasthttp.StatusBadRequest)
		return
	}
	recs, complete := p.plog.after(since)
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"complete": complete, "records": recs})
}

// catchUp runs once in a cluster when a snapshot was loaded: it fetches
// the purges this node missed from a peer and applies them, then lets
// the snapshot's entries be served. Until then (and for good, when no
// peer could give a complete log) they are treated as invalidated.
func (p *Proxy) catchUp(c *cluster, savedAt int64, release func()) {
	defer p.bgWG.Done()
	deadline := time.Now().Add(catchUpWindow)
	for time.Now().Before(deadline) && p.bgCtx.Err() == nil {
		v := c.m.View()
		self := c.m.Self().ID
		for _, peer := range v.Current.Peers() {
			if peer.ID == self {
				continue
			}
			pc := c.peers.Load().byID[peer.ID]
			if pc == nil {
				continue
			}
			recs, complete, err := fetchPurgeLog(c, pc, peer.Addr, v.Current.Generation(), savedAt)
			if err != nil || !complete {
				continue
			}
			for _, r := range recs {
				if _, _, err := p.applyPurge(r); err != nil {
					p.logger.Warn("replayed purge refused", "args", r.Args, "err", err)
				}
			}
			release()
			p.logger.Info("caught up on purges before serving the snapshot", "peer", peer.ID, "purges", len(recs))
			return
		}
		select {
		case <-p.bgCtx.Done():
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
	p.logger.Warn("no peer could tell which purges were missed: snapshot entries are not served", "waited", catchUpWindow.String())
}

func fetchPurgeLog(c *cluster, pc *peerClient, addr string, gen uint64, since int64) ([]purgeRecord, bool, error) {
	var out struct {
		Complete bool          `json:"complete"`
		Records  []purgeRecord `json:"records"`
	}
	status, err := getPurgeLog(c, pc, addr, gen, "since="+strconv.FormatInt(since, 10), &out)
	if err == nil && status != fasthttp.StatusOK {
		err = errors.New("purge log: status " + strconv.Itoa(status))
	}
	return out.Records, out.Complete, err
}

// getPurgeLog asks a peer for its purge log (query: its parameters) and
// decodes a 200 answer into out; other statuses are the caller's to read.
func getPurgeLog(c *cluster, pc *peerClient, addr string, gen uint64, query string, out any) (status int, err error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(purgeLogPath + "?" + query)
	setPeerHead(&req.Header, c, addr, gen)
	if err := pc.hc.DoTimeout(req, resp, purgeSendLimit); err != nil {
		return 0, err
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		return resp.StatusCode(), nil
	}
	if err := json.Unmarshal(resp.Body(), out); err != nil {
		return resp.StatusCode(), fmt.Errorf("purge log: %w", err)
	}
	return resp.StatusCode(), nil
}
