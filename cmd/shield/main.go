// Command shield runs the caching shield: a public listener that proxies
// and caches, and an admin listener for metrics and health.
//
//	shield -config shield.yaml        run
//	shield -check-config shield.yaml  validate and exit (0 = valid)
//
// Signals: SIGTERM/SIGINT drain in-flight requests (bounded by
// server.drain_timeout), save the cache when cache.path is set, and exit
// 0; SIGHUP reloads the configuration file (a bad file is rejected and
// the running configuration stays).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/proxy"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("shield", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "configuration file (YAML)")
	checkPath := fs.String("check-config", "", "validate this configuration file and exit")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *showVersion {
		fmt.Println("shield", buildVersion())
		return 0
	}
	if *checkPath != "" {
		if _, err := config.Load(*checkPath); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "%s: ok\n", *checkPath)
		return 0
	}
	if *cfgPath == "" {
		fmt.Fprintln(os.Stderr, "shield: -config FILE is required (or -check-config FILE)")
		fs.Usage()
		return 2
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	logger := newLogger(cfg.Log)
	if err := serve(*cfgPath, cfg, logger); err != nil {
		logger.Error("shield stopped", "err", err)
		return 1
	}
	return 0
}

// version is set at build time: -ldflags "-X main.version=v1.2.3".
var version = ""

// buildVersion is the linked version, else the module version and VCS
// revision from the build info, else "dev".
func buildVersion() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	v := bi.Main.Version
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += " " + s.Value[:12]
		}
	}
	if v == "" || v == "(devel)" {
		return "dev"
	}
	return v + " " + bi.GoVersion
}

func newLogger(c config.Log) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Level))
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}

// serve runs the listeners until a termination signal, then drains.
func serve(path string, cfg *config.Config, logger *slog.Logger) error {
	p, err := proxy.New(cfg, logger)
	if err != nil {
		return err
	}
	p.SetReloader(func() error { return reloadFile(path, p, logger) })
	pub := &fasthttp.Server{
		Handler:      p.Handler(),
		ReadTimeout:  cfg.Server.ReadTimeout,
		WriteTimeout: cfg.Server.WriteTimeout,
		IdleTimeout:  cfg.Server.IdleTimeout,
		// ReadBufferSize bounds the request line and headers.
		ReadBufferSize:     int(cfg.Server.MaxHeaderSize),
		MaxRequestBodySize: int(cfg.Server.MaxBodySize),
		// Server comes from the origin or the cached entry. Date is
		// fasthttp's (the time of sending, cached per second): fasthttp
		// manages Date itself and ignores a Date set by the handler, so
		// a cached answer carries the current Date and its Age.
		NoDefaultServerHeader:        true,
		NoDefaultContentType:         true,
		DisablePreParseMultipartForm: true,
		CloseOnShutdown:              true,
		// ReduceMemoryUsage stays off on purpose: with it the server
		// returns each response's body buffer to fasthttp's pool, which
		// drops buffers whose capacity outgrew their length — exactly
		// what the hit path hands back (entry = body + metadata) — so
		// every hit would allocate (proxy BenchmarkHitPooledBody).
		ReduceMemoryUsage: false,
		Logger:            slogPrinter{logger},
		ErrorHandler:      requestError,
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	errc := make(chan error, 2)
	go func() { errc <- pub.Serve(ln) }()

	var admin *fasthttp.Server
	if cfg.Admin.Listen != "off" {
		admin = &fasthttp.Server{Handler: p.AdminHandler(), Name: "shield-admin", ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second}
		aln, err := net.Listen("tcp", cfg.Admin.Listen)
		if err != nil {
			_ = pub.Shutdown()
			return fmt.Errorf("listen admin %s: %w", cfg.Admin.Listen, err)
		}
		go func() { errc <- admin.Serve(aln) }()
	}
	var cl *clusterNode
	if cfg.Cluster != nil {
		if cl, err = startCluster(cfg, p, logger, errc); err != nil {
			_ = pub.Shutdown()
			if admin != nil {
				_ = admin.Shutdown()
			}
			return err
		}
	}
	p.SetReady(true)
	logger.Info("shield serving", "listen", cfg.Listen, "admin", cfg.Admin.Listen)

	sigc := make(chan os.Signal, 4)
	signal.Notify(sigc, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	for {
		select {
		case err := <-errc:
			return fmt.Errorf("listener: %w", err)
		case sig := <-sigc:
			if sig == syscall.SIGHUP {
				_ = p.Reload()
				continue
			}
			logger.Info("draining", "signal", sig.String(), "timeout", cfg.Server.DrainTimeout.String())
			p.SetReady(false)
			if cl != nil {
				// Leave the peer set first, so other nodes stop routing
				// keys here, then keep serving through the overlap.
				cl.leave(cfg, p, logger)
			}
			ctx, cancel := context.WithTimeout(context.Background(), cfg.Server.DrainTimeout)
			err := pub.ShutdownWithContext(ctx)
			cancel()
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				logger.Warn("drain", "err", err)
			}
			if cl != nil {
				cl.stop()
			}
			if admin != nil {
				_ = admin.Shutdown()
			}
			if err := p.Close(); err != nil {
				logger.Error("saving cache", "err", err)
			}
			logger.Info("stopped")
			return nil
		}
	}
}

// reloadFile validates the file and swaps it in; a bad file changes
// nothing. Listener addresses, cache size/path and the cluster block need
// a restart.
func reloadFile(path string, p *proxy.Proxy, logger *slog.Logger) error {
	cfg, err := config.Load(path)
	if err == nil {
		err = p.Apply(cfg)
	}
	if err != nil {
		logger.Error("reload rejected, keeping the running configuration", "err", err)
		return err
	}
	logger.Info("configuration reloaded", "path", path)
	return nil
}

// requestError answers requests fasthttp could not parse: 413 for a body
// over server.max_body_size, 431 for headers over max_header_size, 400
// otherwise — never reaching the origin.
func requestError(ctx *fasthttp.RequestCtx, err error) {
	status, msg := fasthttp.StatusBadRequest, "bad request\n"
	var small *fasthttp.ErrSmallBuffer
	var netErr net.Error
	switch {
	case errors.As(err, &netErr) && netErr.Timeout():
		// A client that sent no (complete) request within read_timeout:
		// fasthttp must answer something; 408 is the honest answer
		// (RFC 9110 §15.5.9), not 400.
		status, msg = fasthttp.StatusRequestTimeout, "request timeout\n"
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		status, msg = fasthttp.StatusRequestEntityTooLarge, "request body too large\n"
	case errors.As(err, &small):
		status, msg = fasthttp.StatusRequestHeaderFieldsTooLarge, "request header too large\n"
	}
	ctx.Response.Reset()
	ctx.SetStatusCode(status)
	ctx.SetContentType("text/plain; charset=utf-8")
	ctx.Response.Header.Set("Cache-Status", "shield; fwd=bypass; detail=bad-request")
	ctx.Response.Header.Set("Cache-Control", "no-store")
	ctx.SetConnectionClose()
	ctx.SetBodyString(msg)
}

// slogPrinter adapts fasthttp's Logger to slog. fasthttp's messages about
// malformed requests quote the raw request (cookies, credentials), so
// they go to debug level, truncated.
type slogPrinter struct{ l *slog.Logger }

func (s slogPrinter) Printf(format string, args ...any) {
	if !s.l.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	msg := fmt.Sprintf(format, args...)
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	s.l.Debug(msg, "component", "http")
}
