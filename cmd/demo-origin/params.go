package main

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// defaultCacheControl is sent when the request has no cc parameter: a
// response every shared cache may store for a minute.
const defaultCacheControl = "public, max-age=60"

// Bounds on the shaping parameters: the origin is a test tool, and a typo
// must not make it sleep for a day or allocate a gigabyte.
const (
	maxDelay = time.Minute
	maxSize  = 64 << 20
	maxRate  = 1 << 30
	// Interim heads: enough to flood a proxy (10,000 × 64 KiB), bounded.
	maxHints   = 10000
	maxHintPad = 64 << 10
)

// params is the parsed response-shaping query of one request.
type params struct {
	cacheControl string // "" with setCC means: send no Cache-Control
	setCC        bool
	status       int
	delay        time.Duration
	size         int // -1: natural JSON size
	vary         []string
	setCookie    bool
	etag         bool
	lastModified bool
	expires      time.Duration
	setExpires   bool
	chunked      bool
	rate         int           // bytes per second the body is sent at (0: at once)
	cdnCC        string        // CDN-Cache-Control value (RFC 9213), "" for none
	dateAgo      time.Duration // Date this long before now
	setDateAgo   bool
	earlyHints   int   // 103 Early Hints sent before the answer
	hintPad      int   // bytes of X-Pad in each 103
	interim      []int // other 1xx sent first
	headers      bool  // echo every request field in "headers"
}

// parseParams reads the shaping parameters; unknown parameters are
// ignored (they still make a distinct URL for the cache).
func parseParams(q url.Values) (params, error) {
	p := params{cacheControl: defaultCacheControl, setCC: true, status: http.StatusOK, size: -1}
	if v, ok := q["cc"]; ok {
		p.cacheControl = v[0]
		p.setCC = v[0] != ""
	}
	var err error
	if v := q.Get("status"); v != "" {
		if p.status, err = intIn(v, 200, 599); err != nil {
			return p, fmt.Errorf("status: %w", err)
		}
	}
	if v := q.Get("delay"); v != "" {
		ms, err := intIn(v, 0, int(maxDelay/time.Millisecond))
		if err != nil {
			return p, fmt.Errorf("delay: %w", err)
		}
		p.delay = time.Duration(ms) * time.Millisecond
	}
	if v := q.Get("size"); v != "" {
		if p.size, err = intIn(v, 0, maxSize); err != nil {
			return p, fmt.Errorf("size: %w", err)
		}
	}
	if v := q.Get("vary"); v != "" {
		for name := range strings.SplitSeq(v, ",") {
			name = strings.TrimSpace(name)
			if !isToken(name) {
				return p, fmt.Errorf("vary: %q is not a header name", name)
			}
			p.vary = append(p.vary, http.CanonicalHeaderKey(name))
		}
	}
	p.headers = q.Get("headers") == "1"
	if v := q.Get("expires"); v != "" {
		secs, err := intIn(v, -1e9, 1e9)
		if err != nil {
			return p, fmt.Errorf("expires: %w", err)
		}
		p.expires, p.setExpires = time.Duration(secs)*time.Second, true
	}
	p.setCookie = q.Get("setcookie") == "1"
	p.etag = q.Get("etag") == "1"
	p.lastModified = q.Get("lm") == "1"
	p.chunked = q.Get("chunked") == "1"
	if v := q.Get("rate"); v != "" {
		if p.rate, err = intIn(v, 1, maxRate); err != nil {
			return p, fmt.Errorf("rate: %w", err)
		}
	}
	if v := q.Get("hints"); v != "" {
		if p.earlyHints, err = intIn(v, 0, maxHints); err != nil {
			return p, fmt.Errorf("hints: %w", err)
		}
	}
	if v := q.Get("hintpad"); v != "" {
		if p.hintPad, err = intIn(v, 0, maxHintPad); err != nil {
			return p, fmt.Errorf("hintpad: %w", err)
		}
	}
	if v := q.Get("interim"); v != "" {
		for c := range strings.SplitSeq(v, ",") {
			code, err := intIn(strings.TrimSpace(c), 100, 199)
			if err != nil || code == http.StatusSwitchingProtocols {
				return p, fmt.Errorf("interim: %q is not an informational status other than 101", c)
			}
			p.interim = append(p.interim, code)
		}
	}
	p.cdnCC = q.Get("cdncc")
	if strings.ContainsAny(p.cdnCC, "\r\n") {
		return p, fmt.Errorf("cdncc: line breaks")
	}
	if v := q.Get("dateago"); v != "" {
		secs, err := intIn(v, 0, 1e6)
		if err != nil {
			return p, fmt.Errorf("dateago: %w", err)
		}
		p.dateAgo, p.setDateAgo = time.Duration(secs)*time.Second, true
	}
	return p, nil
}

func intIn(s string, lo, hi int) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, err
	}
	if n < lo || n > hi {
		return 0, fmt.Errorf("%d outside [%d, %d]", n, lo, hi)
	}
	return n, nil
}

// isToken reports whether s is a non-empty RFC 9110 token, the syntax of
// a header field name.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
