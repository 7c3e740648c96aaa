package proxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
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
	wake    chan struct{}
}

// deliver sends r to every other current peer. With wait it first tries
// each peer once, in parallel, and returns their statuses (0: not reached);
// a peer that did not acknowledge gets r through its queue, retried.
func (p *Proxy) deliver(r purgeRecord, wait bool) map[string]int {
	c := p.cluster.Load()
	if c == nil {
		return nil
	}
	if wait && c.sync != nil && !c.sync.awaitMembership(purgeSendLimit) {
		p.logger.Warn("purge delivered before the membership source answered: peers learn of it when they sync", "args", r.Args)
	}
	v := c.m.View()
	self := c.m.Self().ID
	out := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, peer := range v.Current.Peers() {
		if peer.ID == self {
			continue
		}
		q := p.queueFor(c, peer.ID)
		pc := c.peers.Load().byID[peer.ID]
		if !wait || pc == nil {
			q.push(r)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := sendPurgeRecord(c, pc, peer.Addr, v.Current.Generation(), r)
			mu.Lock()
			out[peer.ID] = st
			mu.Unlock()
			if st != fasthttp.StatusOK {
				q.push(r)
			}
		}()
	}
	wg.Wait()
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

// sendLoop delivers a peer's queue in order, retrying with backoff, until
// the proxy closes or the peer leaves the membership.
func (p *Proxy) sendLoop(c *cluster, id string, q *peerQueue) {
	defer p.bgWG.Done()
	backoff := purgeRetryMin
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
			q.pending = nil
			q.mu.Unlock()
			delete(c.queues, id)
			c.qmu.Unlock()
			return
		}
		pc := c.peers.Load().byID[id]
		if pc != nil && sendPurgeRecord(c, pc, addr, v.Current.Generation(), *head) == fasthttp.StatusOK {
			q.mu.Lock()
			q.pending = q.pending[1:]
			q.mu.Unlock()
			backoff = purgeRetryMin
			continue
		}
		p.g.peerPurgeRetries.Inc()
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
