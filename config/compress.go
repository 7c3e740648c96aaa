package config

import (
	"fmt"
	"slices"
	"strings"
)

// compressCodings are the codings shield can produce itself.
var compressCodings = []string{"br", "gzip"}

// validateCompress checks routes[i].compress. p is the route's path
// ("routes[2]"). compress.codings and cache.accept_encoding are one
// decision seen from two sides — which coding a request is keyed and
// answered with — so a route that sets both is refused rather than
// having one silently win; accept_encoding written out at its default
// (a configuration dumped with its defaults) is no conflict.
func (d *decoder) validateCompress(p string, rc *RouteCompress, ae []string) {
	cp := p + ".compress"
	for i, c := range rc.Codings {
		at := fmt.Sprintf("%s.codings[%d]", cp, i)
		switch {
		case !slices.Contains(compressCodings, c):
			d.problem(at, "%q is not a coding shield produces (one of %s)", c, strings.Join(compressCodings, ", "))
		case slices.Index(rc.Codings, c) != i:
			d.problem(at, "%q is listed twice", c)
		}
	}
	if ae := ae; len(rc.Codings) > 0 && d.has(p+".cache.accept_encoding") && !slices.Equal(ae, defaultAcceptEncoding) {
		d.problem(p+".cache.accept_encoding", "not used with compress.codings (shield asks the origin for identity and negotiates the coding with clients itself): remove one")
	}
	for i, t := range rc.Types {
		if !validMediaPattern(t) {
			d.problem(fmt.Sprintf("%s.types[%d]", cp, i), "%q is not a media type, type/*, or +suffix", t)
		}
	}
	if rc.MinSize < 0 {
		d.problem(cp+".min_size", "must not be negative, got %s", rc.MinSize)
	}
}

// validMediaPattern accepts "type/subtype", "type/*" and "+suffix".
func validMediaPattern(t string) bool {
	if suffix, ok := strings.CutPrefix(t, "+"); ok {
		return isToken(suffix)
	}
	typ, sub, ok := strings.Cut(t, "/")
	return ok && isToken(typ) && typ != "*" && (sub == "*" || isToken(sub))
}
