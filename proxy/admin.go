package proxy

import (
	"bytes"
	"errors"
	"strconv"
	"strings"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/statuspage"
)

// AdminHandler serves the admin listener: / (the status page, HTML) and
// /status.json (the same data), /metrics (Prometheus text
// format: shield's metrics plus Go runtime and process metrics),
// /healthz (the process is up), /readyz (it should get traffic: false
// before the listeners are up and while draining), POST /reload (re-read
// the configuration file; a bad one is rejected and the running one
// stays) and POST /purge (see Purge). Keep this listener off the public
// network: it has no authentication.
//
// It defends itself against the operator's own browser: every answer
// carries a Content-Security-Policy that allows nothing but this
// listener's own resources and no framing, and nosniff; a state-changing
// request (any method but GET and HEAD) that the browser marks as coming
// from another site is refused (crossSite). Command-line clients send
// neither Origin nor Sec-Fetch-Site and are served as before.
func (p *Proxy) AdminHandler() fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		// After the handler: ctx.Error resets the response head.
		defer adminHeaders(&ctx.Response.Header)
		if !ctx.IsGet() && !ctx.IsHead() {
			if why := crossSite(&ctx.Request.Header, ctx.IsTLS()); why != "" {
				p.g.adminCrossSite.Inc()
				writeJSON(ctx, fasthttp.StatusForbidden, map[string]string{
					"error": "cross-site request refused: " + why + "; the admin listener takes state-changing requests only from its own pages or from clients that send no Origin (curl)",
				})
				return
			}
		}
		switch string(ctx.Path()) {
		case "/":
			p.serveStatus(ctx, false)
		case "/status.css":
			ctx.SetContentType("text/css; charset=utf-8")
			ctx.Response.Header.Set("Cache-Control", "no-cache")
			ctx.SetBody(statuspage.CSS)
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

// adminCSP lets the status page load its own stylesheet and links, and
// nothing else: no script, no inline style, no other site's resources,
// no framing (clickjacking the purge or reload of an operator).
const adminCSP = "default-src 'self'; frame-ancestors 'none'"

// adminHeaders sets the headers every admin answer carries.
func adminHeaders(h *fasthttp.ResponseHeader) {
	h.Set("Content-Security-Policy", adminCSP)
	h.Set("X-Content-Type-Options", "nosniff")
}

// crossSite says why a state-changing admin request comes from another
// site in a browser ("" when it does not): Sec-Fetch-Site cross-site or
// same-site (another port or subdomain is another site's page to this
// listener), or an Origin other than this listener's own (the scheme and
// the Host the browser addressed; "null" included: sandboxed frames,
// file: pages, redirects). A request with neither field is not from a
// browser page (curl, scripts, Prometheus) and passes; so does a
// browser's same-origin request and one the user started (none).
func crossSite(h *fasthttp.RequestHeader, tls bool) string {
	switch site := string(h.Peek("Sec-Fetch-Site")); site {
	case "", "same-origin", "none":
	default:
		return "Sec-Fetch-Site: " + site
	}
	origin := h.Peek("Origin")
	if len(origin) == 0 {
		return ""
	}
	scheme := "http://"
	if tls {
		scheme = "https://"
	}
	if own := scheme + string(h.Host()); !strings.EqualFold(string(origin), own) {
		return "Origin " + strconv.Quote(string(origin)) + " is not " + own
	}
	return ""
}

// Reload runs the reloader set by SetReloader and counts the outcome.
func (p *Proxy) Reload() error {
	f := p.reload.Load()
	if f == nil {
		return errors.New("proxy: reload not available")
	}
	if err := (*f)(); err != nil {
		p.g.reloadFails.Inc()
		p.info.events.add("reload-failed", err.Error())
		return err
	}
	p.g.reloads.Inc()
	p.info.events.add("reload", "configuration applied")
	return nil
}
