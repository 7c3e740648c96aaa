package proxy

import (
	"io"

	"github.com/VictoriaMetrics/metrics"

	"github.com/shield-proxy/shield/procs"
)

// SetGovernor exports the processor governor's counts (server.
// adaptive_procs, package procs) with every scrape: how its trials end
// and how often load brought the ceiling back. go_gomaxprocs shows the
// count in force; these show whether it settles or keeps moving, and
// why. Call it once, before serving; without it nothing is exported.
func (p *Proxy) SetGovernor(stats func() procs.Stats) {
	p.g.set.RegisterMetricsWriter(func(w io.Writer) { writeGovernorMetrics(w, stats()) })
}

func writeGovernorMetrics(w io.Writer, st procs.Stats) {
	metrics.WriteCounterUint64(w, `shield_procs_trials_total{result="kept"}`, st.Kept)
	metrics.WriteCounterUint64(w, `shield_procs_trials_total{result="failed"}`, st.Failed)
	metrics.WriteCounterUint64(w, `shield_procs_trials_total{result="inconclusive"}`, st.Inconclusive)
	metrics.WriteCounterUint64(w, `shield_procs_surges_total`, st.Surges)
}
