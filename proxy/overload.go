package proxy

import (
	"github.com/shield-proxy/shield/config"
)

// overload is a route's overload controls (docs/configuration.md,
// routes[].cost …), compiled once per load.
type overload struct {
	// cost is the tokens one request takes from its tenant's bucket, ≥ 1.
	cost int
}

func routeOverload(rc *config.Route) overload {
	return overload{cost: max(rc.Cost, 1)}
}
