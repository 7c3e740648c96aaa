package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/proxy"
	"github.com/shield-proxy/shield/proxy/httpx"
	"github.com/shield-proxy/shield/proxy/rawio"
	"github.com/shield-proxy/shield/routing"
)

// clusterNode is this process's part in a cluster: the membership source
// and the peer listener.
type clusterNode struct {
	consul *routing.Consul // nil with static membership
	peer   *fasthttp.Server
	cancel context.CancelFunc
	done   chan struct{}
}

// startCluster builds membership (static or Consul), joins the proxy to
// it and opens the peer listener.
func startCluster(cfg *config.Config, p *proxy.Proxy, logger *slog.Logger, errc chan<- error) (*clusterNode, error) {
	cc := cfg.Cluster
	self := routing.Peer{ID: cc.NodeID, Addr: cc.Advertise, Weight: cc.Weight}
	m := routing.NewMembership(self, cc.Overlap, logger)
	n := &clusterNode{done: make(chan struct{})}
	var src routing.Source
	switch cc.Membership {
	case "consul":
		health := ""
		if cfg.Admin.Listen != "off" {
			health = "http://" + cfg.Admin.Listen + "/healthz"
		}
		c, err := routing.NewConsul(routing.ConsulConfig{
			Address:         cc.Consul.Address,
			Service:         cc.Consul.Service,
			Token:           cc.Consul.Token,
			CheckInterval:   cc.Consul.CheckInterval,
			DeregisterAfter: cc.Consul.DeregisterAfter,
			HealthURL:       health,
		}, self, m, logger)
		if err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
		n.consul, src = c, c
	default:
		s, err := routing.NewStatic(proxy.StaticPeers(cc), m, time.Now())
		if err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
		src = s
	}
	opts := proxy.ClusterOptionsFor(cfg)
	if cc.TLS != nil {
		pt, err := httpx.NewPeerTLS(cc.TLS)
		if err != nil {
			return nil, err
		}
		opts.TLS = pt
	}
	p.SetCluster(m, src, opts)

	ln, err := net.Listen("tcp", cc.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen peer %s: %w", cc.Listen, err)
	}
	if opts.TLS != nil {
		// Peers must present a certificate signed by cluster.tls.ca_file
		// before any request (and its secret) is read.
		// TLS records go over raw system calls, as plain peers' bytes do
		// (proxy/rawio: the runtime's sysmon stays asleep).
		ln = tls.NewListener(rawio.Listener{Listener: ln}, opts.TLS.Server)
	}
	// The multiplexed peer transport is served on the same port.
	ln = p.PeerListener(ln)
	n.peer = p.PeerServer(cfg.Server, logger)
	go func() { errc <- n.peer.Serve(ln) }()

	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	go func() {
		defer close(n.done)
		if n.consul != nil {
			registerUntilDone(ctx, n.consul, logger)
		}
		if err := src.Run(ctx); err != nil {
			logger.Error("membership stopped", "err", err)
		}
	}()
	logger.Info("cluster node started", "node", cc.NodeID, "peer_listen", cc.Listen, "membership", cc.Membership)
	return n, nil
}

// registerUntilDone registers with Consul, retrying with backoff while the
// agent is unreachable; the node serves alone meanwhile.
func registerUntilDone(ctx context.Context, c *routing.Consul, logger *slog.Logger) {
	backoff := 500 * time.Millisecond
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := c.Register(rctx)
		cancel()
		if err == nil || ctx.Err() != nil {
			return
		}
		logger.Warn("consul registration failed, retrying", "err", err, "in", backoff.String())
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

// leave closes the cache (proxy.Leave), deregisters from Consul, waits
// for the overlap window (bounded by the drain timeout) while peers may
// still route here, then hands the hottest entries to their new owners.
// The cache closes first: once a peer has dropped this node it sends it
// no purges, and this node still answers through the overlap.
func (n *clusterNode) leave(cfg *config.Config, p *proxy.Proxy, logger *slog.Logger) {
	if n.consul == nil {
		return
	}
	p.Leave()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if err := n.consul.Deregister(ctx); err != nil {
		logger.Warn("consul deregistration failed", "err", err)
	}
	cancel()
	wait := min(cfg.Cluster.Overlap, cfg.Server.DrainTimeout/2)
	logger.Info("left the cluster, serving through the overlap", "wait", wait.String())
	time.Sleep(wait)
	hctx, hcancel := context.WithTimeout(context.Background(), cfg.Server.DrainTimeout/2)
	sent := p.Handoff(hctx)
	hcancel()
	logger.Info("handed off hot entries", "entries", sent)
}

// stop ends membership watching and closes the peer listener.
func (n *clusterNode) stop() {
	n.cancel()
	<-n.done
	_ = n.peer.Shutdown()
}
