package cluster

import (
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/admission"
	"github.com/shield-proxy/shield/routing"
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
	// The exchange loop's own: a report's encoding, and each peer's
	// send in flight.
	body     []byte
	inFlight map[string]*atomic.Bool
}

// startUsage starts the exchange loop; it stops with the node's
// background context.
func (c *Node) startUsage() {
	if c.opts.UsageInterval <= 0 {
		return
	}
	set := c.env.Metrics
	u := &usageExchange{
		fleet:    admission.NewFleet(c.m.Self().ID, c.opts.UsageInterval),
		interval: c.opts.UsageInterval,
		sent:     set.NewCounter(`shield_usage_reports_total{outcome="sent"}`),
		failed:   set.NewCounter(`shield_usage_reports_total{outcome="failed"}`),
		received: set.NewCounter(`shield_usage_reports_total{outcome="received"}`),
		bad:      set.NewCounter(`shield_usage_reports_total{outcome="bad"}`),
		inFlight: map[string]*atomic.Bool{},
	}
	silent := new(atomic.Int64)
	set.NewGauge(`shield_usage_silent_peers`, func() float64 { return float64(silent.Load()) })
	c.usage = u
	fm := newFailMode(set, c.logger, u.fleet, u.interval, time.Now())
	c.env.WG.Add(1)
	go func() {
		defer c.env.WG.Done()
		tick := time.NewTicker(u.interval)
		defer tick.Stop()
		for {
			select {
			case <-c.env.Ctx.Done():
				return
			case <-tick.C:
			}
			ts := c.local.Tenants()
			if ts == nil {
				continue
			}
			now := time.Now()
			rep := u.fleet.Observe(ts, now)
			v := c.m.View()
			peers := v.Current.Peers()
			members := make([]string, 0, len(peers))
			for _, peer := range peers {
				members = append(members, peer.ID)
			}
			if rep.Window > 0 {
				u.body = admission.AppendReport(u.body[:0], rep)
				c.sendReports(v, u.body, now)
			}
			n := u.fleet.Apply(ts, members, now)
			silent.Store(int64(n))
			fm.note(n, members, now)
		}
	}()
}

// sendReports sends one report to every other peer of v whose previous
// report has finished, in the background.
func (c *Node) sendReports(v *routing.View, body []byte, now time.Time) {
	u := c.usage
	self := c.m.Self().ID
	gen := v.Current.Generation()
	tab := c.peers.Load()
	for _, peer := range v.Current.Peers() {
		pc := tab.byID[peer.ID]
		if peer.ID == self || pc == nil {
			continue
		}
		busy := u.inFlight[peer.ID]
		if busy == nil {
			busy = new(atomic.Bool)
			u.inFlight[peer.ID] = busy
		}
		if !busy.CompareAndSwap(false, true) {
			continue // the previous report to it has not finished
		}
		b := append([]byte(nil), body...)
		addr := peer.Addr
		c.env.WG.Add(1)
		go func() {
			defer c.env.WG.Done()
			defer busy.Store(false)
			if c.sendUsage(pc, addr, gen, b, now.Add(u.interval)) {
				u.sent.Inc()
			} else {
				u.failed.Inc()
			}
		}()
	}
}

// sendUsage POSTs one report; it reports whether the peer took it.
func (c *Node) sendUsage(pc *Peer, addr string, gen uint64, body []byte, deadline time.Time) bool {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI(usagePath)
	c.setPeerHead(&req.Header, addr, gen)
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
func (c *Node) takeUsage(ctx *fasthttp.RequestCtx) {
	u := c.usage
	ts := c.local.Tenants()
	if u == nil || ts == nil {
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
	u.fleet.Receive(rep, ts, time.Now())
	u.received.Inc()
	ctx.SetStatusCode(fasthttp.StatusNoContent)
}
