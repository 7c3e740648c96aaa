package proxy

import (
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/admission"
)

// Usage exchange (issue 14): every UsageInterval each node POSTs its
// per-tenant-class usage over the last interval (demanded and admitted
// counts, active classes only) to every peer's listener, authenticated
// like every peer request; the receiver records it and each node sets its
// own share of every class's rate and burst (admission.Fleet). The hit
// path is untouched: the counters it reads are the ones Admit already
// keeps. A peer that does not answer within one interval is simply not
// sent to again until its previous send has finished.

// usagePath is the peer-listener path usage reports are POSTed to.
const usagePath = "/__shield/usage"

type usageExchange struct {
	fleet    *admission.Fleet
	interval time.Duration
	sent     *metrics.Counter
	failed   *metrics.Counter
	received *metrics.Counter
	bad      *metrics.Counter
}

// startUsage starts the exchange loop; it stops with the proxy's
// background context.
func (p *Proxy) startUsage(c *cluster) {
	if c.opts.UsageInterval <= 0 {
		return
	}
	u := &usageExchange{
		fleet:    admission.NewFleet(c.m.Self().ID, c.opts.UsageInterval),
		interval: c.opts.UsageInterval,
		sent:     p.g.set.NewCounter(`shield_usage_reports_total{outcome="sent"}`),
		failed:   p.g.set.NewCounter(`shield_usage_reports_total{outcome="failed"}`),
		received: p.g.set.NewCounter(`shield_usage_reports_total{outcome="received"}`),
		bad:      p.g.set.NewCounter(`shield_usage_reports_total{outcome="bad"}`),
	}
	silent := new(atomic.Int64)
	p.g.set.NewGauge(`shield_usage_silent_peers`, func() float64 { return float64(silent.Load()) })
	c.usage = u
	fm := newFailMode(p.g.set, p.logger, u.fleet, u.interval, time.Now())
	inFlight := map[string]*atomic.Bool{}
	p.bgWG.Add(1)
	go func() {
		defer p.bgWG.Done()
		tick := time.NewTicker(u.interval)
		defer tick.Stop()
		var body []byte
		for {
			select {
			case <-p.bgCtx.Done():
				return
			case <-tick.C:
			}
			rt := p.rt.Load()
			if rt == nil || rt.tenants == nil {
				continue
			}
			now := time.Now()
			rep := u.fleet.Observe(rt.tenants, now)
			v := c.m.View()
			self := c.m.Self().ID
			peers := v.Current.Peers()
			members := make([]string, 0, len(peers))
			for _, peer := range peers {
				members = append(members, peer.ID)
			}
			if rep.Window > 0 {
				body = admission.AppendReport(body[:0], rep)
				gen := v.Current.Generation()
				tab := c.peers.Load()
				for _, peer := range peers {
					pc := tab.byID[peer.ID]
					if peer.ID == self || pc == nil {
						continue
					}
					busy := inFlight[peer.ID]
					if busy == nil {
						busy = new(atomic.Bool)
						inFlight[peer.ID] = busy
					}
					if !busy.CompareAndSwap(false, true) {
						continue // the previous report to it has not finished
					}
					b := append([]byte(nil), body...)
					addr := peer.Addr
					p.bgWG.Add(1)
					go func() {
						defer p.bgWG.Done()
						defer busy.Store(false)
						if sendUsage(c, pc, addr, gen, b, now.Add(u.interval)) {
							u.sent.Inc()
						} else {
							u.failed.Inc()
						}
					}()
				}
			}
			n := u.fleet.Apply(rt.tenants, members, now)
			silent.Store(int64(n))
			fm.note(n, members, now)
		}
	}()
}

// sendUsage POSTs one report; it reports whether the peer took it.
func sendUsage(c *cluster, pc *peerClient, addr string, gen uint64, body []byte, deadline time.Time) bool {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI(usagePath)
	setPeerHead(&req.Header, c, addr, gen)
	req.Header.SetContentType("text/plain")
	req.SetBody(body)
	if err := pc.hc.DoDeadline(req, resp, deadline); err != nil {
		return false
	}
	return resp.StatusCode() == fasthttp.StatusNoContent
}

// takeUsage records a peer's usage report. Called by PeerHandler after
// the secret and address checks and before the generation check: usage
// does not depend on key ownership, so a membership change in flight
// must not drop it.
func (p *Proxy) takeUsage(ctx *fasthttp.RequestCtx, c *cluster) {
	u := c.usage
	rt := p.rt.Load()
	if u == nil || rt == nil || rt.tenants == nil {
		ctx.SetStatusCode(fasthttp.StatusNotFound)
		return
	}
	if !ctx.IsPost() {
		ctx.SetStatusCode(fasthttp.StatusMethodNotAllowed)
		return
	}
	rep, err := admission.ParseReport(ctx.PostBody())
	if err != nil {
		u.bad.Inc()
		ctx.SetStatusCode(fasthttp.StatusBadRequest)
		ctx.SetBodyString(err.Error() + "\n")
		return
	}
	u.fleet.Receive(rep, rt.tenants, time.Now())
	u.received.Inc()
	ctx.SetStatusCode(fasthttp.StatusNoContent)
}
