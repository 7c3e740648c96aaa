package admission

import "math"

// FleetReserve is the fraction of a tenant's rate the fleet keeps spread
// evenly over the nodes whose demand it knows, whatever that demand is:
// each such node holds at least FleetReserve/n of the rate (n nodes in the
// fleet), so a node that suddenly receives a tenant's traffic admits some
// of it at once instead of being starved until the next usage exchange.
// The price is at most FleetReserve of the rate left unused when all of a
// tenant's traffic lands on one node (5 %, inside the ±10 % target).
const FleetReserve = 0.05

// Shares computes the fraction of one tenant's fleet-wide rate each node
// should enforce, from each node's recent demand (requests per second it
// was asked to admit, admitted or refused for rate). demand holds the
// nodes whose demand is known: this node and the peers heard from
// recently. silent counts the other members, whose demand is unknown
// (unreachable, stopped, or just joined); each of them is assumed to hold
// exactly 1/n of the rate, n = len(demand)+silent, which is what a node
// that hears from nobody enforces itself. rate is the configured rate.
// The result is written to dst (grown as needed) and returned, in
// demand's order.
//
// The known nodes split the rest, 1 − silent/n, as follows:
//
//   - each gets the floor FleetReserve/n;
//   - what remains is divided in proportion to demand when the known
//     demand D is at least the rate they share (every request of the
//     tenant then has about the same chance, as with one central bucket);
//   - when D is below it, each node gets its demand plus an even part of
//     the unused capacity, so no node is refused while the tenant is under
//     its rate, and an idle tenant goes back to rate/n everywhere.
//
// So the shares, plus silent/n, sum to exactly 1 (never more); each is at
// least FleetReserve/n; and the result depends only on the inputs, so on
// fixed demand the fleet settles in one exchange. Negative, NaN and
// infinite demands count as 0. It does not allocate when dst is large
// enough.
func Shares(dst, demand []float64, silent int, rate float64) []float64 {
	k := len(demand)
	if cap(dst) < k {
		dst = make([]float64, k)
	}
	dst = dst[:k]
	if k == 0 {
		return dst
	}
	silent = max(0, silent)
	n := float64(k + silent)
	avail := float64(k) / n // 1 − silent/n
	floor := FleetReserve / n
	rest := avail - float64(k)*floor
	capacity := rate * avail // what the known nodes may admit together
	var total float64
	for _, d := range demand {
		total += cleanDemand(d)
	}
	for i, d := range demand {
		d = cleanDemand(d)
		var w float64 // Σw = 1
		switch {
		case !(capacity > 0) || math.IsInf(capacity, 0):
			w = 1 / float64(k)
		case total >= capacity:
			w = d / total
		default:
			w = (d + (capacity-total)/float64(k)) / capacity
		}
		dst[i] = floor + rest*w
	}
	return dst
}

func cleanDemand(d float64) float64 {
	if !(d > 0) || math.IsInf(d, 0) {
		return 0
	}
	return d
}
