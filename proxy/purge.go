package proxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/cachekey"
	"github.com/shield-proxy/shield/proxy/cache"
)

// Purge.
//
//   - By URL and by tag (surrogate key): an entry in the invalidation
//     table (proxy/cache/inval.go) makes every entry of that URL — all key_headers
//     and Vary variants — or carrying that tag, fetched before the purge,
//     a miss; a soft purge makes them stale from the purge instant (they
//     can still be served inside their stale-while-revalidate and
//     stale-if-error windows, measured from the purge, and the next
//     request refreshes them). O(1) per purge, whatever the cache holds.
//     The URL's primary entry is also deleted, to free it at once.
//   - By namespace: every key carries a namespace version (route version
//     in the high 16 bits, tenant version in the low 16 for tenant-scoped
//     routes). Bumping a version makes every older key unreachable at
//     once, O(1); fastcache evicts the orphans in time. A version wraps
//     after 65536 purges of one route or tenant: the purge that wraps it
//     also raises the invalidation table's global watermark, so no entry
//     stored under the version before the wrap (still in fastcache, now
//     reachable again) can be served — one cold cache every 65536
//     namespace purges instead of a purge undone.
//
// Both live in memory and, when cache.path is set, in sidecar files
// rewritten after every purge and saved with the snapshot, so a restart
// does not resurrect purged entries.

// errPurge is a purge request that cannot be carried out (4xx).
var errPurge = errors.New("proxy: bad purge request")

// Purge applies one purge on this node. args are the admin query
// parameters: url (absolute, with soft=1 for a soft purge and tenant= for
// tenant-scoped routes), or tag (with soft=1), or route, or tenant.
func (p *Proxy) Purge(args url.Values) (PurgeResult, error) {
	res, err := p.purge(args)
	if err == nil {
		if serr := p.cache.SaveInvalidations(); serr != nil {
			p.logger.Error("purge applied but not persisted", "err", serr)
		}
	}
	return res, err
}

func (p *Proxy) purge(args url.Values) (PurgeResult, error) {
	soft := args.Get("soft") == "1" || args.Get("soft") == "true"
	switch {
	case args.Get("url") != "":
		return p.purgeURL(args.Get("url"), args.Get("tenant"), soft)
	case args.Get("all") == "1":
		// Everything fetched before now: what a peer gets when its purge
		// queue overflowed.
		p.cache.Invalidations().InvalidateAll()
		return PurgeResult{Kind: "all"}, nil
	case args.Get("tag") != "":
		tag := args.Get("tag")
		if len(tag) > 1024 {
			return PurgeResult{}, fmt.Errorf("%w: tag longer than 1024 bytes", errPurge)
		}
		p.cache.Invalidations().InvalidateTag([]byte(tag), soft)
		kind := "tag"
		if soft {
			kind = "soft-tag"
		}
		return PurgeResult{Kind: kind, Target: tag}, nil
	case args.Get("route") != "":
		name := args.Get("route")
		if !p.hasRoute(name) {
			return PurgeResult{}, fmt.Errorf("%w: unknown route %q", errPurge, name)
		}
		v := p.cache.Namespaces().BumpRoute(name)
		p.namespaceWrapped(v)
		return PurgeResult{Kind: "route", Target: name, Namespace: v}, nil
	case args.Get("tenant") != "":
		name := args.Get("tenant")
		v := p.cache.Namespaces().BumpTenant(name)
		p.namespaceWrapped(v)
		return PurgeResult{Kind: "tenant", Target: name, Namespace: v}, nil
	}
	return PurgeResult{}, fmt.Errorf("%w: give url=, tag=, route= or tenant=", errPurge)
}

// namespaceWrapped makes every entry fetched so far dead when a namespace
// version v has just wrapped to 0: keys of version 0 from before the wrap
// may still be in the cache and would otherwise be served again.
func (p *Proxy) namespaceWrapped(v uint16) {
	if v == 0 {
		p.cache.Invalidations().InvalidateAll()
	}
}

func (p *Proxy) hasRoute(name string) bool {
	for _, r := range p.rt.Load().routes {
		if r.name == name {
			return true
		}
	}
	return false
}

// purgeURL deletes (or soft-purges) the primary entry of an absolute URL.
func (p *Proxy) purgeURL(raw, tenant string, soft bool) (PurgeResult, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return PurgeResult{}, fmt.Errorf("%w: url must be absolute http(s), got %q", errPurge, raw)
	}
	// The normal percent-encoding, as sanitize gives every request
	// (sanitize.go): "/%61pi/x" and "/api/x" are one resource, and a
	// purge of either reaches the entry both are served from.
	path := normalTarget(u.EscapedPath())
	if path == "" {
		path = "/"
	}
	rt := p.rt.Load()
	r := rt.table.Match([]byte(u.Host), []byte(path))
	if r == nil {
		return PurgeResult{}, fmt.Errorf("%w: no route for %q", errPurge, raw)
	}
	rte := rt.routes[r.Index]
	tid := []byte(tenant)
	if rte.tenant != nil {
		tid = rte.tenant
	}
	parts := cachekey.Parts{
		Namespace: p.cache.Namespaces().Version(rte.name, rte.scoped, tid),
		Route:     rte.name,
		Scheme:    []byte(u.Scheme),
		Host:      []byte(u.Host),
		Path:      []byte(path),
		Query:     []byte(normalTarget(u.RawQuery)),
	}
	if rte.scoped {
		parts.Tenant = tid
	}
	urlPart := cachekey.AppendURL(nil, rte.rules, &parts)
	p.cache.Invalidations().InvalidateURL(cachekey.Digest(urlPart), soft)
	key := rte.rules.AppendHeaders(urlPart, nil)
	res := PurgeResult{Kind: "url", Target: raw}
	b := p.cache.Get(nil, key)
	var e cache.Entry
	res.Found = len(b) > 0 && cache.DecodeEntry(b, &e) == nil
	if soft {
		res.Kind = "soft-url"
		return res, nil
	}
	p.cache.Del(key)
	p.delSiblings(rte, key) // dead already (same URL digest), freed at once too
	return res, nil
}

// adminPurge serves POST /purge on the admin listener; in a cluster the
// purge is applied on every peer too.
func (p *Proxy) adminPurge(ctx *fasthttp.RequestCtx) {
	if !ctx.IsPost() {
		ctx.Error("use POST\n", fasthttp.StatusMethodNotAllowed)
		return
	}
	args, _ := url.ParseQuery(string(ctx.QueryArgs().QueryString()))
	rec := newPurge(args)
	res, _, err := p.applyPurge(rec)
	if err != nil {
		status := fasthttp.StatusInternalServerError
		if errors.Is(err, errPurge) {
			status = fasthttp.StatusBadRequest
		}
		writeJSON(ctx, status, map[string]string{"error": err.Error()})
		return
	}
	p.g.purges.Inc()
	p.info.events.add("purge", res.Kind+" "+res.Target)
	d := p.deliver(rec, true)
	if len(d.Pending) > 0 {
		p.logger.Info("purge answered before every peer had it: delivering in the background", "purge", res.Kind+" "+res.Target, "pending", d.Pending)
	}
	// Durable here (applied and in the purge log) and on the peers of
	// d.Peers with status 200; the peers of pending get it in the
	// background (deliver).
	writeJSON(ctx, fasthttp.StatusOK, purgeAnswer{Purge: res, Peers: d.Peers, Pending: d.Pending})
}

// purgeAnswer is POST /purge's answer: what the purge did here, each
// peer that answered in time with its status (200: it has the purge), and
// the peers that have not acknowledged it yet (they get it in the
// background; see deliver).
type purgeAnswer struct {
	Purge   PurgeResult    `json:"purge"`
	Peers   map[string]int `json:"peers"`
	Pending []string       `json:"pending"`
}

func writeJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	b, _ := json.Marshal(v)
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(append(b, '\n'))
}
