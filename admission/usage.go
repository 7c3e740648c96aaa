package admission

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// Usage exchange: nodes tell each other, about once a second, how much
// each tenant class asked of them, and each sets its own share of every
// class's rate and burst from the fleet's recent demand (Shares). The
// exchange itself (HTTP on the peer listener) is the proxy's; this file
// holds the bookkeeping and the wire format, with no I/O.

// Report is one node's usage over one window: only classes with demand
// in it are listed, so a report's size follows active tenants.
type Report struct {
	Node    string        // sender's node id
	Window  time.Duration // the window's length, > 0
	Classes []ClassUsage
}

// ClassUsage is one class's counts over a report's window.
type ClassUsage struct {
	Name     string
	Demanded uint64 // requests that reached the bucket (admitted or refused for rate)
	Admitted uint64
}

// Limits of the wire format: a report larger than this is refused.
const (
	MaxReportBytes   = 1 << 20
	maxReportClasses = 1 << 14
	reportMagic      = "shield-usage/1"
)

// AppendReport appends r in the wire format to dst:
//
//	shield-usage/1 <node> <window-ms>\n
//	<class> <demanded> <admitted>\n   (one line per class)
//
// Node and class names are URL-path-escaped so any name survives.
func AppendReport(dst []byte, r Report) []byte {
	dst = append(dst, reportMagic...)
	dst = append(dst, ' ')
	dst = append(dst, url.PathEscape(r.Node)...)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, r.Window.Milliseconds(), 10)
	dst = append(dst, '\n')
	for _, c := range r.Classes {
		dst = append(dst, url.PathEscape(c.Name)...)
		dst = append(dst, ' ')
		dst = strconv.AppendUint(dst, c.Demanded, 10)
		dst = append(dst, ' ')
		dst = strconv.AppendUint(dst, c.Admitted, 10)
		dst = append(dst, '\n')
	}
	return dst
}

// ParseReport parses a report in the format AppendReport writes. Any
// malformation is an error naming the line; it never panics.
func ParseReport(b []byte) (Report, error) {
	var r Report
	if len(b) > MaxReportBytes {
		return r, fmt.Errorf("admission: usage report: %d bytes, limit %d", len(b), MaxReportBytes)
	}
	line, rest, ok := bytes.Cut(b, []byte{'\n'})
	if !ok {
		return r, errors.New("admission: usage report: no header line")
	}
	f := bytes.Fields(line)
	if len(f) != 3 || string(f[0]) != reportMagic {
		return r, fmt.Errorf("admission: usage report: header %.60q, want %q <node> <window-ms>", line, reportMagic)
	}
	node, err := url.PathUnescape(string(f[1]))
	if err != nil || node == "" {
		return r, fmt.Errorf("admission: usage report: bad node id %.60q", f[1])
	}
	ms, err := strconv.ParseInt(string(f[2]), 10, 64)
	if err != nil || ms <= 0 || ms > int64(time.Hour/time.Millisecond) {
		return r, fmt.Errorf("admission: usage report: window %.20q must be 1..3600000 ms", f[2])
	}
	r.Node, r.Window = node, time.Duration(ms)*time.Millisecond
	for n := 2; len(rest) > 0; n++ {
		line, rest, ok = bytes.Cut(rest, []byte{'\n'})
		if !ok {
			return Report{}, fmt.Errorf("admission: usage report: line %d: not terminated", n)
		}
		f := bytes.Fields(line)
		if len(f) != 3 {
			return Report{}, fmt.Errorf("admission: usage report: line %d: want <class> <demanded> <admitted>", n)
		}
		if len(r.Classes) == maxReportClasses {
			return Report{}, fmt.Errorf("admission: usage report: more than %d classes", maxReportClasses)
		}
		name, err := url.PathUnescape(string(f[0]))
		if err != nil {
			return Report{}, fmt.Errorf("admission: usage report: line %d: bad class name: %w", n, err)
		}
		d, err1 := strconv.ParseUint(string(f[1]), 10, 64)
		a, err2 := strconv.ParseUint(string(f[2]), 10, 64)
		if err1 != nil || err2 != nil || a > d {
			return Report{}, fmt.Errorf("admission: usage report: line %d: counts must be integers with admitted ≤ demanded", n)
		}
		r.Classes = append(r.Classes, ClassUsage{Name: name, Demanded: d, Admitted: a})
	}
	return r, nil
}

// Fleet is one node's view of the fleet's demand and the engine that sets
// this node's shares. The proxy calls Observe every interval (and sends
// the report to every peer), Receive for every peer report, and Apply
// after Observe. Memory: one small map per peer heard from, holding only
// the classes that peer reported active; peers that leave the membership
// are forgotten on Apply. Safe for concurrent use.
type Fleet struct {
	self     string
	staleAge time.Duration // a peer not heard from for this long is silent

	mu     sync.Mutex
	peers  map[string]*peerUsage
	prev   map[*Tenant]counts // cumulative counts at the last Observe
	prevAt time.Time
	local  map[*Tenant]float64 // this node's demand per second, last window
	// scratch for Apply
	demand []float64
	out    []float64
}

type peerUsage struct {
	heard  time.Time
	demand map[string]float64 // class → demanded per second
}

type counts struct{ demanded, admitted uint64 }

// StaleIntervals is how many exchange intervals a peer may stay unheard
// before it counts as silent: its demand unknown, and 1/n of every rate
// assumed to be its own.
const StaleIntervals = 3

// NewFleet returns the Fleet of node self, exchanging every interval.
func NewFleet(self string, interval time.Duration) *Fleet {
	return &Fleet{
		self:     self,
		staleAge: StaleIntervals * interval,
		peers:    map[string]*peerUsage{},
		prev:     map[*Tenant]counts{},
		local:    map[*Tenant]float64{},
	}
}

// Observe measures this node's usage since the previous call and returns
// it as the report to send: classes with demand in the window only. The
// first call has no window: it returns an empty report with Window 0
// (nothing to send).
func (f *Fleet) Observe(ts *Tenants, now time.Time) Report {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := Report{Node: f.self}
	window := now.Sub(f.prevAt)
	first := f.prevAt.IsZero()
	f.prevAt = now
	all := ts.classes()
	next := make(map[*Tenant]counts, len(all))
	clear(f.local)
	for _, t := range all {
		d, a := t.usage()
		next[t] = counts{d, a}
		p, ok := f.prev[t]
		if first || !ok || window <= 0 || d < p.demanded || a < p.admitted {
			continue
		}
		if dd := d - p.demanded; dd > 0 {
			r.Classes = append(r.Classes, ClassUsage{Name: t.name, Demanded: dd, Admitted: a - p.admitted})
			f.local[t] = float64(dd) / window.Seconds()
		}
	}
	f.prev = next
	if !first && window > 0 {
		r.Window = window
	}
	return r
}

// Receive records a peer's report at now. Reports from this node itself,
// and classes this node does not have, are ignored (during a rolling
// reload the tables may differ for a moment).
func (f *Fleet) Receive(r Report, ts *Tenants, now time.Time) {
	if r.Node == f.self || r.Window <= 0 {
		return
	}
	tab := ts.tab.Load()
	demand := make(map[string]float64, len(r.Classes))
	for _, c := range r.Classes {
		if _, ok := tab.classes[c.Name]; !ok && c.Name != DefaultClass {
			continue
		}
		demand[c.Name] = float64(c.Demanded) / r.Window.Seconds()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.peers[r.Node] = &peerUsage{heard: now, demand: demand}
}

// Apply sets this node's share of every class at now from the last
// observed local demand and the peers' reports. members are the ids of
// the current membership (this node included; if it is missing it is
// counted anyway). A member not heard from within StaleIntervals
// intervals, or never, is silent: it is assumed to hold 1/n. So a node
// that hears from nobody enforces rate/n, as does a node that just
// joined, and the fleet never enforces more than the configured rate in
// total (up to one window of demand shift, and while peers agree on the
// membership). It returns the number of silent members.
func (f *Fleet) Apply(ts *Tenants, members []string, now time.Time) (silent int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fresh := make([]*peerUsage, 0, len(members))
	keep := make(map[string]bool, len(members))
	for _, id := range members {
		if id == f.self {
			continue
		}
		keep[id] = true
		if p := f.peers[id]; p != nil && now.Sub(p.heard) <= f.staleAge {
			fresh = append(fresh, p)
		} else {
			silent++
		}
	}
	for id := range f.peers {
		if !keep[id] {
			delete(f.peers, id)
		}
	}
	ts.SetShares(now, func(t *Tenant) float64 {
		f.demand = append(f.demand[:0], f.local[t])
		for _, p := range fresh {
			f.demand = append(f.demand, p.demand[t.name])
		}
		f.out = Shares(f.out, f.demand, silent, t.limits.Load().Rate)
		return f.out[0]
	})
	return silent
}
