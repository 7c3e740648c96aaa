// Command profile serves shield's proxy exactly as cmd/shield's public
// listener does (same fasthttp.Server options, same config loading) plus
// net/http/pprof on a second address, so the hit path can be CPU-profiled
// under real socket load (wrk) without a profiling flag in the product.
//
//	profile -config shield.yaml -pprof 127.0.0.1:16060
//
// It has no admin listener, no cluster, no signals beyond SIGTERM/SIGINT:
// a single node's request path is what it is for. Keep its server options
// in step with cmd/shield/main.go, or the profile stops describing shield.
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	_ "net/http/pprof" // the profiling endpoints, on -pprof only
	"os"
	"os/signal"
	"syscall"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/proxy"
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
	p, err := proxy.New(cfg, logger)
	if err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	p.SetReady(true)
	srv := &fasthttp.Server{
		Handler:                      p.Handler(),
		ReadTimeout:                  cfg.Server.ReadTimeout,
		WriteTimeout:                 cfg.Server.WriteTimeout,
		IdleTimeout:                  cfg.Server.IdleTimeout,
		ReadBufferSize:               int(cfg.Server.MaxHeaderSize),
		MaxRequestBodySize:           int(cfg.Server.MaxBodySize),
		NoDefaultServerHeader:        true,
		NoDefaultContentType:         true,
		DisablePreParseMultipartForm: true,
		CloseOnShutdown:              true,
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("profile: listen: %w", err)
	}
	pln, err := net.Listen("tcp", pprofAddr)
	if err != nil {
		return fmt.Errorf("profile: listen pprof: %w", err)
	}
	go func() { _ = http.Serve(pln, nil) }()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	go func() {
		<-sig
		_ = srv.Shutdown()
	}()
	if err := srv.Serve(ln); err != nil {
		return fmt.Errorf("profile: serve: %w", err)
	}
	return p.Close()
}
