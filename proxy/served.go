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
	for i := range c.stripes {
		for r := range c.stripes[i].n {
			n += c.stripes[i].n[r].Load()
		}
	}
	return n
}
