package proxy

// Served counts the requests answered so far, every route and result
// (shield_requests_total summed): the work rate the processor governor
// (package procs) judges by. Routes keep their counts across reloads, so
// it never decreases.
func (p *Proxy) Served() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var n uint64
	for _, m := range p.kept.routeMetrics {
		n += m.requests.total()
	}
	return n
}

// total is the count of every result.
func (c *resultCounts) total() uint64 {
	var n uint64
	for r := range numResults {
		n += c.get(result(r))
	}
	return n
}
