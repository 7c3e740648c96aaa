// Command profile serves shield's proxy exactly as cmd/shield's public
// listener does (same fasthttp.Server options, same config loading) plus
// net/http/pprof on a second address, so the hit path can be CPU-profiled
// under real socket load (wrk) without a profiling flag in the product.
//
//	profile -config shield.yaml -pprof 127.0.0.1:16060
//
// The admin listener serves /metrics (the bench reads counters from it);
// there are no signals beyond SIGTERM/SIGINT. A
// `cluster:` block with static membership is honoured (peer listener
// included) so the forwarded-hit path can be profiled on an edge node;
// Consul membership is not. Keep its server options and cluster wiring in
// step with cmd/shield (main.go, cluster.go), or the profile stops
// describing shield.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	_ "net/http/pprof" // the profiling endpoints, on -pprof only
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/heapfloor"
	"github.com/shield-proxy/shield/procs"
	"github.com/shield-proxy/shield/proxy"
	"github.com/shield-proxy/shield/routing"
)

func main() {
	cfgPath := flag.String("config", "", "shield configuration file")
	pprofAddr := flag.String("pprof", "127.0.0.1:16060", "net/http/pprof listener")
	flag.Parse()
	if err := run(*cfgPath, *pprofAddr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(cfgPath, pprofAddr string) error {
	cfg, err := config.Load(cfgPath)
	if err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	defer heapfloor.Start(uint64(cfg.Server.HeapFloor)).Stop() // as cmd/shield paces the collector
	p, err := proxy.New(cfg, logger)
	if err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	if cfg.Cluster != nil {
		if err := joinStatic(cfg, p, logger); err != nil {
			return err
		}
	}
	p.SetReady(true)
	if cfg.Server.AdaptiveProcs {
		defer procs.Start(p.Served, 0, logger).Stop() // as cmd/shield sizes GOMAXPROCS
	}
	srv := p.NewPublic(cfg.Server, logger) // HTTP/2 too, with server.h2c
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("profile: listen: %w", err)
	}
	pln, err := net.Listen("tcp", pprofAddr)
	if err != nil {
		return fmt.Errorf("profile: listen pprof: %w", err)
	}
	go func() { _ = http.Serve(pln, nil) }()
	if cfg.Admin.Listen != "off" {
		aln, err := net.Listen("tcp", cfg.Admin.Listen)
		if err != nil {
			return fmt.Errorf("profile: listen admin: %w", err)
		}
		go func() { _ = fasthttp.Serve(aln, p.AdminHandler()) }()
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	go func() {
		<-sig
		_ = srv.Shutdown()
	}()
	if err := srv.Serve(ln, nil); err != nil {
		return fmt.Errorf("profile: serve: %w", err)
	}
	return p.Close()
}

// joinStatic joins p to a static cluster and serves its peer listener, as
// cmd/shield's startCluster does for static membership.
func joinStatic(cfg *config.Config, p *proxy.Proxy, logger *slog.Logger) error {
	cc := cfg.Cluster
	if cc.Membership != "static" {
		return fmt.Errorf("profile: only static membership is supported, not %q", cc.Membership)
	}
	m := routing.NewMembership(routing.Peer{ID: cc.NodeID, Addr: cc.Advertise, Weight: cc.Weight}, cc.Overlap, logger)
	src, err := routing.NewStatic(proxy.StaticPeers(cc), m, time.Now())
	if err != nil {
		return fmt.Errorf("profile: cluster: %w", err)
	}
	p.SetCluster(m, src, proxy.ClusterOptionsFor(cfg))
	ln, err := net.Listen("tcp", cc.Listen)
	if err != nil {
		return fmt.Errorf("profile: listen peer: %w", err)
	}
	peer := p.PeerServer(cfg.Server, logger)
	go func() { _ = peer.Serve(p.PeerListener(ln)) }()
	go func() {
		if err := src.Run(context.Background()); err != nil {
			logger.Error("membership stopped", "err", err)
		}
	}()
	return nil
}
