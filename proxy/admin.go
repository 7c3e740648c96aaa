package proxy

import (
	"bytes"
	"errors"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"
)

// AdminHandler serves the admin listener: / (the status page, HTML) and
// /status.json (the same data), /metrics (Prometheus text
// format: shield's metrics plus Go runtime and process metrics),
// /healthz (the process is up), /readyz (it should get traffic: false
// before the listeners are up and while draining), POST /reload (re-read
// the configuration file; a bad one is rejected and the running one
// stays) and POST /purge (see Purge). Keep this listener off the public
// network: it has no authentication.
func (p *Proxy) AdminHandler() fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		switch string(ctx.Path()) {
		case "/":
			p.serveStatus(ctx, false)
		case "/status.json":
			p.serveStatus(ctx, true)
		case "/metrics":
			ctx.SetContentType("text/plain; version=0.0.4; charset=utf-8")
			var buf bytes.Buffer
			p.g.set.WritePrometheus(&buf)
			metrics.WriteProcessMetrics(&buf)
			writeFamilies(ctx, buf.Bytes())
		case "/purge":
			p.adminPurge(ctx)
		case "/reload":
			if !ctx.IsPost() {
				ctx.Error("use POST\n", fasthttp.StatusMethodNotAllowed)
				return
			}
			if err := p.Reload(); err != nil {
				writeJSON(ctx, fasthttp.StatusBadRequest, map[string]string{"error": err.Error()})
				return
			}
			writeJSON(ctx, fasthttp.StatusOK, map[string]string{"status": "reloaded"})
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

// Reload runs the reloader set by SetReloader and counts the outcome.
func (p *Proxy) Reload() error {
	f := p.reload.Load()
	if f == nil {
		return errors.New("proxy: reload not available")
	}
	if err := (*f)(); err != nil {
		p.g.reloadFails.Inc()
		p.events.add("reload-failed", err.Error())
		return err
	}
	p.g.reloads.Inc()
	p.events.add("reload", "configuration applied")
	return nil
}
