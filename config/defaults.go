package config

import (
	"fmt"
	"slices"
	"time"
)

// defaultAcceptEncoding is routes[].cache.accept_encoding's default.
var defaultAcceptEncoding = []string{"br", "gzip"}

// Defaults, as documented on the Config types.
const (
	defaultAdminListen = "127.0.0.1:9091"
	defaultLogLevel    = "info"
	defaultLogFormat   = "text"

	defaultReadTimeout   = 10 * time.Second
	defaultWriteTimeout  = 30 * time.Second
	defaultIdleTimeout   = 60 * time.Second
	defaultMaxHeaderSize = 16 * KiB
	// defaultMaxConnections: 2000 idle connections measured ~9 KiB of
	// RSS each, so 10000 at rest hold ~90 MiB (docs/configuration.md).
	defaultMaxConnections = 10000
	defaultMaxBodySize    = 4 * MiB
	defaultDrainTimeout   = 15 * time.Second
	defaultHeapFloor      = 64 * MiB

	defaultCacheSize     = 512 * MiB
	defaultMaxObjectSize = 8 * MiB
	// defaultDiskMaxObjectSize is max_object_size's default with a
	// disk tier (capped at a quarter of it).
	defaultDiskMaxObjectSize = GiB
	// minDiskSize is the smallest disk tier.
	minDiskSize       = 64 * MiB
	defaultHitForMiss = 10 * time.Second
	defaultMaxWaiters = 1024

	defaultOriginTimeout         = 5 * time.Second
	defaultConnectTimeout        = 1 * time.Second
	defaultMaxConcurrency        = 256
	defaultMaxResponseHeaderSize = 64 * KiB
	defaultOriginIdleTimeout     = 4 * time.Second
	defaultMaxEarlyHints         = 3
	defaultHealthInterval        = 5 * time.Second
	defaultHealthTimeout         = 1 * time.Second
	defaultHealthy               = 2
	defaultUnhealthy             = 3
	defaultTLSMinVersion         = "1.2"

	defaultPathPrefix         = "/"
	defaultMaxStale           = time.Hour
	defaultSurrogateKeyHeader = "Surrogate-Key"
)

// setDefault stores v in *p unless the setting was present in the file. A
// present zero is kept: either it means something (hit_for_miss: 0
// disables hit-for-miss) or validation rejects it, so a typo'd 0 never
// silently becomes the default.
func setDefault[T any](p *T, present bool, v T) {
	if !present {
		*p = v
	}
}

// applyDefaults fills every setting absent from the file; has reports
// whether the setting at a field path was present.
func applyDefaults(c *Config, has func(path string) bool) {
	setDefault(&c.Admin.Listen, has("admin.listen"), defaultAdminListen)
	setDefault(&c.Log.Level, has("log.level"), defaultLogLevel)
	setDefault(&c.Log.Format, has("log.format"), defaultLogFormat)

	s := &c.Server
	setDefault(&s.ReadTimeout, has("server.read_timeout"), defaultReadTimeout)
	setDefault(&s.WriteTimeout, has("server.write_timeout"), defaultWriteTimeout)
	setDefault(&s.IdleTimeout, has("server.idle_timeout"), defaultIdleTimeout)
	setDefault(&s.MaxHeaderSize, has("server.max_header_size"), defaultMaxHeaderSize)
	setDefault(&s.MaxBodySize, has("server.max_body_size"), defaultMaxBodySize)
	setDefault(&s.DrainTimeout, has("server.drain_timeout"), defaultDrainTimeout)
	setDefault(&s.MaxConnections, has("server.max_connections"), defaultMaxConnections)
	applyHTTP2Defaults(s, has)
	if s.TLS != nil {
		setDefault(&s.TLS.MinVersion, has("server.tls.min_version"), defaultTLSMinVersion)
	}

	longest := time.Duration(0)
	for name, o := range c.Origins {
		p := join("origins", name)
		setDefault(&o.Timeout, has(p+".timeout"), defaultOriginTimeout)
		setDefault(&o.ConnectTimeout, has(p+".connect_timeout"), defaultConnectTimeout)
		setDefault(&o.MaxConcurrency, has(p+".max_concurrency"), defaultMaxConcurrency)
		setDefault(&o.MaxResponseHeaderSize, has(p+".max_response_header_size"), defaultMaxResponseHeaderSize)
		setDefault(&o.IdleTimeout, has(p+".idle_timeout"), defaultOriginIdleTimeout)
		setDefault(&o.MaxEarlyHints, has(p+".max_early_hints"), defaultMaxEarlyHints)
		if hc := o.HealthCheck; hc != nil {
			hp := p + ".health_check"
			setDefault(&hc.Interval, has(hp+".interval"), defaultHealthInterval)
			setDefault(&hc.Timeout, has(hp+".timeout"), defaultHealthTimeout)
			setDefault(&hc.Healthy, has(hp+".healthy"), defaultHealthy)
			setDefault(&hc.Unhealthy, has(hp+".unhealthy"), defaultUnhealthy)
		}
		longest = max(longest, o.Timeout)
	}
	if longest <= 0 {
		longest = defaultOriginTimeout
	}

	ca := &c.Cache
	setDefault(&ca.Size, has("cache.size"), defaultCacheSize)
	setDefault(&s.HeapFloor, has("server.heap_floor"), min(defaultHeapFloor, ca.Size/4))
	setDefault(&s.AdaptiveProcs, has("server.adaptive_procs"), true)
	maxObject := defaultMaxObjectSize
	if ca.Disk != nil && ca.Disk.Size > 0 {
		// With a disk tier, objects up to 1GiB are cached when they fit
		// a quarter of it.
		maxObject = min(defaultDiskMaxObjectSize, ca.Disk.Size/4)
	}
	setDefault(&ca.MaxObjectSize, has("cache.max_object_size"), maxObject)
	setDefault(&ca.HitForMiss, has("cache.hit_for_miss"), defaultHitForMiss)
	setDefault(&ca.MaxWaiters, has("cache.max_waiters"), defaultMaxWaiters)
	// A waiter should not give up before the fetch it joined can: wait as
	// long as the slowest origin's timeout.
	setDefault(&ca.WaitTimeout, has("cache.wait_timeout"), longest)

	for i, r := range c.Routes {
		p := fmt.Sprintf("routes[%d]", i)
		setDefault(&r.PathPrefix, has(p+".path_prefix"), defaultPathPrefix)
		setDefault(&r.Cost, has(p+".cost"), 1)
		setDefault(&r.Priority, has(p+".priority"), "normal")
		setDefault(&r.Cache.MaxStale, has(p+".cache.max_stale"), defaultMaxStale)
		setDefault(&r.Cache.SurrogateKeyHeader, has(p+".cache.surrogate_key_header"), defaultSurrogateKeyHeader)
		setDefault(&r.Cache.Targeted, has(p+".cache.targeted"), []string{"CDN-Cache-Control"})
		setDefault(&r.Cache.AcceptEncoding, has(p+".cache.accept_encoding"), slices.Clone(defaultAcceptEncoding))
		setDefault(&r.Compress.Types, has(p+".compress.types"), slices.Clone(DefaultCompressTypes))
		setDefault(&r.Compress.MinSize, has(p+".compress.min_size"), KiB)
	}
}
