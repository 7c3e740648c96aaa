package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// workload is the cluster-economics request stream: key ranks drawn from
// a Zipf distribution over keys (weight 1/rank^s, s may be 1.0, which
// math/rand's Zipf does not allow), each key's object size fixed by a
// hash of the key: a truncated Pareto between min and max bytes, so most
// objects are small and a few are large. The stream depends only on the
// seed, so every system measured is sent the same requests in the same
// order.
type workload struct {
	keys     []uint32 // key rank of request i
	min, max int
	alpha    float64
}

func newWorkload(nKeys, nReq int, s float64, seed uint64, minSize, maxSize int, alpha float64) (*workload, error) {
	if nKeys < 1 || nReq < 1 || s <= 0 || minSize < 1 || maxSize < minSize || alpha <= 0 {
		return nil, errors.New("client: zipf: need keys, requests, s, alpha > 0 and 0 < min <= max")
	}
	cdf := make([]float64, nKeys)
	sum := 0.0
	for k := range cdf {
		sum += math.Pow(float64(k+1), -s)
		cdf[k] = sum
	}
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	w := &workload{keys: make([]uint32, nReq), min: minSize, max: maxSize, alpha: alpha}
	for i := range w.keys {
		w.keys[i] = uint32(sort.SearchFloat64s(cdf, r.Float64()*sum))
	}
	return w, nil
}

// size is key k's object size: min * u^(-1/alpha), u uniform in (0, 1]
// from a hash of k, capped at max.
func (w *workload) size(k uint32) int {
	x := uint64(k) + 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	x ^= x >> 31
	u := (float64(x>>11) + 1) / (1 << 53)
	v := float64(w.min) * math.Pow(u, -1/w.alpha)
	if v > float64(w.max) {
		return w.max
	}
	return int(v)
}

// floor counts the distinct keys of the stream and their bytes: the
// fewest origin requests any cache can make for it.
func (w *workload) floor() (keys int, bytes int64) {
	seen := map[uint32]struct{}{}
	for _, k := range w.keys {
		if _, ok := seen[k]; !ok {
			seen[k] = struct{}{}
			bytes += int64(w.size(k))
		}
	}
	return len(seen), bytes
}

// zipf sends the stream round-robin over the targets (request i goes to
// target i mod n) from c connections and reports what the origin and the
// client saw.
func zipf(args []string) error {
	fs := flag.NewFlagSet("zipf", flag.ContinueOnError)
	targets := fs.String("targets", "", "comma-separated host:port list; request i goes to target i mod n")
	nKeys := fs.Int("keys", 1000000, "distinct keys the Zipf distribution draws from")
	nReq := fs.Int("requests", 200000, "requests in the stream")
	s := fs.Float64("s", 1.0, "Zipf exponent")
	seed := fs.Uint64("seed", 1, "stream seed (same seed, same stream)")
	minSize := fs.Int("min", 1024, "smallest object, bytes")
	maxSize := fs.Int("max", 256<<10, "largest object, bytes")
	alpha := fs.Float64("alpha", 1.2, "Pareto tail index of object sizes (smaller: heavier tail)")
	delay := fs.Int("delay", 20, "origin latency per request, ms (the origin's delay= knob)")
	prefix := fs.String("prefix", "/z", "path prefix; a fresh one per run keeps earlier runs' objects out")
	conc := fs.Int("c", 128, "connections (requests in flight)")
	stats := fs.String("stats", "", "origin /__origin/stats URL")
	host := fs.String("host", "shield-bench.test", "Host header of every request (the same on every target)")
	maxErrors := fs.Int64("max-errors", 0, "failed requests (transport error, non-200, short body) tolerated before the command fails")
	plan := fs.Bool("plan", false, "only print the stream's floor (distinct keys, bytes) and size quantiles")
	if err := fs.Parse(args); err != nil {
		return err
	}
	w, err := newWorkload(*nKeys, *nReq, *s, *seed, *minSize, *maxSize, *alpha)
	if err != nil {
		return err
	}
	distinct, dbytes := w.floor()
	if *plan {
		sizes := make([]int, 0, 1000)
		for k := range uint32(min(*nKeys, 100000)) {
			sizes = append(sizes, w.size(k))
		}
		slices.Sort(sizes)
		mean := 0.0
		for _, v := range sizes {
			mean += float64(v)
		}
		mean /= float64(len(sizes))
		q := func(f float64) int { return sizes[int(f*float64(len(sizes)-1))] }
		fmt.Printf("requests=%d distinct=%d distinct_mib=%.1f size_p50=%d size_p99=%d size_mean=%.0f\n",
			*nReq, distinct, float64(dbytes)/(1<<20), q(0.5), q(0.99), mean)
		return nil
	}
	hosts := strings.Split(*targets, ",")
	if *targets == "" || len(hosts) == 0 || *conc < 1 {
		return errors.New("client: zipf needs -targets and -c >= 1")
	}
	clients := make([]*fasthttp.HostClient, len(hosts))
	for i, h := range hosts {
		clients[i] = &fasthttp.HostClient{
			Addr: h, MaxConns: *conc, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second,
			MaxResponseBodySize: *maxSize + 4096, NoDefaultUserAgentHeader: true, DisablePathNormalizing: true,
		}
	}
	before, err := originTotal(*stats)
	if err != nil {
		return err
	}
	lat := make([]int32, len(w.keys)) // µs
	var next atomic.Int64
	var failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for range *conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			var uri []byte
			for {
				i := int(next.Add(1) - 1)
				if i >= len(w.keys) {
					return
				}
				k := w.keys[i]
				size := w.size(k)
				uri = append(uri[:0], *prefix...)
				uri = append(uri, '/')
				uri = strconv.AppendUint(uri, uint64(k), 10)
				uri = append(uri, "?size="...)
				uri = strconv.AppendInt(uri, int64(size), 10)
				uri = append(uri, "&delay="...)
				uri = strconv.AppendInt(uri, int64(*delay), 10)
				hc := clients[i%len(clients)]
				req.Reset()
				req.SetRequestURIBytes(uri)
				// One site name whatever node is asked: caches key on
				// Host, and a cluster's nodes are one site.
				req.Header.SetHost(*host)
				t0 := time.Now()
				err := hc.Do(req, resp)
				lat[i] = int32(time.Since(t0) / time.Microsecond)
				if err == nil && (resp.StatusCode() != fasthttp.StatusOK || len(resp.Body()) != size) {
					err = fmt.Errorf("%s%s: status %d, %d bytes, want 200 and %d", hc.Addr, uri, resp.StatusCode(), len(resp.Body()), size)
				}
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	after, err := originTotal(*stats)
	if err != nil {
		return err
	}
	slices.Sort(lat)
	q := func(f float64) float64 { return float64(lat[int(f*float64(len(lat)-1))]) / 1000 }
	orig := after - before
	fmt.Printf("requests=%d distinct=%d distinct_mib=%.1f origin_requests=%d floor_ratio=%.3f hit_ratio=%.4f "+
		"origin_rps=%.0f rps=%.0f wall_s=%.2f p50_ms=%.2f p99_ms=%.2f errors=%d\n",
		len(w.keys), distinct, float64(dbytes)/(1<<20), orig, float64(orig)/float64(distinct),
		1-float64(orig)/float64(len(w.keys)), float64(orig)/wall.Seconds(), float64(len(w.keys))/wall.Seconds(),
		wall.Seconds(), q(0.5), q(0.99), failed.Load())
	if err, _ := firstErr.Load().(error); err != nil {
		fmt.Fprintf(os.Stderr, "client: zipf: %d requests failed, first: %v\n", failed.Load(), err)
	}
	if n := failed.Load(); n > *maxErrors {
		return fmt.Errorf("client: zipf: %d requests failed, first: %v", n, firstErr.Load())
	}
	return nil
}
