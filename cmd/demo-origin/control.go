package main

import (
	"fmt"
	"net/http"
	"strings"
	"time"
)

// stats is the answer of GET /__origin/stats.
type stats struct {
	Total       int64            `json:"total"`
	ByPath      map[string]int64 `json:"by_path"`
	NotModified int64            `json:"not_modified"`
	InFlight    int64            `json:"in_flight"`
	MaxInFlight int64            `json:"max_in_flight"`
	Mode        string           `json:"mode"`
	// Faults are the path-scoped fault modes, by path prefix.
	Faults map[string]string `json:"faults,omitempty"`
}

// serveControl answers the /__origin/ endpoints.
func (o *origin) serveControl(w http.ResponseWriter, r *http.Request) {
	switch strings.TrimPrefix(r.URL.Path, controlPrefix) {
	case "stats":
		if allow(w, r, http.MethodGet, http.MethodHead) {
			writeJSON(w, http.StatusOK, o.snapshot())
		}
	case "reset":
		if allow(w, r, http.MethodPost) {
			o.resetCounters()
			writeJSON(w, http.StatusOK, o.snapshot())
		}
	case "fault":
		if !allow(w, r, http.MethodPost) {
			return
		}
		q := r.URL.Query()
		mode := q.Get("mode")
		if !validMode(mode) {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("demo-origin: unknown fault mode %q", mode)})
			return
		}
		prefix, scoped := q["prefix"]
		if !scoped {
			o.setMode(mode)
			o.logger.Info("fault mode set", "mode", mode)
			writeJSON(w, http.StatusOK, map[string]string{"mode": mode})
			return
		}
		if !strings.HasPrefix(prefix[0], "/") || strings.HasPrefix(prefix[0], controlPrefix) {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("demo-origin: fault prefix %q must start with / and not be a control path", prefix[0])})
			return
		}
		o.setPrefixMode(prefix[0], mode)
		o.logger.Info("fault mode set", "mode", mode, "prefix", prefix[0])
		writeJSON(w, http.StatusOK, map[string]string{"mode": mode, "prefix": prefix[0]})
	case "bump":
		if !allow(w, r, http.MethodPost) {
			return
		}
		path := r.URL.Query().Get("path")
		if !strings.HasPrefix(path, "/") {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("demo-origin: bump path %q must start with /", path)})
			return
		}
		version := o.bump(path, time.Now())
		writeJSON(w, http.StatusOK, map[string]any{"path": path, "version": version, "etag": fmt.Sprintf(`"v%d"`, version)})
	default:
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "demo-origin: unknown control endpoint"})
	}
}

func (o *origin) snapshot() stats {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := stats{
		Total:       o.total,
		ByPath:      make(map[string]int64, len(o.byPath)),
		NotModified: o.notModified,
		InFlight:    o.inFlight,
		MaxInFlight: o.maxInFlight,
		Mode:        o.mode,
	}
	for p, n := range o.byPath {
		s.ByPath[p] = n
	}
	if len(o.prefixModes) > 0 {
		s.Faults = make(map[string]string, len(o.prefixModes))
		for p, m := range o.prefixModes {
			s.Faults[p] = m
		}
	}
	return s
}

// resetCounters zeroes the counters. Requests still in flight stay in the
// gauge (they will leave), so max_in_flight restarts from it.
func (o *origin) resetCounters() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.total, o.notModified = 0, 0
	o.byPath = make(map[string]int64)
	o.maxInFlight = o.inFlight
}

func (o *origin) setMode(mode string) {
	o.mu.Lock()
	o.mode = mode
	o.mu.Unlock()
}

// setPrefixMode sets the fault mode of the paths under prefix; mode ok
// removes the prefix's own fault, so the global mode applies again.
func (o *origin) setPrefixMode(prefix, mode string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if mode == modeOK {
		delete(o.prefixModes, prefix)
		return
	}
	o.prefixModes[prefix] = mode
}

// bump gives path a new ETag version and a Last-Modified strictly later
// than the previous one (whole seconds, as HTTP dates have), so both kinds
// of revalidation see a change. It returns the new version.
func (o *origin) bump(path string, now time.Time) int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.bumps[path]++
	prev, ok := o.lastMod[path]
	if !ok {
		prev = o.started
	}
	lm := now.UTC().Truncate(time.Second)
	if !lm.After(prev) {
		lm = prev.Add(time.Second)
	}
	o.lastMod[path] = lm
	return o.bumps[path] + 1
}

// allow reports whether r's method is one of methods, answering 405 with
// an Allow header when it is not.
func allow(w http.ResponseWriter, r *http.Request, methods ...string) bool {
	for _, m := range methods {
		if r.Method == m {
			return true
		}
	}
	w.Header().Set("Allow", strings.Join(methods, ", "))
	writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "demo-origin: method not allowed"})
	return false
}

// writeJSON sends v as JSON. Control and error answers are marked
// no-store so that a cache in front never keeps them.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b := marshal(v)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
