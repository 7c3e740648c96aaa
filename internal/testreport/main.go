// Command testreport reads `go test -json` on stdin and prints what a
// plain `go test` would (package results, the output of failing tests),
// then a count of passed, failed and skipped tests with the reason for
// every skip.
//
// It exists so that `make test` cannot pass while quietly skipping: it
// exits non-zero when any test failed, when the stream shows a build or
// package failure, and — under CI (see internal/testenv) or with
// -max-skips — when more tests skipped than allowed.
//
//	go test -json ./... | testreport -label unit
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// report accumulates the stream.
type report struct {
	out            io.Writer
	buf            map[string][]string // package/test → output so far
	passed, failed int
	skipped        []string // "pkg Test: reason"
	pkgFailed      bool
}

func newReport(out io.Writer) *report {
	return &report{out: out, buf: map[string][]string{}}
}

func (r *report) add(line []byte) {
	var e event
	if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
		fmt.Fprintln(r.out, string(line)) // not JSON: a build error or a stray print
		return
	}
	id := e.Package + " " + e.Test
	switch {
	case e.Action == "build-output":
		fmt.Fprint(r.out, e.Output)
	case e.Action == "build-fail":
		r.pkgFailed = true
	case e.Test == "":
		// Package-level lines: "ok pkg 1.2s", "FAIL", a panic outside a test.
		if e.Action == "output" {
			fmt.Fprint(r.out, e.Output)
		}
		if e.Action == "fail" {
			r.pkgFailed = true
		}
	case e.Action == "output":
		r.buf[id] = append(r.buf[id], e.Output)
	case e.Action == "pass":
		r.passed++
		delete(r.buf, id)
	case e.Action == "fail":
		r.failed++
		for _, l := range r.buf[id] {
			fmt.Fprint(r.out, l)
		}
		delete(r.buf, id)
	case e.Action == "skip":
		r.skipped = append(r.skipped, e.Package+" "+e.Test+": "+skipReason(r.buf[id]))
		delete(r.buf, id)
	}
}

// skipReason picks the message t.Skip printed out of a test's output.
func skipReason(lines []string) string {
	var msg []string
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- SKIP") {
			continue
		}
		msg = append(msg, l)
	}
	if len(msg) == 0 {
		return "(no reason given)"
	}
	return strings.Join(msg, " ")
}

// summary prints the counts and returns the exit status.
func (r *report) summary(label string, maxSkips int) int {
	sort.Strings(r.skipped)
	fmt.Fprintf(r.out, "%s: %d passed, %d failed, %d skipped\n", label, r.passed, r.failed, len(r.skipped))
	for _, s := range r.skipped {
		fmt.Fprintf(r.out, "  skipped: %s\n", s)
	}
	switch {
	case r.failed > 0 || r.pkgFailed:
		return 1
	case maxSkips >= 0 && len(r.skipped) > maxSkips:
		fmt.Fprintf(r.out, "%s: %d skipped tests, at most %d allowed here\n", label, len(r.skipped), maxSkips)
		return 1
	}
	return 0
}

func inCI() bool {
	switch os.Getenv("CI") {
	case "", "0", "false":
		return false
	}
	return true
}

func main() {
	label := flag.String("label", "tests", "name printed with the counts")
	maxSkips := flag.Int("max-skips", -1, "fail when more tests skip (-1: no limit, but 0 under CI)")
	flag.Parse()
	if *maxSkips < 0 && inCI() {
		*maxSkips = 0
	}
	r := newReport(os.Stdout)
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	for sc.Scan() {
		r.add(sc.Bytes())
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "testreport: reading go test -json:", err)
		os.Exit(2)
	}
	os.Exit(r.summary(*label, *maxSkips))
}
