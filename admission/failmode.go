package admission

import (
	"slices"
	"time"
)

// Fail mode of the fleet limiter (issue 24, item 7). When the usage
// exchange cannot reach a member (no report within StaleIntervals
// intervals: unreachable, stopped, partitioned, or just joined), Apply
// assumes that member holds exactly 1/n of every class's rate and burst,
// n the members in the current membership. This node then enforces a
// bounded local allowance:
//
//   - it hears from nobody: exactly rate/n and ceil(burst/n), what a node
//     enforces at start;
//   - it hears from some: at most rate × (1 − silent/n) together with the
//     peers it hears, split by demand, and at least FleetReserve/n of the
//     rate.
//
// Never unlimited (a partitioned fleet admits at most the rate in total,
// each side its members' part), never zero (every node keeps at least
// FleetReserve/n, and 1/n when alone). The proxy logs entering and
// leaving this mode, naming the silent members, and exports it as
// shield_usage_fail_mode.

// Silent returns the members (this node excluded) not heard from within
// StaleIntervals intervals at now, sorted: the ones Apply assumes hold
// 1/n each.
func (f *Fleet) Silent(members []string, now time.Time) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, id := range members {
		if id == f.self {
			continue
		}
		if p := f.peers[id]; p == nil || now.Sub(p.heard) > f.staleAge {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// LocalAllowance is the share of every class's rate this node enforces
// when it hears from none of its n members but itself: 1/n (n ≥ 1).
func LocalAllowance(n int) float64 { return 1 / float64(max(n, 1)) }
