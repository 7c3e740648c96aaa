package main

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// padAlphabet fills the "pad" field. Its length, 61, is prime: no chunk
// size a transport is likely to use is a multiple of it, so a reordered or
// repeated chunk changes the bytes at that position.
const padAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz012345678"

// chunkPieces is how many flushed writes a chunked=1 body takes at least;
// maxPiece bounds one write.
const (
	chunkPieces = 3
	maxPiece    = 64 << 10
)

// timeLayout is RFC 3339 with all nine fractional digits: unlike
// time.RFC3339Nano it keeps trailing zeros, so the envelope (and with
// size= the pad) has the same length for every request with the same n,
// and time.RFC3339Nano still parses it.
const timeLayout = "2006-01-02T15:04:05.000000000Z07:00"

// slowInterval is the pause between bytes in fault mode slow.
const slowInterval = 100 * time.Millisecond

// resource is the JSON body of every non-control answer.
type resource struct {
	Path  string            `json:"path"`
	URI   string            `json:"uri"`
	Query string            `json:"query"`
	N     int64             `json:"n"`
	Time  string            `json:"time"`
	Vary  map[string]string `json:"vary"`
	// Headers holds every request field with headers=1.
	Headers map[string]string `json:"headers,omitempty"`
	Pad     *string           `json:"pad,omitempty"`
}

// serveResource answers a counted request; n is its per-path number.
func (o *origin) serveResource(w http.ResponseWriter, r *http.Request, n int64, slow bool) {
	if r.URL.Query().Get("page") == "fetch" {
		servePage(w, r)
		return
	}
	p, err := parseParams(r.URL.Query())
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "demo-origin: " + err.Error()})
		return
	}
	if p.delay > 0 && !waitFor(r, p.delay) {
		return // the client gave up; there is nobody to answer
	}
	now := time.Now()
	version, lastMod := o.validators(r.URL.Path)

	h := w.Header()
	for _, code := range p.interim {
		w.WriteHeader(code) // net/http sends any 1xx but 101 as an interim head
	}
	if p.earlyHints > 0 {
		h.Set("Link", "</style.css>; rel=preload; as=style")
		if p.hintPad > 0 {
			h.Set("X-Pad", strings.Repeat("p", p.hintPad))
		}
		for range p.earlyHints {
			w.WriteHeader(http.StatusEarlyHints)
		}
		h.Del("X-Pad") // the Link stays on the final answer too
	}
	if p.setCC {
		h.Set("Cache-Control", p.cacheControl)
	}
	if len(p.vary) > 0 {
		h.Set("Vary", strings.Join(p.vary, ", "))
	}
	var etag string
	if p.etag {
		etag = fmt.Sprintf(`"v%d"`, version)
		h.Set("ETag", etag)
	}
	if p.lastModified {
		h.Set("Last-Modified", lastMod.Format(http.TimeFormat))
	}
	if p.cdnCC != "" {
		h.Set("CDN-Cache-Control", p.cdnCC)
	}
	if p.setDateAgo {
		h.Set("Date", now.Add(-p.dateAgo).UTC().Format(http.TimeFormat))
	}
	if p.setExpires {
		h.Set("Date", now.UTC().Format(http.TimeFormat))
		h.Set("Expires", now.Add(p.expires).UTC().Format(http.TimeFormat))
	}
	if p.status == http.StatusOK && notModified(r, etag, p.lastModified, lastMod) {
		o.countNotModified()
		w.WriteHeader(http.StatusNotModified)
		return
	}
	if p.setCookie {
		h.Set("Set-Cookie", "sid="+randomHex(8)+"; Path=/; HttpOnly")
	}
	if !bodyAllowed(p.status) {
		w.WriteHeader(p.status)
		return
	}

	echo := make(map[string]string, len(p.vary))
	for _, name := range p.vary {
		echo[name] = strings.Join(r.Header.Values(name), ", ")
	}
	var headers map[string]string
	if p.headers {
		headers = make(map[string]string, len(r.Header))
		for name, vs := range r.Header {
			headers[name] = strings.Join(vs, ", ")
		}
	}
	body := buildBody(resource{
		Path:    r.URL.Path,
		URI:     r.RequestURI,
		Headers: headers,
		Query:   r.URL.RawQuery,
		N:       n,
		Time:    now.Format(timeLayout),
		Vary:    echo,
	}, p.size)
	h.Set("Content-Type", "application/json")
	if !p.chunked {
		h.Set("Content-Length", strconv.Itoa(len(body)))
	}
	if p.rate > 0 {
		// A paced body is a large one a test checks whole: say what it
		// is, and (it took a while to build) when sending starts.
		sum := sha256.Sum256(body)
		h.Set("X-Origin-Body-Sha256", hex.EncodeToString(sum[:]))
		h.Set("X-Origin-First-Byte", time.Now().Format(timeLayout))
	}
	w.WriteHeader(p.status)
	switch {
	case slow:
		o.dribble(w, r, body)
	case p.rate > 0:
		writePaced(w, r, body, p.rate)
	case p.chunked:
		writePieces(w, body)
	default:
		_, _ = w.Write(body)
	}
}

// buildBody encodes res; with size ≥ 0 the result is exactly size bytes,
// padded with padAlphabet or, if the envelope alone is longer, truncated.
// Without size a newline ends the body, for people reading it with curl.
func buildBody(res resource, size int) []byte {
	if size < 0 {
		return append(marshal(res), '\n')
	}
	empty := ""
	res.Pad = &empty
	b := marshal(res)
	if len(b) >= size {
		return b[:size]
	}
	pad := padding(size - len(b))
	res.Pad = &pad
	return marshal(res) // pad bytes need no escaping: exactly size bytes
}

// marshal encodes v without a trailing newline and without HTML escaping,
// so a query like a=1&b=2 reads as sent.
func marshal(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return []byte(`{"error":"demo-origin: encode"}`)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// padding returns n bytes of padAlphabet, byte i being padAlphabet[i%61].
func padding(n int) string {
	var sb strings.Builder
	sb.Grow(n)
	for i := range n {
		sb.WriteByte(padAlphabet[i%len(padAlphabet)])
	}
	return sb.String()
}

// notModified evaluates If-None-Match (weak comparison, RFC 9110 §13.1.2)
// against etag, or, when the request has none, If-Modified-Since against
// lastMod if Last-Modified is sent.
func notModified(r *http.Request, etag string, sendsLM bool, lastMod time.Time) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	if inm := r.Header.Get("If-None-Match"); inm != "" {
		if etag == "" {
			return false
		}
		for tag := range strings.SplitSeq(inm, ",") {
			tag = strings.TrimSpace(tag)
			if tag == "*" || strings.TrimPrefix(tag, "W/") == strings.TrimPrefix(etag, "W/") {
				return true
			}
		}
		return false
	}
	if ims := r.Header.Get("If-Modified-Since"); ims != "" && sendsLM {
		t, err := http.ParseTime(ims)
		return err == nil && !lastMod.After(t)
	}
	return false
}

// bodyAllowed reports whether status may carry content (RFC 9110 §6.4.1).
func bodyAllowed(status int) bool {
	return status != http.StatusNoContent && status != http.StatusNotModified
}

// waitFor sleeps d unless the client goes away first; it reports whether
// the full delay elapsed. A shutdown does not cut it short: a delayed
// request is exactly what a graceful drain must let finish.
func waitFor(r *http.Request, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
}

// writePieces writes body in at least chunkPieces flushed writes, so the
// client sees a chunked, incrementally arriving body.
func writePieces(w http.ResponseWriter, body []byte) {
	rc := http.NewResponseController(w)
	piece := min(maxPiece, max(1, (len(body)+chunkPieces-1)/chunkPieces))
	for len(body) > 0 {
		k := min(piece, len(body))
		if _, err := w.Write(body[:k]); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
		body = body[k:]
	}
}

// writePaced writes body at rate bytes per second: flushed pieces of at
// most maxPiece bytes (a tenth of a second's worth when less), each sent
// once the time the bytes before it take at that rate has passed. A
// client that goes away ends it.
func writePaced(w http.ResponseWriter, r *http.Request, body []byte, rate int) {
	rc := http.NewResponseController(w)
	piece := min(maxPiece, max(1, rate/10))
	start := time.Now()
	for sent := 0; sent < len(body); {
		due := start.Add(time.Duration(float64(sent) / float64(rate) * float64(time.Second)))
		if d := time.Until(due); d > 0 && !waitFor(r, d) {
			return
		}
		k := min(piece, len(body)-sent)
		if _, err := w.Write(body[sent : sent+k]); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
		sent += k
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
