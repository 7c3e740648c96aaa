// Command client is the load helper of `make bench-peers` for what wrk
// cannot do:
//
//	client collapse -url U -n 200 -stats S
//	    opens n connections first, then sends one GET for U on each at the
//	    same instant and reads every answer; prints the wall time from the
//	    release to the last complete answer, the statuses, and how many
//	    requests the origin counted meanwhile (S is its /__origin/stats).
//	client warm -url U -keys 10000 -c 32
//	    GETs U with "%d" replaced by 0..keys-1 (c at a time), failing on
//	    any status but 200: fills a cache before a many-keys hit run.
//	client classify -url U -keys 2000 -metrics M -local L -forwarded F
//	    GETs U for each key number, one at a time, through a cluster's
//	    edge node and reads the edge's shield_requests_total{cache="peer"}
//	    (M is its admin /metrics) after each: the request path goes to
//	    file F when the counter moved (another node owns the key), else
//	    to L. The files feed bench/keys.lua (BENCH_PATHS).
//	client zipf -targets H1,H2,H3 -keys 1000000 -requests 200000 -stats S
//	    the cluster-economics stream (zipf.go): Zipf-ranked keys with
//	    heavy-tailed sizes, round-robin over the targets; prints hit
//	    ratio, origin requests against the floor, p50/p99. -plan prints
//	    the stream's floor only.
//
// Connections are dialled before the release so that the figure measures
// the proxy's collapsing, not 200 TCP handshakes racing the first fetch.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: client collapse|warm|classify|zipf [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "collapse":
		err = collapse(os.Args[2:])
	case "warm":
		err = warm(os.Args[2:])
	case "classify":
		err = classify(os.Args[2:])
	case "zipf":
		err = zipf(os.Args[2:])
	default:
		err = fmt.Errorf("client: unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func collapse(args []string) error {
	fs := flag.NewFlagSet("collapse", flag.ContinueOnError)
	rawURL := fs.String("url", "", "URL every request asks for")
	n := fs.Int("n", 200, "concurrent requests")
	stats := fs.String("stats", "", "origin /__origin/stats URL (optional)")
	timeout := fs.Duration("timeout", 30*time.Second, "bound on the whole run")
	if err := fs.Parse(args); err != nil {
		return err
	}
	u, err := url.Parse(*rawURL)
	if err != nil || u.Host == "" {
		return fmt.Errorf("client: bad -url %q", *rawURL)
	}
	before, err := originTotal(*stats)
	if err != nil {
		return err
	}
	conns := make([]net.Conn, *n)
	for i := range conns {
		if conns[i], err = net.DialTimeout("tcp", u.Host, 5*time.Second); err != nil {
			return fmt.Errorf("client: dial: %w", err)
		}
		defer conns[i].Close()
		_ = conns[i].SetDeadline(time.Now().Add(*timeout))
	}
	req := []byte("GET " + u.RequestURI() + " HTTP/1.1\r\nHost: " + u.Host + "\r\nUser-Agent: bench-client\r\n\r\n")
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		statuses = map[int]int{}
		errs     []error
		slowest  time.Duration
		release  = make(chan struct{})
	)
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-release
			t0 := time.Now()
			status, err := roundTrip(c, req)
			d := time.Since(t0)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			statuses[status]++
			slowest = max(slowest, d)
		}()
	}
	start := time.Now()
	close(release)
	wg.Wait()
	wall := time.Since(start)
	after, err := originTotal(*stats)
	if err != nil {
		return err
	}
	var parts []string
	for s, c := range statuses {
		parts = append(parts, fmt.Sprintf("%d:%d", s, c))
	}
	fmt.Printf("origin_requests=%d wall_ms=%.1f slowest_ms=%.1f statuses=%s errors=%d\n",
		after-before, wall.Seconds()*1000, slowest.Seconds()*1000, strings.Join(parts, ","), len(errs))
	if len(errs) > 0 {
		return fmt.Errorf("client: %d requests failed, first: %w", len(errs), errs[0])
	}
	return nil
}

// roundTrip writes req on c and reads one whole response.
func roundTrip(c net.Conn, req []byte) (int, error) {
	if _, err := c.Write(req); err != nil {
		return 0, fmt.Errorf("client: write: %w", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, fmt.Errorf("client: read: %w", err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return 0, fmt.Errorf("client: body: %w", err)
	}
	return resp.StatusCode, nil
}

// originTotal reads the origin's request counter; 0 without a URL.
func originTotal(statsURL string) (int64, error) {
	if statsURL == "" {
		return 0, nil
	}
	resp, err := http.Get(statsURL)
	if err != nil {
		return 0, fmt.Errorf("client: origin stats: %w", err)
	}
	defer resp.Body.Close()
	var s struct {
		Total int64 `json:"total"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return 0, fmt.Errorf("client: origin stats: %w", err)
	}
	return s.Total, nil
}

func warm(args []string) error {
	fs := flag.NewFlagSet("warm", flag.ContinueOnError)
	pattern := fs.String("url", "", `URL with one "%d" for the key number`)
	keys := fs.Int("keys", 10000, "number of keys")
	conc := fs.Int("c", 32, "requests in flight")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if strings.Count(*pattern, "%d") != 1 {
		return errors.New(`client: -url needs exactly one "%d"`)
	}
	hc := &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: *conc},
	}
	next := make(chan int)
	errc := make(chan error, *conc)
	var wg sync.WaitGroup
	for range *conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := get(hc, fmt.Sprintf(*pattern, i)); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	var err error
feed:
	for i := range *keys {
		select {
		case next <- i:
		case err = <-errc:
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err == nil && len(errc) > 0 {
		err = <-errc
	}
	return err
}

func get(hc *http.Client, u string) error {
	resp, err := hc.Get(u)
	if err != nil {
		return fmt.Errorf("client: warm: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("client: warm %s: status %d", u, resp.StatusCode)
	}
	return nil
}

func classify(args []string) error {
	fs := flag.NewFlagSet("classify", flag.ContinueOnError)
	pattern := fs.String("url", "", `edge URL with one "%d" for the key number`)
	keys := fs.Int("keys", 2000, "number of keys to try")
	metricsURL := fs.String("metrics", "", "the edge's admin /metrics URL")
	localFile := fs.String("local", "", "file for the paths the edge owns")
	fwdFile := fs.String("forwarded", "", "file for the paths another node owns")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if strings.Count(*pattern, "%d") != 1 || *metricsURL == "" || *localFile == "" || *fwdFile == "" {
		return errors.New(`client: classify needs -url with one "%d", -metrics, -local and -forwarded`)
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	prev, err := peerCount(hc, *metricsURL)
	if err != nil {
		return err
	}
	var local, fwd strings.Builder
	for i := range *keys {
		u := fmt.Sprintf(*pattern, i)
		if err := get(hc, u); err != nil {
			return err
		}
		n, err := peerCount(hc, *metricsURL)
		if err != nil {
			return err
		}
		pu, _ := url.Parse(u)
		if n != prev {
			fmt.Fprintln(&fwd, pu.RequestURI())
		} else {
			fmt.Fprintln(&local, pu.RequestURI())
		}
		prev = n
	}
	if err := os.WriteFile(*localFile, []byte(local.String()), 0o644); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	if err := os.WriteFile(*fwdFile, []byte(fwd.String()), 0o644); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	return nil
}

// peerCount sums the edge's requests answered by another node.
func peerCount(hc *http.Client, metricsURL string) (float64, error) {
	resp, err := hc.Get(metricsURL)
	if err != nil {
		return 0, fmt.Errorf("client: metrics: %w", err)
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "shield_requests_total{") || !strings.Contains(line, `cache="peer"`) {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err != nil {
			return 0, fmt.Errorf("client: metrics line %q: %w", line, err)
		}
		sum += v
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("client: metrics: %w", err)
	}
	return sum, nil
}
