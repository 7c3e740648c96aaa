package proxy

import (
	"bytes"
	"math/rand/v2"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/proxy/httpx"
	"github.com/shield-proxy/shield/stale"
)

// decision is what the stale package's rules say about one origin
// response, in the proxy's terms.
type decision struct {
	storable   bool
	reason     string // why not, when !storable
	lifetime   time.Duration
	initialAge time.Duration
	swr, sie   time.Duration
	// strip lists (comma-separated) the fields a qualified no-cache or
	// private names: stored without them (RFC 9111 §5.2.2.4, §5.2.2.7).
	strip []byte
}

var (
	hAuthorization = []byte("Authorization")
	methodGET      = []byte(fasthttp.MethodGet)
)

// decide applies RFC 9111 storage and freshness rules (package stale) to
// an origin response; hasAuth says the request carried Authorization.
func decide(hasAuth bool, resp *fasthttp.Response, rte *route, reqTime, respTime time.Time) decision {
	var cc stale.Directives
	cc.Reset()
	hasCC, setCookie, varyStar := false, false, false
	var strip []byte
	// RFC 9213 §2.2: the first targeted field present with a value
	// replaces Cache-Control and Expires for this cache.
	var targeted []byte
	for _, name := range rte.targeted {
		if v := resp.Header.PeekBytes(name); len(bytes.TrimSpace(v)) > 0 {
			targeted = v
			cc.Parse(v)
			strip = stale.QualifiedFields(strip, v)
			hasCC = true
			break
		}
	}
	for k, v := range resp.Header.All() {
		switch {
		case bytes.EqualFold(k, httpx.HCacheControl) && targeted == nil:
			cc.Parse(v)
			strip = stale.QualifiedFields(strip, v)
			hasCC = true
		case bytes.EqualFold(k, httpx.HSetCookie):
			setCookie = true
		case bytes.EqualFold(k, httpx.HVary):
			varyStar = varyStar || httpx.ListContains(v, []byte("*"))
		}
	}
	if setCookie && stale.ListHas(strip, httpx.HSetCookie) {
		setCookie = false // stored without it
	}
	f := stale.Facts{
		Method:        methodGET, // HEAD misses are fetched as GET
		Authorization: hasAuth,
		Status:        resp.StatusCode(),
		SetCookie:     setCookie,
		VaryStar:      varyStar,
		Date:          resp.Header.PeekBytes(httpx.HDate),
		LastModified:  resp.Header.PeekBytes(httpx.HLastModified),
		ETag:          len(resp.Header.PeekBytes(httpx.HETag)) > 0,
		ResponseTime:  respTime,
	}
	if targeted == nil {
		f.Expires = resp.Header.PeekBytes(httpx.HExpires)
	}
	if hasCC {
		f.CC = &cc
	}
	ok, reason := stale.Storable(&f, rte.policy)
	if !ok {
		return decision{reason: string(reason)}
	}
	ageHdr, _ := stale.ParseAge(resp.Header.PeekBytes(httpx.HAge))
	date, okDate := stale.ParseHTTPDate(f.Date)
	if !okDate {
		date = respTime
	}
	d := decision{
		storable:   true,
		lifetime:   stale.Lifetime(&f, rte.policy),
		initialAge: stale.InitialAge(ageHdr, date, reqTime, respTime),
		strip:      strip,
	}
	d.swr, d.sie = stale.Windows(f.CC, rte.policy)
	d.lifetime = jitterLifetime(d.lifetime, rte.ttlJitter, rand.Float64())
	return d
}

// explicitFreshness reports whether resp states its own lifetime for
// shield (max-age, s-maxage or Expires, or a targeted field's): only such
// error answers are stored (RFC 9111 §3, §4.2.1).
func explicitFreshness(resp *fasthttp.Response, rte *route) bool {
	for _, name := range rte.targeted {
		if v := resp.Header.PeekBytes(name); len(bytes.TrimSpace(v)) > 0 {
			return hasLifetime(v)
		}
	}
	if len(resp.Header.PeekBytes(httpx.HExpires)) > 0 {
		return true
	}
	for _, v := range resp.Header.PeekAll("Cache-Control") {
		if hasLifetime(v) {
			return true
		}
	}
	return false
}

func hasLifetime(v []byte) bool {
	var cc stale.Directives
	cc.Reset()
	cc.Parse(v)
	return cc.MaxAge >= 0 || cc.SMaxAge >= 0
}
