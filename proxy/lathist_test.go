package proxy

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// TestLatencyHistMatchesPrometheusHistogram: fed the same durations (on
// and either side of every bound, and at random), latencyHist writes the
// lines metrics.PrometheusHistogram writes: same names, labels, `le`
// values, bucket counts and count, and the same sum up to rounding.
func TestLatencyHistMatchesPrometheusHistogram(t *testing.T) {
	const name = `shield_request_duration_seconds`
	s := metrics.NewSet()
	ref := s.NewPrometheusHistogramExt(name+`{route="r"}`, durationBuckets)
	h := newLatencyHist(name, `route="r"`, durationBuckets)
	var ds []time.Duration
	for _, b := range durationBuckets {
		n := time.Duration(b * 1e9)
		ds = append(ds, n-1, n, n+1)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		ds = append(ds, time.Duration(rng.Int64N(int64(12*time.Second))))
	}
	ds = append(ds, 0, 20*time.Second, -time.Millisecond)
	for i, d := range ds {
		ref.Update(d.Seconds())
		h.observe(uint64(i), d)
	}
	var want, got bytes.Buffer
	s.WritePrometheus(&want)
	h.write(&got)
	wl, gl := strings.Split(strings.TrimSpace(want.String()), "\n"), strings.Split(strings.TrimSpace(got.String()), "\n")
	if len(wl) != len(gl) {
		t.Fatalf("%d lines, want %d:\n%s\nwant:\n%s", len(gl), len(wl), &got, &want)
	}
	for i := range wl {
		if strings.HasPrefix(wl[i], name+"_sum") {
			wk, wv, _ := strings.Cut(wl[i], " ")
			gk, gv, _ := strings.Cut(gl[i], " ")
			w, _ := strconv.ParseFloat(wv, 64)
			g, err := strconv.ParseFloat(gv, 64)
			if gk != wk || err != nil || g < w*(1-1e-9) || g > w*(1+1e-9) {
				t.Errorf("line %d: %q, want %q", i, gl[i], wl[i])
			}
			continue
		}
		if gl[i] != wl[i] {
			t.Errorf("line %d: %q, want %q", i, gl[i], wl[i])
		}
	}
}

// TestLatencyHistConcurrent: observations from many goroutines at once
// are all counted (run with -race it also checks the stripes are only
// touched atomically).
func TestLatencyHistConcurrent(t *testing.T) {
	h := newLatencyHist("x_seconds", `route="r"`, durationBuckets)
	const workers, each = 8, 2000
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				h.observe(uint64(w*each+i), 50*time.Microsecond)
			}
		}()
	}
	wg.Wait()
	var b bytes.Buffer
	h.write(&b)
	for _, want := range []string{
		`x_seconds_bucket{route="r",le="0.0001"} 16000`,
		`x_seconds_bucket{route="r",le="+Inf"} 16000`,
		`x_seconds_sum{route="r"} 0.8`,
		`x_seconds_count{route="r"} 16000`,
	} {
		if !strings.Contains(b.String(), want+"\n") {
			t.Errorf("missing %q in\n%s", want, &b)
		}
	}
}

// TestResultCountsMatchCounters: resultCounts writes the lines one
// metrics.Counter per result writes, counts from any connection added up.
func TestResultCountsMatchCounters(t *testing.T) {
	s := metrics.NewSet()
	c := newResultCounts("r")
	for r := range numResults {
		ref := s.NewCounter(`shield_requests_total{route="r",cache="` + resultLabels[r] + `"}`)
		for i := range int(r) * 3 {
			ref.Inc()
			c.inc(uint64(i*7), r)
		}
	}
	var want, got bytes.Buffer
	s.WritePrometheus(&want)
	c.write(&got)
	wl, gl := strings.Split(want.String(), "\n"), strings.Split(got.String(), "\n")
	slices.Sort(wl)
	slices.Sort(gl)
	if !slices.Equal(wl, gl) {
		t.Errorf("got\n%s\nwant\n%s", &got, &want)
	}
}
