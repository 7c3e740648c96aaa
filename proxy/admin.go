package proxy

import (
	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"
)

// AdminHandler serves the admin listener: /metrics (Prometheus text
// format: shield's metrics plus Go runtime and process metrics),
// /healthz (the process is up) and /readyz (it should get traffic: false
// before the listeners are up and while draining). Keep this listener
// off the public network.
func (p *Proxy) AdminHandler() fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		switch string(ctx.Path()) {
		case "/metrics":
			ctx.SetContentType("text/plain; version=0.0.4; charset=utf-8")
			p.g.set.WritePrometheus(ctx)
			metrics.WriteProcessMetrics(ctx)
		case "/healthz":
			ctx.SetBodyString("ok\n")
		case "/readyz":
			if !p.ready.Load() {
				ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
				ctx.SetBodyString("not ready\n")
				return
			}
			ctx.SetBodyString("ready\n")
		default:
			ctx.SetStatusCode(fasthttp.StatusNotFound)
			ctx.SetBodyString("not found\n")
		}
	}
}
