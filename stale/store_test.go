package stale

import (
	"testing"
	"time"
)

// cc parses one Cache-Control value into fresh Directives.
func cc(v string) *Directives {
	d := parse(v)
	return &d
}

func TestStorable(t *testing.T) {
	// base is a plainly storable exchange; each case edits one thing.
	base := func() Facts {
		return Facts{Method: []byte("GET"), Status: 200, CC: cc("max-age=60"), ResponseTime: time.Unix(1e9, 0)}
	}
	tests := []struct {
		name   string
		edit   func(f *Facts, p *Policy)
		ok     bool
		reason Reason
	}{
		{"GET with max-age §3", func(f *Facts, p *Policy) {}, true, ""},
		{"HEAD §3 (understood method)", func(f *Facts, p *Policy) { f.Method = []byte("HEAD") }, true, ""},
		{"POST §3", func(f *Facts, p *Policy) { f.Method = []byte("POST") }, false, ReasonMethod},
		{"lower-case get is another method RFC9110§9.1", func(f *Facts, p *Policy) { f.Method = []byte("get") }, false, ReasonMethod},
		{"request no-store §3 §5.2.1.5", func(f *Facts, p *Policy) { f.RequestNoStore = true }, false, ReasonRequestNoStore},
		{"response no-store §3 §5.2.2.5", func(f *Facts, p *Policy) { f.CC = cc("no-store, max-age=60") }, false, ReasonNoStore},
		{"must-understand ignores no-store for an understood status §5.2.2.3", func(f *Facts, p *Policy) { f.CC = cc("must-understand, no-store, max-age=60") }, true, ""},
		{"must-understand with a status not understood §5.2.2.3", func(f *Facts, p *Policy) { f.Status, f.CC = 302, cc("must-understand, no-store, max-age=60") }, false, ReasonMustUnderstand},
		{"private §3 §5.2.2.7", func(f *Facts, p *Policy) { f.CC = cc("private, max-age=60") }, false, ReasonPrivate},
		{"private with fields stores the rest §5.2.2.7", func(f *Facts, p *Policy) { f.CC = cc(`private="X-Name", max-age=60`) }, true, ""},
		{"no-cache with fields stores the rest §5.2.2.4", func(f *Facts, p *Policy) { f.CC = cc(`no-cache="Set-Cookie", max-age=60`) }, true, ""},
		{"500 with explicit freshness is storable §3", func(f *Facts, p *Policy) { f.Status = 500 }, true, ""},
		{"503 without explicit freshness is not §3 §4.2.2", func(f *Facts, p *Policy) { f.Status, f.CC = 503, nil; p.DefaultTTL = time.Minute }, false, ReasonStatus},
		{"public and private: private wins §3", func(f *Facts, p *Policy) { f.CC = cc("public, private, max-age=60") }, false, ReasonPrivate},
		{"authorization §3.5", func(f *Facts, p *Policy) { f.Authorization = true }, false, ReasonAuthorization},
		{"authorization + public §3.5", func(f *Facts, p *Policy) { f.Authorization, f.CC = true, cc("public, max-age=60") }, true, ""},
		{"authorization + s-maxage §3.5", func(f *Facts, p *Policy) { f.Authorization, f.CC = true, cc("s-maxage=60") }, true, ""},
		{"authorization + must-revalidate §3.5", func(f *Facts, p *Policy) { f.Authorization, f.CC = true, cc("must-revalidate, max-age=60") }, true, ""},
		{"authorization + proxy-revalidate is not enough §3.5", func(f *Facts, p *Policy) { f.Authorization, f.CC = true, cc("proxy-revalidate, max-age=60") }, false, ReasonAuthorization},
		{"set-cookie, route refuses (docs/architecture.md §5)", func(f *Facts, p *Policy) { f.SetCookie = true }, false, ReasonSetCookie},
		{"set-cookie, route allows (docs/architecture.md §5)", func(f *Facts, p *Policy) { f.SetCookie, p.AllowSetCookie = true, true }, true, ""},
		{"Vary: * §4.1", func(f *Facts, p *Policy) { f.VaryStar = true }, false, ReasonVaryStar},
		{"206 without range support §3.3", func(f *Facts, p *Policy) { f.Status = 206 }, false, ReasonStatus},
		{"304 is not stored as such §4.3.4", func(f *Facts, p *Policy) { f.Status = 304 }, false, ReasonStatus},
		{"1xx is not final §3", func(f *Facts, p *Policy) { f.Status = 103 }, false, ReasonStatus},
		{"out of range status", func(f *Facts, p *Policy) { f.Status = 600 }, false, ReasonStatus},
		{"302 with explicit max-age §3", func(f *Facts, p *Policy) { f.Status = 302 }, true, ""},
		{"500 with Expires §3", func(f *Facts, p *Policy) {
			f.Status, f.CC, f.Expires = 500, nil, []byte("Sun, 06 Nov 1994 08:49:37 GMT")
		}, true, ""},
		{"invalid Expires is still explicit §5.3", func(f *Facts, p *Policy) { f.CC, f.Expires = nil, []byte("0") }, true, ""},
		{"302 without explicit freshness RFC9110§15.1", func(f *Facts, p *Policy) { f.Status, f.CC, f.ETag = 302, nil, true }, false, ReasonStatus},
		{"500 with DefaultTTL only (DefaultTTL replaces the heuristic)", func(f *Facts, p *Policy) { f.Status, f.CC, p.DefaultTTL = 500, nil, time.Minute }, false, ReasonStatus},
		{"302 public is heuristically cacheable §5.2.2.9", func(f *Facts, p *Policy) { f.Status, f.CC, f.ETag = 302, cc("public"), true }, true, ""},
		{"404 heuristic with Last-Modified §4.2.2", func(f *Facts, p *Policy) {
			f.Status, f.CC, f.LastModified = 404, nil, []byte("Sun, 06 Nov 1994 08:49:37 GMT")
		}, true, ""},
		{"200 with only a route DefaultTTL", func(f *Facts, p *Policy) { f.CC, p.DefaultTTL = nil, time.Minute }, true, ""},
		{"200 with only an ETag (revalidate every time)", func(f *Facts, p *Policy) { f.CC, f.ETag = nil, true }, true, ""},
		{"200 with nothing that ever makes it reusable", func(f *Facts, p *Policy) { f.CC = nil }, false, ReasonNoFreshness},
		{"no-cache with validator: stored, revalidated on use §5.2.2.4", func(f *Facts, p *Policy) { f.CC, f.ETag = cc("no-cache"), true }, true, ""},
		{"no-cache without anything", func(f *Facts, p *Policy) { f.CC = cc("no-cache") }, false, ReasonNoFreshness},
		{"max-age=0 is explicit (stale-if-error use)", func(f *Facts, p *Policy) { f.CC = cc("max-age=0, stale-if-error=60") }, true, ""},
		{"order: method before no-store", func(f *Facts, p *Policy) { f.Method, f.CC = []byte("PUT"), cc("no-store") }, false, ReasonMethod},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, p := base(), Policy{}
			tt.edit(&f, &p)
			ok, reason := Storable(&f, p)
			if ok != tt.ok || reason != tt.reason {
				t.Errorf("Storable = %v, %q; want %v, %q", ok, reason, tt.ok, tt.reason)
			}
		})
	}
}
