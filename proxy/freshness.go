package proxy

import (
	"bytes"
	"time"

	"github.com/valyala/fasthttp"

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
	for k, v := range resp.Header.All() {
		switch {
		case bytes.EqualFold(k, hCacheControl):
			cc.Parse(v)
			hasCC = true
		case bytes.EqualFold(k, hSetCookie):
			setCookie = true
		case bytes.EqualFold(k, hVary):
			varyStar = varyStar || listContains(v, []byte("*"))
		}
	}
	f := stale.Facts{
		Method:        methodGET, // HEAD misses are fetched as GET
		Authorization: hasAuth,
		Status:        resp.StatusCode(),
		SetCookie:     setCookie,
		VaryStar:      varyStar,
		Date:          resp.Header.PeekBytes(hDate),
		Expires:       resp.Header.PeekBytes(hExpires),
		LastModified:  resp.Header.PeekBytes(hLastModified),
		ETag:          len(resp.Header.PeekBytes(hETag)) > 0,
		ResponseTime:  respTime,
	}
	if hasCC {
		f.CC = &cc
	}
	ok, reason := stale.Storable(&f, rte.policy)
	if !ok {
		return decision{reason: string(reason)}
	}
	ageHdr, _ := stale.ParseAge(resp.Header.PeekBytes(hAge))
	date, okDate := stale.ParseHTTPDate(f.Date)
	if !okDate {
		date = respTime
	}
	d := decision{
		storable:   true,
		lifetime:   stale.Lifetime(&f, rte.policy),
		initialAge: stale.InitialAge(ageHdr, date, reqTime, respTime),
	}
	d.swr, d.sie = stale.Windows(f.CC, rte.policy)
	return d
}
