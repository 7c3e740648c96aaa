package cluster

import (
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/shield-proxy/shield/admission"
)

// failMode tracks the fleet limiter's fail mode (admission/failmode.go):
// some member of the membership has not been heard from, so this node
// enforces the bounded local allowance for its part. It logs entering,
// changing and leaving the mode, naming the silent members, and exports
// shield_usage_fail_mode (1 while in it) and
// shield_usage_fail_mode_entered_total. Used by the exchange loop only.
type failMode struct {
	logger *slog.Logger
	fleet  *admission.Fleet
	// graceUntil: before it the first reports cannot have arrived yet
	// (the first exchange has no window to report), so silence is not a
	// failure.
	graceUntil time.Time
	silent     []string // as last logged
	on         atomic.Bool
	entered    *metrics.Counter
}

func newFailMode(s *metrics.Set, logger *slog.Logger, fleet *admission.Fleet, interval time.Duration, now time.Time) *failMode {
	fm := &failMode{
		logger:     logger,
		fleet:      fleet,
		graceUntil: now.Add(time.Duration(admission.StaleIntervals+1) * interval),
		entered:    s.NewCounter(`shield_usage_fail_mode_entered_total`),
	}
	s.NewGauge(`shield_usage_fail_mode`, func() float64 {
		if fm.on.Load() {
			return 1
		}
		return 0
	})
	return fm
}

// note is called after every Apply with its count of silent members.
func (fm *failMode) note(silent int, members []string, now time.Time) {
	if now.Before(fm.graceUntil) || (silent == 0 && len(fm.silent) == 0) {
		return
	}
	var ids []string
	if silent > 0 {
		ids = fm.fleet.Silent(members, now)
	}
	if slices.Equal(ids, fm.silent) {
		return
	}
	n := max(len(members), 1)
	switch {
	case len(fm.silent) == 0:
		fm.entered.Inc()
		fm.on.Store(true)
		fm.logger.Warn("usage exchange: fail mode: members not heard from, enforcing the bounded local allowance",
			"silent", ids, "members", n,
			"rule", "each silent member is assumed to hold 1/members of every tenant's rate and burst; this node enforces at most the rest with the members it hears, and 1/members when it hears none",
			"alone_share", admission.LocalAllowance(n))
	case len(ids) == 0:
		fm.on.Store(false)
		fm.logger.Info("usage exchange: fail mode over: every member heard, shares follow demand again", "members", n)
	default:
		fm.logger.Warn("usage exchange: fail mode: silent members changed", "silent", ids, "members", n)
	}
	fm.silent = ids
}
