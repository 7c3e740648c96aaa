package admission

import (
	"errors"
	"fmt"
	"math"

	"golang.org/x/time/rate"
)

// DefaultClass is the name (and metrics label) of the class that unknown
// and missing tenants share. It cannot be used as a configured class name.
const DefaultClass = "default"

// Limits are one tenant class's limits, as configured for the whole fleet.
type Limits struct {
	// Rate is the sustained request rate per second for the fleet; each
	// node enforces Rate × its share (1/peers until the usage exchange
	// moves it). Required, > 0.
	Rate float64
	// Burst is the bucket size for the fleet; each node holds
	// ceil(Burst × share), at least 1. Default (0): ceil(Rate), at least 1.
	Burst int
	// MaxConcurrency bounds the class's in-flight requests on each node.
	// Required, ≥ 1.
	MaxConcurrency int
	// OriginShare is the fraction of each origin's concurrency budget the
	// class's misses may hold, in (0, 1]. Default (0): 1.
	OriginShare float64
}

// Config is the tenant table: the default class and the named classes.
type Config struct {
	// Default applies to unknown and missing tenants.
	Default Limits
	// Classes by tenant name (exact, case-sensitive). "" and DefaultClass
	// are not allowed as names.
	Classes map[string]Limits
}

// Validate reports every problem in c, joined.
func (c Config) Validate() error {
	var errs []error
	errs = append(errs, c.Default.validate(DefaultClass)...)
	for name, l := range c.Classes {
		if name == "" || name == DefaultClass {
			errs = append(errs, fmt.Errorf("admission: class name %q is reserved", name))
			continue
		}
		errs = append(errs, l.validate(name)...)
	}
	return errors.Join(errs...)
}

func (l Limits) validate(class string) []error {
	var errs []error
	if !(l.Rate > 0) || math.IsInf(l.Rate, 0) {
		errs = append(errs, fmt.Errorf("admission: class %q: rate must be a finite number > 0, got %v", class, l.Rate))
	}
	if l.Burst < 0 {
		errs = append(errs, fmt.Errorf("admission: class %q: burst must be ≥ 0 (0 = ceil(rate)), got %d", class, l.Burst))
	}
	if l.MaxConcurrency < 1 {
		errs = append(errs, fmt.Errorf("admission: class %q: max_concurrency must be ≥ 1, got %d", class, l.MaxConcurrency))
	}
	if !(l.OriginShare >= 0 && l.OriginShare <= 1) {
		errs = append(errs, fmt.Errorf("admission: class %q: origin_share must be in (0, 1] (0 = 1), got %v", class, l.OriginShare))
	}
	return errs
}

// withDefaults fills Burst and OriginShare. l must be valid.
func (l Limits) withDefaults() Limits {
	if l.Burst == 0 {
		l.Burst = ceilAtLeast1(l.Rate)
	}
	if l.OriginShare == 0 {
		l.OriginShare = 1
	}
	return l
}

// perNode returns the rate and burst one of peers nodes enforces.
func (l Limits) perNode(peers int) (rate.Limit, int) {
	return rate.Limit(l.Rate / float64(peers)), ceilAtLeast1(float64(l.Burst) / float64(peers))
}

// perShare returns the rate and burst a node holding share (in (0, 1]) of
// the fleet's limits enforces: rate × share and ceil(burst × share), at
// least 1. perShare(1/n) is perNode(n).
func (l Limits) perShare(share float64) (rate.Limit, int) {
	return rate.Limit(l.Rate * share), ceilAtLeast1(float64(l.Burst) * share)
}

// ceilAtLeast1 rounds x up to an int, at least 1, saturating at MaxInt32
// (a bucket larger than that is a configuration mistake, not a need).
func ceilAtLeast1(x float64) int {
	c := math.Ceil(x - roundingSlack)
	switch {
	case c < 1:
		return 1
	case !(c < math.MaxInt32):
		return math.MaxInt32
	}
	return int(c)
}

// shareSlots is how many of limit slots a tenant with share may hold:
// floor(share × limit), at least 1. The slack keeps 0.29 × 100 at 29 where
// float arithmetic gives 28.999999999999996.
func shareSlots(share float64, limit int) int {
	if share >= 1 {
		return limit
	}
	n := int(math.Floor(share*float64(limit) + roundingSlack))
	return max(1, min(n, limit))
}
