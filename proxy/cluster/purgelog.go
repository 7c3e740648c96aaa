package cluster

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

	"github.com/shield-proxy/shield/routing"
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

// PurgeRecord is one purge as logged and delivered.
type PurgeRecord struct {
	ID   uint64 `json:"id"`
	At   int64  `json:"at"` // unix ns where it was first applied
	Args string `json:"args"`
	// Seq and Added are this log's own: its position (consecutive, from
	// 1) and this node's clock when the record entered it. Peers syncing
	// from this log ask by them (purgesync.go).
	Seq   uint64 `json:"seq,omitempty"`
	Added int64  `json:"added,omitempty"`
}

// PurgeLog is the ring of recent purges this node applied.
type PurgeLog struct {
	mu           sync.Mutex
	recs         []PurgeRecord       // oldest first, at most purgeLogSize
	ids          map[uint64]struct{} // ids in recs
	dropped      int64               // the latest At of a record pushed out of the ring
	droppedAdded int64               // the latest Added of a record pushed out of the ring
	since        int64               // the log holds every purge applied since this instant
	epoch        uint64              // this process's log: Seq values mean nothing across epochs
	nextSeq      uint64              // the Seq the next record gets
}

// NewPurgeLog makes an empty log, complete since now.
func NewPurgeLog(now time.Time) *PurgeLog {
	return &PurgeLog{ids: map[uint64]struct{}{}, since: now.UnixNano(), epoch: rand.Uint64() | 1, nextSeq: 1}
}

// Add records r; false when its id was already recorded.
func (l *PurgeLog) Add(r PurgeRecord) bool {
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
func (l *PurgeLog) fromSeq(seq uint64) (recs []PurgeRecord, complete bool, next uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	recs = l.filterLocked(func(r *PurgeRecord) bool { return r.Seq >= seq })
	oldest := l.nextSeq
	if len(l.recs) > 0 {
		oldest = l.recs[0].Seq
	}
	return recs, seq >= oldest, l.nextSeq
}

// addedSince returns the records that entered this log at or after
// since (this node's clock) and whether none of those was pushed out.
func (l *PurgeLog) addedSince(since int64) (recs []PurgeRecord, complete bool, next uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	recs = l.filterLocked(func(r *PurgeRecord) bool { return r.Added >= since })
	return recs, l.droppedAdded < since, l.nextSeq
}

// filterLocked returns a copy of the records keep selects; l.mu held.
func (l *PurgeLog) filterLocked(keep func(*PurgeRecord) bool) []PurgeRecord {
	var recs []PurgeRecord
	for i := range l.recs {
		if keep(&l.recs[i]) {
			recs = append(recs, l.recs[i])
		}
	}
	return recs
}

// after returns the records at or after since and whether the log is
// complete for that span.
func (l *PurgeLog) after(since int64) (recs []PurgeRecord, complete bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	recs = l.filterLocked(func(r *PurgeRecord) bool { return r.At >= since })
	return recs, l.since <= since && l.dropped < since
}

// PurgeLogFile is a saved purge log, beside a cache snapshot.
type PurgeLogFile struct {
	SavedAt int64         `json:"saved_at"` // when the snapshot beside it was saved
	Since   int64         `json:"since"`
	Records []PurgeRecord `json:"records"`
}

// Save writes the log to path (through a temporary file); savedAt is
// when the snapshot beside it was saved.
func (l *PurgeLog) Save(path string, savedAt time.Time) error {
	l.mu.Lock()
	b, err := json.Marshal(PurgeLogFile{SavedAt: savedAt.UnixNano(), Since: l.since, Records: l.recs})
	l.mu.Unlock()
	if err != nil {
		return fmt.Errorf("cluster: purge log: %w", err)
	}
	if err := os.WriteFile(path+".tmp", b, 0o644); err != nil {
		return fmt.Errorf("cluster: save purge log: %w", err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		return fmt.Errorf("cluster: save purge log: %w", err)
	}
	return nil
}

// LoadPurgeLog reads a saved log; savedAt is when the snapshot was saved.
func LoadPurgeLog(path string) (f PurgeLogFile, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return f, err
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return f, fmt.Errorf("cluster: purge log %s: %w", path, err)
	}
	return f, nil
}

// Since is the instant since which the log holds every purge applied.
func (l *PurgeLog) Since() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.since
}

// WidenSince moves Since back to since when it is earlier: a saved log
// taken back in covers what it covered.
func (l *PurgeLog) WidenSince(since int64) {
	l.mu.Lock()
	l.since = min(l.since, since)
	l.mu.Unlock()
}

// Records returns a copy of the records at or after the log position seq.
func (l *PurgeLog) Records(seq uint64) []PurgeRecord {
	recs, _, _ := l.fromSeq(seq)
	return recs
}

// NewPurge makes a record for args, applied here first.
func NewPurge(args url.Values) PurgeRecord {
	return PurgeRecord{ID: rand.Uint64() | 1, At: time.Now().UnixNano(), Args: args.Encode()}
}

// peerQueue holds purges not yet acknowledged by one peer.
type peerQueue struct {
	mu      sync.Mutex
	pending []PurgeRecord
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

// Deliver sends r to every other current peer. With wait it tries each
// peer once, in parallel, and returns what answered within
// purgeAnswerWait; a peer that did not acknowledge gets r through its
// queue, retried. A peer that is behind (purges queued, or an attempt
// unanswered past purgeAnswerWait) gets r through its queue at once, in
// order, instead of another direct attempt: a hung peer costs one
// connection at a time, not one per purge, and no answer waits for it.
func (c *Node) Deliver(r PurgeRecord, wait bool) Delivery {
	out := Delivery{Peers: map[string]int{}, Pending: []string{}}
	if wait && c.sync != nil && !c.sync.awaitMembership(purgeSendLimit) {
		c.logger.Warn("purge delivered before the membership source answered: peers learn of it when they sync", "args", r.Args)
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
		q := c.queueFor(peer.ID)
		pc := c.peers.Load().byID[peer.ID]
		if !wait || pc == nil || q.behind() {
			q.push(r)
			out.Pending = append(out.Pending, peer.ID)
			continue
		}
		a := &attempt{}
		tries[peer.ID] = try{q, a}
		go func() {
			st := c.sendPurgeRecord(pc, peer.Addr, v.Current.Generation(), r)
			q.ended(a)
			if st != fasthttp.StatusOK {
				c.purgeFailed(peer.ID)
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
		c.purgesPending.Inc()
	}
	return out
}

func (q *peerQueue) push(r PurgeRecord) {
	q.mu.Lock()
	if len(q.pending) >= peerQueueMax {
		// Too far behind to replay one by one: one message that drops
		// everything the peer fetched before now stands for all of them.
		// It is for that peer only: never logged or relayed there
		// (peerPurge), or it would empty every cache it reached.
		q.pending = append(q.pending[:0], NewPurge(url.Values{"all": {"1"}, "overflow": {"1"}}))
	}
	q.pending = append(q.pending, r)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// queueFor returns the peer's queue, starting its sender on first use.
func (c *Node) queueFor(id string) *peerQueue {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	if q := c.queues[id]; q != nil {
		return q
	}
	q := &peerQueue{wake: make(chan struct{}, 1)}
	c.queues[id] = q
	c.env.WG.Add(1)
	go c.sendLoop(id, q)
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
func (c *Node) purgeFailed(peer string) {
	c.env.Metrics.GetOrCreateCounter(`shield_purge_delivery_failures_total{peer="` + peer + `"}`).Inc()
}

// sendLoop delivers a peer's queue in order, retrying with backoff, until
// the proxy closes or the peer leaves the membership (or, with dynamic
// membership, takes nothing for purgeGiveUp).
func (c *Node) sendLoop(id string, q *peerQueue) {
	defer c.env.WG.Done()
	backoff := purgeRetryMin
	var failingSince time.Time // first failure of the current streak
	failures := 0
	for {
		head := q.head()
		if head == nil {
			select {
			case <-c.env.Ctx.Done():
				return
			case <-q.wake:
				continue
			}
		}
		v := c.m.View()
		addr := peerAddr(v, id)
		if addr == "" {
			// Left the membership: it catches up when it rejoins.
			n := c.dropQueue(id, q)
			if failures > 0 {
				c.logger.Warn("peer left the membership with purges undelivered: it syncs them when it rejoins", "peer", id, "purges", n)
			}
			return
		}
		pc := c.peers.Load().byID[id]
		if pc != nil && c.sendPurgeRecord(pc, addr, v.Current.Generation(), *head) == fasthttp.StatusOK {
			n := q.pop()
			if failures > 0 {
				c.logger.Info("purge delivery to peer resumed", "peer", id, "failed_attempts", failures, "for", time.Since(failingSince).Round(time.Millisecond).String(), "still_queued", n)
			}
			backoff, failures = purgeRetryMin, 0
			continue
		}
		c.peerPurgeRetries.Inc()
		c.purgeFailed(id)
		if failures == 0 {
			failingSince = time.Now()
			c.logger.Warn("purge delivery to peer failed: retrying in the background", "peer", id, "queued", q.size())
		}
		failures++
		if c.sync != nil && time.Since(failingSince) > purgeGiveUp {
			n := q.clear()
			c.purgesDropped.Add(n)
			c.logger.Warn("peer took no purge for too long: its queue is dropped, its purge sync pulls them from this node's log",
				"peer", id, "purges", n, "failed_attempts", failures, "for", purgeGiveUp.String())
			backoff, failures = purgeRetryMin, 0
			continue
		}
		select {
		case <-c.env.Ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, purgeRetryMax)
	}
}

// head is the purge to deliver next (nil: none).
func (q *peerQueue) head() *PurgeRecord {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.pending) > 0 {
		return &q.pending[0]
	}
	return nil
}

// pop drops the delivered head; it returns how many purges still wait.
func (q *peerQueue) pop() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.pending = q.pending[1:]
	return len(q.pending)
}

// clear drops every waiting purge and returns how many there were.
func (q *peerQueue) clear() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := len(q.pending)
	q.pending = q.pending[:0]
	return n
}

// dropQueue forgets the queue of a peer that left the membership and
// returns how many purges it held.
func (c *Node) dropQueue(id string, q *peerQueue) int {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	q.mu.Lock()
	n := len(q.pending)
	q.pending = nil
	q.mu.Unlock()
	delete(c.queues, id)
	return n
}

// peerAddr is the address of peer id in v's current peer set ("": none).
func peerAddr(v *routing.View, id string) string {
	var addr string
	for _, peer := range v.Current.Peers() {
		if peer.ID == id {
			addr = peer.Addr
		}
	}
	return addr
}

// sendPurgeRecord delivers one purge to a peer; it returns the peer's
// status, or 0 when the peer could not be reached.
func (c *Node) sendPurgeRecord(pc *Peer, addr string, gen uint64, r PurgeRecord) int {
	args, _ := url.ParseQuery(r.Args)
	args.Set("_id", strconv.FormatUint(r.ID, 10))
	args.Set("_at", strconv.FormatInt(r.At, 10))
	return c.sendPurge(pc, addr, gen, args)
}

// peerPurge serves a delivered purge on the peer listener.
func (c *Node) peerPurge(ctx *fasthttp.RequestCtx) {
	args, _ := url.ParseQuery(string(ctx.QueryArgs().QueryString()))
	id, err1 := strconv.ParseUint(args.Get("_id"), 10, 64)
	at, err2 := strconv.ParseInt(args.Get("_at"), 10, 64)
	args.Del("_id")
	args.Del("_at")
	var res PurgeResult
	var err error
	applied := false
	rec := PurgeRecord{ID: id, At: at, Args: args.Encode()}
	switch {
	case err1 != nil || err2 != nil || id == 0:
		res, err = c.local.Purge(args) // an older node: no id, apply as is
	case args.Get("overflow") == "1":
		// The sender's queue for us overflowed: ours alone. Said here,
		// where the cache empties, not only on the sender.
		c.logger.Warn("a peer's purge queue for this node overflowed: everything fetched before now is dropped",
			"from", ctx.RemoteAddr().String())
		res, err = c.local.Purge(args)
	default:
		res, applied, err = c.local.ApplyPurge(rec)
	}
	if err != nil {
		writeJSON(ctx, fasthttp.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	if applied {
		// The sender delivered to the peers of its view. When ours is
		// another (membership in flux), pass the purge on before
		// acknowledging it, so that every node either of us knows has it
		// once the sender answers its client. A node that has it already
		// acknowledges at once, so relays end.
		gen, _ := strconv.ParseUint(string(ctx.Request.Header.PeekBytes(hShieldGeneration)), 10, 64)
		if gen != c.m.View().Current.Generation() {
			c.Deliver(rec, true)
		}
	}
	c.local.Event("purge", res.Kind+" "+res.Target+" (from a peer)")
	writeJSON(ctx, fasthttp.StatusOK, res)
}

// servePurgeLog answers a catching-up peer: the purges since ?since=.
func (c *Node) servePurgeLog(ctx *fasthttp.RequestCtx) {
	since, err := strconv.ParseInt(string(ctx.QueryArgs().Peek("since")), 10, 64)
	if err != nil {
		ctx.Error("since must be unix nanoseconds\n", fasthttp.StatusBadRequest)
		return
	}
	recs, complete := c.plog.after(since)
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"complete": complete, "records": recs})
}

// catchUp runs once in a cluster when a snapshot was loaded: it fetches
// the purges this node missed from a peer and applies them, then lets
// the snapshot's entries be served. Until then (and for good, when no
// peer could give a complete log) they are treated as invalidated.
func (c *Node) catchUp(savedAt int64, release func()) {
	defer c.env.WG.Done()
	deadline := time.Now().Add(catchUpWindow)
	for time.Now().Before(deadline) && c.env.Ctx.Err() == nil {
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
			recs, complete, err := c.fetchPurgeLog(pc, peer.Addr, v.Current.Generation(), savedAt)
			if err != nil || !complete {
				continue
			}
			for _, r := range recs {
				if _, _, err := c.local.ApplyPurge(r); err != nil {
					c.logger.Warn("replayed purge refused", "args", r.Args, "err", err)
				}
			}
			release()
			c.logger.Info("caught up on purges before serving the snapshot", "peer", peer.ID, "purges", len(recs))
			return
		}
		select {
		case <-c.env.Ctx.Done():
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
	c.logger.Warn("no peer could tell which purges were missed: snapshot entries are not served", "waited", catchUpWindow.String())
}

func (c *Node) fetchPurgeLog(pc *Peer, addr string, gen uint64, since int64) ([]PurgeRecord, bool, error) {
	var out struct {
		Complete bool          `json:"complete"`
		Records  []PurgeRecord `json:"records"`
	}
	status, err := c.getPurgeLog(pc, addr, gen, "since="+strconv.FormatInt(since, 10), &out)
	if err == nil && status != fasthttp.StatusOK {
		err = errors.New("purge log: status " + strconv.Itoa(status))
	}
	return out.Records, out.Complete, err
}

// getPurgeLog asks a peer for its purge log (query: its parameters) and
// decodes a 200 answer into out; other statuses are the caller's to read.
func (c *Node) getPurgeLog(pc *Peer, addr string, gen uint64, query string, out any) (status int, err error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(purgeLogPath + "?" + query)
	c.setPeerHead(&req.Header, addr, gen)
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

func writeJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	b, _ := json.Marshal(v)
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(append(b, '\n'))
}
