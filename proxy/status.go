package proxy

import (
	"cmp"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/fastcache"
	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/admission"
	"github.com/shield-proxy/shield/originpool"
	"github.com/shield-proxy/shield/statuspage"
	"github.com/shield-proxy/shield/topk"
)

// topKeysExported is how many hot keys /metrics exports
// (shield_top_key_requests): a fixed bound on that family's series.
const topKeysExported = 10

// eventLog keeps the last few purges and reloads for the status page.
type eventLog struct {
	mu   sync.Mutex
	ring [32]statuspage.Event
	n    int // events ever recorded
}

func (l *eventLog) add(kind, detail string) {
	l.mu.Lock()
	l.ring[l.n%len(l.ring)] = statuspage.Event{Time: time.Now(), Kind: kind, Detail: detail}
	l.n++
	l.mu.Unlock()
}

// recent returns the events, newest first.
func (l *eventLog) recent() []statuspage.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]statuspage.Event, 0, min(l.n, len(l.ring)))
	for i := l.n - 1; i >= 0 && i >= l.n-len(l.ring); i-- {
		out = append(out, l.ring[i%len(l.ring)])
	}
	return out
}

// SetNodeInfo names this node on the status page (the cluster node ID,
// else the host name) and gives the build version.
func (p *Proxy) SetNodeInfo(node, version string) {
	p.mu.Lock()
	p.info.nodeName, p.info.version = node, version
	p.mu.Unlock()
}

// ServerHealth returns every origin's per-server health by origin name:
// a read-only snapshot for the admin status page.
func (p *Proxy) ServerHealth() map[string][]originpool.Status { return p.origins.Health() }

// Status gathers the status page's data at now.
func (p *Proxy) Status(now time.Time) *statuspage.Status {
	s := &statuspage.Status{Time: now, Uptime: now.Sub(p.info.started)}
	var st fastcache.Stats
	p.cache.Fastcache().UpdateStats(&st)
	s.Cache = statuspage.Cache{Entries: st.EntriesCount, Bytes: st.BytesSize, MaxBytes: st.MaxBytesSize,
		Lookups: st.GetCalls, Misses: st.Misses, Writes: st.SetCalls, Corrupt: st.Corruptions}
	if ds, ok := p.cache.DiskStats(); ok {
		s.Cache.Disk = &statuspage.DiskTier{Entries: ds.Objects, Bytes: ds.Bytes, MaxBytes: ds.MaxBytes,
			Hits: ds.Hits, Misses: ds.Misses, Writes: ds.Writes, Evictions: ds.Evictions, Errors: ds.Errors,
			Corrupt: ds.Corrupt, Degraded: ds.Degraded, DegradedTotal: ds.DegradedTotal, Dropped: ds.Dropped}
	}
	if c := p.cluster.Load(); c != nil {
		s.Cluster = c.Status()
	}
	rt := p.rt.Load()
	for _, r := range rt.routes {
		s.Routes = append(s.Routes, routeStatus(r))
	}
	s.Origins = p.origins.Status(now)
	p.mu.Lock()
	s.Node, s.Version = p.info.nodeName, p.info.version
	if p.kept.tenants != nil {
		s.Tenants = tenantStatus(p.kept.tenants.Stats())
	}
	p.mu.Unlock()
	s.Keys = statuspage.Keys{Window: topk.DefaultWindow.String(), Sample: topk.DefaultSample}
	for _, e := range p.top.Top(20, now) {
		s.Keys.Top = append(s.Keys.Top, statuspage.Key{Key: e.Key, Requests: e.Count, Hits: e.Hits, Error: e.Error, NearCopy: e.Flag})
	}
	s.Events = p.info.events.recent()
	if s.Node == "" && s.Cluster != nil {
		for _, peer := range s.Cluster.Peers {
			if peer.Self {
				s.Node = peer.ID
			}
		}
	}
	return s
}

func routeStatus(r *route) statuspage.Route {
	m := r.m
	rs := statuspage.Route{Name: r.name, Origin: r.origin.Name(), ByResult: map[string]uint64{}, Stale: map[string]uint64{}, Bypass: map[string]uint64{}}
	var hits, cacheable uint64
	for i := range numResults {
		n := m.requests.get(i)
		rs.ByResult[resultLabels[i]] = n
		rs.Requests += n
		switch result(i) {
		case resHit, resCollapsed, resRevalidated, resStale:
			hits += n
			cacheable += n
		case resMiss:
			cacheable += n
		case resBypass, resPass, resRejected, resError, resPeer:
			rs.Bypass[resultLabels[i]] = n
		}
	}
	rs.HitRatio = -1
	if cacheable > 0 {
		rs.HitRatio = float64(hits) / float64(cacheable)
	}
	for i, c := range m.stale {
		rs.Stale[staleLabels[i]] = c.Get()
	}
	rs.Priority, rs.Shed = r.prio.String(), make(map[string]uint64, len(shedReasons))
	for i, c := range r.shed {
		rs.Shed[shedReasons[i]] = c.Get()
	}
	return rs
}

func tenantStatus(stats []admission.TenantStats) *statuspage.Tenants {
	all := make([]statuspage.Tenant, 0, len(stats))
	for _, ts := range stats {
		t := statuspage.Tenant{Name: ts.Name, Admitted: ts.Admitted, InFlight: ts.InFlight, Rate: ts.Limits.Rate, ByReason: map[string]uint64{}}
		for r := admission.Reason(1); int(r) < admission.NumReasons; r++ {
			t.Rejected += ts.Rejected[r]
			t.ByReason[r.String()] = ts.Rejected[r]
		}
		all = append(all, t)
	}
	byReq := slices.Clone(all)
	slices.SortStableFunc(byReq, func(a, b statuspage.Tenant) int { return cmp.Compare(b.Admitted+b.Rejected, a.Admitted+a.Rejected) })
	byRej := all
	slices.SortStableFunc(byRej, func(a, b statuspage.Tenant) int { return cmp.Compare(b.Rejected, a.Rejected) })
	return &statuspage.Tenants{ByRequests: byReq[:min(20, len(byReq))], ByRejections: byRej[:min(20, len(byRej))]}
}

// serveStatus answers GET / and GET /status.json.
func (p *Proxy) serveStatus(ctx *fasthttp.RequestCtx, asJSON bool) {
	s := p.Status(time.Now())
	ctx.Response.Header.Set("Cache-Control", "no-store")
	if asJSON {
		ctx.SetContentType("application/json")
		_ = statuspage.WriteJSON(ctx, s)
		return
	}
	ctx.SetContentType("text/html; charset=utf-8")
	if err := statuspage.WriteHTML(ctx, s); err != nil {
		p.logger.Error("status page", "err", err)
	}
}

// writeTopKeyMetrics exports the hottest keys, top topKeysExported only.
func (p *Proxy) writeTopKeyMetrics(w io.Writer) {
	for _, e := range p.top.Top(topKeysExported, time.Now()) {
		metrics.WriteGaugeUint64(w, `shield_top_key_requests{key="`+labelValue(e.Key)+`"}`, e.Count)
	}
}

// labelValue escapes a Prometheus label value.
func labelValue(s string) string {
	if !strings.ContainsAny(s, "\\\"\n") {
		return s
	}
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}
