package proxy

import (
	"context"
	"errors"
	"time"

	"github.com/shield-proxy/shield/cachekey"
	"github.com/shield-proxy/shield/proxy/cache"
)

// Handoff pushes this node's hottest fresh entries to the nodes that own
// their keys now (cluster.Node.Handoff). Call it on a graceful leave,
// after membership no longer includes this node; it returns how many
// entries were accepted.
func (p *Proxy) Handoff(ctx context.Context) int {
	c := p.cluster.Load()
	if c == nil {
		return 0
	}
	return c.Handoff(ctx)
}

// Leave closes the cache for good at the start of a graceful leave,
// before the node deregisters (cluster.Node.Leave): its peers stop
// sending it purges as they drop it, while it still serves through the
// overlap, so from now on it answers nothing from its cache. No-op
// without a cluster.
func (p *Proxy) Leave() {
	if c := p.cluster.Load(); c != nil {
		c.Leave()
	}
}

// HandoffEntry returns key's stored entry when it may be handed over: a
// response, not invalidated, servable at now (cluster.Local).
func (l peerLocal) HandoffEntry(key []byte, now time.Time) ([]byte, bool) {
	p := l.p
	b := p.cache.Get(nil, key)
	var e cache.Entry
	// apply, not servable: a leaving node is out of its peers' views
	// (out of purge sync) by now, and the new owner checks the
	// entry's fetch start against its own invalidations at lookup.
	if len(b) == 0 || cache.DecodeEntry(b, &e) != nil || e.Kind != cache.KindResponse || !p.cache.Invalidations().Apply(&e) || !staleServable(&e, now) {
		return nil, false
	}
	return b, true
}

// errBadHandoff: a handed-over entry that does not decode, is no
// response, or was stored under another key.
var errBadHandoff = errors.New("proxy: bad hand-off entry")

// TakeHandoff stores an entry pushed by a leaving node, unless this node
// already holds one for the key (it may be newer). The entry must decode
// and must have been stored under exactly this key (cluster.Local).
func (l peerLocal) TakeHandoff(key, raw []byte) (bool, error) {
	p := l.p
	var e cache.Entry
	if cache.DecodeEntry(raw, &e) != nil || e.Kind != cache.KindResponse || e.KeyDigest != cachekey.Digest(key) {
		return false, errBadHandoff
	}
	// Checked and stored in one step under the key's stripe: a fill that
	// lands meanwhile is never overwritten.
	return p.cache.Put(key, raw, &e, cache.PutOptions{IfAbsent: true}), nil
}
