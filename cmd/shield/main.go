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
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/heapfloor"
	"github.com/shield-proxy/shield/procs"
	"github.com/shield-proxy/shield/proxy"
	"github.com/shield-proxy/shield/proxy/httpx"
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
	floor := heapfloor.Start(uint64(cfg.Server.HeapFloor))
	defer floor.Stop()
	if cfg.Server.HeapFloor > 0 && !floor.Running() {
		logger.Info("server.heap_floor ignored: GOGC is set", "GOGC", os.Getenv("GOGC"))
	}
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
	var certs *httpx.CertReloader
	if t := cfg.Server.TLS; t != nil {
		if certs, err = httpx.NewCertReloader(t.CertFile, t.KeyFile); err != nil {
			return err
		}
	}
	// running is the configuration in force: shutdown drains with the
	// reloaded server.drain_timeout, not the one the process started with.
	var running atomic.Pointer[config.Config]
	running.Store(cfg)
	p.SetReloader(func() error { return reloadFile(path, p, certs, &running, logger) })
	node, _ := os.Hostname()
	if cfg.Cluster != nil {
		node = cfg.Cluster.NodeID
	}
	p.SetNodeInfo(node, buildVersion())
	// The processor governor: stopped (every processor back) before a
	// drain, so that draining and saving the snapshot use them all.
	var gov *procs.Governor
	if cfg.Server.AdaptiveProcs {
		gov = procs.Start(p.Served, 0, logger)
		defer gov.Stop()
		if gov.Running() {
			p.SetGovernor(gov.Stats)
		} else {
			logger.Info("server.adaptive_procs ignored", "GOMAXPROCS", os.Getenv("GOMAXPROCS"), "cpus", gov.Ceiling())
		}
	}
	pub := p.NewPublic(cfg.Server, logger)
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	var tc *tls.Config
	if certs != nil {
		// The certificate is read per handshake from certs, which a
		// reload replaces: established connections are untouched.
		tc = httpx.PublicTLS(cfg.Server.TLS, certs)
	}
	errc := make(chan error, 2)
	go func() { errc <- pub.Serve(ln, tc) }()

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
			if gov != nil {
				gov.Stop()
			}
			drain := running.Load().Server.DrainTimeout
			logger.Info("draining", "signal", sig.String(), "timeout", drain.String())
			p.SetReady(false)
			if cl != nil {
				// Leave the peer set first, so other nodes stop routing
				// keys here, then keep serving through the overlap.
				cl.leave(cfg, p, logger)
			}
			ctx, cancel := context.WithTimeout(context.Background(), drain)
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
// nothing. The public listener's certificate is re-read (server.tls), and
// so are the peers' certificate and CA pool (cluster.tls): turning TLS on
// or off needs a restart, as do listener addresses, cache size/path and
// the rest of the cluster block.
//
// All or nothing: the new certificates are read first but installed only
// once the configuration has been applied, so a rejected file leaves the
// old certificates too. running is set to the applied configuration.
func reloadFile(path string, p *proxy.Proxy, certs *httpx.CertReloader, running *atomic.Pointer[config.Config], logger *slog.Logger) error {
	cfg, err := config.Load(path)
	var cert *tls.Certificate
	if err == nil && certs != nil {
		if t := cfg.Server.TLS; t != nil {
			cert, err = httpx.LoadCertificate(t.CertFile, t.KeyFile)
		}
	}
	var installPeerTLS func()
	if err == nil && cfg.Cluster != nil {
		installPeerTLS, err = p.PreparePeerTLS(cfg.Cluster.TLS)
	}
	if err == nil {
		err = p.Apply(cfg)
	}
	if err != nil {
		logger.Error("reload rejected, keeping the running configuration", "err", err)
		return err
	}
	if cert != nil {
		certs.Set(cert)
	}
	if installPeerTLS != nil {
		installPeerTLS()
	}
	running.Store(cfg)
	logger.Info("configuration reloaded", "path", path)
	return nil
}
